"""One plan's estimate: the typed ``PlanEstimate`` and the plan JSON of the CLI contract around it.

The plan JSON is what ``explain --json`` and ``search --json`` print and what ``--plan`` reads back:
``{model, hardware, gpus, training, parallel, options, legal, broken_rules, estimate, model_spec}``;
``estimate`` is a ``PlanEstimate`` (memory in GiB for the most loaded GPU, time in seconds per
iteration; the terms add up), with each term's formula text and source from the cost module that
computed it.
"""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
import math
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from planner.costs import flops
from planner.costs.estimate import (  # terms: PlanEstimate's keys
    MEMORY_TERMS,
    TIME_TERMS,
    Evaluation,
    context_formulas,
    formulas,
)
from planner.costs.linears import userbuffers_json
from planner.costs.megatron_memory import MIB, differences, report_theoretical_memory
from planner.costs.process_memory import resolve_headroom, usable_bytes
from planner.costs.train_cost import train_cost_terms
from planner.errors import PlannerError
from planner.fidelity.evidence import PlanEvidence, band_frac, band_parts, band_rows, evidence_json, plan_evidence
from planner.fidelity.published import plan_load_imbalance, published_json, published_runs
from planner.hardware.spec import GIB
from planner.models.params import megatron_count_gaps, padded_vocab, param_counts
from planner.models.pipeline_layout import stage_contents
from planner.models.spec import ModelSpec
from planner.plan import Context, ParallelPlan, recompute_layers_run
from planner.space.grid import PlanGrid, stage_layers


class TermFormula(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    formula: str
    source: str


class PlanEstimate(BaseModel):
    """What megaplan predicts for one plan (the plan JSON's ``estimate``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    iteration_s: float
    tokens_per_s: float
    tflops_per_gpu: float  # model FLOPs (no recomputation) per second per GPU: the MFU basis
    hw_tflops_per_gpu: float  # with recomputed FLOPs: the HFU basis
    megatron_tflops_per_gpu: float  # as today's Megatron-LM logs it (causal attention halved)
    mfu: float  # model FLOP/s (full s² attention, the papers') ÷ the dense peak of mfu_peak
    mfu_causal: float  # the same with causal attention halved: Megatron-LM's and Megatron-Bridge's convention
    mfu_peak: str  # the peak both are against: "bf16" (FP8 plans too) or "tf32" (fp32 training)
    hfu: float
    iteration_s_band: tuple[float, float]  # iteration × exp(∓ε), ε the plan's band (evidence.band_frac)
    tokens_per_s_band: tuple[float, float]
    peak_memory_gib: float
    allocated_gib: float  # the PyTorch-allocated part of the peak (Megatron logs its max as "max allocated")
    allocatable_gib: float  # what PyTorch can allocate on the GPU (hardware preset memory.allocatable_gib)
    memory_headroom: float  # share of it kept free
    capacity_gib: float  # allocatable × (1 − headroom): what a plan may fill
    fits: bool  # peak ≤ capacity_gib (keeps the headroom)
    fits_without_headroom: bool  # peak ≤ allocatable_gib
    peak_stage: int
    bubble_frac: float
    num_microbatches: float
    memory: dict[str, float]  # GiB, MEMORY_TERMS and total, most loaded GPU
    time: dict[str, float]  # seconds per iteration, TIME_TERMS
    formulas: dict[str, dict[str, TermFormula]]  # {"memory": {term: ...}, "time": {...}, "*_parts": {...}}
    parts: dict[str, dict[str, float]] | None = None  # explain: {"memory": {part: GiB}, "time": {part: s}}
    train_tokens: float
    train_days: float
    gpu_hours: float
    gpu_hour_price: float | None
    cost: float | None
    energy_mwh: float | None


def estimate_band(iteration_s: float, band_frac: float) -> tuple[float, float]:
    """[low, high] iteration time: the estimate times exp(∓ε), ε = √(ε₀² + n·δ²): ε₀ the validation
    error and calibration uncertainty of the GPU generation (hardware preset ``accuracy``; MoE plans:
    the MoE rows'; NVFP4 plans: the NVFP4 rows'), δ its largest validation error, n the plan's features
    no published setting exercises (``planner.fidelity.evidence``)."""
    return iteration_s * math.exp(-band_frac), iteration_s * math.exp(band_frac)


def plan_band(ctx: Context, gpus: int, plan: ParallelPlan, evidence: PlanEvidence | None = None, i: int = 0):
    """(ε, evidence JSON): the plan's band and each feature with the settings behind it; ``evidence``:
    that of the grid the plan is row ``i`` of, looked up once for all its rows (else the plan's own)."""
    ev = evidence if evidence is not None else plan_evidence(PlanGrid.from_plans([plan]), ctx, gpus)
    row = i if evidence is not None else 0
    eps = float(band_frac(ev.extrapolated[row : row + 1], ctx)[0])
    return eps, evidence_json(ev, row, (*band_parts(ctx), eps), band_rows(ctx))


def _formulas_json(text: dict) -> dict:
    """``formulas``' terms as the plan JSON writes them (``PlanEstimate.formulas``)."""
    return {kind: {k: {"formula": f.text, "source": f.source} for k, f in t.items()} for kind, t in text.items()}


def _fresh(tree):
    """A copy of a JSON tree, its dicts and lists new (the leaves shared)."""
    if type(tree) is dict:
        return {k: _fresh(v) for k, v in tree.items()}
    if type(tree) is list:
        return [_fresh(v) for v in tree]
    return tree


class Shared:
    """What the plan JSON of the rows of one evaluated grid share, each computed once: the JSON dumps of the
    contexts' model, training and options (each plan JSON gets its own copy: a new dict whose few nested dicts
    and lists are new too) and the model's parameters, what ``formulas`` reads of each context alone, and with
    ``evidence`` (``plan_evidence`` of the grid) every row's band."""

    def __init__(self, evidence: PlanEvidence | None = None):
        self.evidence = evidence
        self._dumps: dict[int, tuple] = {}  # id -> (the object, kept so the id stays its own; dump; nested keys)
        self._bands: dict[int, tuple] = {}
        self._fixed: dict[int, tuple] = {}
        self._params: dict[int, tuple] = {}
        self._published: dict[tuple, tuple] = {}

    def formulas(self, ctx: Context, plan: ParallelPlan) -> dict:
        """``formulas(ctx, plan)``, what it reads of the context alone computed once per context."""
        held = self._fixed.get(id(ctx))
        if held is None:
            held = self._fixed[id(ctx)] = (ctx, context_formulas(ctx))
        return formulas(ctx, plan, held[1])

    def dump(self, spec) -> dict:
        """``spec.model_dump(mode="json")``, a copy of it after the first."""
        held = self._dumps.get(id(spec))
        if held is None:
            out = spec.model_dump(mode="json")
            self._dumps[id(spec)] = (spec, out, [k for k, v in out.items() if type(v) in (dict, list)])
            return out
        out = dict(held[1])
        for k in held[2]:
            out[k] = _fresh(out[k])
        return out

    def params(self, model: ModelSpec) -> dict[str, int]:
        """``model_params(model)``, counted once (each plan JSON gets its own dict)."""
        held = self._params.get(id(model))
        if held is None:
            held = self._params[id(model)] = (model, model_params(model))
        return dict(held[1])

    def published(self, ctx: Context, gpus: int) -> tuple:
        """``published_runs(ctx, gpus)``, looked up once per context and GPU count."""
        held = self._published.get((id(ctx), gpus))
        if held is None:
            held = self._published[(id(ctx), gpus)] = (ctx, published_runs(ctx, gpus))
        return held[1]

    def band(self, ctx: Context, gpus: int, plan: ParallelPlan, i: int) -> tuple:
        """``plan_band`` of row i: the ε of every row of the grid computed at once (once per context)."""
        if self.evidence is None:
            return plan_band(ctx, gpus, plan)
        held = self._bands.get(id(ctx))
        if held is None:
            parts = band_parts(ctx)
            eps_all = band_frac(self.evidence.extrapolated, ctx).tolist()
            held = self._bands[id(ctx)] = (ctx, parts, eps_all, band_rows(ctx))
        eps = held[2][i]
        return eps, evidence_json(self.evidence, i, (*held[1], eps), held[3])


def plan_json(
    ctx: Context,
    gpus: int,
    grid: PlanGrid,
    ev: Evaluation,
    i: int,
    broken: list[str],
    memory_headroom: float | None = None,
    shared: Shared | None = None,
) -> dict:
    """The plan JSON for plan i of an evaluated grid; with ``ev.stages``, every stage's memory too.
    ``shared``: what the JSON of many rows of the grid share (``Shared``), when a caller builds many."""
    shared = Shared() if shared is None else shared
    plan = grid.plan(i)
    eps, evidence = shared.band(ctx, gpus, plan, i)
    estimate = _estimate_json(ctx, gpus, plan, ev, i, memory_headroom, eps, _formulas_json(shared.formulas(ctx, plan)))
    out = {
        "model": ctx.model.name,
        "hardware": ctx.hardware.name,
        "gpus": gpus,
        "training": shared.dump(ctx.training),
        "parallel": _parallel_json(plan, stage_layer_list(ctx, grid, i)),
        "options": shared.dump(ctx.options),
        "legal": not broken,
        "broken_rules": broken,
        "estimate": estimate,
        "evidence": evidence,
        "model_spec": shared.dump(ctx.model),
        "model_params": shared.params(ctx.model),
    }
    # the setup's published runs and this plan's estimate against the fastest (planner.fidelity.published)
    imbalance = plan_load_imbalance(ctx)
    if (pub := published_json(shared.published(ctx, gpus), estimate["tokens_per_s"] / gpus, imbalance)) is not None:
        out["published"] = pub
    if (ub := userbuffers_json(ctx, plan)) is not None:  # with --tp-comm-overlap-cfg: the config this plan runs
        out["userbuffers"] = ub
    if ev.stages is not None:
        rows = _stage_rows(ev.stages, i, plan.pp)
        out["stages"] = sorted(rows, key=lambda row: -row["total"])
        out["megatron_estimate"] = megatron_estimate_json(ctx, plan, gpus, rows)
    return out


def brief_plan_json(ctx: Context, grid: PlanGrid, ev: Evaluation, i: int) -> dict:
    """What ``plan_json`` says of plan i that a comparison of many plans reads: its parallel fields, its options
    and ``estimate.iteration_s``, the same values (validate's published plans: every fitting plan of a search)."""
    plan = grid.plan(i)
    return {
        "parallel": _parallel_json(plan, stage_layer_list(ctx, grid, i)),
        "options": ctx.options.model_dump(mode="json"),
        "estimate": {"iteration_s": float(ev.iteration_s[i])},
    }


def _parallel_json(plan: ParallelPlan, stage_layers: list[int]) -> dict:
    """The plan's fields as Megatron-LM runs them (--recompute-num-layers at most a chunk's layers) and
    its layers per stage."""
    par = plan.model_dump(mode="json")
    par["recompute_num_layers"] = recompute_layers_run(plan, stage_layers)
    return {**par, "stage_layers": stage_layers}


def _stage_rows(st, i: int, p: int) -> list[dict]:
    """Every pipeline stage of plan i: its layers and memory terms (GiB), first to last."""
    return [
        {
            "stage": k,
            "layers": int(st.layers[i, k]),
            "moe_layers": int(st.moe_layers[i, k]),
            "mtp_layers": int(st.mtp_layers[i, k]),
            **{t: float(st.memory[t][i, k]) / GIB for t in (*MEMORY_TERMS, "allocated", "total")},
        }
        for k in range(p)
    ]


def plan_estimate(
    ctx: Context,
    gpus: int,
    plan: ParallelPlan,
    ev: Evaluation,
    i: int,
    memory_headroom: float | None,
    band: float | None = None,
) -> PlanEstimate:
    """The estimate of plan i of an evaluated grid: speed, memory, the terms and their formulas, cost;
    ``band``: its ε (``plan_band``'s when not given). The plan JSON's ``estimate`` is its JSON dump."""
    eps = plan_band(ctx, gpus, plan)[0] if band is None else band
    text = _formulas_json(formulas(ctx, plan))
    return PlanEstimate(**_estimate_json(ctx, gpus, plan, ev, i, memory_headroom, eps, text))


def _estimate_json(
    ctx: Context, gpus: int, plan: ParallelPlan, ev: Evaluation, i: int, memory_headroom, band: float, text: dict
) -> dict:
    """``plan_estimate(...).model_dump(mode="json")``, built as such (every value of its JSON type; the plan JSON
    of a search's shown plans validated and dumped ``PlanEstimate``s for ~0.25 M instructions a plan): ``band``
    its ε, ``text`` its formulas as JSON (``_formulas_json``)."""
    it = float(ev.iteration_s[i])
    peak = ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
    tokens = ctx.training.global_batch * ctx.training.seq_len
    tokens_per_s = tokens / it
    headroom = resolve_headroom(memory_headroom)
    allocatable = ctx.hardware.memory.allocatable_bytes
    cap = usable_bytes(allocatable, headroom)
    low, high = estimate_band(it, band)
    flops = {kind: float(ev.flops[kind][i]) / it / gpus for kind in ("model", "hardware", "megatron", "causal")}
    peak_bytes = ev.peak_memory_bytes[i]
    out = {
        "iteration_s": it,
        "tokens_per_s": float(tokens_per_s),
        "iteration_s_band": [low, high],
        "tokens_per_s_band": [float(tokens / high), float(tokens / low)],
        "tflops_per_gpu": flops["model"] / 1e12,
        "hw_tflops_per_gpu": flops["hardware"] / 1e12,
        "megatron_tflops_per_gpu": flops["megatron"] / 1e12,
        "mfu": flops["model"] / peak,
        "mfu_causal": flops["causal"] / peak,
        "mfu_peak": "tf32" if ctx.precision == "fp32" else "bf16",
        "hfu": flops["hardware"] / peak,
        "peak_memory_gib": float(peak_bytes) / GIB,
        "allocated_gib": float(ev.memory["allocated"][i]) / GIB,
        "allocatable_gib": float(allocatable / GIB),
        "memory_headroom": float(headroom),
        "capacity_gib": float(cap / GIB),
        "fits": bool(peak_bytes <= cap),
        "fits_without_headroom": bool(peak_bytes <= allocatable),
        "peak_stage": int(ev.peak_stage[i]),
        "bubble_frac": float(ev.bubble_frac[i]),
        "num_microbatches": float(ev.m[i]),
        "memory": {k: float(ev.memory[k][i]) / GIB for k in (*MEMORY_TERMS, "total")},
        "time": {k: float(ev.time[k][i]) for k in TIME_TERMS},
        "formulas": text,
        "parts": _parts_json(ev, i, text),
        **{k: None if v is None else float(v) for k, v in _cost_terms(ctx, tokens_per_s, gpus).items()},
    }
    return {k: out[k] for k in ESTIMATE_KEYS}


ESTIMATE_KEYS = tuple(PlanEstimate.model_fields)  # the plan JSON's ``estimate`` keys, in PlanEstimate's order


def _cost_terms(ctx: Context, tokens_per_s: float, gpus: int) -> dict:
    """Days, GPU-hours, cost and energy of training ``ctx.training.train_tokens`` at this speed."""
    tr = ctx.training
    terms = train_cost_terms(
        tokens_per_s,
        gpus,
        tokens=tr.train_tokens,
        gpu_hour_price=tr.gpu_hour_price,
        tdp_watts=ctx.hardware.gpu.tdp_watts,
    )
    if not all(math.isfinite(v) for v in terms.values() if v is not None):
        # --gpu-hour-price 1e308: a cost beyond a float wrote "cost": Infinity, which strict JSON readers
        # (JavaScript, Go, jq --strict) refuse, and printed "cost inf" (fresh user trial 10)
        price = f" × --gpu-hour-price {tr.gpu_hour_price:g}" if tr.gpu_hour_price is not None else ""
        raise PlannerError(
            f"--tokens {tr.train_tokens:g}{price}: {terms['gpu_hours']:.3g} GPU-hours{price and ' × the price'} "
            "is beyond a float (1.8e308); give smaller values"
        )
    return terms


def _parts_json(ev: Evaluation, i: int, text: dict) -> dict | None:
    """What the attention blocks and the experts take of plan i's memory (GiB) and time (s), for explain."""
    if ev.parts is None:
        return None
    return {
        "memory": {k: float(v[i]) / GIB for k, v in ev.parts["memory"].items() if k in text["memory_parts"]},
        "time": {k: float(v[i]) for k, v in ev.parts["time"].items() if k in text["time_parts"]},
    }


def megatron_estimate_json(ctx: Context, plan: ParallelPlan, gpus: int, stages: list[dict]) -> dict:
    """What Megatron-LM's report_theoretical_memory prints for this plan, megaplan's counterpart (the
    first stage's model states and activations) and why they differ."""
    mm = report_theoretical_memory(ctx.model, ctx.training, plan, gpus)
    first = next(st for st in stages if st["stage"] == 0)
    return {
        "log_line": mm.log_line(),
        "weight_and_optimizer_mib": mm.weight_and_optimizer_mib,
        "activation_mib": mm.activation_mib,
        "total_mib": mm.total_mib,
        "formula": mm.formula,
        "megaplan_first_stage_mib": {
            "weight_and_optimizer": (first["weights"] + first["gradients"] + first["optimizer"]) * GIB / MIB,
            "activation": first["activations"] * GIB / MIB,
        },
        "differences": differences(ctx.model, ctx.training, plan, ctx.options),
        "parameters": megatron_params_json(ctx.model, plan.tp),
        "flops": megatron_flops_json(ctx, plan.tp),
    }


def megatron_params_json(model: ModelSpec, t: int) -> dict:
    """The parameter counts Megatron-LM's report_theoretical_memory prints at tensor-parallel size t (its lines 202-203,
    theoretical_memory_usage.py @ d98e8a64) beside megaplan's, and every reason they differ, each with the parameters
    it moves (``megatron_count_gaps``: they sum to the difference)."""
    mine, theirs = _param_totals(model), param_counts(model, padded_for_t=t, megatron=True)
    return {
        "megatron": {"total": theirs.total, "active": theirs.active},
        "megaplan": {"total": mine[0], "active": mine[1]},
        "log_lines": [
            f"Total number of parameters in billions: {theirs.total / 10**9:.2f}",
            f"Total number of active parameters in billions: {theirs.active / 10**9:.2f}",
        ],
        "differences": [vars(g) for g in megatron_count_gaps(model, t)],
    }


def megatron_flops_json(ctx: Context, t: int) -> dict:
    """One iteration's FLOPs as Megatron-LM's num_floating_point_operations logs them (training.py:1009-1310 @
    d98e8a64) beside megaplan's model FLOPs (the MFU basis), and every reason they differ (``megatron_flop_gaps``)."""
    mo, tr = ctx.model, ctx.training
    B, s = tr.global_batch, tr.seq_len
    V = int(padded_vocab(mo.vocab_size, mo.make_vocab_size_divisible_by, t))
    return {
        "megatron": flops.model_flops(B, s, V, flops.Shape.of(mo, megatron=True), attention_frac=0.5),
        "megaplan_model": flops.model_flops(B, s, V, flops.Shape.of(mo)),
        "differences": [vars(g) for g in flops.megatron_flop_gaps(B, s, V, mo)],
    }


def model_params(model: ModelSpec) -> dict[str, int]:
    """Parameters of the model (``planner.models.params.param_counts``): ``total`` (all, with the MTP
    depths, one copy of tied embeddings) and ``active`` (those a token passes through: k of the E
    experts of each MoE layer), as counts."""
    total, active = _param_totals(model)
    return {"total": total, "active": active}


@lru_cache(maxsize=16)
def _param_totals(model: ModelSpec) -> tuple[int, int]:
    """(total, active) parameters, counted once per model (every plan JSON of a search carries them)."""
    counts = param_counts(model)
    return round(counts.total), round(counts.active)


def stage_layer_list(ctx: Context, grid: PlanGrid, i: int) -> list[int]:
    """Decoder layers on each pipeline stage of plan i, first to last (``planner.models.pipeline_layout``;
    for a split Megatron-LM rejects, ``planner.space.grid.stage_layers``' even-split view)."""
    p, mo = int(grid.pp[i]), ctx.model
    contents = stage_contents(
        mo.num_layers,
        mo.mtp_layers,
        p,
        int(grid.vpp[i]),
        int(grid.split[i]),
        int(grid.first_layers[i]),
        int(grid.last_layers[i]),
        grid.layout_text(i),
    )
    if contents is not None:
        return [len(ids) for ids in contents.layers]
    lay = stage_layers(
        mo.num_layers,
        grid.pp[i : i + 1],
        grid.split[i : i + 1],
        grid.first_layers[i : i + 1],
        grid.last_layers[i : i + 1],
    )
    if p == 1:
        return [int(lay.first[0])]
    return [int(lay.first[0])] + [int(lay.middle[0])] * (p - 2) + [int(lay.last[0])]
