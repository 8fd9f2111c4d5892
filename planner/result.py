"""One plan's estimate: the typed ``PlanEstimate`` and the plan JSON of the CLI contract around it.

The plan JSON is what ``explain --json`` and ``search --json`` print and what ``--plan`` reads back:
``{model, hardware, gpus, training, parallel, options, legal, broken_rules, estimate, model_spec}``;
``estimate`` is a ``PlanEstimate`` (memory in GiB for the most loaded GPU, time in seconds per
iteration; the terms add up), with each term's formula text and source from the cost module that
computed it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.costs.estimate import MEMORY_TERMS, TIME_TERMS, Evaluation, formulas
from planner.costs.train_cost import train_cost_terms
from planner.hardware.spec import GIB
from planner.plan import Context
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
    mfu: float
    hfu: float
    peak_memory_gib: float
    capacity_gib: float
    fits: bool
    peak_stage: int
    bubble_frac: float
    num_microbatches: float
    memory: dict[str, float]  # GiB, MEMORY_TERMS and total, most loaded GPU
    time: dict[str, float]  # seconds per iteration, TIME_TERMS
    formulas: dict[str, dict[str, TermFormula]]  # {"memory": {term: ...}, "time": {term: ...}}
    train_tokens: float
    train_days: float
    gpu_hours: float
    gpu_hour_price: float | None
    cost: float | None
    energy_mwh: float | None


def plan_json(
    ctx: Context, gpus: int, grid: PlanGrid, ev: Evaluation, i: int, broken: list[str], memory_headroom: float = 0.0
) -> dict:
    """The plan JSON for plan i of an evaluated grid; with ``ev.stages``, every stage's memory too."""
    plan = grid.plan(i)
    it = float(ev.iteration_s[i])
    peak = ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
    tokens_per_s = ctx.training.global_batch * ctx.training.seq_len / it
    cap = ctx.hardware.gpu.hbm_bytes * (1 - memory_headroom)

    def per_gpu(kind: str) -> float:
        return float(ev.flops[kind][i]) / it / gpus

    text = formulas(ctx, plan)
    estimate = PlanEstimate(
        iteration_s=it,
        tokens_per_s=tokens_per_s,
        tflops_per_gpu=per_gpu("model") / 1e12,
        hw_tflops_per_gpu=per_gpu("hardware") / 1e12,
        megatron_tflops_per_gpu=per_gpu("megatron") / 1e12,
        mfu=per_gpu("model") / peak,
        hfu=per_gpu("hardware") / peak,
        peak_memory_gib=float(ev.peak_memory_bytes[i]) / GIB,
        capacity_gib=cap / GIB,
        fits=bool(ev.peak_memory_bytes[i] <= cap),
        peak_stage=int(ev.peak_stage[i]),
        bubble_frac=float(ev.bubble_frac[i]),
        num_microbatches=float(ev.m[i]),
        memory={k: float(ev.memory[k][i]) / GIB for k in (*MEMORY_TERMS, "total")},
        time={k: float(ev.time[k][i]) for k in TIME_TERMS},
        formulas={
            kind: {k: TermFormula(formula=f.text, source=f.source) for k, f in terms.items()}
            for kind, terms in text.items()
        },
        **train_cost_terms(
            tokens_per_s,
            gpus,
            tokens=ctx.training.train_tokens,
            gpu_hour_price=ctx.training.gpu_hour_price,
            tdp_watts=ctx.hardware.gpu.tdp_watts,
        ),
    )
    out = {
        "model": ctx.model.name,
        "hardware": ctx.hardware.name,
        "gpus": gpus,
        "training": ctx.training.model_dump(mode="json"),
        "parallel": {**plan.model_dump(mode="json"), "stage_layers": stage_layer_list(ctx, grid, i)},
        "options": ctx.options.model_dump(mode="json"),
        "legal": not broken,
        "broken_rules": broken,
        "estimate": estimate.model_dump(mode="json"),
        "model_spec": ctx.model.model_dump(mode="json"),
    }
    if ev.stages is not None:
        st = ev.stages
        p = plan.pp
        rows = [
            {
                "stage": k,
                "layers": int(st.layers[i, k]),
                **{t: float(st.memory[t][i, k]) / GIB for t in (*MEMORY_TERMS, "total")},
            }
            for k in range(p)
        ]
        out["stages"] = sorted(rows, key=lambda row: -row["total"])
    return out


def stage_layer_list(ctx: Context, grid: PlanGrid, i: int) -> list[int]:
    """Layers on each pipeline stage of plan i, first to last (``planner.space.grid.stage_layers``)."""
    lay = stage_layers(
        ctx.model.num_layers,
        grid.pp[i : i + 1],
        grid.split[i : i + 1],
        grid.first_layers[i : i + 1],
        grid.last_layers[i : i + 1],
    )
    p = int(grid.pp[i])
    if p == 1:
        return [int(lay.first[0])]
    return [int(lay.first[0])] + [int(lay.middle[0])] * (p - 2) + [int(lay.last[0])]
