"""Every option is given once: an option typed twice with different values (``--plan a.json --plan b.json``)
or both ways of an on/off pair (``--sequence-parallel --no-sequence-parallel``) is refused with one line,
never settled silently by the last one. The same value typed twice loses nothing and is accepted. An empty
value (``--schedule-file ''``) is refused too, except for the options whose empty value means something.
Options that collect (``multiple=True``) or count are not concerned."""

from __future__ import annotations

import click


def _spelling(option) -> str:
    """The option as the user typed it: a flag by its own side (--x or --no-x), a valued option by its
    long name."""
    names = [*option._long_opts, *option._short_opts]
    if option.action == "store_const" and names:
        return names[0]
    opts = getattr(option.obj, "opts", None) or names
    return max(opts, key=len)


def refuse_repeats(seen: list[tuple[click.Parameter, str, object]]) -> None:
    """Stop with one line when one parameter was given more than one way; ``seen`` lists
    (parameter, spelling, value) in the order typed."""
    by_param: dict[str, list[tuple[str, object]]] = {}
    for param, spelling, value in seen:
        by_param.setdefault(param.name, []).append((spelling, value))
    for given in by_param.values():
        values = list(dict.fromkeys(repr(value) for _, value in given))
        if len(values) < 2:
            continue
        spellings = list(dict.fromkeys(spelling for spelling, _ in given))
        if all(isinstance(value, bool) for _, value in given):
            raise click.UsageError(f"{' and '.join(spellings)} both given; give one of them")
        shown = ", then ".join(str(value) for value in dict.fromkeys(str(v) for _, v in given))
        times = "twice" if len(given) == 2 else f"{len(given)} times"
        raise click.UsageError(f"{spellings[0]} given {times} with different values ({shown}); give it once")


EMPTY_ALLOWED = {"megatron_args", "a_args", "b_args"}  # an empty flag string or override set is a valid (empty) one


def refuse_empty(seen: list[tuple[click.Parameter, str, object]]) -> None:
    """Stop with one line when an option that names something (a file, a preset, a format) is given an
    empty value: ``--schedule-file ''`` wrote nothing and ``--hardware ''`` took the default, silently."""
    for param, spelling, value in seen:
        if isinstance(value, str) and not value.strip() and param.name not in EMPTY_ALLOWED:
            raise click.UsageError(f"{spelling} is empty ({value!r}): give a value, or leave the option out")


class GivenOnce:
    """Mixin for click commands and groups: records each option as the parser meets it and refuses
    repeats (``refuse_repeats``) before any value is converted."""

    def make_parser(self, ctx):
        parser = super().make_parser(ctx)
        seen: list = []
        appended: list = []  # repeatable options (--bridge-override, --env): each value checked for emptiness
        options = {id(o): o for o in [*parser._long_opt.values(), *parser._short_opt.values()]}
        for option in options.values():
            if option.action in ("store", "store_const", "append"):
                option.process = _recording(option, appended if option.action == "append" else seen)
        parse = parser.parse_args

        def parse_args(args):
            result = parse(args)
            refuse_repeats(seen)
            refuse_empty(seen + appended)
            return result

        parser.parse_args = parse_args
        return parser


def _recording(option, seen: list):
    process = option.process

    def recorded(value, state):
        const = option.action == "store_const"
        seen.append((option.obj, _spelling(option), option.const if const else value))
        return process(value, state)

    return recorded


class OnceCommand(GivenOnce, click.Command):
    """A click command whose options are each given once (see the module)."""
