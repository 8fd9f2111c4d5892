"""Hints checked before they are printed: what a search on a plan's own GPUs really finds when no
single change makes the plan fit (explain's "fix" line), instead of promising that it finds one."""

from __future__ import annotations

from planner import api
from planner.errors import PlannerError
from planner.plan import plan_label
from planner.search import search


def search_on_these_gpus(req: api.PlanRequest, memory_headroom: float | None = None) -> dict:
    """{finds, plan, iteration_s, feasible, best} of a search over the plan's model, hardware, training
    and GPU count (``best``: the fastest plan's JSON); ``finds`` False with ``why`` when no legal plan fits."""
    try:
        result = search(req.ctx, req.gpus, top=1, memory_headroom=memory_headroom, suggest_sizes=False)
    except PlannerError as err:
        return {"finds": False, "why": str(err), "best": None}
    best = result.plans[0]
    return {
        "finds": True,
        "plan": plan_label(best["parallel"], moe=req.ctx.model.is_moe, options=best["options"]),
        "iteration_s": best["estimate"]["iteration_s"],
        "feasible": result.feasible,
        "best": best,
    }
