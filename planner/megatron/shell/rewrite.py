"""Rewrite what bashlex cannot parse, then parse with bashlex.

bashlex cannot parse arrays, ``$((...))``/``$[...]``, ``[[ ]]``, ``(( ))`` or ``case``, mislays
positions in second and later ``elif``s, and loops on some unclosed brackets. :class:`Rewriter`
turns array assignments, ``[[``, ``((`` and ``case`` into marker commands (``ARRAY``, ``COND``,
``ARITH``, ``CASE``; ``case`` becomes an ``if``/``else if`` chain, ``elif`` becomes ``else if``)
and every expansion or quoted text into an opaque ``${__mp_<kind><n>}`` parameter whose content
is kept in a side table, so bashlex only ever sees simple words. :func:`parse` runs bashlex.
"""

from __future__ import annotations

import re

from planner.megatron.bashlex_tables import import_bashlex
from planner.megatron.shell.launch import ShellParseError

bashlex = import_bashlex()  # its parser tables kept between runs (megatron/bashlex_tables.py)

ARRAY, COND, ARITH, CASE = "__mp_array__", "__mp_cond__", "__mp_arith__", "__mp_case__"
HEREDOC = "__mp_h"  # a here-document's delimiter as bashlex sees it: __mp_h<n>, its body in table "h"
_DO_NEXT = re.compile(r"[ \t]*do\b")  # a loop's `do` on the line after its condition (bashlex rejects it)
_OPS = ";&|()<>"
_STARTERS = {"then", "do", "else", "elif", "if", "while", "until", "{", "!", "time"}
_ARRAY_RE = re.compile(r"([A-Za-z_]\w*)(\+?)=\(")
_PAIRS = {"(": ")", "{": "}", "[": "]"}


def close_bracket(s: str, i: int) -> int:
    """Index just after the bracket matching ``s[i]`` (one of ``({[``), skipping quotes.

    Raises :class:`ShellParseError` if it is not closed (bashlex would loop on it).
    """
    if i >= len(s) or s[i] not in _PAIRS:
        raise ShellParseError(f"expected one of ({{[ at offset {i} of {s!r}")
    opener, closer, depth = s[i], _PAIRS[s[i]], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            i += 1
            while i < len(s) and s[i] != c:
                i += 2 if c == '"' and s[i] == "\\" else 1
        elif c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellParseError(f"unterminated {opener} in {s[max(0, i - 30) :][:30].strip()!r}")


def _closing_quote(s: str, j: int, quote: str, name: str) -> int:
    """Index of the quote that closes a quoted string starting at j (backslash escapes skipped; in double
    quotes, ``$(...)``, ``${...}`` and backquotes are skipped whole: their own quotes nest)."""
    while j < len(s) and s[j] != quote:
        if quote == '"' and s[j] == "$" and s[j + 1 : j + 2] in ("(", "{"):
            j = close_bracket(s, j + 1)
        elif quote == '"' and s[j] == "`":
            j = (s.find("`", j + 1) + 1) or len(s)
        else:
            j += 2 if s[j] == "\\" else 1
    if j >= len(s):
        raise ShellParseError(f"unterminated {name} quote")
    return j


class Rewriter:
    """Rewrite shell constructs bashlex cannot parse into marker commands and parameters."""

    def __init__(self, s: str, tables: dict[str, list]) -> None:
        self.s, self.tables = s, tables
        self.heredocs: list[tuple[str, bool, int]] = []  # (delimiter, strip tabs, index in table "h")
        self.ifs: list[int] = []  # elifs seen per open if

    def _param(self, kind: str, value: object) -> str:
        """Store ``value`` in table ``kind``; bashlex sees only a plain ``${__mp_<kind><n>}``.

        Kinds: ``a`` arithmetic, ``c`` command substitution, ``p`` ``${...}`` expansion
        (rewritten inner text, original text), ``q`` quoted literal text.
        """
        self.tables[kind].append(value)
        return f"${{__mp_{kind}{len(self.tables[kind]) - 1}}}"

    def dollar(self, i: int) -> tuple[str, int]:
        """Rewrite the expansion starting at ``s[i] == '$'``."""
        s, nxt = self.s, self.s[i + 1 : i + 2]
        if nxt in ("(", "["):
            j = close_bracket(s, i + 1)
            if s.startswith("$((", i) and s[j - 2 : j] == "))":
                return self._param("a", s[i + 3 : j - 2]), j
            if nxt == "[":
                return self._param("a", s[i + 2 : j - 1]), j
            return self._param("c", s[i:j]), j
        if nxt == "{":
            j = close_bracket(s, i + 1)
            return self._param("p", (self.inner(i + 2, j - 1), s[i:j])), j
        if nxt == "'":
            j = _closing_quote(s, i + 2, "'", "$'")
            return '"' + self._param("q", _ansi_c(s[i + 2 : j])) + '"', j + 1
        return "$", i + 1

    def inner(self, i: int, end: int) -> str:
        """Copy ``s[i:end]`` (inside double quotes or ``${}``) rewriting nested expansions."""
        out = []
        while i < end:
            c = self.s[i]
            if c == "$" and self.s[i + 1 : i + 2] != "'":
                text, i = self.dollar(i)
            elif c == "`":
                text, i = self.backquote(i)
            else:
                j = i + 2 if c == "\\" else i + 1
                text, i = self.s[i:j], j
            out.append(text)
        return "".join(out)

    def backquote(self, i: int) -> tuple[str, int]:
        j = self.s.find("`", i + 1) + 1
        if not j:
            raise ShellParseError("unterminated ` quote")
        return self._param("c", self.s[i:j]), j

    def word(self, i: int) -> tuple[str, int]:
        """Read one shell word from ``i``; return its rewritten text and the index after it."""
        s, out = self.s, []
        while i < len(s) and s[i] not in " \t\n" and s[i] not in _OPS:
            c = s[i]
            if c == "'":
                j = s.find("'", i + 1) + 1
                if not j:
                    raise ShellParseError("unterminated ' quote")
                text = '"' + self._param("q", s[i + 1 : j - 1]) + '"'
            elif c == "`":
                text, j = self.backquote(i)
            elif c == '"':
                j = _closing_quote(s, i + 1, '"', '"')
                text, j = '"' + self.inner(i + 1, j) + '"', j + 1
            elif c == "$":
                text, j = self.dollar(i)
            else:
                j = i + 2 if c == "\\" else i + 1
                text = s[i:j]
            out.append(text)
            i = j
        return "".join(out), i

    def heredoc_bodies(self, i: int) -> tuple[str, int]:
        """Move pending here-document bodies from ``i`` (a line start) into table ``h``; bashlex sees a
        stand-in body and the delimiter ``__mp_h<n>``, which names the body (text, quoted delimiter)."""
        out = []
        for delim, strip, n in self.heredocs:
            body = []
            while i < len(self.s):
                end = self.s.find("\n", i) + 1 or len(self.s)
                line, i = self.s[i:end], end
                text = line.lstrip("\t") if strip else line
                if text.rstrip("\n") == delim:  # a one-line stand-in body: bashlex fails on empty ones in { } / if
                    out.append(f"{HEREDOC}\n{HEREDOC}{n}\n")
                    break
                body.append(text)
            else:
                raise ShellParseError(f"here-document without its end {delim!r}")
            self.tables["h"][n] = ("".join(body), self.tables["h"][n][1])
        self.heredocs = []
        return "".join(out), i

    def scan(self, i: int, mode: str) -> tuple[str, int]:
        """Rewrite from ``i`` until the end of ``mode``: top, array ``)``, cond ``]]``, case ``;;``."""
        s, out, cmd = self.s, [], True
        while i < len(s):
            c = s[i]
            if c in " \t" or s.startswith("\\\n", i):
                step = 2 if c == "\\" else 1
                out.append(s[i : i + step])
                i += step
            elif c == "\n":
                loop_do = not self.heredocs and mode not in ("array", "cond") and _DO_NEXT.match(s, i + 1)
                out.append(" \\\n" if mode in ("array", "cond") else "; " if loop_do else "\n")
                i, cmd = i + 1, True
                if self.heredocs:
                    body, i = self.heredoc_bodies(i)
                    out.append(body)
            elif c == "#":
                i = s.find("\n", i) if s.find("\n", i) >= 0 else len(s)
            elif mode == "array" and c == ")":
                return "".join(out), i + 1
            elif mode == "case" and (s.startswith(";;", i) or s.startswith(";&", i)):
                return "".join(out), i + (3 if s.startswith(";;&", i) else 2)
            elif cmd and s.startswith("((", i):
                j = close_bracket(s, i)
                out.append(f"{ARITH} " + self._param("a", s[i + 2 : j - 2]))
                i, cmd = j, False
            elif c in _OPS:
                i, cmd = self.operator(i, mode, out)
            else:
                done, i, cmd = self.word_unit(i, mode, cmd, out)
                if done:
                    return "".join(out), i
        if mode != "top":
            raise ShellParseError(f"unterminated {'array (' if mode == 'array' else mode} block")
        return "".join(out), i

    def operator(self, i: int, mode: str, out: list[str]) -> tuple[int, bool]:
        s = self.s
        if mode == "cond":
            if s.startswith("&&", i) or s.startswith("||", i):
                out.append(" -a " if s[i] == "&" else " -o ")
                return i + 2, False
            out.append("\\" + s[i])
            return i + 1, False
        if s.startswith("<<<", i):  # a here-string: its word follows as an ordinary word
            out.append("<<<")
            return i + 3, False
        if s.startswith("<<", i):
            dash = s[i + 2 : i + 3] == "-"
            j = i + 2 + dash
            while j < len(s) and s[j] in " \t":
                j += 1
            raw_end = j
            while raw_end < len(s) and s[raw_end] not in " \t\n;&|<>()":
                raw_end += 1
            raw = s[j:raw_end]
            n = len(self.tables["h"])
            self.tables["h"].append(("", any(q in raw for q in "\"'\\")))
            self.heredocs.append((re.sub(r"[\"'\\]", "", raw), dash, n))
            out.append(f"<<{'-' if dash else ''}{HEREDOC}{n}")
            return raw_end, False
        out.append(s[i])
        return i + 1, s[i] in ";&|("

    def word_unit(self, i: int, mode: str, cmd: bool, out: list[str]) -> tuple[bool, int, bool]:
        """Handle a word at ``i``; return (end of block, next index, command position)."""
        m = _ARRAY_RE.match(self.s, i) if mode != "cond" else None
        if m:
            body, j = self.scan(m.end(), "array")
            out.append(f"{ARRAY} {m.group(1)} {m.group(2)}= {body}")
            return False, j, False
        word, j = self.word(i)
        if mode == "cond" and word == "]]":
            out.append(" ]]")
            return True, j, False
        if cmd and word == "[[":
            body, j = self.scan(j, "cond")
            out.append(COND + body)
        elif cmd and word == "case":
            text, j = self.case(j)
            out.append(text)
        elif mode == "case" and cmd and word == "esac":
            return True, i, True
        elif cmd and word == "for" and re.match(r"[ \t]*\(\(", self.s[j:]):
            k = close_bracket(self.s, self.s.index("((", j))  # for ((init; test; step)): its body runs once
            out.append("for __mp_cfor in 1")
            return False, k, False
        elif cmd and word == "time":  # bash's reserved word, timing the pipeline after it (bashlex cannot
            p = re.match(r"[ \t]+-p(?=[ \t])", self.s[j:])  # parse it: fresh user trial 8, `time torchrun ...`)
            return False, j + (p.end() if p else 0), True
        elif cmd and word in ("if", "elif", "fi"):
            out.append(self.if_word(word))
            return False, j, word != "fi"
        else:
            out.append(word)
            return False, j, word in _STARTERS
        return False, j, False

    def if_word(self, word: str) -> str:
        """``elif`` -> ``else if`` (bashlex mislays positions in second and later elifs)."""
        if word == "if":
            self.ifs.append(0)
        elif word == "elif" and self.ifs:
            self.ifs[-1] += 1
            return "else if"
        elif word == "fi" and self.ifs:
            return "fi" + "; fi" * self.ifs.pop()
        return word

    def _blank(self, i: int) -> int:
        """Skip blanks, newlines, ``;``, line continuations and comments."""
        s = self.s
        while i < len(s):
            if s[i] in " \t\n;":
                i += 1
            elif s.startswith("\\\n", i):
                i += 2
            elif s[i] == "#":
                i = s.find("\n", i) if s.find("\n", i) >= 0 else len(s)
            else:
                break
        return i

    def case(self, i: int) -> tuple[str, int]:
        """Turn ``case WORD in pat) ...;; esac`` (after ``case``) into an if/elif chain."""
        subject, i = self.word(self._blank(i))
        keyword, i = self.word(self._blank(i))
        if keyword != "in":
            raise ShellParseError("case without 'in'")
        parts: list[str] = []
        while True:
            i = self._blank(i)
            if i >= len(self.s):
                raise ShellParseError("case without esac")
            word, j = self.word(i)
            if word == "esac":
                return "".join(parts) + "; ".join(["fi"] * len(parts)) if parts else ":", j
            i += self.s[i] == "("
            patterns = []
            while True:
                pattern, i = self.word(self._blank(i))
                patterns.append(pattern or "''")
                i = self._blank(i)
                if self.s[i : i + 1] not in ("|", ")"):
                    raise ShellParseError("bad case pattern")
                i += 1
                if self.s[i - 1] == ")":
                    break
            body, i = self.scan(i, "case")
            keyword = "else if" if parts else "if"
            parts.append(f"{keyword} {CASE} {subject} {' '.join(patterns)}; then :\n{body}\n")


_PLACEHOLDER = re.compile(r"<(?=[A-Za-z])[^<>\n'\"$`&|;()=]*[^\s<>'\"$`&|;()=]>(?!>)")


def placeholders(text: str, tables: dict[str, list]) -> str:
    """Turn fill-in placeholders (``<Specify path>``, ``<PATH TO CHECKPOINTS>``) outside single quotes into
    unresolved values, as an unset variable is: bash would read them as redirections and fail."""
    out, i, quote = [], 0, ""
    while i < len(text):
        c = text[i]
        m = _PLACEHOLDER.match(text, i) if c == "<" and quote != "'" and text[i - 1 : i] != "<" else None
        if m:
            tables["c"].append(m.group())
            out.append(f"${{__mp_c{len(tables['c']) - 1}}}")
            i = m.end()
            continue
        step = 2 if c == "\\" and quote != "'" else 1
        if c == "#" and not quote and (i == 0 or text[i - 1] in " \t\n;"):  # a comment, to the line's end
            step = (text.find("\n", i) + 1 or len(text) + 1) - i
        elif c in "'\"" and quote in ("", c):
            quote = "" if quote == c else c
        out.append(text[i : i + step])
        i += step
    return "".join(out)


def _ansi_c(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def parse(text: str, tables: dict[str, list] | None = None, original: str | None = None) -> list:
    """Parse (rewritten) text with bashlex; any bashlex failure is a :class:`ShellParseError`, naming the line
    of ``original`` (the script as written) to fix. A line continuation at the very end of the file ends the
    command there, as bash reads it (bashlex would stop at an unexpected EOF: Megatron-LM's
    examples/t5/train_t5_220m_distributed.sh ends in a backslash)."""
    ended = _ended(text)
    if not ended.strip():  # no command (a lone backslash): bashlex fails with "'str' object has no attribute 'kind'"
        return []
    try:
        return bashlex.parse(ended)
    except Exception as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        part, pos = getattr(err, "s", None), getattr(err, "position", None)
        if first.startswith("unexpected EOF") and isinstance(pos, int):  # its token's text is a stale one's
            first = first.replace(f"(position {pos})", f"(position {len(ended)})")
        elif isinstance(part, str) and isinstance(pos, int) and ended.endswith(part):  # from the command's start
            first = first.replace(f"(position {pos})", f"(position {len(ended) - len(part) + pos})")
        line = failing_line(original, unwritten(first, text, tables)) if original is not None else None
        at = (line, original.splitlines()[line - 1]) if line and original is not None else None
        raise ShellParseError(f"not a shell script bashlex can parse: {unwritten(first, text, tables, at)}") from None


def _ended(text: str) -> str:
    return re.sub(r"\\\n?\s*\Z", "\n", text)


def failing_line(original: str, message: str) -> int | None:
    """The line of ``original`` where bashlex's ``message`` (an unexpected token, in the script's terms) starts:
    the fewest lines whose text fails with it (bashlex's position counts from the start of the command it
    parses, not of the text: Megatron-LM's msdp/prompt_knwl_gen.sh was said to fail near line 9, a quoted
    assignment, where bash names line 15, ``X=<PATH> (e.g., ...)``). None for an unexpected end of the text
    (the construct left open may start anywhere) or when no prefix fails alike."""
    key = _unplaced(message)
    if not key.startswith("unexpected token"):
        return None
    lines = original.splitlines(keepends=True)

    def fails(n: int) -> bool:
        tables: dict[str, list] = {"a": [], "c": [], "p": [], "q": [], "h": []}
        try:
            rewritten, _ = Rewriter(placeholders("".join(lines[:n]), tables), tables).scan(0, "top")
            bashlex.parse(_ended(rewritten))
        except ShellParseError:
            return False
        except Exception as err:
            return _unplaced(unwritten((str(err).splitlines() or [""])[0], rewritten, tables)) == key
        return False

    lo, hi = 1, len(lines)
    if not lines or not fails(hi):
        return None
    while lo < hi:  # a prefix that fails alike stays failing as lines are added: bisect the first
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fails(mid) else (mid + 1, hi)
    return lo


def _prefix_fails(lines: list[str], n: int) -> bool:
    """Whether the text's first ``n`` lines fail to rewrite or parse (a construct left open in them)."""
    tables: dict[str, list] = {"a": [], "c": [], "p": [], "q": [], "h": []}
    try:
        rewritten, _ = Rewriter(placeholders("".join(lines[:n]), tables), tables).scan(0, "top")
        if rewritten.strip():
            bashlex.parse(_ended(rewritten))
    except Exception:
        return True
    return False


def placed(message: str, original: str) -> str:
    """A parse error that names no line, with the line where what is left open to the end of the text starts
    (an unterminated quote or ``$((``, an ``if`` without ``fi``): the first line whose prefix of the text fails,
    bisected as failing_line does (it was "unexpected EOF (at the end of the script)" alone, ux12)."""
    if re.search(r"\((?:line|near line) \d+", message):
        return message
    lines = original.splitlines(keepends=True)
    if not lines or not _prefix_fails(lines, len(lines)):
        return message
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _prefix_fails(lines, mid) else (mid + 1, hi)
    where = f"line {lo}: {lines[lo - 1].strip()[:60]!r}"
    if message.endswith("(at the end of the script)"):
        return f"{message[:-1]}; what is left open starts at {where})"
    return f"{message} ({where})"


def _unplaced(message: str) -> str:
    """A parse error's message without where it was found."""
    return re.sub(r" \((?:position \d+|near line .*|at the end of the script)\)$", "", message)


def unwritten(message: str, text: str, tables: dict[str, list] | None, at: tuple[int, str] | None = None) -> str:
    """bashlex's message about the rewritten text, in the script's terms: a stand-in ``${__mp_q0}`` is the
    text it stands for, and a position is the line it falls on (fresh user trial 8: "unexpected token
    '"${__mp_q0}"' (position 6)" named neither), or the script's own line ``at`` (number, text) when known
    (failing_line)."""

    def original(m: re.Match) -> str:
        kind, n = m.group(1), int(m.group(2))
        value = (tables or {}).get(kind, [])[n] if n < len((tables or {}).get(kind, [])) else None
        value = value[1] if isinstance(value, tuple) else value
        return value if isinstance(value, str) else "…"

    message = re.sub(r"\$\{__mp_([a-z])(\d+)\}", original, message)
    found = re.search(r"\(position (\d+)\)", message)
    if found and at:
        message = message.replace(found.group(), f"(line {at[0]}: {at[1].strip()[:60]!r})")
    elif found:
        line = text.count("\n", 0, int(found.group(1))) + 1
        lines = text.splitlines()
        where = "at the end of the script"
        if line <= len(lines):
            where = f"near line {line}: {lines[line - 1].strip()[:60]!r}"
        message = message.replace(found.group(), f"({where})")
    return re.sub(r"\$\{__mp_([a-z])(\d+)\}", "…", message)
