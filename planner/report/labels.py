"""A plan's label in a report, kept apart from the rich renderables: --csv and --json need it without
importing rich."""

from __future__ import annotations


def plan_text(pj: dict) -> str:
    """The short plan label of a plan JSON (``planner.plan.plan_label``)."""
    from planner.plan import plan_label

    return plan_label(pj["parallel"], moe=bool(pj.get("model_spec", {}).get("num_experts")), options=pj.get("options"))
