"""The command lines that rebuild a plan JSON: each search row's explain and export."""

from __future__ import annotations

import shlex
from functools import lru_cache

from planner.cli.options import KNOBS, LISTS, OVERLAP_PINS, PLAN_OPTIONS
from planner.cli.options import dest as option_dest
from planner.hardware.userbuffers import BRIDGE_PREFIX
from planner.plan import DEFAULT_TRAIN_TOKENS, PlanOptions, StageSplit
from planner.plan_options import RECIPE_OVERLAPS, recipe_overlaps
from planner.presets import command_ref
from planner.whole import number_word

CORE = {"model", "hardware", "gpus", "global_batch", "seq_len", "precision", *KNOBS}  # always written
LIST_DEFAULTS = {name: tuple(PlanOptions.model_fields[name].default) for name in LISTS}  # comma-separated options


def _plan_values(pj: dict, model_ref: str | None, hardware_ref: str | None) -> dict:
    """A plan JSON's values by the name of the option that sets each."""
    par, tr = pj["parallel"], pj["training"]
    split = StageSplit(par.get("stage_split", "even"))
    cfg = pj["options"].get("tp_comm_overlap_cfg")
    return {
        **pj["options"],
        # the file it was read from, 'bridge' or a Bridge preset's name
        "tp_comm_overlap_cfg": cfg["name"].removeprefix(BRIDGE_PREFIX) if isinstance(cfg, dict) else cfg,
        **{k: v for k, v in par.items() if k != "dp"},
        # a file by its absolute path: the commands run from any folder (a preset keeps its name)
        "model": command_ref(model_ref) or pj["model"],
        "hardware": command_ref(hardware_ref) or pj["hardware"],
        "gpus": pj["gpus"],
        "global_batch": tr["global_batch"],
        "seq_len": tr["seq_len"],
        "precision": tr["precision"],
        "tokens": tr.get("train_tokens"),
        "gpu_hour_price": tr.get("gpu_hour_price"),
        "account_for_embedding_in_pipeline_split": split.embedding_counted,
        "account_for_loss_in_pipeline_split": split.loss_counted,
        "decoder_first_pipeline_num_layers": par.get("first_stage_layers"),
        "decoder_last_pipeline_num_layers": par.get("last_stage_layers"),
    }


def command_args(
    pj: dict, model_ref: str | None = None, hardware_ref: str | None = None, skip: set[str] = frozenset()
) -> list[str]:
    """The plan options that rebuild a plan JSON on the command line (the model by the name or path
    the user gave): every parallel knob, and each behaviour option that differs from its default;
    none of ``skip`` (option destinations)."""
    values = _plan_values(pj, model_ref, hardware_ref)
    defaults = _defaults()
    # the overlaps explain sets as today's recipes do when the command leaves them out (recipe_overlaps): a plan
    # without one says so (--no-overlap-grad-reduce was dropped, and the command priced the plan with it)
    derived = recipe_overlaps({}, values, RECIPE_OVERLAPS)
    args: list[str] = []
    for opt in PLAN_OPTIONS:
        dest = option_dest(opt)
        value = values.get(dest)
        if value is None or dest in skip or (opt.plan_only and dest != "gpus"):
            continue
        if dest == "moe_flex_dispatcher_backend" and value == _default_backend(values["hardware"]):
            continue  # the hardware's own default (HybridEP on a multi-node NVLink domain, else DeepEP)
        if dest == "recompute_method" and values.get("recompute") != "full":
            continue  # a method goes with full recomputation only (Megatron-LM refuses it with selective)
        if dest not in CORE and value == defaults.get(dest) and derived.get(dest, value) == value:
            continue
        if isinstance(value, list | tuple):
            if tuple(value) == LIST_DEFAULTS.get(dest):
                continue
            value = ",".join(value)
        moe = bool(pj.get("model_spec", {}).get("num_experts"))
        if not moe and ((dest == "etp" and value == values["tp"]) or (dest in ("cp", "ep") and value == 1)):
            continue
        if not moe and dest in ("moe_token_dispatcher", "overlap_moe_expert_parallel_comm"):
            continue  # a dense model has no token dispatcher
        if (dest in ("fsdp_sharding", "fsdp_outer_sharding") and not values.get("fsdp")) or (
            dest in ("distributed_optimizer_instances", "fsdp_outer_sharding") and value in (1, "no_shard")
        ):
            continue  # a strategy without FSDP, one optimizer instance: nothing to say
        name = opt.decls[0]
        if opt.flag and opt.solo:
            args += [name] if value else []
        elif opt.flag:
            args.append(name if value else f"--no-{name[2:]}")
        else:
            args += [name, number_word(value) if isinstance(value, float) else str(value)]
    return args


@lru_cache(maxsize=8)
def _default_backend(hardware: str) -> str:
    """The flex dispatcher's backend a command without --moe-flex-dispatcher-backend gets on ``hardware``
    (``space.flex_backend.default_backend``); DeepEP where the hardware cannot be read again by that word."""
    from planner.errors import PlannerError
    from planner.presets import load_hardware
    from planner.space.flex_backend import default_backend

    try:
        return default_backend(load_hardware(hardware)).value
    except (PlannerError, OSError, ValueError):
        return "deepep"


@lru_cache(maxsize=1)
def _defaults() -> dict:
    """Each plan option's default by its destination (the same for every plan a search shows)."""
    return {option_dest(o): o.default for o in PLAN_OPTIONS} | {"tokens": DEFAULT_TRAIN_TOKENS}


SPLIT = {
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "pipeline_layout",
}


def search_command(pj: dict, model_ref: str | None = None, hardware_ref: str | None = None) -> str:
    """The search command over a plan's model, hardware, training and GPUs: its options without the
    knobs search picks (the parallel sizes, recomputation, the stage split, the overlaps)."""
    picked = {option_dest(o) for o in PLAN_OPTIONS if o.searched} | SPLIT | set(OVERLAP_PINS)
    return f"megaplan search {shlex.join(command_args(pj, model_ref, hardware_ref, skip=picked))}"


def commands(
    pj: dict, model_ref: str | None = None, hardware_ref: str | None = None, bridge: dict | None = None
) -> dict[str, str]:
    """The explain and export command lines that reproduce a plan JSON; with ``bridge`` (the search's
    --bridge-recipe/--bridge-version), the export writes Bridge overrides over that recipe."""
    args = shlex.join(command_args(pj, model_ref, hardware_ref))
    if bridge is None:
        return {"explain": f"megaplan explain {args}", "export": f"megaplan export {args} --format slurm"}
    over = shlex.join(["--format", "bridge", *(x for k, v in bridge.items() for x in (flag_of(k), v))])
    return {"explain": f"megaplan explain {args}", "export": f"megaplan export {args} {over}"}


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")
