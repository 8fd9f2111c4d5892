"""One command-line option of the plan-options table: its click declarations, plan default, help
and whether search searches it; and the token-count type of --tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import click

from planner.whole import LARGEST, NotWhole, decimal_number, whole_number


class CommaChoices(click.ParamType):
    """A comma-separated list, each item one of ``choices``, checked as the option is read: ``--recompute-modules
    foo`` said "options: recompute_modules.0: Input should be ..." (the plan's field, not the option). The text is
    kept as given (the plan options split it)."""

    name = "text"

    def __init__(self, choices: tuple[str, ...], what: str):
        self.choices, self.what = choices, what

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            bad = [x.strip() for x in value.split(",") if x.strip() and x.strip() not in self.choices]
            if bad:
                self.fail(f"{bad[0]!r} is not a {self.what}; allowed: {', '.join(self.choices)}", param, ctx)
        return value


class TokenCount(click.ParamType):
    """A positive number of tokens: 300e9, 3e11, 300000000000, or with a suffix 300B, 1.4T, 500M."""

    name = "TOKENS"
    SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            text = str(value).strip()
            scale = self.SUFFIX.get(text[-1:].lower(), 1.0)
            try:
                number = decimal_number(text[:-1] if scale != 1.0 else text) * scale
            except NotWhole as err:  # 3_00B, ٣٠٠B: float() reads them (planner.whole)
                self.fail(f"{value!r}: {err}" if scale != 1.0 else str(err), param, ctx)
            except ValueError:
                number = float("nan")
        if not number > 0 or number == float("inf"):
            self.fail(f"{value!r} is not a positive token count; write e.g. 300e9, 3e11 or 300B", param, ctx)
        return number


class IntRange(click.IntRange):
    """click's IntRange over :func:`planner.whole.whole_number`, named "integer" in its error: click's own name
    made `--gpus abc` read "'abc' is not a valid integer range", as if a range had been asked for (ux13, newcomer
    pass). A number with thousands separators, as megaplan prints counts ("1,024 GPUs"), is told how to write
    it; one Python's int() reads but that is no plain digits (``2_0``, ``٢``) is refused with what int() reads.

    Without a ``max`` it stops at 2³¹−1 (``planner.whole.LARGEST``): search keeps sizes in 32-bit integers, so
    a typo such as --seq-len 3000000000 ended in an OverflowError traceback and --micro-batch 100000000000 was
    priced as 1215752192, wrapped (fresh user trial 8), and calibrate's --gpus had no bound at all (err16). The
    help says x>=1: the 32-bit guard is no choice a user makes, and "[1<=x<=2147483647]" under 20 options of
    every --help was noise (ux14, newcomer pass); a value past it is refused with the whole range."""

    name = "integer"

    def __init__(self, min: int | None = None, max: int | None = None) -> None:
        super().__init__(min, LARGEST if max is None else max)
        self.capped = max is None

    def _describe_range(self) -> str:
        return f"x>={self.min}" if self.capped and self.min is not None else super()._describe_range()

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            if re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+", value.strip()):
                self.fail(f"{value!r} is not a valid integer: write it without separators ({value.replace(',', '')})")
            try:
                whole_number(value)
            except NotWhole as err:
                if err.read is not None:  # 'abc': click's "'abc' is not a valid integer."
                    self.fail(str(err), param, ctx)
        number = click.INT.convert(value, param, ctx)
        if self.capped and number > self.max:
            self.fail(f"{number} is not in the range {self.min}<=x<={self.max}.", param, ctx)
        return super().convert(number, param, ctx)


POSITIVE = SIZE = IntRange(min=1)  # a count or a size of the plan (tp, micro-batch, seq-len ...)


class FiniteRange(click.FloatRange):
    """click's FloatRange that also refuses nan and inf: `--memory-headroom nan` passed every bound
    (a comparison with nan is false) and reached the search as "more than nan GiB per GPU", and
    `--gpu-hour-price inf` wrote `"cost": Infinity`, which is not JSON. Named "number" in its error
    (click's "'abc' is not a valid float range")."""

    name = "number"

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            try:
                decimal_number(value)
            except NotWhole as err:  # 2_0.5, ٢: float() reads them (planner.whole)
                self.fail(str(err), param, ctx)
            except ValueError:  # 'abc': click's own "'abc' is not a valid float."
                pass
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number; allowed: {self._describe_range()}", param, ctx)
        return number


@dataclass(frozen=True)
class Option:
    """One option: click declarations, its plan default and help, and whether search searches it."""

    decls: tuple[str, ...]
    help: str
    default: object = None
    type: object = None
    searched: bool = False  # search: no default; given, it pins the knob
    flag: bool = False  # a boolean --x/--no-x (or --x alone when ``solo``)
    solo: bool = False
    plan_only: bool = False  # explain/export/compare only (where the plan comes from)
    derived: str | None = None  # search: what it sets when the knob is not given, if not both ways
    # explain/export/compare: not given, the flag is set from the plan (plan_options.recipe_overlaps), as said here
    plan_derived: str | None = None
    extra: dict = field(default_factory=dict)

    def decorator(self, *, search: bool):
        kw = dict(help=self.help, **self.extra)
        decls = self.decls
        if self.flag:
            if search and self.searched:
                decls = (f"{decls[0]}/--no-{decls[0][2:]}",)
                kw.update(default=None, help=self.help + f" (default: {self.derived or 'search both'})")
            elif self.plan_derived is not None:
                decls = (f"{decls[0]}/--no-{decls[0][2:]}",)
                kw.update(default=None, help=self.help + f" [default: {self.plan_derived}]")
            elif self.solo and not self.searched:  # a searched knob takes its --no- form everywhere
                kw.update(is_flag=True)
            else:
                decls = (f"{decls[0]}/--no-{decls[0][2:]}",)
                kw.update(default=self.default, show_default=True)
        else:
            kw["type"] = self.type
            if search and self.searched:
                kw["help"] = self.help + f" (default: {self.derived or 'searched'})"
            elif self.default is not None:
                kw.update(default=self.default, show_default=True)
        return click.option(*decls, **kw)
