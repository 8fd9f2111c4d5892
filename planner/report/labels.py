"""A plan's label in a report, kept apart from the rich renderables: --csv and --json need it without
importing rich."""

from __future__ import annotations


def plan_text(pj: dict) -> str:
    """The short plan label of a plan JSON (``planner.plan.plan_label``), with ``tpo:TE`` where the plan runs
    Transformer Engine's userbuffer defaults because --tp-comm-overlap-cfg bridge has no Megatron-Bridge preset
    for its shape (``userbuffers.bridge_fallback``)."""
    from planner.plan import plan_label

    notes = ("tpo:TE",) if (pj.get("userbuffers") or {}).get("bridge_fallback") else ()
    moe = bool(pj.get("model_spec", {}).get("num_experts"))
    return plan_label(pj["parallel"], moe=moe, options=pj.get("options"), notes=notes)
