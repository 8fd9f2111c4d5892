"""The plan options by name (as the command line's option table names them: tp, recompute, tokens,
account_for_embedding_in_pipeline_split, …) turned into the plan's fields, or into search's context
and pins. One translation serves explain, export, compare (one plan) and search, sweep (pins)."""

from __future__ import annotations

from planner.errors import PlannerError
from planner.plan import PlanOptions, Recompute, RecomputeMethod, RecomputeModule, StageSplit

DEFAULT_HARDWARE = "dgx-a100-superpod"
BEHAVIOUR = tuple(name for name in PlanOptions.model_fields if name not in ("distribute_saved_activations",))
LISTS = ("recompute_modules", "cuda_graph_modules")  # comma-separated on the command line
KNOBS = (
    "tp",
    "pp",
    "dp",
    "vpp",
    "microbatch_group_size",
    "micro_batch",
    "cp",
    "ep",
    "etp",
    "fsdp",
    "fsdp_sharding",
    "fsdp_outer_sharding",
    "distributed_optimizer_instances",
    "sequence_parallel",
    "recompute",
    "recompute_method",
    "recompute_num_layers",
    "distributed_optimizer",
    "moe_token_dispatcher",
    "overlap_moe_expert_parallel_comm",
)  # the searched plan options: ParallelPlan fields, search pins
OVERLAP_PINS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")  # searched PlanOptions
RECIPE_OVERLAPS = ("overlap_grad_reduce", "overlap_param_gather")  # a typed plan without them: set as search sets them


def recipe_overlaps(options: dict, parallel: dict, derive) -> dict:
    """``options`` with the overlaps named in ``derive`` (those a plan typed as flags leaves out) set as search
    sets them (``search.recipe_options``, as today's Megatron-Bridge and NeMo performance recipes do):
    --overlap-grad-reduce on; --overlap-param-gather on with a sharded optimizer (distributed optimizer or
    Megatron FSDP) and the gradient overlap (Megatron-LM arguments.py: it needs --overlap-grad-reduce), else off.
    So the layout a user types and search's plan of that layout are one estimate under one label. Megatron-LM's
    own default for both is off: a launch script or a plan file keeps what it says (they never reach here)."""
    out = dict(options)
    if "overlap_grad_reduce" in derive:
        out["overlap_grad_reduce"] = True
    if "overlap_param_gather" in derive:
        sharded = bool(parallel.get("distributed_optimizer") or parallel.get("fsdp"))
        out["overlap_param_gather"] = sharded and bool(out.get("overlap_grad_reduce"))
    return out


def behaviour(values: dict) -> dict:
    """The PlanOptions the options set."""
    out = {name: values[name] for name in BEHAVIOUR if name in values}
    for name in LISTS:
        if isinstance(out.get(name), str):
            out[name] = tuple(x.strip() for x in out[name].split(",") if x.strip())
    return out


def stage_split(values: dict) -> StageSplit:
    return StageSplit.from_flags(
        values["account_for_embedding_in_pipeline_split"], values["account_for_loss_in_pipeline_split"]
    )


def training(values: dict) -> dict:
    """The training fields the options set, by make_request's argument names."""
    return {
        "global_batch": values["global_batch"],
        "seq_len": values["seq_len"],
        "precision": values["precision"],
        "train_tokens": values["tokens"],
        "gpu_hour_price": values["gpu_hour_price"],
    }


def knobs(values: dict) -> dict:
    """The parallel knobs the options set, by ParallelPlan field name, and the explicit end stages; as Megatron-LM
    reads them: --use-megatron-fsdp turns the distributed optimizer on (Megatron FSDP v1 runs on it; arguments.py
    warns and sets it), and --sequence-parallel is off at --tp 1 (arguments.py turns it off there). Search pins
    them so, rather than pinning a pair no candidate can hold (it listed no plan, naming the world size)."""
    out = {
        **{k: values[k] for k in KNOBS},
        "first_stage_layers": values["decoder_first_pipeline_num_layers"],
        "last_stage_layers": values["decoder_last_pipeline_num_layers"],
        "pipeline_layout": values["pipeline_layout"],
    }
    if values["fsdp"]:
        out["distributed_optimizer"] = True
    if out["tp"] == 1 and out["sequence_parallel"]:
        out["sequence_parallel"] = False
    return out


def flag_fields(values: dict) -> dict:
    """The plan's fields (the plan JSON's shape, not yet checked) that the plan options describe."""
    par = knobs(values)
    par["stage_split"] = stage_split(values)
    return {
        "model": values["model"],
        "hardware": values["hardware"] or DEFAULT_HARDWARE,
        "gpus": values["gpus"],
        "training": training(values),
        "parallel": par,
        "options": recipe_overlaps(behaviour(values), par, [k for k in RECIPE_OVERLAPS if values.get(k) is None]),
    }


def search_inputs(values: dict):
    """The request (context) and pins that search's options describe (search, sweep, --min-gpus)."""
    from planner import api

    req = api.make_request(
        model=values["model"],
        hardware=values["hardware"] or DEFAULT_HARDWARE,
        **training(values),
        options=behaviour(values),
    )
    return req, search_pins(values)


def search_pins(values: dict):
    """The knobs the options pin for search (None: searched)."""
    from planner.space.candidates import Pins

    split = stage_split(values)
    explicit = values["decoder_first_pipeline_num_layers"] or values["decoder_last_pipeline_num_layers"]
    if explicit and split is not StageSplit.EVEN:
        raise PlannerError(
            "give either --decoder-first/last-pipeline-num-layers or "
            "--account-for-embedding/loss-in-pipeline-split, not both (Megatron-LM takes one)"
        )
    pinned = knobs(values)
    max_tp = values.get("max_tp")
    if max_tp and pinned["tp"] and pinned["tp"] > max_tp:  # was "the pinned tp is not legal for this model"
        raise PlannerError(f"--tp {pinned['tp']} is above --max-tp {max_tp}: give one of them")
    pinned["recompute"] = pinned["recompute"] and Recompute(pinned["recompute"])
    pinned["recompute_method"] = pinned["recompute_method"] and RecomputeMethod(pinned["recompute_method"])
    _check_outer_sharding(pinned)
    if pinned["fsdp"] and pinned["dp"] == 1 and pinned["cp"] == 1:  # search builds FSDP rows with d·c > 1 only
        raise PlannerError(
            "--fsdp with --dp 1 --cp 1: search builds Megatron FSDP plans sharded over d·c > 1 ranks only (at d·c = 1 "
            "it shards nothing); give --dp or --cp above 1, or --tp and --pp to explain that plan"
        )
    overlaps = {k: values.get(k) for k in OVERLAP_PINS}
    split = None if split is StageSplit.EVEN else split
    return Pins(**pinned, **overlaps, max_tp=max_tp, stage_split=split, recompute_modules=pinned_modules(values))


def _check_outer_sharding(pinned: dict) -> None:
    """--outer-dp-sharding-strategy optim pinned with a pinned R or sharding strategy no Megatron FSDP plan can run
    it with (``ParallelPlan._hybrid_rules``: R > 1 and optim_grads_params): refused as explain refuses it, not
    searched with the FSDP plans at no_shard (--num-distributed-optimizer-instances 1 listed them silently)."""
    if pinned["fsdp_outer_sharding"] != "optim" or pinned["fsdp"] is False:
        return
    from pydantic import ValidationError

    from planner.plan import ParallelPlan
    from planner.presets import format_validation_error

    hybrid = {"distributed_optimizer_instances": 2, "fsdp_sharding": "optim_grads_params"}
    hybrid.update({k: pinned[k] for k in hybrid if pinned[k] is not None})
    try:
        ParallelPlan(fsdp=True, distributed_optimizer=True, fsdp_outer_sharding="optim", **hybrid)
    except ValidationError as err:
        raise PlannerError(format_validation_error(err)) from None


def pinned_modules(values: dict) -> tuple[RecomputeModule, ...] | None:
    """--recompute-modules as given: the modules of every selective row search builds (None: not given, and
    search picks them, ``space.candidates.searched_modules``)."""
    given = behaviour({"recompute_modules": values.get("recompute_modules")}).get("recompute_modules")
    if not given:
        return None
    allowed = ", ".join(m.value for m in RecomputeModule)
    bad = [m for m in given if m not in {x.value for x in RecomputeModule}]
    if bad:
        raise PlannerError(f"--recompute-modules: {bad[0]!r} is not a module; allowed: {allowed}")
    return tuple(RecomputeModule(m) for m in given)
