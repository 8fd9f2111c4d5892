"""``[ ... ]``, ``test`` and ``[[ ... ]]`` expressions, evaluated on expanded words.

Supports ``!``, ``-a``/``-o`` (``&&``/``||`` in ``[[``), parentheses, string, glob (``[[``
only), regex and integer comparisons, ``-n``/``-z``/``-v``. File tests are taken as true; a
malformed expression is false.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from planner.megatron.shell.fields import Var

_BINARY = {"=", "==", "!=", "<", ">", "=~", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
_UNARY = {
    "-e",
    "-f",
    "-d",
    "-r",
    "-w",
    "-x",
    "-s",
    "-L",
    "-h",
    "-p",
    "-S",
    "-b",
    "-c",
    "-g",
    "-u",
    "-k",
    "-O",
    "-G",
    "-N",
    "-a",
    "-n",
    "-z",
    "-v",
    "-t",
}


class _TestError(Exception):
    """A malformed test expression: the test is false."""


class Test:
    """Evaluate ``[ ... ]`` / ``[[ ... ]]`` arguments (files are assumed to exist)."""

    def __init__(self, args: list[str], double: bool, variables: Mapping[str, Var]) -> None:
        self.a, self.double, self.vars = args, double, variables

    def run(self) -> bool:
        try:
            value, i = self.any_of(0)
        except (_TestError, ValueError, RecursionError, re.error):
            return False
        return value and i == len(self.a)

    def any_of(self, i: int) -> tuple[bool, int]:
        value, i = self.all_of(i)
        while i < len(self.a) and self.a[i] == "-o":
            other, i = self.all_of(i + 1)
            value = value or other
        return value, i

    def all_of(self, i: int) -> tuple[bool, int]:
        value, i = self.negation(i)
        while i < len(self.a) and self.a[i] == "-a":
            other, i = self.negation(i + 1)
            value = value and other
        return value, i

    def negation(self, i: int) -> tuple[bool, int]:
        if i + 1 < len(self.a) and self.a[i] == "!":
            value, i = self.negation(i + 1)
            return not value, i
        return self.primary(i)

    def primary(self, i: int) -> tuple[bool, int]:
        a = self.a
        if i >= len(a):
            raise _TestError
        if a[i] == "(" and i + 1 < len(a):
            value, i = self.any_of(i + 1)
            if i >= len(a) or a[i] != ")":
                raise _TestError
            return value, i + 1
        if i + 2 < len(a) and a[i + 1] in _BINARY:
            return self.binary(a[i], a[i + 1], a[i + 2]), i + 3
        if a[i] in _UNARY and i + 1 < len(a):
            op, arg = a[i], a[i + 1]
            known = {"-n": arg != "", "-z": arg == "", "-v": _is_set(arg, self.vars), "-t": False}
            return known.get(op, True), i + 2
        return a[i] != "", i + 1

    def binary(self, left: str, op: str, right: str) -> bool:
        if op in ("=", "==", "!="):
            glob = self.double and any(ch in right for ch in "*?[")
            same = fnmatch.fnmatchcase(left, right) if glob else left == right
            return same != (op == "!=")
        if op == "=~":
            return bool(re.search(right, left))
        if op in ("<", ">"):
            return left < right if op == "<" else left > right
        x, y = int(left), int(right)
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]


def _is_set(arg: str, variables) -> bool:
    """``-v NAME`` or ``-v NAME[KEY]``: the variable, or that element of it, is set."""
    m = re.fullmatch(r"([A-Za-z_]\w*)\[(.*)\]", arg, re.DOTALL)
    var = variables.get(m.group(1) if m else arg)
    if var is None or m is None:
        return var is not None
    if isinstance(var.value, dict):
        return m.group(2) in var.value
    items = var.items()
    return m.group(2).lstrip("-").isdigit() and -len(items) <= int(m.group(2)) < len(items)
