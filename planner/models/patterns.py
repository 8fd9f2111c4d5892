"""Per-layer patterns as Megatron-LM writes them: ``--moe-layer-freq`` and ``--window-attn-skip-freq``.

Both flags take an integer N or a Python list expression of 0s and 1s such as ``([0]*3+[1]*58)``
(Megatron-LM megatron/training/arguments.py:327-350, ``moe_freq_type``; the expression may hold
only digits, commas, brackets, parentheses, + and *, ``_eval_pattern`` at l. 245-253). Megatron
evaluates the expression with Python's ``eval``; here a small parser of the same grammar reads it,
so nothing a user writes is executed.
"""

from __future__ import annotations

import re

from planner.whole import DIGITS

_ALLOWED = re.compile(r"[^,0-9\[\]\(\)\+\*\s]")  # 0-9, not \d: \d takes every script's digits (planner.whole)
_TOKEN = re.compile(r"\s*([0-9]+|[\[\]\(\)\+\*,])")


class PatternError(ValueError):
    """A layer pattern that is not a list expression of Megatron-LM's grammar."""


class _Parser:
    """A recursive-descent reader of the tokens of one pattern expression (``parse_pattern``'s grammar)."""

    def __init__(self, text: str, tokens: list[str]):
        self.text, self.tokens, self.pos = text, tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise PatternError(f"{self.text!r}: expected {expected or 'more'} at token {self.pos + 1}")
        self.pos += 1
        return tok

    def integer(self) -> int:
        tok = self.take()
        if not DIGITS.fullmatch(tok):
            raise PatternError(f"{self.text!r}: expected an integer, got {tok!r}")
        return int(tok)

    def atom(self) -> list[int]:
        if self.peek() == "[":
            self.take("[")
            items = [] if self.peek() == "]" else [self.integer()]
            while self.peek() == ",":
                self.take(",")
                items.append(self.integer())
            self.take("]")
            return items
        if self.peek() == "(":
            self.take("(")
            inner = self.total()
            self.take(")")
            return inner
        if self.peek() is not None and DIGITS.fullmatch(self.peek()):  # n*[...]
            n = self.integer()
            self.take("*")
            return self.atom() * n
        raise PatternError(f"{self.text!r}: expected a list at token {self.pos + 1}")

    def product(self) -> list[int]:
        value = self.atom()
        while self.peek() == "*":
            self.take("*")
            value = value * self.integer()
        return value

    def total(self) -> list[int]:
        value = self.product()
        while self.peek() == "+":
            self.take("+")
            value = value + self.product()
        return value


def parse_pattern(text: str) -> list[int]:
    """The list a Megatron-LM pattern expression evaluates to: ``"([0]*3+[1]*2)"`` -> [0, 0, 0, 1, 1].

    Grammar (Python's, restricted as Megatron restricts it): sum := product ('+' product)*;
    product := atom ('*' integer)* | integer '*' atom; atom := '[' integers ']' | '(' sum ')'.
    """
    if _ALLOWED.search(text):
        raise PatternError(f"{text!r}: only digits, commas, [ ] ( ) + and * are allowed")
    tokens = _TOKEN.findall(text)
    if "".join(tokens) != re.sub(r"\s", "", text):
        raise PatternError(f"{text!r} is not a list expression")
    parser = _Parser(text, tokens)
    result = parser.total()
    if parser.pos != len(tokens):
        raise PatternError(f"{text!r}: unexpected {tokens[parser.pos]!r} at token {parser.pos + 1}")
    if any(v not in (0, 1) for v in result):
        raise PatternError(f"{text!r}: a layer pattern holds only 0s and 1s")
    return result


def pattern_text(pattern: list[int] | tuple[int, ...]) -> str:
    """The shortest run-length expression of a 0/1 list, as Megatron-LM reads it: [0,0,0,1,1] -> ``([0]*3+[1]*2)``."""
    runs: list[tuple[int, int]] = []
    for v in pattern:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    return "(" + "+".join(f"[{v}]*{n}" if n > 1 else f"[{v}]" for v, n in runs) + ")"


def freq_value(value: object) -> int | tuple[int, ...]:
    """An integer N or a 0/1 tuple from what a preset, a plan file or a command line holds."""
    if isinstance(value, bool):
        raise PatternError(f"{value!r} is neither an integer nor a list of 0s and 1s")
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, bool) or v not in (0, 1) for v in value):
            raise PatternError(f"{list(value)!r}: a layer pattern holds only 0s and 1s")
        return tuple(int(v) for v in value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[0-9]+", text):
            return int(text)
        return tuple(parse_pattern(text))
    raise PatternError(f"{value!r} is neither an integer nor a list of 0s and 1s")


def moe_layers(freq: int | tuple[int, ...], num_layers: int) -> tuple[bool, ...]:
    """Which of the L layers are mixture-of-experts: layer i (0-based) iff i mod N = 0, or the
    pattern's 1s (Megatron-LM training.py:1024-1040, theoretical_memory_usage.py:29-45)."""
    if isinstance(freq, int):
        return tuple(i % freq == 0 for i in range(num_layers))
    return tuple(bool(v) for v in freq)


def window_layers(skip_freq: int | tuple[int, ...] | None, num_layers: int) -> tuple[bool, ...]:
    """Which layers use sliding-window attention when a window is set: all without a skip frequency;
    with an integer N, 1-based layer l iff l mod N != 0; with a list, its 1s
    (Megatron-LM megatron/core/transformer/utils.py:531-546, ``is_layer_window_attention``)."""
    if skip_freq is None:
        return (True,) * num_layers
    if isinstance(skip_freq, int):
        return tuple((i + 1) % skip_freq != 0 for i in range(num_layers))
    return tuple(bool(v) for v in skip_freq)
