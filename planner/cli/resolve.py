"""The plan a command's options describe: a saved plan or a launch script with the options given beside it
applied over the file's values (each with a note), the plan flags, or search's best plan for them."""

from __future__ import annotations

from dataclasses import dataclass

import click

from planner import api
from planner.cli.options import (
    KNOBS,
    OVERLAP_PINS,
    PLAN_OPTIONS,
    _env_pair,
    _knobs,
    _stage_split,
    _training,
    behaviour,
    dest,
    read_text,
    search_inputs,
)
from planner.errors import PlannerError
from planner.plan_file import read_plan_file, request_from_plan

SOURCES = ("plan_file", "megatron_args", "megatron_args_file")
NOT_PLAN = {"plan_file", "rank", "megatron_args", "megatron_args_file", "env_pairs", "memory_headroom"}
IMPORTER_TAKES = {"model", "hardware", "gpus"}  # the importer reads these itself (preset base, world size)


@dataclass(frozen=True)
class Resolved:
    """The plan the options describe, and the notes the CLI says on stderr about how it was built."""

    request: api.PlanRequest
    notes: tuple[str, ...] = ()
    searched: str | None = None  # set when the plan is search's best for the options given


def given_options() -> set[str]:
    """The parameters of the running command given on its command line (not defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {k for k in ctx.params if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE,)}


def _flag(name: str) -> str:
    return "--" + {"env_pairs": "env", "plan_file": "plan"}.get(name, name).replace("_", "-")


def _refuse_strays(kw: dict, given: set[str]) -> None:
    """Options that would be silently ignored are refused (exit 2), naming what they need."""
    sources = [n for n in SOURCES if n in given or kw.get(n)]
    if set(sources) == {"megatron_args", "megatron_args_file"}:
        sources = ["megatron_args_file"]  # --megatron-args then adds flags to the script's launch line
    if len(sources) > 1:
        raise PlannerError(
            f"give one of --plan, --megatron-args, --megatron-args-file, not {' and '.join(map(_flag, sources))}"
        )
    if "rank" in given and not kw.get("plan_file"):
        raise PlannerError("--rank picks a plan of a search --json file: give it with --plan FILE")
    if "env_pairs" in given and not (kw.get("megatron_args") is not None or kw.get("megatron_args_file")):
        raise PlannerError(
            "--env sets variables of a launch script: give it with --megatron-args-file or --megatron-args"
        )


def resolve(kw: dict, *, search_best: bool = False) -> Resolved:
    """The plan the options describe: a saved plan or an imported Megatron-LM command line with the
    options given beside it applied over the file's values (each with a note), or the plan flags.
    With ``search_best`` and neither --tp nor --pp given, search's best plan for the options given."""
    given = given_options() & {dest(o) for o in PLAN_OPTIONS}
    _refuse_strays(kw, given)
    if kw.get("plan_file"):
        base = request_from_plan(read_plan_file(kw["plan_file"], kw.get("rank")))
        return _with_overrides(base, kw, given - NOT_PLAN, "the plan file")
    if kw.get("megatron_args") is not None or kw.get("megatron_args_file"):
        return _imported(kw, given)
    if not kw.get("model"):
        raise click.UsageError(
            "Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path)."
        )
    if search_best and not ({"tp", "pp"} & given):
        return _search_best(kw, given)
    knobs = _knobs(kw)
    knobs["distributed_optimizer"] = knobs["distributed_optimizer"] or kw["fsdp"]
    req = api.make_request(
        model=kw["model"],
        hardware=kw["hardware"] or "dgx-a100-superpod",
        gpus=kw["gpus"],
        **_training(kw),
        **knobs,
        stage_split=_stage_split(kw),
        options=behaviour(kw),
    )
    return Resolved(req)


def _imported(kw: dict, given: set[str]) -> Resolved:
    from planner.megatron.importer import import_megatron

    path = kw.get("megatron_args_file")
    text = read_text(path) if path else kw["megatron_args"]
    extra = kw.get("megatron_args") if path else None
    env = dict(_env_pair(p) for p in kw.get("env_pairs") or ())
    imported = import_megatron(
        text, gpus=kw["gpus"], model=kw["model"], hardware=kw["hardware"], env=env, base_dir=_base_dir(kw), extra=extra
    )
    notes = [f"warning: {w}" for w in imported.warnings] + [f"note: {n}" for n in imported.notes]
    script_gpus = imported.script_gpus
    if kw["gpus"] is not None and script_gpus is not None and script_gpus != kw["gpus"]:
        notes.append(f"note: --gpus {kw['gpus']} overrides the script's {script_gpus} GPUs")
    if kw.get("model"):
        notes.append(f"note: --model {kw['model']}: the script's architecture flags apply over the preset")
    resolved = _with_overrides(imported.request, kw, given - NOT_PLAN - IMPORTER_TAKES, "the script")
    return Resolved(resolved.request, tuple(notes) + resolved.notes)


def _base_dir(kw: dict) -> str | None:
    import os

    path = kw.get("megatron_args_file")
    return os.path.dirname(os.path.abspath(path)) if path else None


def _current(data: dict, name: str):
    if name in ("gpus", "model", "hardware"):
        return data.get(name)
    name = {"tokens": "train_tokens"}.get(name, name)
    for section in ("parallel", "options", "training"):
        if name in data[section]:
            return data[section][name]
    return None


def _with_overrides(base: api.PlanRequest, kw: dict, names: set[str], where: str) -> Resolved:
    """``base`` with every plan option given on the command line applied over it, each with a note."""
    from planner.plan_file import override_request, request_to_json

    if not names:
        return Resolved(base)
    data = {**request_to_json(base), "hardware": base.ctx.hardware.name}
    overrides = {n: kw[n] for n in names}
    notes = []
    for name in sorted(names):
        old = _current(data, name)
        value = kw[name]
        shown = value.value if hasattr(value, "value") else value
        if old is not None and str(old) == str(shown):
            notes.append(f"note: {_flag(name)} {shown} is what {where} has already")
        else:
            notes.append(f"note: {_flag(name)} {shown} overrides {where}'s {old if old is not None else 'default'}")
    return Resolved(override_request(base, overrides), tuple(notes))


def _search_best(kw: dict, given: set[str]) -> Resolved:
    """Search's best plan for the options given: the knobs given are pinned, the rest searched."""
    from planner.search import search

    pinned = {k: kw[k] if k in given else None for k in kw}
    searched = {*KNOBS, *OVERLAP_PINS}  # left to search unless given, as `megaplan search` does
    req, pins = search_inputs(pinned | {k: kw[k] for k in kw if k not in searched})
    if kw.get("gpus") is None:
        raise click.UsageError(
            "Missing option '--gpus' (without --tp and --pp the best plan on N GPUs is searched; "
            "or give --tp and --pp)."
        )
    result = search(req.ctx, kw["gpus"], pins, top=1, memory_headroom=kw.get("memory_headroom"))
    best = request_from_plan(result.plans[0], hardware=req.ctx.hardware)
    pins_given = sorted(given & set(KNOBS))
    pinned_text = f"; pinned {' '.join(_flag(k) for k in pins_given)}" if pins_given else ""
    note = f"search's best of {result.feasible:,} plans that fit (no --tp/--pp given{pinned_text})"
    return Resolved(best, searched=note)
