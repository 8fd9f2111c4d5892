"""Command substitutions whose output follows from their words alone, computed without running anything.

``$(dirname P)``, ``$(basename P [SUFFIX])``, ``$(readlink -f P)``, ``$(realpath P)``, ``$(pwd)``,
``$(cd D && pwd)``, ``$(echo WORDS)``, and ``$(yq EXPR FILE)`` for the expressions Megatron-LM's
moe-modelzoo launcher uses (:func:`planner.megatron.modelzoo.yq`), optionally piped through
``tr 'SET1' 'SET2'``. Paths resolve against the working directory the interpreter knows (the folder the
script runs from); the file ``yq`` reads is one the script wrote (``envsubst < A > B``) or one the reader
gives. Any other command, or an unresolved word, leaves the substitution unresolved, as before.
"""

from __future__ import annotations

import posixpath
import re

_SEPARATORS = ("&&", "||", "|", ";")
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\\\": "\\"}


def split_commands(text: str) -> list[tuple[str, list[str]]] | None:
    """``text`` as (separator before it, raw words) per simple command; None if it holds anything else
    (redirections, subshells, here-strings)."""
    out: list[tuple[str, list[str]]] = [("", [])]
    word, i, quote = "", 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            word += c
            if c == "\\" and quote == '"':
                word += text[i + 1 : i + 2]
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote, word = c, word + c
        elif c == "$" and text[i + 1 : i + 2] in ("(", "{"):  # not "" at the end: '' in "({" is true
            from planner.megatron.shell.rewrite import close_bracket

            j = close_bracket(text, i + 1)
            word, i = word + text[i:j], j
            continue
        elif c in " \t\n" or text.startswith(_SEPARATORS, i):
            if word:
                out[-1][1].append(word)
            word = ""
            sep = next((s for s in _SEPARATORS if text.startswith(s, i)), None)
            if sep:
                out.append((sep, []))
                i += len(sep)
                continue
        elif c in "<>()`":
            return None
        else:
            word += c
        i += 1
    if word:
        out[-1][1].append(word)
    return [(sep, words) for sep, words in out if words] or None


def _tr(text: str, set1: str, set2: str) -> str:
    a = re.sub(r"\\.", lambda m: _ESCAPES.get(m.group(), m.group()[1]), set1)
    b = re.sub(r"\\.", lambda m: _ESCAPES.get(m.group(), m.group()[1]), set2)
    b = (b + b[-1:] * len(a))[: len(a)] if b else ""
    return text.translate(str.maketrans(a, b)) if b else text


class Substitute:
    """Mixin of the interpreter: the output of a command substitution, when its words alone give it."""

    cwd: str | None
    files: dict[str, str]

    def substitute(self, raw: str) -> str | None:
        inner = raw[2:-1] if raw.startswith("$(") else raw[1:-1]
        commands = split_commands(inner)
        if commands is None:
            return None
        cwd, out = self.cwd, ""
        for sep, words in commands:
            fields = [f for w in words for f in self.expand(w)]
            if not fields or any(u for _, u in fields) or sep == "||":
                return None
            args = [t for t, _ in fields]
            if sep == "|":
                if args[0] != "tr" or len(args) != 3:
                    return None
                out = _tr(out, args[1], args[2])
                continue
            result = self._pure(args, cwd)
            if result is None:
                return None
            if args[0] == "cd":
                cwd = result
            else:
                out += result + "\n"
        return out.rstrip("\n")

    def _pure(self, args: list[str], cwd: str | None) -> str | None:
        """The output of one pure command (the new directory for ``cd``), or None."""
        name, rest = args[0], [a for a in args[1:] if not a.startswith("-")]

        def absolute(path: str) -> str | None:
            if path.startswith("/"):
                return posixpath.normpath(path)
            return posixpath.normpath(posixpath.join(cwd, path)) if cwd else None

        if name == "dirname" and len(rest) == 1:
            return posixpath.dirname(rest[0].rstrip("/") or "/") or "."
        if name == "basename" and rest:
            base = posixpath.basename(rest[0].rstrip("/"))
            return base[: -len(rest[1])] if len(rest) > 1 and base.endswith(rest[1]) and base != rest[1] else base
        if name in ("readlink", "realpath", "cd") and len(rest) == 1 and (name != "readlink" or "-f" in args):
            return absolute(rest[0])
        if name == "pwd" and not rest:
            return cwd
        if name == "echo":
            return " ".join(args[1:])
        if name == "cat" and len(args) == 2 and args[1] in self.files:  # a file the script wrote (a here-document)
            return self.files[args[1]]
        if name == "yq" and len(rest) == 2:
            from planner.megatron.modelzoo import yq

            text = self.sibling(rest[1])
            return None if text is None else yq(rest[0], text)
        return None
