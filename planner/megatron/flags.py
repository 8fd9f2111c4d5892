"""Megatron-LM's command-line arguments and a typed parser of a ``pretrain_gpt.py`` argv.

The argument table is ``planner/megatron/data/megatron_arguments.json``: every argument of
Megatron-LM's ``megatron/training/arguments.py`` at commit d98e8a64 (megatron-core 0.20.0).
:func:`parse_megatron_argv` reads an argv list the way Megatron's argparse parser does
(``allow_abbrev=False``: no prefix matching), converting values by the table's type and
enforcing choices, but never running anything.

Flags of older Megatron-LM releases, and flags today's ``validate_args`` rejects or
deprecates, are read through :data:`ALIASES` into today's destinations, each use adding a
warning. Explicit modern flags always win over values an alias implies.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources

from planner.errors import PlannerError, typographic_dash_hint
from planner.megatron.aliases import ALIASES, DROPPED_DESTS, VALUE, ArgSpec
from planner.megatron.dialects import FORK_CHOICES, fork_flag
from planner.whole import DIGITS, NotWhole, decimal_number, python_int, whole_number

__all__ = [
    "ALIASES",
    "DROPPED_DESTS",
    "ArgSpec",
    "MegatronArgError",
    "MegatronArgs",
    "UnknownMegatronFlag",
    "argument_specs",
    "flag_table",
    "megatron_source",
    "parse_megatron_argv",
    "validate_flag_set",
]


class MegatronArgError(PlannerError):
    """A Megatron-LM argv the parser cannot read: missing or bad value, bad choice, stray token."""


class UnknownMegatronFlag(MegatronArgError):
    """A flag Megatron-LM's parser (and the alias table) does not know."""


@dataclass(frozen=True)
class MegatronArgs:
    """A parsed argv: ``values`` maps dest -> typed value for the flags actually given; ``fork`` maps a
    flag of an older release or a fork (``planner.megatron.dialects``) to the words given with it."""

    values: dict[str, object]
    given: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    fork: dict[str, list[str]] = field(default_factory=dict)


@functools.cache
def _table_json() -> dict:
    text = resources.files("planner.megatron.data").joinpath("megatron_arguments.json").read_text("utf-8")
    return json.loads(text)


ARGUMENT_TABLE_COMMIT = (
    "d98e8a64ddf34856e74b24714e3bedb2f5a39553"  # NVIDIA/Megatron-LM, 2026-08-22, megatron-core 0.20.0
)
# sha256 of megatron_arguments.json exactly as dumped from that commit: every action of the parser that
# megatron/training/arguments.py:add_megatron_arguments builds (flags, dest, whether it takes a value, nargs,
# type name, choices, default); docs/megatron-flags.md says how it was dumped. The file is never edited by hand.
ARGUMENT_TABLE_SHA256 = "c265303c665b2b9a95a7792d9b9fa6f74fb4713f82520c240d13bd062389e184"


def argument_table_bytes() -> bytes:
    """The argument table file as shipped in the package."""
    return resources.files("planner.megatron.data").joinpath("megatron_arguments.json").read_bytes()


def megatron_source() -> str:
    """Where the argument table was read: repository, file and commit."""
    return str(_table_json()["source"])


@functools.cache
def argument_specs() -> tuple[ArgSpec, ...]:
    """Every argument of today's Megatron-LM parser, in the parser's order."""
    return tuple(
        ArgSpec(
            tuple(a["flags"]),
            a["dest"],
            bool(a["takes_value"]),
            a["nargs"] or None,
            a["type"],
            tuple(a["choices"]) if a["choices"] else None,
            a["default"],
        )
        for a in _table_json()["arguments"]
    )


@functools.cache
def flag_table() -> dict[str, ArgSpec]:
    """Flag spelling -> :class:`ArgSpec`, for every spelling in today's parser."""
    return {flag: spec for spec in argument_specs() for flag in spec.flags}


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _is_option(token: str) -> bool:
    """Whether argparse would read ``token`` as a flag rather than a value."""
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def _convert_one(spec: ArgSpec, flag: str, raw: str) -> object:
    """One value, converted by the spec's type and checked against its choices."""
    kind = spec.type or "str"
    try:
        if kind == "int":
            value: object = whole_number(raw)
        elif kind == "float":
            value = decimal_number(raw)
        elif kind == "bool":
            if raw.lower() not in _TRUE + _FALSE:
                raise ValueError(raw)
            value = raw.lower() in _TRUE
        elif kind == "tuple_type":
            value = tuple(whole_number(x) for x in raw.strip("()").split(","))
        elif kind.endswith("freq_type"):  # a number, or a Python list expression read later
            value = whole_number(raw) if python_int(raw) is not None else raw
        else:
            value = raw
    except NotWhole as err:  # 2_0, ٢: argparse's int() reads them; megaplan takes them for typos (planner.whole)
        if err.read is None:
            raise MegatronArgError(f"{flag} expects {_describe(spec)}, got {raw!r}") from None
        raise MegatronArgError(f"{flag} {err}") from None
    except ValueError:
        raise MegatronArgError(f"{flag} expects {_describe(spec)}, got {raw!r}") from None
    if spec.choices is not None and str(value) not in spec.choices:
        by_case = {c.lower(): c for c in spec.choices}
        fork = FORK_CHOICES.get(spec.dest, {})
        if str(value).lower() in by_case:  # rmsnorm, layernorm: a fork's lower-case spelling
            return by_case[str(value).lower()]
        if str(value) in fork:
            return ForkValue(fork[str(value)], str(value))
        if spec.dest in OPEN_CHOICES:  # kept: what it changes is read elsewhere, and can be overridden
            return UnknownChoice(str(value))
        raise MegatronArgError(f"{flag} got {raw!r}; allowed: {', '.join(spec.choices)}")
    return value


OPEN_CHOICES = {"tokenizer_type"}  # a value today's parser does not list (a fork's tokenizer) is kept, not refused


class UnknownChoice(str):
    """A value of an OPEN_CHOICES flag that today's Megatron-LM does not list (a fork's, a newer release's)."""


class ForkValue(str):
    """A value a fork allows, read as today's value; ``original`` is what the script wrote."""

    original: str

    def __new__(cls, value: str, original: str):
        obj = super().__new__(cls, value)
        obj.original = original
        return obj


def _describe(spec: ArgSpec) -> str:
    kind = {
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "tuple_type": "integers separated by commas",
    }.get(spec.type or "", "a string")
    if spec.choices:
        kind = "one of " + ", ".join(spec.choices)
    if spec.nargs in ("+", "*"):
        return f"{'zero' if spec.nargs == '*' else 'one'} or more values, each {kind}"
    if isinstance(spec.nargs, int):
        return f"{spec.nargs} values, each {kind}"
    return kind


def _count_ok(nargs: int | str | None, n: int) -> bool:
    if nargs is None:
        return n == 1
    if nargs == "+":
        return n >= 1
    return True if nargs == "*" else n == nargs


def _take(spec: ArgSpec, flag: str, inline: str | None, argv: list[str], i: int) -> tuple[object, int]:
    """Read the value(s) of ``flag`` (token ``argv[i - 1]``); return them and the next index."""
    if not spec.takes_value:
        if inline is not None:
            raise MegatronArgError(f"{flag} takes no value, got {flag}={inline}")
        return spec.const(flag), i
    if inline is not None:
        raws = [inline]
    else:
        want = 1 if spec.nargs is None else spec.nargs
        stop = i + (want if isinstance(want, int) else len(argv))
        j = i
        while j < min(stop, len(argv)) and not _is_option(argv[j]):
            j += 1
        raws, i = argv[i:j], j
    if not raws and spec.nargs != "*":
        raise MegatronArgError(f"{flag} is missing its value: expects {_describe(spec)}")
    if not _count_ok(spec.nargs, len(raws)):
        raise MegatronArgError(f"{flag} expects {_describe(spec)}, got {len(raws)}")
    values = [_convert_one(spec, flag, r) for r in raws]
    return (values[0] if spec.nargs is None else values), i


def _suggest(flag: str) -> str:
    real = [f for f in flag_table() if f not in ALIASES]
    close = difflib.get_close_matches(flag.replace("_", "-"), real, n=1, cutoff=0.7)
    return f"{flag} (did you mean {close[0]}?)" if close else flag


def _unknown(flags: list[str]) -> UnknownMegatronFlag:
    what = "unknown Megatron-LM flag" if len(flags) == 1 else f"{len(flags)} unknown Megatron-LM flags"
    return UnknownMegatronFlag(
        f"{what}: {', '.join(_suggest(f) for f in flags)} (not in today's Megatron-LM, its older releases since "
        "v1.0, DeepSpeed or the Megatron-DeepSpeed forks; a fork's flag cannot be priced: to price the rest, "
        "drop it from a copy of the script)"
    )


@dataclass
class _State:
    explicit: dict[str, object] = field(default_factory=dict)
    strong: dict[str, object] = field(default_factory=dict)
    weak: dict[str, object] = field(default_factory=dict)
    given: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    stray_after: dict[int, str | None] = field(default_factory=dict)  # {0: the flag whose value the strays follow}
    fork: dict[str, list[str]] = field(default_factory=dict)
    underscored: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)  # a flag set twice to different values (argparse: last wins)

    def merged(self) -> dict[str, object]:
        return {**self.weak, **self.strong, **self.explicit}


def _step(argv: list[str], i: int, state: _State) -> int:
    """Parse the token at ``argv[i]`` (and its values) into ``state``; return the next index."""
    token = argv[i]
    if not _is_option(token):
        state.stray.append(token)
        after_value = i > 0 and not _is_option(argv[i - 1]) and bool(state.given) and len(state.stray) == 1
        state.stray_after.setdefault(0, state.given[-1] if after_value else None)
        return i + 1
    flag, eq, rest = token.partition("=") if token.startswith("--") else (token, "", "")
    inline = rest if eq else None
    alias = ALIASES.get(flag)
    spec = alias.spec if alias else flag_table().get(flag)
    dashed = "--" + flag[2:].replace("_", "-")
    if spec is None and flag.startswith("--") and dashed != flag and dashed in flag_table() and not fork_flag(flag):
        state.underscored.append(flag)  # Megatron-LLM spells every flag with underscores
        flag, spec = dashed, flag_table()[dashed]
    if spec is None:
        return _other_flag(flag, inline, argv, i + 1, state)
    value, nxt = _take(spec, flag, inline, argv, i + 1)
    state.given.append(flag)
    if spec.dest == "num_experts" and nxt < len(argv) and DIGITS.fullmatch(argv[nxt]):
        nxt, value = _per_layer_experts(argv, nxt, value, state)
    if alias is None:
        old = state.explicit.get(spec.dest, value)
        if old != value:  # argparse keeps the last: say so rather than drop the first silently
            state.repeated.append(f"{flag} given twice ({old}, then {value}): Megatron-LM keeps the last, {value}")
        state.explicit[spec.dest] = value
        return nxt
    state.strong.update({k: value if v is VALUE else v for k, v in alias.sets.items()})
    for key, val in alias.weak.items():
        state.weak.setdefault(key, val)
    state.warnings.append(f"{flag} is an old Megatron-LM flag ({alias.note}); today: {alias.modern}")
    return nxt


def _per_layer_experts(argv: list[str], j: int, first: object, state: _State) -> tuple[int, object]:
    """Microsoft Megatron-DeepSpeed's ``--num-experts`` takes one count per layer group (pyramid MoE):
    read them all; a single count stands for them when they agree, else the most common one, said in a warning."""
    counts = [int(str(first))]
    while j < len(argv) and DIGITS.fullmatch(argv[j]):
        counts.append(whole_number(argv[j]))
        j += 1
    common = max(set(counts), key=counts.count)
    if len(set(counts)) > 1:
        state.warnings.append(
            f"--num-experts {' '.join(map(str, counts))}: expert counts per layer (Megatron-DeepSpeed's pyramid MoE) "
            f"are not modelled; every MoE layer priced with {common} experts"
        )
    return j, common


def _other_flag(flag: str, inline: str | None, argv: list[str], i: int, state: _State) -> int:
    """A flag today's parser lacks: a fork's (kept with its words) or an unknown one (noted, with the words
    after it); returns the next index."""
    known = fork_flag(flag)
    j = i
    if inline is None and (known is None or known.takes_value):
        limit = known.nargs if known is not None and isinstance(known.nargs, int) else None
        want = 1 if known is not None and known.nargs is None else limit
        while j < len(argv) and not _is_option(argv[j]) and (want is None or j - i < want):
            j += 1
    words = [inline] if inline is not None else argv[i:j]
    if known is None:
        state.unknown.append(flag)
    else:
        state.fork[flag] = words
        state.given.append(flag)
    return j


def _stray_error(stray: list[str], after: str | None = None) -> MegatronArgError:
    shown = " ".join(repr(s) for s in stray[:5]) + (" ..." if len(stray) > 5 else "")
    if hint := next(filter(None, map(typographic_dash_hint, stray)), None):  # `—hidden-size 4096`, pasted
        return MegatronArgError(hint)
    if stray and all(not s.strip() for s in stray):  # `... \ ` at a line's end: bash's escaped space, then the end
        return MegatronArgError(
            f"stray word {shown}{f' after {after} and its value' if after else ''}: a backslash followed by a space "
            "at the end of a line passes ' ' as an argument and ends the command there (the next line is another "
            "command); Megatron-LM would reject it too: delete the space after the backslash"
        )
    if after:
        return MegatronArgError(
            f"stray words {shown} after {after} and its value: a value with spaces was split into words, as bash "
            "splits an unquoted expansion (an array element expanded as ${ARGS[@]} without quotes, or $VAR); "
            'Megatron-LM would reject it too: quote the expansion, "${ARGS[@]}"'
        )
    return MegatronArgError(f"stray positional argument(s) not after a flag: {shown}")


def parse_megatron_argv(argv: list[str], extra_flags_allowed: bool = False) -> MegatronArgs:
    """Parse a Megatron-LM argv (the arguments after ``pretrain_gpt.py``) without running it.

    Raises :class:`UnknownMegatronFlag` for a flag the parser does not know (unless
    ``extra_flags_allowed``: an entry point that adds its own, whose flags are then kept in
    ``fork`` and named in a warning) and :class:`MegatronArgError` for a missing or bad value, a
    bad choice or stray tokens.
    """
    argv = [str(t) for t in argv]
    state, i = _State(), 0
    while i < len(argv):
        if argv[i] == "--":
            state.stray.extend(argv[i + 1 :] or ["--"])
            break
        i = _step(argv, i, state)
    if state.unknown and not extra_flags_allowed:
        raise _unknown(state.unknown)
    if state.unknown:
        state.warnings.append(
            f"read and ignored {len(state.unknown)} flag{'s' * (len(state.unknown) > 1)} pretrain_gpt.py does not "
            "have (the entry point adds its "
            f"own): {' '.join(state.unknown[:6])}{' ...' if len(state.unknown) > 6 else ''}"
        )
    if state.stray:
        raise _stray_error(state.stray, state.stray_after.get(0))
    if state.underscored:
        state.warnings.append(
            f"read {len(state.underscored)} underscore-spelled flags as today's dashes (Megatron-LLM style): "
            + ", ".join(state.underscored[:4])
            + (" ..." if len(state.underscored) > 4 else "")
        )
    warnings = tuple(state.repeated + state.warnings)
    return MegatronArgs(state.merged(), tuple(state.given), warnings, dict(state.fork))


def validate_flag_set(argv: list[str], allow_aliases: bool = False) -> list[str]:
    """Problems with an argv meant for today's Megatron-LM; an empty list means it is clean.

    Checks every flag is a real flag of today's parser with a value of the right type and
    choice, that no destination is set twice and (unless ``allow_aliases``) that no old
    flag from :data:`ALIASES` is used. Unlike :func:`parse_megatron_argv` it reports all
    problems instead of stopping at the first.
    """
    argv = [str(t) for t in argv]
    problems: list[str] = []
    state, i = _State(), 0
    seen: dict[str, str] = {}
    while i < len(argv):
        try:
            before, unknown, underscored = len(state.given), len(state.unknown), len(state.underscored)
            i = _step(argv, i, state)
            problems += [f"unknown Megatron-LM flag {_suggest(f)}" for f in state.unknown[unknown:]]
            problems += [f"{f}: today's Megatron-LM spells it with dashes" for f in state.underscored[underscored:]]
        except MegatronArgError as err:
            problems.append(str(err))
            i += 1
            while i < len(argv) and not _is_option(argv[i]):
                i += 1
            continue
        if len(state.given) > before and state.given[-1] not in state.fork:
            flag = state.given[-1]
            spec = ALIASES[flag].spec if flag in ALIASES else flag_table()[flag]
            if spec.dest in seen:
                problems.append(f"{flag} sets {spec.dest}, already set by {seen[spec.dest]}")
            seen[spec.dest] = flag
    problems += [f"{f} is not a flag of today's Megatron-LM ({fork_flag(f).origin})" for f in state.fork]
    if state.stray:
        problems.append(str(_stray_error(state.stray)))
    if not allow_aliases:
        problems.extend(state.warnings)
    return problems
