"""The plan a command's options describe, through the library's one function for it
(``planner.plan_sources.resolve_plan``): the CLI only says which options were given."""

from __future__ import annotations

import click

from planner.cli.options import PLAN_OPTIONS, dest
from planner.plan_sources import Resolved, resolve_plan

__all__ = ["Resolved", "given_options", "resolve"]


def given_options() -> set[str]:
    """The plan options of the running command given on its command line (not defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    names = {dest(o) for o in PLAN_OPTIONS}
    return {k for k in ctx.params if k in names and ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE}


def resolve(kw: dict, *, search_best: bool = False) -> Resolved:
    """The plan the command's options describe (``resolve_plan``), with the notes on how it was built."""
    return resolve_plan(kw, given_options(), search_best=search_best)
