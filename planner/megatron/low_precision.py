"""The low-precision flags of a Megatron-LM command line checked as Megatron-LM checks them: NVFP4 (priced on
Blackwell, ``planner.api.check_fp4``), the BF16 end layers and the MXFP8 output projection (carried by the plan's
options and priced), the router's quantisation padding (not priced).

Each refusal names the flag, what is allowed and the Megatron-LM line that refuses it (commit d98e8a64:
``megatron/training/arguments.py`` validate_args, ``megatron/core/transformer/transformer_config.py``
TransformerConfig.__post_init__, which ``pretrain_gpt.py`` builds before training); the combinations Megatron-LM
runs but the estimate does not price are returned as warnings. The GPU-dependent recipe checks are
``planner.api.FP8_RECIPE_CAPABILITY`` (Transformer Engine's ``check_*_support``)."""

from __future__ import annotations

from planner.errors import PlannerError

# --fp4-recipe custom builds Transformer Engine quantizers from user code (fp4_utils._get_custom_recipe)
FP4_CUSTOM = "--fp4-recipe custom loads quantizers of your own, which megaplan cannot cost; allowed: --fp4-recipe nvfp4"


DESTS = (  # the flags read here (planner.megatron.script.COST_DESTS: a value left unset is an error, not dropped)
    "fp4",
    "fp4_recipe",
    "fp4_param_gather",
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
    "fp8_output_proj",
    "moe_router_padding_for_quantization",
    "moe_router_padding_for_fp8",
)


def _dest(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _fp4(v: dict) -> None:
    """NVFP4 (arguments.py:1099-1109): not with FP8, its parameter gather only with it; the custom recipe not
    priced (the GPU check: ``planner.api.check_fp4``, Transformer Engine check_nvfp4_support)."""
    if v.get("fp4") and v.get("fp8"):
        raise PlannerError(
            "--fp4-format with --fp8-format: Megatron-LM takes one of them (arguments.py:1100 refuses the pair); "
            "allowed: --fp8-format e4m3|hybrid alone"
        )
    if v.get("fp4_param_gather") and not v.get("fp4"):
        raise PlannerError("--fp4-param-gather needs --fp4-format (arguments.py:1104); allowed: drop it")
    if v.get("fp4") and (v.get("fp4_recipe") or "nvfp4") != "nvfp4":
        raise PlannerError(FP4_CUSTOM)


def _bf16_end_layers(v: dict, num_layers: int, pp: int) -> list[str]:
    """--first-last-layers-bf16 (transformer_config.py:1527-1556): not with delayed scaling, whose amaxes are
    reduced once for all FP8 layers; at most the layers of one pipeline stage, L // pp, at each end."""
    if not (v.get("fp8") and v.get("first_last_layers_bf16")):
        return []
    recipe = v.get("fp8_recipe") or "delayed"
    if recipe == "delayed":
        raise PlannerError(
            "--first-last-layers-bf16 with --fp8-recipe delayed: Megatron-LM refuses it (transformer_config.py:1530, "
            "'Delayed scaling does not support first / last layer in BF16'); allowed: --fp8-recipe tensorwise, "
            "blockwise or mxfp8"
        )
    most = num_layers // pp
    ends = {"num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1}  # TransformerConfig's defaults
    start, end = (default if v.get(dest) is None else int(v[dest]) for dest, default in ends.items())
    for dest, n in zip(ends, (start, end), strict=True):
        if not 0 <= n <= most:
            raise PlannerError(
                f"{_dest(dest)} {n}: allowed: 0 to {most}, the layers of one pipeline stage ({num_layers} layers / "
                f"pp {pp}; transformer_config.py:1536-1556)"
            )
    return []  # priced: PlanOptions.first_last_layers_bf16 (costs.blocks.bf16_layer_sums)


def _output_proj(v: dict) -> list[str]:
    """--fp8-output-proj: the LM head in MXFP8, with the MXFP8 recipe only (transformer_config.py:1569-1575)."""
    if not v.get("fp8_output_proj"):
        return []
    recipe = v.get("fp8_recipe") or "delayed"
    if not v.get("fp8") or recipe != "mxfp8":
        raise PlannerError(
            f"--fp8-output-proj needs --fp8-format with --fp8-recipe mxfp8 (transformer_config.py:1569-1575); "
            f"got {'--fp8-recipe ' + recipe if v.get('fp8') else 'no --fp8-format'}; allowed: drop it"
        )
    return []  # priced: PlanOptions.fp8_output_proj (costs.layer_time.logits_gemm_s)


def _router_padding(v: dict) -> list[str]:
    """--moe-router-padding-for-quantization (or the deprecated --moe-router-padding-for-fp8): needs FP8 or FP4
    and a dispatcher other than allgather (transformer_config.py:2641-2660)."""
    given = [d for d in ("moe_router_padding_for_quantization", "moe_router_padding_for_fp8") if v.get(d)]
    if not given:
        return []
    flag = _dest(given[0])
    if not v.get("fp8") and not v.get("fp4"):
        raise PlannerError(
            f"{flag} needs --fp8-format (transformer_config.py:2651: 'fp8/fp4 must be specified'); allowed: drop it"
        )
    dispatcher = v.get("moe_token_dispatcher_type") or "allgather"
    if dispatcher not in ("alltoall", "flex"):
        raise PlannerError(
            f"{flag} with --moe-token-dispatcher-type {dispatcher}: Megatron-LM refuses it "
            "(transformer_config.py:2656); allowed: --moe-token-dispatcher-type alltoall or flex"
        )
    return []


def check_low_precision(v: dict, *, num_layers: int, pp: int) -> list[str]:
    """Refuse (PlannerError, one line) what Megatron-LM refuses among the low-precision flags; the warnings for what
    it runs that the estimate prices otherwise (none today: what it accepts is carried by the options and priced).
    ``v``: the parsed flag values."""
    _fp4(v)
    if v.get("fp8_param_gather") and not v.get("fp8"):
        raise PlannerError(
            "--fp8-param-gather needs --fp8-format (transformer_config.py:1566: 'fp8_param must be used together "
            "with fp8 mode'); allowed: add --fp8-format e4m3|hybrid, or drop it"
        )
    _offloaded_fp8_params(v)
    return _bf16_end_layers(v, num_layers, pp) + _output_proj(v) + _router_padding(v)


def _offloaded_fp8_params(v: dict) -> None:
    """The optimizer's CPU offload keeps FP8 parameters with delayed scaling only (arguments.py:1889-1892)."""
    recipe = v.get("fp8_recipe") or "delayed"
    if v.get("optimizer_cpu_offload") and v.get("fp8") and v.get("fp8_param_gather") and recipe != "delayed":
        raise PlannerError(
            f"--optimizer-cpu-offload with --fp8-param-gather and --fp8-recipe {recipe}: Megatron-LM refuses it "
            "(arguments.py:1889); allowed: --fp8-recipe delayed, or drop --fp8-param-gather"
        )
