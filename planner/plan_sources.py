"""Where a plan comes from, and how the options given beside it change it: decided here, once.

A plan comes from one source: the plan options themselves (flags), a saved plan (``--plan``), a
Megatron-LM command line or launch script (``--megatron-args``, ``--megatron-args-file``), or search's
best plan for the options (explain and export without ``--tp``/``--pp``). A file source yields the
plan's fields (the plan JSON's shape, not yet checked); every plan option given beside it is applied
over those fields, each with a note; the plan is then built and checked once, after the overrides,
so an override can repair what the file alone would not allow (a TP·PP that does not divide the GPUs).

A new source is a class with ``selectors`` (the options that pick it), ``companions`` (options that
only make sense with it), ``where`` (how notes name it), ``takes`` (options it reads itself rather
than applying them over its fields) and ``fields(values)``, and a row of ``SOURCES``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from planner import api
from planner.errors import PlannerError, counted, refuse_device, url_hint
from planner.plan import ParallelPlan, PlanOptions, Recompute, StageSplit, TrainingSpec, recompute_layers_run
from planner.plan_file import read_plan_file, request_from_fields, request_from_plan, request_to_json
from planner.plan_options import (
    KNOBS,
    LISTS,
    OVERLAP_PINS,
    RECIPE_OVERLAPS,
    flag_fields,
    recipe_overlaps,
    search_inputs,
    search_pins,
)

FLAG_NAMES = {  # option names whose flag is not --name-with-dashes
    "plan_file": "--plan",
    "env_pairs": "--env",
    "pipeline_layout": "--pipeline-model-parallel-layout",
}
NOT_PLAN = {"memory_headroom", "bridge_recipe", "bridge_version"}  # options given with a plan that do not describe it


def flag(name: str) -> str:
    """The command-line flag of an option name."""
    return FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


@dataclass(frozen=True)
class Fields:
    """A source's plan, before the options beside it and before it is checked."""

    data: dict  # model or model_spec, hardware, gpus, training, parallel, options (plan JSON's shape)
    notes: tuple[str, ...] = ()  # "note: ..." and "warning: ..." on how the source was read
    world: str | None = None  # how the source gives the GPU count, for errors ("the script's 8 GPUs")
    file: str | None = None  # a plan file's name, when its own fields give the plan's sizes (errors name them)
    unset: dict = field(default_factory=dict)  # option -> what the source left unset there, as written


@dataclass(frozen=True)
class Resolved:
    """The plan the options describe, and the notes to say on stderr about how it was built."""

    request: api.PlanRequest
    notes: tuple[str, ...] = ()
    searched: str | None = None  # set when the plan is search's best for the options given
    read: bool = False  # the model was read from a launch script (explain shows what it read)
    derived: tuple[str, ...] = ()  # the overlaps a plan typed as flags left out, set as search sets them

    @property
    def overrides(self) -> tuple[str, ...]:
        """The options given over the source and how it was read, as the notes say them ("--model x overrides
        the plan file's y", "read as a ... config"): an error about the plan names them, since the notes are
        not shown beside an error."""
        return tuple(
            n.removeprefix("note: ") for n in self.notes if " overrides " in n or n.startswith("note: read as ")
        )


class PlanFile:
    """A plan saved by explain or search --json."""

    selectors = ("plan_file",)
    companions = {"rank": "--rank picks a plan of a search --json file: give it with --plan FILE"}
    where = "the plan file"
    takes = frozenset()

    def fields(self, values: dict, beside: frozenset[str] = frozenset()) -> Fields:
        ref, rank = values["plan_file"], values.get("rank")
        data = read_plan_file(ref, rank, model_given=values.get("model") is not None)
        name = f"{ref}#{rank}" if rank is not None else ref
        return Fields(data, (), f"the plan file's {data.get('gpus')} GPUs", f"plan file {name}")


class LaunchScript:
    """A Megatron-LM command line, or a launch script (with --megatron-args: flags added to its launch)."""

    selectors = ("megatron_args_file", "megatron_args")
    companions = {
        "env_pairs": "--env sets variables of a launch script: give it with --megatron-args-file or --megatron-args"
    }
    where = "the script"
    takes = frozenset({"model", "hardware", "gpus"})  # the preset base and the world size the import reads

    def fields(self, values: dict, beside: frozenset[str] = frozenset()) -> Fields:
        from planner.megatron.importer import import_fields

        path = values.get("megatron_args_file")
        script = read_launch_script(path) if path is not None else ScriptSource(values["megatron_args"])
        hardware, named = _hardware_of(values.get("hardware"), script.script_path)
        generated = _generated_for(script.text) if hardware is None else []
        imported = import_fields(
            script.text,
            gpus=values.get("gpus"),
            model=values.get("model"),
            hardware=hardware,
            env=env_values(values.get("env_pairs") or ()),
            base_dir=script.base_dir,
            script_path=script.script_path,
            extra=values.get("megatron_args") if path else None,
            given=beside,
        )
        notes = [f"warning: {w}" for w in (*script.warnings, *generated, *imported.warnings)]
        notes += [f"note: {n}" for n in (*named, *imported.notes)]
        gpus, script_gpus = values.get("gpus"), imported.script_gpus
        if gpus is not None and script_gpus is not None and script_gpus != gpus:
            notes.append(f"note: --gpus {gpus} overrides the script's {script_gpus} GPUs")
        if values.get("model") and not any("(--model) gives what the script leaves" in n for n in notes):
            notes.append(f"note: --model {values['model']}: the script's architecture flags apply over the preset")
        world = f"--gpus {gpus}" if gpus is not None else imported.world_text
        return Fields(imported.data, tuple(notes), world, unset=imported.unset)


def _hardware_of(given, script_path) -> tuple[object, list[str]]:
    """The hardware to read a launch script on: the one given, else the GPU the script's file name states as a
    word (NVIDIA's examples/llama/train_llama3_8b_h100_fp8.sh: an H100 script, which on the default A100 preset
    was refused for its FP8), with a note; else None (the default preset)."""
    from pathlib import Path

    from planner.hardware.names import gpu_in_name

    if given is not None or script_path is None:
        return given, []
    found = gpu_in_name(Path(script_path).name)
    if found is None:
        return None, []
    gpu, preset = found
    return preset, [f"hardware {preset} from the script's name {Path(script_path).name} ({gpu}; --hardware overrides)"]


def _generated_for(text: str) -> list[str]:
    """A warning where megaplan's own Slurm export is read back without --hardware on another preset than the one
    its header names ("# Generated by megaplan for deepseek-v3 on 256 GPUs of gb200-nvl72"): the script's flags do
    not say the GPU, so its GB200 plan was priced on the default A100 preset, DOES NOT FIT, with the first line the
    only sign (qa21). The header's read-back line gives the options; nothing is taken from a comment unasked."""
    import re

    from planner.presets import DEFAULT_HARDWARE, preset_names

    m = re.search(r"^# Generated by megaplan for \S+ on [\d,]+ GPUs of (\S+?)(?: \(|:)", text, re.MULTILINE)
    if m is None or m.group(1) == DEFAULT_HARDWARE:
        return []
    named = f" (--hardware {m.group(1)})" if m.group(1) in preset_names("hardware") else ""  # a YAML's name: its path
    return [
        f"this script was written by megaplan for {m.group(1)}, but no --hardware was given: it is read on "
        f"{DEFAULT_HARDWARE} (the default); its 'Read it back' line gives the options{named}"
    ]


class BridgeConfig:
    """A Megatron-Bridge config: an override file or saved ConfigContainer YAML, or overrides over a recipe."""

    selectors = ("bridge_config", "bridge_override")
    companions = {}
    where = "the Bridge config"
    takes = frozenset({"model", "hardware", "gpus"})

    def fields(self, values: dict, beside: frozenset[str] = frozenset()) -> Fields:
        from planner.bridge.importer import read_bridge_source

        read, world = read_bridge_source(values)
        return Fields(
            read.data, tuple(f"warning: {w}" for w in read.warnings) + tuple(f"note: {n}" for n in read.notes), world
        )


SOURCES = (PlanFile, LaunchScript, BridgeConfig)  # the flags themselves are the source when none of these is given


def _given(values: dict, name: str, given: set[str]) -> bool:
    value = values.get(name)
    return name in given or (value is not None and value != () and value is not False)


def pick_source(values: dict, given: set[str]):
    """The file source the options name (None: the plan options are the plan); options that would be
    silently ignored are refused, naming what they need."""
    picked = [(S, [o for o in S.selectors if _given(values, o, given)]) for S in SOURCES]
    picked = [(S, names) for S, names in picked if names]
    if len(picked) > 1:
        every = ", ".join(flag(o) for S in SOURCES for o in reversed(S.selectors))
        raise PlannerError(f"give one of {every}, not {' and '.join(flag(names[0]) for _, names in picked)}")
    source = picked[0][0] if picked else None
    for S in SOURCES:
        for name, message in S.companions.items():
            if name in given and S is not source:
                raise PlannerError(message)
    return source() if source else None


def resolve_plan(values: dict, given: set[str], *, search_best: bool = False) -> Resolved:
    """The plan the options describe. ``values``: every plan option by name (defaults included);
    ``given``: the names the user gave. A file source with the options given beside it applied over
    its fields (each with a note), else the plan options; with ``search_best`` and neither tp nor pp
    given, search's best plan for the options given. The plan is checked once, after the overrides."""
    if (
        values.get("bridge_recipe")
        and not values.get("model")
        and not any(_given(values, s, given) for S in SOURCES for s in S.selectors)
    ):
        given = given | {"bridge_override"}  # the recipe alone is the source, as search reads it: nothing to override
        values = {**values, "bridge_override": ()}
    source = pick_source(values, given)
    if source is None:
        if not values.get("model"):
            raise PlannerError(
                "Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path)."
            )
        if search_best and not ({"tp", "pp"} & given):
            return _search_best(values, given)
        gpus = values.get("gpus")
        req, clamped = clamp_recompute_layers(build(flag_fields(values), f"--gpus {gpus}"))
        derived = tuple(k for k in RECIPE_OVERLAPS if values.get(k) is None)
        return Resolved(req, clamped, derived=derived)
    selecting = {*source.selectors, *source.companions}
    names = given - NOT_PLAN - selecting - source.takes
    fields = source.fields(values, frozenset(names))  # what the options beside override, the source need not give
    data, notes = override_fields(fields.data, {n: values[n] for n in names}, source.where, fields.unset)
    world = f"--gpus {values['gpus']}" if "gpus" in names else fields.world
    if fields.file and not names & {*WORLD_FIELDS, "dp"}:
        check_file_world(data, fields.file)
    req, clamped = clamp_recompute_layers(build(data, world))
    return Resolved(req, fields.notes + notes + clamped, read=isinstance(source, LaunchScript))


def clamp_recompute_layers(req: api.PlanRequest) -> tuple[api.PlanRequest, tuple[str, ...]]:
    """--recompute-num-layers beyond the layers of a model chunk: accepted, as Megatron-LM does, and read as
    the chunk's layer count (``recompute_layers_run``), with a note, so the label and export say what runs."""
    from planner.result import stage_layer_list
    from planner.space.grid import PlanGrid

    plan = req.plan
    if plan.recompute_num_layers is None or plan.recompute is not Recompute.FULL:
        return req, ()
    stages = stage_layer_list(req.ctx, PlanGrid.from_plans([plan]), 0)
    run = recompute_layers_run(plan, stages)
    if run == plan.recompute_num_layers:
        return req, ()
    chunk = run or 1
    most = max(stages)
    where = f"{most} per stage" + (f" in {plan.vpp} chunks" if plan.vpp > 1 and not plan.pipeline_layout else "")
    note = (
        f"note: --recompute-num-layers {plan.recompute_num_layers} is more than the {counted(chunk, 'layer')} of a "
        f"model chunk ({where}); Megatron-LM accepts it and recomputes all {chunk}, so the plan is read as "
        f"--recompute-num-layers {chunk}"
    )
    clamped = plan.model_copy(update={"recompute_num_layers": run})
    return api.PlanRequest(ctx=req.ctx, plan=clamped, gpus=req.gpus), (note,)


def _shown(value):
    """An option's value as the command line writes it: an enum by its value, a list comma-separated
    ("(none)" when empty), as --recompute-modules takes it (it showed "the script's ('core_attn',)"), a switch
    on or off."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(_shown(v)) for v in value) or "(none)"
    if isinstance(value, bool):  # "--overlap-grad-reduce False overrides the script's True" (ux15)
        return "on" if value else "off"
    return value.value if hasattr(value, "value") else value


def _current(data: dict, name: str):
    if name in ("gpus", "model"):
        return data.get(name)
    if name == "hardware":
        hw = data.get("hardware")
        return getattr(hw, "name", hw)
    name = {"tokens": "train_tokens"}.get(name, name)
    for section in ("parallel", "options", "training"):
        if name in data[section]:
            return data[section][name]
    return None


def override_notes(data: dict, overrides: dict, where: str, unset: dict | None = None) -> list[str]:
    """One note per option given over a source: what it overrides (``unset``: a value the source left unset, as
    written), or that the source has it already."""
    notes = []
    for name in sorted(overrides):
        old, shown = _shown(_current(data, name)), _shown(overrides[name])
        if name == "tokens":  # "--tokens 15000000000000.0 overrides the Bridge config's 4899999842304.0"
            from planner.report.layout import tokens_text

            old, shown = (tokens_text(float(x)) if x is not None else None for x in (old, shown))
        old = f"{(unset or {})[name]} (unset)" if name in (unset or {}) else old
        if old is not None and str(old) == str(shown):
            notes.append(f"note: {flag(name)} {shown} is what {where} has already")
        else:
            notes.append(f"note: {flag(name)} {shown} overrides {where}'s {old if old is not None else 'default'}")
    return notes


SPLIT_FLAGS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
LAYER_FLAGS = {
    "decoder_first_pipeline_num_layers": "first_stage_layers",
    "decoder_last_pipeline_num_layers": "last_stage_layers",
}
WORLD_FIELDS = ("tp", "pp", "cp", "gpus")


def override_fields(data: dict, overrides: dict, where: str, unset: dict | None = None) -> tuple[dict, tuple[str, ...]]:
    """A source's fields with plan options (by option name) applied over them, and a note for each.
    dp is derived again when the world or the model-parallel sizes change and dp is not given;
    N = tp·cp·pp·dp when dp is given without gpus."""
    if not overrides:
        return data, ()
    notes = override_notes(data, overrides, where, unset)
    overrides = dict(overrides)
    if "tokens" in overrides:
        overrides["train_tokens"] = overrides.pop("tokens")
    data = {**data, **{k: dict(data[k]) for k in ("training", "parallel", "options")}}
    if "hardware" in overrides:
        data["hardware"] = overrides.pop("hardware")
    if "model" in overrides:
        data["model"] = overrides.pop("model")
        data.pop("model_spec", None)
    par = data["parallel"]
    if any(k in overrides for k in SPLIT_FLAGS):
        old = StageSplit(_shown(par.get("stage_split", "even")))
        emb = overrides.pop(SPLIT_FLAGS[0], old.embedding_counted)
        loss = overrides.pop(SPLIT_FLAGS[1], old.loss_counted)
        par["stage_split"] = StageSplit.from_flags(emb, loss).value
    for option, layer_field in LAYER_FLAGS.items():
        if option in overrides:
            par[layer_field] = overrides.pop(option)
    if "dp" in overrides and "gpus" not in overrides:
        data["gpus"] = None  # N = tp·cp·pp·dp
    elif any(k in overrides for k in WORLD_FIELDS) and "dp" not in overrides:
        par.pop("dp", None)  # derived again when the plan is built
    if "gpus" in overrides:
        data["gpus"] = overrides.pop("gpus")
    if _shown(overrides.get("recompute", "full")) != "full":  # the source's full-recomputation method goes with it
        par.pop("recompute_method", None) if "recompute_method" not in overrides else None
        par.pop("recompute_num_layers", None) if "recompute_num_layers" not in overrides else None
    if overrides.get("fsdp"):
        overrides.setdefault("distributed_optimizer", True)  # Megatron FSDP shards the optimizer too
    for name in LISTS:  # comma-separated, as plan_options.behaviour reads them (fresh user trial 8: beside a
        if isinstance(overrides.get(name), str):  # script, --recompute-modules mlp was "not a valid tuple")
            overrides[name] = tuple(x.strip() for x in overrides[name].split(",") if x.strip())
    for name, value in overrides.items():
        for section, spec in (("parallel", ParallelPlan), ("options", PlanOptions), ("training", TrainingSpec)):
            if name in spec.model_fields:
                data[section][name] = value
                break
        else:
            raise PlannerError(f"{flag(name)} does not describe the plan, so it cannot change one")
    return data, tuple(notes)


def check_file_world(data: dict, file: str) -> None:
    """A plan file's own sizes against its GPU count, each named by its field (fresh user trial 8: a plan file
    edited to tp 3 said "--gpus 64 is not divisible", blaming an option the user never typed)."""
    from planner.plan_file import _typed

    par, gpus = data["parallel"], data.get("gpus")
    sizes = _typed({k: par.get(k) for k in ("tp", "pp", "cp", "dp")})  # "tp": "eight" is said by its field
    if type(gpus) is not int:
        return  # said by the plan's own check
    tp, pp, cp = (sizes.get(k) or 1 for k in ("tp", "pp", "cp"))
    mp, dp = tp * pp * cp, sizes.get("dp")
    if gpus % mp or (dp is not None and dp * mp != gpus):
        _missing_size(par, sizes, gpus, file)
    if gpus % mp:
        raise PlannerError(
            f"{file}: gpus {gpus} is not divisible by parallel.tp·pp·cp = {mp} (tp {tp} × pp {pp} × cp {cp}); "
            f"allowed: parallel sizes whose product divides {gpus}, or gpus a multiple of {mp}; edit the file, or "
            "give --tp/--pp/--cp or --gpus beside it"
        )
    if dp is not None and dp * mp != gpus:
        raise PlannerError(
            f"{file}: parallel.dp {dp} disagrees with gpus {gpus} (tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {dp * mp}); "
            f"allowed: parallel.dp {gpus // mp}, or gpus {dp * mp}"
        )


def _missing_size(par: dict, sizes: dict, gpus: int, file: str) -> None:
    """A plan file whose sizes disagree with its GPU count because a size field was deleted (megaplan writes
    tp, pp, cp and dp in every plan file) names that field, not dp or gpus (fresh user trial 9: a file with
    parallel.tp deleted said "parallel.dp 16 disagrees with gpus 64")."""
    gone = [k for k in ("tp", "pp", "cp", "dp") if k not in par]
    if not gone:
        return
    known = [sizes.get(k) or 1 for k in ("tp", "pp", "cp", "dp") if k in par]
    product = 1
    for k in known:
        product *= k
    would = f" (with the others as they are it is {gpus // product})" if len(gone) == 1 and gpus % product == 0 else ""
    names = " and ".join(f"parallel.{k}" for k in gone)
    raise PlannerError(
        f"{file}: {names} {'is' if len(gone) == 1 else 'are'} missing{would}: megaplan writes tp, pp, cp and dp in "
        f"every plan file; put {'it' if len(gone) == 1 else 'them'} back, or give "
        f"{' '.join('--' + k for k in gone)} beside --plan"
    )


def build(data: dict, world: str | None = None) -> api.PlanRequest:
    """The request of a plan's fields, checked: dp is N/(t·p·c) when not given, and a GPU count that
    t·p·c does not divide is an error naming where that count came from (``world``)."""
    par = data["parallel"]
    gpus = data.get("gpus")
    if par.get("dp") is None and gpus is not None:
        tp, pp, cp = (par.get(k) or 1 for k in ("tp", "pp", "cp"))
        mp = tp * pp * cp
        if gpus % mp:
            nearby = " or ".join(map(str, sorted({max(mp, gpus // mp * mp), (gpus // mp + 1) * mp})))
            said = world or f"--gpus {gpus}"
            knob = api.knob_that_divides(gpus, tp, pp, cp)  # "; or --tp 2 or 4 on 8 GPUs", or ""
            if said.startswith("--gpus"):
                fix = knob
            else:
                fix = "; give --gpus N" + (
                    f", {knob.removeprefix('; ')}" if knob else ", or --tp/--pp/--cp that divide it"
                )
            raise PlannerError(
                f"{said} {'is' if said.startswith('--gpus') else 'are'} not divisible by tp·pp·cp = {mp} "
                f"(tp {tp} × pp {pp} × cp {cp}); allowed: a multiple of {mp}, e.g. {nearby}{fix}"
            )
    return request_from_fields(data)


def override_request(
    req: api.PlanRequest, overrides: dict, where: str = "the plan", derived: tuple[str, ...] = ()
) -> api.PlanRequest:
    """``req`` with some plan options (by option name) changed (compare's --a and --b); ``derived``: the overlaps
    ``req`` took from its plan (a plan typed as flags), set again from the changed plan unless given."""
    data = {**request_to_json(req), "hardware": req.ctx.hardware}
    changed, _ = override_fields(data, overrides, where)
    derive = [k for k in derived if k not in overrides]
    changed["options"] = recipe_overlaps(changed["options"], changed["parallel"], derive)
    return build(changed, f"{where}'s {req.gpus} GPUs" if "gpus" not in overrides else None)


def _search_best(values: dict, given: set[str]) -> Resolved:
    """Search's best plan for the options given: the knobs given are pinned, the rest searched."""
    from planner.search import search

    searched = {*KNOBS, *OVERLAP_PINS}  # left to search unless given, as `megaplan search` does
    req, pins = search_inputs({k: v if k in given or k not in searched else None for k, v in values.items()})
    if values.get("gpus") is None:
        raise PlannerError(
            "Missing option '--gpus' (without --tp and --pp the best plan on N GPUs is searched; "
            "or give --tp and --pp)."
        )
    result = search(req.ctx, values["gpus"], pins, top=1, memory_headroom=values.get("memory_headroom"))
    best = request_from_plan(result.plans[0], hardware=req.ctx.hardware)
    pins_given = sorted(given & set(KNOBS))
    pinned_text = f"; pinned {' '.join(flag(k) for k in pins_given)}" if pins_given else ""
    note = f"search's best of {counted(result.feasible, 'plan')} that fit (no --tp/--pp given{pinned_text})"
    return Resolved(best, searched=note)


PINNED_SHAPE = (
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "pipeline_layout",
    *SPLIT_FLAGS,
)  # given to search, these pin the plans' stage shapes rather than changing the source's fields


def search_source(values: dict, given: set[str]):
    """search's context and pins. Without a source: the options (``search_inputs``). With a Megatron-Bridge config
    (--bridge-recipe/--bridge-config/--bridge-override, as explain reads it at --gpus): the recipe's model, batch,
    sequence, precision and behaviour options, with the options given beside it applied over them (each with a
    note, as explain does); what search searches (the parallel knobs, recomputation, the overlaps) is searched
    unless given, whatever the recipe sets. Returns (request, pins, notes, the source's GPU count or None)."""
    if values.get("bridge_recipe") and not (values.get("bridge_config") or values.get("bridge_override")):
        given = given | {"bridge_override"}  # the recipe alone is a source here: nothing to override
        values = {**values, "bridge_override": ()}
    source = pick_source(values, given)
    if source is None:
        return (*search_inputs(values), (), None)
    if not isinstance(source, BridgeConfig):
        raise PlannerError(f"search reads a plan's context from a Bridge config only, not from {source.where}")
    fields = source.fields(values)
    searched = {*KNOBS, *OVERLAP_PINS, *PINNED_SHAPE, "gpus"}
    names = given - NOT_PLAN - set(source.selectors) - source.takes - searched
    data, notes = override_fields(fields.data, {n: values[n] for n in names}, source.where, fields.unset)
    req = request_from_fields({**data, "gpus": None, "parallel": {}})
    knob_values = {k: values.get(k) if k in given else None for k in (*KNOBS, *OVERLAP_PINS, *PINNED_SHAPE)}
    pins = search_pins({**values, **knob_values})
    what = f"model {req.ctx.model.name}, global batch {req.ctx.training.global_batch}"
    what += f", seq {req.ctx.training.seq_len}, {req.ctx.precision}"
    kept = f"note: search keeps {source.where}'s {what} and options; searches its parallel layout"
    return req, pins, (*fields.notes, *notes, kept), data.get("gpus")


STDIN_NAME = "<stdin>"


@dataclass(frozen=True)
class ScriptSource:
    """A launch script as read for its import: the text bash would read, the reading's warnings, how messages
    name it, the folder the files it sources are read from and its own path ($0); a command line given as text
    (--megatron-args) has neither folder nor path."""

    text: str
    warnings: tuple[str, ...] = ()
    name: str = "--megatron-args"
    base_dir: str | None = None
    script_path: str | None = None


def read_launch_script(path: str, example: str = "explain --megatron-args-file -") -> ScriptSource:
    """``--megatron-args-file PATH`` of every command (explain, search, export, calibrate): one reader. ``-`` is
    standard input (the files it sources are read beside the working directory); ``example`` is the command
    line the empty-pipe error shows."""
    from planner.megatron.script import launch_text

    if path == "-":
        text, warnings = launch_text(read_piped_script(example), STDIN_NAME)
        return ScriptSource(text, tuple(warnings), STDIN_NAME, os.getcwd())
    text, warnings = launch_text(read_text(path), path)
    full = os.path.abspath(path)
    return ScriptSource(text, tuple(warnings), path, os.path.dirname(full), full)


def read_piped_script(example: str = "explain --megatron-args-file -") -> str:
    """``--megatron-args-file -``: the launch script from standard input (``cat run.sh | megaplan explain
    --megatron-args-file -``, as Unix tools read ``-``), refused when it is a terminal (reading would wait for
    typing) or empty."""
    import sys

    from planner.megatron.script import decode_text

    data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    if not data.strip():
        raise PlannerError(
            "--megatron-args-file -: reads the launch script from standard input, but nothing is piped in "
            f"(cat run.sh | megaplan {example})"
        )
    text = decode_text(data)
    if text is None:
        raise PlannerError("--megatron-args-file -: standard input is not text; pipe a launch script into it")
    return text


def read_text(path: str) -> str:
    from planner.megatron.script import decode_text

    refuse_device(path, "file")
    try:
        with open(path, "rb") as fh:
            text = decode_text(fh.read())
    except OSError as err:
        raise PlannerError(f"cannot read {path!r}: {err.strerror}{url_hint(path)}") from err
    if text is None:
        raise PlannerError(f"{path!r} is not a text file")
    return text


def env_values(pairs) -> dict[str, str]:
    """The variables --env VAR=VALUE sets, each once: one variable given two different values is refused."""
    env: dict[str, str] = {}
    for name, value in map(env_pair, pairs):
        if env.get(name, value) != value:
            raise PlannerError(
                f"--env {name} given twice with different values ({env[name]}, then {value}); give it once"
            )
        env[name] = value
    return env


def env_pair(pair: str) -> tuple[str, str]:
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise PlannerError(f"--env {pair!r}: expected VAR=VALUE")
    words = pair.split()
    if len(words) > 1 and all(re.fullmatch(r"[A-Za-z_]\w*=\S*", word) for word in words):
        # 'TP=4 PP=2' in one --env set TP to "4 PP=2" (fresh user trial 9)
        raise PlannerError(
            f"--env {pair!r}: one VAR=VALUE per --env; allowed: " + " ".join(f"--env {word}" for word in words)
        )
    return name, value
