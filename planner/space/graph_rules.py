"""What Megatron-Core refuses in a plan's CUDA graphs beyond the rule table's simpler graph rules: the modules
per-layer graphs take together, MoE graphs without drop-and-pad routing, graphed recomputation under dropout,
and graphs beside the expert all-to-all overlap (TransformerConfig.__post_init__, transformer_config.py:2798-2935
and 3062-3070 @ d98e8a64)."""

from __future__ import annotations

from planner.models.spec import ModelSpec
from planner.plan import PlanOptions

PER_LAYER = ("local", "transformer_engine")


def _module_breach(impl: str, mods: set[str], moe: bool) -> str:
    """The modules one per-layer graph implementation refuses together, or on a mixture of experts."""
    if impl not in PER_LAYER:
        return ""
    if {"moe", "moe_router"} <= mods:
        return "--cuda-graph-modules takes moe or moe_router, not both"
    if "moe_preprocess" in mods and "moe_router" not in mods:
        return "--cuda-graph-modules moe_preprocess needs moe_router"
    if moe and "moe" in mods:  # capacity_factor None or not moe_pad_expert_input_to_capacity
        return (
            "--cuda-graph-modules moe graphs only drop-and-pad routing (--moe-pad-expert-input-to-capacity, not "
            "modelled): graph moe_router (and moe_preprocess) instead"
        )
    return ""


def _recompute_breach(impl: str, mods: set[str], options: PlanOptions, model: ModelSpec) -> str:
    """What selective recomputation of graphed modules refuses: moe with a TE router graph, and recomputed
    modules inside a graph under dropout (the graph replays the same random numbers)."""
    rc = {m.value for m in options.recompute_modules}
    whole = impl == "full_iteration" or not mods  # a graph of the whole layer
    out = []
    if impl == "transformer_engine" and "moe" in rc and "moe_router" in mods:
        out.append("moe recomputation with a transformer_engine moe_router graph")
    if model.attention_dropout and (whole or "attn" in mods) and "core_attn" in rc:
        out.append(f"core_attn recomputation inside the graph with attention dropout {model.attention_dropout:g}")
    graphed_mlp = ((whole or "mlp" in mods) and "mlp" in rc) or ((whole or "moe" in mods) and "moe" in rc)
    if model.hidden_dropout and graphed_mlp:
        out.append(f"mlp/moe recomputation inside the graph with hidden dropout {model.hidden_dropout:g}")
    return "; ".join(out)


def graph_breaches(options: PlanOptions, model: ModelSpec) -> dict[str, str]:
    """Each breach's text by the plans it binds: "all", those with "selective" recomputation, with the "a2a"
    overlap, or the "alltoall" dispatcher; empty when CUDA graphs are off or Megatron-Core takes them."""
    impl = options.cuda_graph_impl.value
    if impl == "none":
        return {}
    mods = {m.value for m in options.cuda_graph_modules}
    if impl == "local" and mods & {"moe_router", "moe_preprocess"}:  # local graphs the router and its preprocess
        mods |= {"moe_router", "moe_preprocess"}
    found = {
        "all": _module_breach(impl, mods, model.is_moe),
        "selective": _recompute_breach(impl, mods, options, model),
        "a2a": "transformer_engine graphs of moe or mlp beside --overlap-moe-expert-parallel-comm"
        if impl == "transformer_engine" and mods & {"moe", "mlp"}
        else "",
        "alltoall": "--cuda-graph-modules moe_preprocess with the alltoall dispatcher and a capacity factor (the "
        "preprocess syncs with the host)"
        if impl in PER_LAYER and model.is_moe and "moe_preprocess" in mods and options.moe_capacity_factor is not None
        else "",
    }
    return {k: v for k, v in found.items() if v}


def plan_graph_breach(breaches: dict[str, str], selective: bool, a2a: bool, alltoall: bool) -> str:
    """The breaches of ``graph_breaches`` one plan makes."""
    binds = {"all": True, "selective": selective, "a2a": a2a, "alltoall": alltoall}
    return "; ".join(text for key, text in breaches.items() if binds[key])
