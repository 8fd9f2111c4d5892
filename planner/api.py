"""The library's front door: build a plan from named options and estimate it.

The CLI, the Megatron-LM importer and the tests all come through here, so one plan built from
flags, from a saved plan or from a Megatron command line is the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from planner.costs.estimate import Evaluation, evaluate
from planner.costs.process_memory import DEFAULT_MEMORY_HEADROOM, usable_bytes
from planner.errors import InfeasibleError, PlannerError
from planner.hardware.spec import HardwareSpec
from planner.models.spec import ModelSpec
from planner.plan import Context, ParallelPlan, PlanOptions, Recompute, StageSplit, TrainingSpec
from planner.presets import format_validation_error, load_hardware, load_model
from planner.result import plan_json
from planner.space import flex_backend
from planner.space.grid import PlanGrid
from planner.space.rules import rule_masks, rule_messages

__all__ = ["DEFAULT_MEMORY_HEADROOM", "Context", "PlanRequest", "explain", "explain_plan", "make_request"]


@dataclass(frozen=True)
class PlanRequest:
    """A fully resolved configuration: what to train, on what, split how."""

    ctx: Context
    plan: ParallelPlan
    gpus: int


def _build(kind, what: str, **fields):
    try:
        return kind(**fields)
    except ValidationError as err:
        raise PlannerError(f"{what}: {format_validation_error(err)}") from err


def training_for(
    model: ModelSpec,
    global_batch: int | None,
    seq_len: int | None,
    precision: str | None,
    train_tokens: float | None = None,
    gpu_hour_price: float | None = None,
) -> TrainingSpec:
    """Training spec from explicit values, else the model preset's published defaults."""
    defaults = model.training
    # `is None`, not `or`: a 0 read from a launch line (--seq-length 0) is refused by the spec, not replaced
    B = global_batch if global_batch is not None else defaults.global_batch if defaults else None
    s = seq_len if seq_len is not None else defaults.seq_len if defaults else None
    if B is None or s is None:
        missing = "--global-batch" if B is None else "--seq-len"
        if model.source == "Megatron-LM command line":  # an imported script's architecture, no preset behind it
            flag = "--global-batch-size" if B is None else "--seq-length"
            raise PlannerError(f"the launch line sets no {flag}: give {missing} N beside it")
        raise PlannerError(f"{missing} is required: model {model.name!r} has no published training defaults")
    given = {"precision": precision, "train_tokens": train_tokens, "gpu_hour_price": gpu_hour_price}
    return _build(
        TrainingSpec, "training", global_batch=B, seq_len=s, **{k: v for k, v in given.items() if v is not None}
    )


def knob_that_divides(gpus: int, tp: int, pp: int, cp: int) -> str:
    """The values nearest a tp, pp or cp (the first whose change alone fixes it) that divide the GPUs the other two
    leave: `--gpus 8 --tp 3` named only GPU counts, though the typo is the tp."""
    knobs = {"tp": tp, "pp": pp, "cp": cp}
    for name, value in knobs.items():
        others = tp * pp * cp // value
        if value == 1 or gpus % others:
            continue
        fits = [d for d in range(1, gpus // others + 1) if (gpus // others) % d == 0 and d != value]
        near = [max([d for d in fits if d < value], default=None), min([d for d in fits if d > value], default=None)]
        shown = " or ".join(str(d) for d in near if d is not None)
        return f"; or --{name} {shown} on {gpus} GPUs"
    return ""


def resolve_world(gpus: int | None, tp: int, pp: int, cp: int, dp: int | None) -> tuple[int, int]:
    """(gpus, dp) with dp = N/(t·p·c) derived when not given; a mismatch is an error naming both."""
    mp = tp * pp * cp
    if gpus is None:
        dp = dp or 1
        return mp * dp, dp
    if gpus % mp:
        nearby = sorted({max(mp, gpus // mp * mp), (gpus // mp + 1) * mp})
        raise InfeasibleError(
            f"--gpus {gpus} is not divisible by tp·pp·cp = {mp} (tp {tp} × pp {pp} × cp {cp}); "
            f"allowed: a multiple of {mp}, e.g. {' or '.join(map(str, nearby))}{knob_that_divides(gpus, tp, pp, cp)}"
        )
    if dp is not None and dp * mp != gpus:
        raise InfeasibleError(
            f"--dp {dp} disagrees with --gpus {gpus}: tp·pp·cp·dp = {dp * mp}; allowed: --dp {gpus // mp}"
        )
    return gpus, gpus // mp


def make_request(
    *,
    model: str | ModelSpec,
    hardware: str | HardwareSpec | None = None,
    gpus: int | None = None,
    global_batch: int | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
    train_tokens: float | None = None,
    gpu_hour_price: float | None = None,
    options: dict | None = None,
    **parallel,
) -> PlanRequest:
    """Resolve presets, derive dp, and validate the plan's own fields."""
    model_spec = model if isinstance(model, ModelSpec) else load_model(model)
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware or "dgx-a100-superpod")
    training = training_for(model_spec, global_batch, seq_len, precision, train_tokens, gpu_hour_price)
    tp, pp, cp = (parallel.get(k) or 1 for k in ("tp", "pp", "cp"))  # None: not given (a plan file's null)
    gpus, dp = resolve_world(gpus, tp, pp, cp, parallel.pop("dp", None))
    if not model_spec.is_moe:  # a dense model has no experts: --etp is ignored (with a note), not priced as an
        parallel.pop("etp", None)  # expert grid of N/(etp·ep·pp) ranks (0 for --etp 16 on 8 GPUs: a traceback)
    plan = _build(ParallelPlan, "plan", dp=dp, **{k: v for k, v in parallel.items() if v is not None})
    options = {k: v for k, v in (options or {}).items() if v is not None}
    options.setdefault("moe_flex_dispatcher_backend", flex_backend.default_backend(hw).value)  # HybridEP on NVL72
    opts = _build(PlanOptions, "options", **options)
    if opts.fp8 is not None and hw.gpu.peak_fp8_tflops is None:
        from planner.presets import preset_names

        fp8 = [n for n in preset_names("hardware") if load_hardware(n).gpu.peak_fp8_tflops is not None]
        raise PlannerError(
            f"--fp8 needs FP8 tensor cores; {hw.gpu.name} ({hw.name}) has none: give --hardware with one that has "
            f"them ({', '.join(fp8)})"
        )
    _check_fp8_recipe(opts, hw)
    check_fp4(opts, hw, model_spec)
    _check_load_imbalance(opts, model_spec)
    return PlanRequest(ctx=Context(model_spec, hw, training, opts), plan=plan, gpus=gpus)


def _check_load_imbalance(opts: PlanOptions, model: ModelSpec) -> None:
    """The busiest expert's load over the mean is at most E/k (it takes every token; each token goes to k of the
    E experts): --moe-load-imbalance 1e300 overflowed the memory and FLOP sums (numpy warnings, then 4.9e300 GiB),
    and 5 on Mixtral (E/k = 4) was priced. The default is allowed on every model."""
    limit = model.num_experts / model.moe_router_topk if model.is_moe else None
    default = PlanOptions.model_fields["moe_load_imbalance"].default
    if limit is not None and opts.moe_load_imbalance > max(limit, default):
        raise PlannerError(
            f"--moe-load-imbalance {opts.moe_load_imbalance:g} is more than {model.name}'s experts allow: the busiest "
            f"expert takes at most every token, E/k = {model.num_experts}/{model.moe_router_topk} = {limit:g} × the "
            f"mean; allowed: 1 ≤ x ≤ {limit:g}"
        )


# Transformer Engine's recipe checks (transformer_engine/pytorch/quantization.py, check_recipe_support at
# fp8_autocast; a plan outside them fails at its first step with the reason quoted): Float8BlockScaling
# (_compute_fp8_block_scaling_support) compute capability >= 9.0 with CUDA >= 12.9 from v2.9 on, where Blackwell
# runs it as MXFP8 (pytorch/csrc/extensions/gemm.cpp 'Emulate the FP8 block scaling recipe with MXFP8 on
# Blackwell', TE #2157); v2.3-v2.8 refused Blackwell ('FP8 block scaled GEMM requires Hopper and CUDA >= 12.9.').
# MXFP8BlockScaling (_compute_mxfp8_support) 10.0 <= capability < 12.0 (v2.7-v2.18: 'not supported on 12.0+
# architectures yet'). Delayed and current scaling: FP8 tensor cores (--fp8 check above).
FP8_RECIPE_CAPABILITY = {
    "blockwise": (9.0, 99.0, "Hopper or Blackwell (Blackwell: Transformer Engine ≥ 2.9, as MXFP8)"),
    "mxfp8": (10.0, 12.0, "Blackwell data-centre (B200, GB200, GB300)"),
}


def _recipe_runs(recipe: str, hw: HardwareSpec) -> bool:
    low, high, _ = FP8_RECIPE_CAPABILITY.get(recipe, (0.0, 99.0, ""))
    return low <= hw.gpu.compute_capability < high


def _check_fp8_recipe(opts: PlanOptions, hw: HardwareSpec) -> None:
    need = FP8_RECIPE_CAPABILITY.get(opts.fp8_recipe.value)
    if opts.fp8 is None or need is None:
        return
    low, high, what = need
    if not low <= hw.gpu.compute_capability < high:
        raise PlannerError(
            f"--fp8-recipe {opts.fp8_recipe.value} needs {what} tensor cores; {hw.gpu.name} has compute capability "
            f"{hw.gpu.compute_capability:g} (Transformer Engine check_recipe_support); allowed: "
            + ", ".join(r for r in ("delayed", "tensorwise", "blockwise", "mxfp8") if _recipe_runs(r, hw))
        )


# Transformer Engine quantization.py _compute_nvfp4_support (v2.8 through v2.18): NVFP4BlockScaling needs compute
# capability >= 10.0 ('NVFP4 support requires compute capability >= 10.0' at fp8_autocast's check_recipe_support).
NVFP4_CAPABILITY = 10.0


def check_fp4(opts: PlanOptions, hw: HardwareSpec, model: ModelSpec) -> None:
    """--fp4-format on a GPU with FP4 tensor cores (what Transformer Engine checks), on what the estimate prices:
    a dense model's linears (the MoE grouped GEMMs' NVFP4 casts, padding and host ops are not modelled). With
    --fp8-dot-product-attention the attention runs in per-tensor FP8 (NVFP4BlockScaling takes fp8_dpa from it, and
    the export sets NVTE_DPA_FP8_RECIPE=Float8CurrentScaling, as MLPerf v5.1's NVFP4 configs do:
    ``blocks.fp8_attention_ratios``)."""
    if opts.fp4 is None:
        return
    if hw.gpu.compute_capability < NVFP4_CAPABILITY or hw.gpu.peak_nvfp4_tflops is None:
        raise PlannerError(
            f"--fp4-format {opts.fp4.value} needs NVFP4 tensor cores, compute capability ≥ 10 (Transformer Engine "
            f"check_nvfp4_support: 'NVFP4 support requires compute capability >= 10.0'); {hw.gpu.name} has "
            f"{hw.gpu.compute_capability:g}; allowed: --fp8-format e4m3|hybrid, or --hardware dgx-b200-superpod, "
            "gb200-nvl72 or gb300-nvl72"
        )
    if model.is_moe:
        raise PlannerError(
            f"--fp4-format with {model.name} (MoE): NVFP4 expert GEMMs are not modelled (their casts, padding and "
            "host ops); allowed: a dense model, or --fp8-format e4m3|hybrid"
        )


@dataclass(frozen=True)
class Explanation:
    """One plan explained: its plan JSON and the evaluation behind it (with every stage)."""

    plan_json: dict
    evaluation: Evaluation


def explain(req: PlanRequest, memory_headroom: float | None = None, *, suggest: bool = True) -> dict:
    """The plan JSON of one configuration, with the memory of every pipeline stage (and, for a plan that
    does not fit, ``fit_suggestions`` unless ``suggest`` is False)."""
    return explain_plan(req, memory_headroom, suggest=suggest).plan_json


def explain_plan(
    req: PlanRequest, memory_headroom: float | None = None, *, suggest: bool = True, derived: tuple[str, ...] = ()
) -> Explanation:
    """``explain`` with the evaluation kept (the schedule simulation reads its stage times); ``derived``: the
    overlaps a plan typed as flags left out (``fit_suggestions`` prices each change with them set again)."""
    grid = PlanGrid.from_plans([req.plan])
    broken = rule_messages(grid, req.ctx.model, req.ctx.training, req.ctx.options, req.gpus, hardware=req.ctx.hardware)
    if broken:  # DeepEP's rule is its library's and Bridge's: Megatron-LM starts the run, DeepEP cannot serve it
        deepep = all(m.startswith(flex_backend.RULE) for m in broken)
        who = "this plan would not run" if deepep else "Megatron-LM would reject this plan"
        raise InfeasibleError(f"{who}: {'; '.join(broken)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(grid, req.ctx, stages=True)
    out = plan_json(req.ctx, req.gpus, grid, ev, 0, broken, memory_headroom)
    if suggest and not out["estimate"]["fits"]:
        out["fit_suggestions"] = fit_suggestions(req, memory_headroom, derived=derived)
        out["more_gpus"] = more_gpus(req, memory_headroom)
    return Explanation(out, ev)


MAX_DP_GROWTH = 64  # more_gpus tries d·2, d·4 … d·64


def more_gpus(req: PlanRequest, memory_headroom: float | None = None) -> dict | None:
    """The same layout on more GPUs, data parallelism doubled until it fits (the distributed optimizer or
    Megatron FSDP shard their state over d·c ranks, so each doubling lowers the per-GPU memory; without them
    it never fits): the first d·2^k (k ≤ 6) that the global batch divides into micro-batches, that Megatron-LM
    accepts and that fits. A Bridge recipe's name gives one model replica's GPUs (``..._32gpu_...`` is TP4 PP4
    CP2), which is where a user meets this. Memory only: the overlaps a recipe turns on with d > 1 would change
    the time. None when no such size fits."""
    p = req.plan
    if not (p.distributed_optimizer or p.fsdp):
        return None
    cap = usable_bytes(req.ctx.hardware.memory.allocatable_bytes, memory_headroom)
    growth = 2
    while growth <= MAX_DP_GROWTH:
        dp = p.dp * growth
        if req.ctx.training.global_batch % (dp * p.micro_batch) == 0:
            grid = PlanGrid.from_plans([p.model_copy(update={"dp": dp})])
            gpus = req.gpus * growth
            if not rule_messages(
                grid, req.ctx.model, req.ctx.training, req.ctx.options, gpus, hardware=req.ctx.hardware
            ):
                with np.errstate(divide="ignore", invalid="ignore"):
                    ev = evaluate(grid, req.ctx)
                if ev.peak_memory_bytes[0] <= cap:
                    return {"gpus": gpus, "dp": dp, "peak_memory_gib": float(ev.peak_memory_bytes[0]) / 2**30}
        growth *= 2
    return None


SPLIT_CHANGE = {  # a fix's stage split by the options that give it (it read "stage split embedding+loss")
    "even": "stage split even (no --account-for-*-in-pipeline-split)",
    "embedding": "--account-for-embedding-in-pipeline-split",
    "loss": "--account-for-loss-in-pipeline-split",
    "embedding+loss": "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
}


def _variants(plan: ParallelPlan, model: ModelSpec) -> list[tuple[str, ParallelPlan]]:
    """The plan with one knob turned: what a user would try first to make it fit."""
    out = []

    def add(label, **change):
        try:
            out.append((label, plan.model_copy(update=change)))
        except ValidationError:
            pass

    for rc in ("selective", "full"):
        if plan.recompute.value != rc:
            add(f"--recompute {rc}", recompute=Recompute(rc))
    if plan.tp > 1 and not plan.sequence_parallel:
        add("--sequence-parallel", sequence_parallel=True)
    if not plan.distributed_optimizer:
        add("--distributed-optimizer", distributed_optimizer=True)  # megaplan's option (the user types it next)
    for b in range(1, plan.micro_batch):
        if plan.micro_batch % b == 0:
            add(f"--micro-batch {b}", micro_batch=b)
    for v in range(2, model.num_layers + 1):
        if v != plan.vpp:
            add(f"--vpp {v}", vpp=v)
    for split in StageSplit:
        if split is not plan.stage_split:
            add(SPLIT_CHANGE[split.value], stage_split=split, first_stage_layers=None, last_stage_layers=None)
    if plan.cp == 1 and plan.dp % 2 == 0:
        add("--cp 2 (dp halved)", cp=2, dp=plan.dp // 2)
    return out


def fit_suggestions(
    req: PlanRequest, memory_headroom: float | None = None, limit: int = 5, derived: tuple[str, ...] = ()
) -> list[dict]:
    """Single-knob changes that make a plan that does not fit fit, fastest first (one grid per set of options).
    ``derived``: the overlaps a plan typed as flags left out; each change is priced with them set again from the
    changed plan, as the user gets them once they type it (--distributed-optimizer brings
    --overlap-param-gather: plan_options.recipe_overlaps)."""
    variants = _variants(req.plan, req.ctx.model)
    if not variants:
        return []
    n = len(variants)
    legal, peak_bytes, iteration_s, model_flops = np.zeros(n, bool), np.zeros(n), np.zeros(n), np.zeros(n)
    for opts, rows in _variant_options(req, variants, derived).items():
        grid = PlanGrid.from_plans([variants[i][1] for i in rows])
        masks = rule_masks(grid, req.ctx.model, req.ctx.training, opts, req.gpus, hardware=req.ctx.hardware)
        legal[rows] = np.all(np.array(list(masks.values())), axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ev = evaluate(grid, req.ctx if opts == req.ctx.options else _with_options(req.ctx, opts))
        peak_bytes[rows], iteration_s[rows], model_flops[rows] = ev.peak_memory_bytes, ev.iteration_s, ev.flops["model"]
    cap = usable_bytes(req.ctx.hardware.memory.allocatable_bytes, memory_headroom)
    ok = np.flatnonzero(legal & (peak_bytes <= cap))
    ok = ok[np.argsort(iteration_s[ok], kind="stable")][:limit]
    peak_flops_per_s = req.ctx.hardware.gpu.peak_flops_per_s(req.ctx.precision)
    return [
        {
            "change": variants[i][0],
            "peak_memory_gib": float(peak_bytes[i]) / 2**30,
            "iteration_s": float(iteration_s[i]),
            "mfu": float(model_flops[i] / iteration_s[i] / req.gpus / peak_flops_per_s),
        }
        for i in ok
    ]


def _with_options(ctx: Context, options: PlanOptions) -> Context:
    return Context(ctx.model, ctx.hardware, ctx.training, options)


def _variant_options(
    req: PlanRequest, variants: list[tuple[str, ParallelPlan]], derived: tuple[str, ...]
) -> dict[PlanOptions, list[int]]:
    """The variants (by index) grouped by the options each runs with: the plan's own, but for the overlaps in
    ``derived``, which follow the variant's plan (recipe_overlaps)."""
    from planner.plan_options import recipe_overlaps

    groups: dict[PlanOptions, list[int]] = {}
    base = req.ctx.options
    for i, (_, plan) in enumerate(variants):
        opts = base
        if derived:
            sharding = {"distributed_optimizer": plan.distributed_optimizer, "fsdp": plan.fsdp}
            overlaps = recipe_overlaps(base.model_dump(), sharding, derived)
            opts = base.model_copy(update={k: overlaps[k] for k in derived})
        groups.setdefault(opts, []).append(i)
    return groups
