"""Whole numbers as a user types them: the one parser of every integer option and field megaplan reads from text
(its own options, a launch script's flags, a Bridge override, a training log, a sweep's sizes, a pipeline layout).

Python's ``int()`` also reads ``2_0`` (20: an underscore anywhere between digits, PEP 515) and digits of other
scripts (``٢``, Arabic-Indic two; ``２``, full-width), and Megatron-LM's argparse flags (``type=int``) inherit
that, so ``--tensor-model-parallel-size 2_0`` runs at TP 20. Underscores that group digits in threes are meant:
BigScience's launch scripts write ``--train-samples 220_000_000`` and ``--rampup-batch-size 192 16 9_765_625``
(bigscience-workshop/bigscience, train/tr11-176B-ml), and they pass. An underscore elsewhere (``2_0``) is a stray
key between two digits and another script's digit a character pasted from a document: nobody writes a parallel
size so on purpose, so megaplan refuses them with the number ``int()`` would have read, rather than price a plan
nobody asked for (err16). The digits 0-9 with an optional sign and surrounding spaces pass, as ``int()`` reads
them."""

from __future__ import annotations

import re

from planner.errors import PlannerError

# [0-9], not \d: \d matches every script's digits; 220_000_000 (thousands grouped) or 220000000
DIGITS = re.compile(r"\s*[+-]?(?:[0-9]+|[0-9]{1,3}(?:_[0-9]{3})+)\s*")
LARGEST = 2**31 - 1  # sizes and counts: the search grid keeps them in 32-bit integers


# a decimal number as the digits 0-9 write it (3e-4, .5, 1_000.5); and the words float() reads
DECIMAL = re.compile(r"\s*[+-]?(?=[0-9.])(?:[0-9]+|[0-9]{1,3}(?:_[0-9]{3})+)?(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?\s*")
WORDS = re.compile(r"\s*[+-]?(?:nan|inf|infinity)\s*", re.IGNORECASE)


class NotWhole(PlannerError):
    """Text that is not a number in the digits 0-9; ``read``: what Python's ``int()`` (or, for a decimal,
    ``float()``) reads it as, if anything."""

    def __init__(self, text: str, decimal: bool = False):
        self.read = python_number(text, float if decimal else int)
        super().__init__(not_whole(text, self.read, "float()" if decimal else "int()"))


def whole_number(text: str) -> int:
    """``text`` as an integer when it is written in the digits 0-9 (a sign, surrounding spaces and underscores
    between groups of three digits allowed);
    else :class:`NotWhole`, its message the value and, where ``int()`` reads one, the number it reads."""
    if DIGITS.fullmatch(text):
        return int(text)
    raise NotWhole(text)


def decimal_number(text: str) -> float:
    """``float(text)`` where ``text`` is written in the digits 0-9 (as :func:`whole_number`; nan and inf as words):
    float() also reads 2_0.5 and ٢ (err16). A ValueError for text float() does not read; :class:`NotWhole` for
    text it reads that is no plain number."""
    number = float(text)
    if DECIMAL.fullmatch(text) or WORDS.fullmatch(text):
        return number
    raise NotWhole(text, decimal=True)


def python_number(text: str, kind=int):
    """What Python's ``int()`` (``kind`` float: ``float()``) reads ``text`` as (argparse's ``type=int``), None when
    it reads nothing."""
    try:
        return kind(text)
    except ValueError:
        return None


def python_int(text: str) -> int | None:
    """What Python's ``int()`` reads ``text`` as (argparse's ``type=int``), None when it reads nothing."""
    return python_number(text)


def not_whole(text: str, read=None, reader: str = "int()") -> str:
    """Why ``text`` is no whole number: "'2_0' is not written in the digits 0-9 (an underscore may only group
    digits in threes, as in 9_000_000; Python's int() reads 20: write 20 if meant)", or, for text no parser
    reads, "'abc' is not a whole number"."""
    if read is None:
        return f"{text!r} is not a whole number"
    other = next((c for c in text if c.isdigit() and not "0" <= c <= "9"), None)
    if other is not None:
        import unicodedata

        why = f"{other} is {unicodedata.name(other, 'a digit of another script')}"
    else:
        why = "an underscore may only group digits in threes, as in 9_000_000"
    return f"{text!r} is not written in the digits 0-9 ({why}; Python's {reader} reads {read}: write {read} if meant)"


def typed_int(value, text: str, where: str):
    """``value``, a YAML reading of ``text`` (a Bridge or NeMo override's value), unless it is an integer ``text``
    spells other than in the digits 0-9: YAML (and Hydra) read 2_0 as 20, 0x10 as 16 and 1:30 as 90, where a typo
    is likelier than intent."""
    if isinstance(value, int) and not isinstance(value, bool) and not DIGITS.fullmatch(text):
        raise PlannerError(
            f"{where}: {text!r} is not written in the digits 0-9 (read as {value}; write {value} if you mean it)"
        )
    return value


def number_word(value: float) -> str:
    """A number as a generated command line writes it, read back to the same float: Python's ``g`` where its six
    digits hold the value (300e9 is "3e+11"), else the fewest more that do (2.097152e+12; ``--tokens 2.09715e+12``
    stood for 2,097,152,000,000: a search's command priced another run, ux18)."""
    return next(t for p in range(6, 18) if float(t := f"{value:.{p}g}") == value)  # 17 digits hold any float
