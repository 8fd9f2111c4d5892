"""The Megatron-LM options that change memory and time beyond the parallel layout, read from a
parsed argv: recomputation (granularity, method, layer count, modules), CUDA graphs, the
precision-aware optimizer's dtypes, and the options megaplan reads but does not model (reported)."""

from __future__ import annotations

from planner.errors import PlannerError
from planner.plan import PRECISION_AWARE_FIELDS, PRECISION_AWARE_RULE, CudaGraphModule, RecomputeModule


def recompute_fields(v: dict) -> dict:
    """--recompute-granularity (or --recompute-activations, selective) with its method and layer count;
    --moe-layer-recompute is today's selective recomputation of the moe module (transformer_config.py:2015-2025)."""
    gran = v.get("recompute_granularity")
    if v.get("recompute_activations") or (v.get("moe_layer_recompute") and gran != "full"):
        gran = "selective"
    if gran == "full":
        method = v.get("recompute_method")
        if method is None:
            raise PlannerError(
                "--recompute-granularity full needs --recompute-method uniform|block and --recompute-num-layers N "
                "(Megatron-LM transformer_config.py:1901-1938)"
            )
        return {
            "recompute": "full",
            "recompute_method": method,
            "recompute_num_layers": v.get("recompute_num_layers") or 1,
        }
    if gran == "selective" and v.get("recompute_method") is not None:
        raise PlannerError(
            f"Megatron-LM would reject this: --recompute-method {v['recompute_method']} with selective recomputation "
            "('recompute method is not yet supported for selective recomputing granularity', arguments.py since "
            "23.04); drop --recompute-method or use --recompute-granularity full"
        )
    return {"recompute": gran if gran == "selective" else "none"}


MODELLED_MODULES = {m.value for m in RecomputeModule}
MODELLED_GRAPH_MODULES = {m.value for m in CudaGraphModule}


def recompute_modules(v: dict) -> tuple[str, ...]:
    """--recompute-modules (Megatron's default core_attn), plus moe for --moe-layer-recompute."""
    modules = list(v.get("recompute_modules") or ["core_attn"])
    if v.get("moe_layer_recompute") and "moe" not in modules:
        modules.append("moe")
    unknown = [m for m in modules if m not in MODELLED_MODULES]
    if unknown:
        raise PlannerError(
            f"--recompute-modules {' '.join(unknown)}: needs model features megaplan does not model "
            f"(Mamba, GDN or mHC layers); modelled: {', '.join(sorted(MODELLED_MODULES))}"
        )
    return tuple(dict.fromkeys(modules))


def cuda_graph_options(v: dict, warnings: list[str]) -> dict:
    """--cuda-graph-impl and --cuda-graph-modules, with the deprecated scopes Megatron migrates:
    'full' is the whole layer (no modules), 'full_iteration' the full-iteration implementation, which needs the
    NaN check off (arguments.py validate_args: "--no-check-for-nan-in-loss-and-grad should be set with
    --cuda-graph-impl=full_iteration for training")."""
    impl = v.get("cuda_graph_impl") or "none"
    modules = [str(m) for m in v.get("cuda_graph_modules") or []]
    if "full_iteration" in modules:
        impl, modules = "full_iteration", []
    modules = [m for m in modules if m != "full"]
    if "mamba" in modules:
        warnings.append("--cuda-graph-modules mamba ignored: the model has no Mamba layers")
        modules.remove("mamba")
    unknown = [m for m in modules if m not in MODELLED_GRAPH_MODULES]
    if unknown:
        raise PlannerError(
            f"--cuda-graph-modules {' '.join(unknown)}: allowed: {', '.join(sorted(MODELLED_GRAPH_MODULES))}"
        )
    if impl == "full_iteration" and v.get("check_for_nan_in_loss_and_grad") is not False:
        warnings.append(
            "--cuda-graph-impl full_iteration without --no-check-for-nan-in-loss-and-grad: Megatron-LM's validate_args "
            "refuses it for training; add --no-check-for-nan-in-loss-and-grad"
        )
    return {"cuda_graph_impl": impl, "cuda_graph_modules": tuple(dict.fromkeys(modules))}


def optimizer_options(v: dict, warnings: list[str]) -> dict:
    """--use-precision-aware-optimizer and the dtypes it reads; without it Megatron-LM refuses them
    (OptimizerConfig asserts fp32): said, and priced as fp32."""
    dtypes = {k: v[k] for k in PRECISION_AWARE_FIELDS if v.get(k) not in (None, "fp32")}
    if v.get("use_precision_aware_optimizer"):
        return {"use_precision_aware_optimizer": True, **dtypes}
    if dtypes:
        flags = ", ".join("--" + k.replace("_", "-") for k in dtypes)
        warnings.append(
            f"{flags} ignored (priced as fp32): only with --use-precision-aware-optimizer; {PRECISION_AWARE_RULE}, "
            "so Megatron-LM refuses this line"
        )
    return {}


NOT_MODELLED = {  # dest -> (Megatron's default, what it changes): read, reported, not modelled
    "fine_grained_activation_offloading": (False, "fine-grained activation offloading"),
    "optimizer_cpu_offload": (False, "the optimizer's CPU offload"),
    "overlap_param_gather_with_optimizer_step": (False, "the parameter all-gather overlapped with the optimizer step"),
}


def not_modelled(v: dict) -> list[str]:
    """What the options set away from Megatron's default leave out of the estimate, each with its flag."""
    return [
        f"{what} (--{dest.replace('_', '-')} {v[dest]!s})"
        for dest, (default, what) in NOT_MODELLED.items()
        if dest in v and v[dest] not in (default, None, False)
    ]
