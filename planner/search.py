"""Search: every candidate plan as one grid, Megatron's rules and memory as named masks, ranked.

The grid is a cartesian product of the knobs built with numpy (no Python loop over plans); the
candidates that pass every rule are evaluated in chunks by the same ``evaluate`` that explain
uses, so the process's memory stays bounded whatever the size of the space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.costs.estimate import evaluate
from planner.errors import InfeasibleError
from planner.plan import Context, plan_label
from planner.result import plan_json
from planner.space.candidates import NO_PINS, Pins, candidate_grid, nvlink_domain_gpus, tp_in_domain
from planner.space.grid import PlanGrid
from planner.space.rules import rule_masks
from planner.space.sizes import empty_grid_reason, nearest_legal_sizes, rules_broken_everywhere

CHUNK = 65_536
FITS_RULE = "fits in GPU memory"
TP_NODE_RULE = "tp within one NVLink domain (--max-tp to cross nodes)"


@dataclass
class SearchResult:
    plans: list[dict]
    evaluated: int
    feasible: int
    rejected: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"plans": self.plans, "evaluated": self.evaluated, "feasible": self.feasible, "rejected": self.rejected}


def search(
    ctx: Context,
    num_gpus: int,
    pins: Pins = NO_PINS,
    *,
    top: int = 10,
    sort: str = "time",
    memory_headroom: float = 0.0,
    suggest_sizes: bool = True,
) -> SearchResult:
    """Rank every legal plan that fits by iteration time (or by peak memory). With no legal plan, the
    error names every rule that rejected plans and (``suggest_sizes``) the nearest GPU counts that have one."""
    grid = candidate_grid(ctx, num_gpus, pins)
    masks = rule_masks(grid, ctx.model, ctx.training, ctx.options, num_gpus)
    masks[TP_NODE_RULE] = tp_in_domain(grid.tp, nvlink_domain_gpus(ctx.hardware), pins.max_tp)
    legal = np.ones(len(grid), dtype=bool)
    first_broken = np.full(len(grid), -1)
    names = list(masks)
    for k, name in enumerate(names):
        newly = legal & ~masks[name]
        first_broken[newly] = k
        legal &= masks[name]
    capacity = ctx.hardware.gpu.hbm_bytes * (1 - memory_headroom)

    idx = np.flatnonzero(legal)
    iteration = np.empty(len(idx))
    peak = np.empty(len(idx))
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(idx), CHUNK):
            part = idx[start : start + CHUNK]
            ev = evaluate(grid.take(part), ctx)
            iteration[start : start + CHUNK] = ev.iteration_s
            peak[start : start + CHUNK] = ev.peak_memory_bytes
    fits = peak <= capacity
    rejected = {names[k]: int(np.sum(first_broken == k)) for k in range(len(names)) if np.any(first_broken == k)}
    if np.any(~fits):
        rejected[FITS_RULE] = int(np.sum(~fits))
    if not np.any(fits):
        raise InfeasibleError(_nothing_fits(ctx, num_gpus, pins, grid, idx, peak, capacity, rejected, suggest_sizes))

    ok = idx[fits]
    key = iteration[fits] if sort == "time" else peak[fits]
    second = peak[fits] if sort == "time" else iteration[fits]
    order = np.lexsort((ok, second, key))[:top]
    best = grid.take(ok[order])
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(best, ctx)
    plans = [plan_json(ctx, num_gpus, best, ev, i, [], memory_headroom) for i in range(len(best))]
    for rank, pj in enumerate(plans, 1):
        pj["rank"] = rank
    return SearchResult(plans=plans, evaluated=len(grid), feasible=int(np.sum(fits)), rejected=rejected)


def _nothing_fits(
    ctx: Context,
    num_gpus: int,
    pins: Pins,
    grid: PlanGrid,
    idx: np.ndarray,
    peak: np.ndarray,
    capacity: float,
    rejected: dict[str, int],
    suggest_sizes: bool,
) -> str:
    if len(idx) == 0:
        if len(grid) == 0:
            why = f"world size = tp·cp·pp·dp: {empty_grid_reason(num_gpus, pins)}"
        else:
            by_count = sorted(rejected.items(), key=lambda kv: -kv[1])
            why = "rejected by: " + ", ".join(f"{name} ({count:,})" for name, count in by_count)
        always = rules_broken_everywhere(ctx, pins, ctx.hardware.gpus_per_node) if suggest_sizes else []
        near = nearest_legal_sizes(ctx, num_gpus, pins) if suggest_sizes and not always else []
        allowed = f"; nearest GPU counts with a legal plan: {' and '.join(f'{n:,}' for n in near)}" if near else ""
        if always:
            allowed = f"; on any GPU count: {'; '.join(always)}"
        elif suggest_sizes and not near:
            allowed = "; no GPU count nearby has one"
        return f"no legal plan for {ctx.model.name} on {num_gpus:,} GPUs; {why}{allowed}"
    i = idx[np.argmin(peak)]
    gib = 2**30
    label = plan_label(grid.plan(int(i)).model_dump(mode="json"), moe=ctx.model.is_moe)
    return (
        f"every legal plan needs more than {capacity / gib:.1f} GiB per GPU; the smallest, {label}, "
        f"needs {np.min(peak) / gib:.1f} GiB; try more GPUs, a larger-memory --hardware or a smaller --global-batch"
    )
