"""The values expansion works with: expanded fields and shell variables.

A :data:`Field` is one expanded word: its text and the unresolved names (``$X``, ``$(cmd)``,
``$((..))`` with unknowns) it holds. :class:`Fields` builds the fields of one word, splitting
unquoted expansion results on blanks; :class:`Var` is a variable's value, a string or a dense
array, with the unresolved names it was built from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IFS = (" ", "\t", "\n")
Field = tuple[str, frozenset[str]]


class Fields:
    """Builds the fields of one expanded word, with the unresolved names each one holds."""

    def __init__(self, split: bool) -> None:
        self.split, self.out, self.cur = split, [], []
        self.unres: set[str] = set()
        self.has, self.count, self.mark, self.arrays = False, 0, 0, False

    def lit(self, text: str, unres: frozenset[str] | set[str] = frozenset()) -> None:
        self.cur.append(text)
        self.unres.update(unres)
        self.has, self.count = True, self.count + 1

    def quote(self, opening: bool) -> None:
        if opening:
            self.mark, self.arrays = self.count, False
        elif self.count == self.mark and not self.arrays:
            self.has = True  # "" is an empty field

    def brk(self) -> None:
        if self.has:
            self.out.append(("".join(self.cur), frozenset(self.unres)))
        self.cur, self.unres, self.has = [], set(), False

    def value(self, text: str, quoted: bool, unres: frozenset[str] = frozenset()) -> None:
        """Add an expansion result; unquoted results are split on blanks."""
        if quoted or not self.split:
            self.lit(text, unres)
            return
        keep = [u for u in unres if re.search(r"[ \t\n]", u) and u in text]
        for k, u in enumerate(keep):  # an unresolved placeholder stays one word
            text = text.replace(u, f"\0{k}\0")
        words = re.split(r"[ \t\n]+", text.strip(" \t\n")) if text.strip(" \t\n") else []
        for k, u in enumerate(keep):
            words = [w.replace(f"\0{k}\0", u) for w in words]
        if text[:1] in _IFS:
            self.brk()
        for k, word in enumerate(words):
            if k:
                self.brk()
            self.lit(word, unres)
        if words and text[-1:] in _IFS:
            self.brk()

    def values(self, items: list[str], quoted: bool, unres: frozenset[str]) -> None:
        """Add the elements of ``${X[@]}``: one field each when quoted."""
        self.arrays = True
        for k, item in enumerate(items):
            if k and self.split:
                self.brk()
            elif k:
                self.lit(" ")
            self.value(item, quoted, unres)

    def done(self) -> list[tuple[str, frozenset[str]]]:
        self.brk()
        return self.out


@dataclass
class Var:
    value: str | list[str] | dict[str, str]  # a dict: an associative array (declare -A)
    unres: frozenset[str] = frozenset()

    def items(self) -> list[str]:
        if isinstance(self.value, dict):
            return list(self.value.values())
        return list(self.value) if isinstance(self.value, list) else [self.value]


class Variables(dict):
    """The shell's variables by name; ``read`` collects every name looked up, shared with a child process's
    variables, so that an ``--env NAME=VALUE`` the launch never reads is said instead of dropped silently."""

    def __init__(self, items=(), read: set[str] | None = None) -> None:
        super().__init__(items)
        self.read: set[str] = set() if read is None else read

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)
