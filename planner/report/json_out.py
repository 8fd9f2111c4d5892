"""The JSON the command line prints: exactly ``json.dumps(data, indent=2)``, written faster.

``json`` uses its C encoder only without ``indent``; with it, every value goes through the pure-Python
encoder's nested generators (5.6 ms for the 187 kB of `megaplan search --model gpt3-175b --gpus 1024
--json`, against 1.7 ms unindented). Here a tree of plain values (dict, list, tuple, str, int, float,
bool, None: what the planner prints) is written by one recursive function into a list of parts, strings
by the C encoder's own escaping; anything else (another type, a key that is not a string, a cycle) is
handed to ``json.dumps`` itself, so the text and the errors are json's.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _quoted  # the C escaping json.dumps uses (ensure_ascii)

INDENT = "  "  # indent=2
_NAMED = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


class _NotPlain(Exception):
    """A value json.dumps has its own way with (or refuses): the whole text is left to it."""


def json_text(data) -> str:
    """``json.dumps(data, indent=2)``, character for character."""
    parts: list[str] = []
    try:
        _value(data, parts, "\n")
    except (_NotPlain, RecursionError):
        return json.dumps(data, indent=2)
    return "".join(parts)


def _value(o, parts: list[str], newline: str) -> None:
    t = type(o)
    if t is str:
        parts.append(_quoted(o))
    elif t is float:
        parts.append(_float(o))
    elif o is None:
        parts.append("null")
    elif o is True:
        parts.append("true")
    elif o is False:
        parts.append("false")
    elif t is int:
        parts.append(int.__repr__(o))
    elif t is dict:
        _object(o, parts, newline)
    elif t is list or t is tuple:
        _array(o, parts, newline)
    else:
        raise _NotPlain


def _float(x: float) -> str:
    if x != x:
        return "NaN"
    return _NAMED.get(x) or float.__repr__(x)


def _object(o: dict, parts: list[str], newline: str) -> None:
    if not o:
        parts.append("{}")
        return
    inner = newline + INDENT
    sep = "{" + inner
    for key, v in o.items():
        if type(key) is not str:
            raise _NotPlain  # json.dumps turns numbers, booleans and None into strings (or refuses)
        parts.append(sep)
        parts.append(_quoted(key))
        parts.append(": ")
        _value(v, parts, inner)
        sep = "," + inner
    parts.append(newline + "}")


def _array(o: list | tuple, parts: list[str], newline: str) -> None:
    if not o:
        parts.append("[]")
        return
    inner = newline + INDENT
    sep = "[" + inner
    for v in o:
        parts.append(sep)
        _value(v, parts, inner)
        sep = "," + inner
    parts.append(newline + "]")
