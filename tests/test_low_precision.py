"""Low-precision recipes × GPU generation × the options around them, as Megatron-LM and Transformer Engine take
them (docs/megatron-flags.md, 'Low precision'). Every refusal below is Megatron-LM's own at commit d98e8a64
(run through Megatron-LM's validate_args and TransformerConfig with /work/shared/tools/megatron_check, the
message quoted) or Transformer Engine's check_*_support (transformer_engine/pytorch/quantization.py)."""

from __future__ import annotations

import pytest

from planner import api
from planner.errors import PlannerError
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from tests.conftest import one_line_error, run_cli

LLAMA = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 "
    "--global-batch-size 128 --bf16 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
    "--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 128256 --tokenizer-type NullTokenizer"
)


def _import(flags: str, hardware: str = "dgx-h100-superpod"):
    return import_megatron(f"{LLAMA} {flags}", gpus=8, hardware=load_hardware(hardware))


@pytest.mark.parametrize(
    "flags, hardware, message",
    [
        # transformer_config.py:1530 'Delayed scaling does not support first / last layer in BF16.'
        ("--fp8-format hybrid --first-last-layers-bf16", "dgx-h100-superpod", "--fp8-recipe delayed: Megatron-LM"),
        # transformer_config.py:1543 'num_layers_at_start_in_bf16 (40) must be between 0 and number of layers per
        # pipeline stage (32).'; with pp 4 the bound is 32 // 4 = 8 (9 refused, 8 accepted below)
        (
            "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 40",
            "dgx-h100-superpod",
            "--num-layers-at-start-in-bf16 40: allowed: 0 to 32",
        ),
        (
            "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 --pipeline-model-parallel-size 4 "
            "--num-layers-at-start-in-bf16 9",
            "dgx-h100-superpod",
            "allowed: 0 to 8",
        ),
        # transformer_config.py:1552 'num_layers_at_end_in_bf16 (-1) must be between 0 and ...'
        (
            "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-end-in-bf16 -1",
            "dgx-h100-superpod",
            "--num-layers-at-end-in-bf16 -1: allowed: 0 to 32",
        ),
        # arguments.py:1101 '--fp4-format and --fp8-format cannot be used simultaneously.'
        ("--fp4-format e2m1 --fp8-format hybrid", "dgx-b200-superpod", "Megatron-LM takes one of them"),
        # arguments.py:1105 '--fp4-param-gather must be used together with --fp4-format.'
        ("--fp4-param-gather", "dgx-b200-superpod", "--fp4-param-gather needs --fp4-format"),
        # NVFP4: Transformer Engine check_nvfp4_support, compute capability >= 10.0 (priced on Blackwell:
        # tests/test_nvfp4.py)
        ("--fp4-format e2m1", "dgx-h100-superpod", "needs NVFP4 tensor cores, compute capability ≥ 10"),
        # transformer_config.py:1567 'fp8_param must be used together with fp8 mode.' (argument_utils.py:312
        # fp8_param = fp8_param_gather); it was read and ignored
        ("--fp8-param-gather", "dgx-h100-superpod", "--fp8-param-gather needs --fp8-format"),
        # transformer_config.py:1573 "fp8_output_proj requires fp8_recipe='mxfp8', got 'delayed'."
        ("--fp8-format hybrid --fp8-output-proj", "dgx-h100-superpod", "got --fp8-recipe delayed"),
        ("--fp8-output-proj", "dgx-b200-superpod", "got no --fp8-format"),
        # transformer_config.py:2656 'allgather and alltoall_seq dispatcher does not support
        # moe_router_padding_for_quantization.' (the deprecated --moe-router-padding-for-fp8 turns it on)
        (
            "--fp8-format e4m3 --fp8-recipe mxfp8 --moe-router-padding-for-fp8",
            "dgx-b200-superpod",
            "--moe-router-padding-for-fp8 with --moe-token-dispatcher-type allgather",
        ),
        # transformer_config.py:2651 'fp8/fp4 must be specified when moe_router_padding_for_quantization is True.'
        ("--moe-router-padding-for-quantization", "dgx-b200-superpod", "needs --fp8-format"),
        # Transformer Engine _compute_mxfp8_support: 'Device compute capability 10.0 or higher required'
        ("--fp8-format e4m3 --fp8-recipe mxfp8", "dgx-h100-superpod", "allowed: delayed, tensorwise, blockwise$"),
    ],
)
def test_what_megatron_lm_refuses_is_refused_naming_the_flag(flags, hardware, message):
    with pytest.raises(PlannerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _import(flags, hardware)


@pytest.mark.parametrize(
    "flags, hardware, options",
    [
        # accepted by Megatron-LM (validate_args and TransformerConfig pass); 2 ≤ 32 // 1 and 8 ≤ 32 // 4
        (
            "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 2",
            "dgx-h100-superpod",
            {"first_last_layers_bf16": True, "bf16_end_layers": (2, 1)},
        ),
        (
            "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 --pipeline-model-parallel-size 4 "
            "--num-layers-at-start-in-bf16 8 --tp-comm-overlap",
            "dgx-h100-superpod",
            {"bf16_end_layers": (8, 1), "tp_comm_overlap": True},
        ),
        ("--fp8-format e4m3 --fp8-recipe mxfp8 --fp8-output-proj", "dgx-b200-superpod", {"fp8_output_proj": True}),
    ],
)
def test_what_megatron_lm_runs_is_carried_into_the_options_and_priced(flags, hardware, options):
    """The BF16 end layers and the MXFP8 output layer are plan options, priced (tests/test_bf16_end_layers.py): the
    import carries them and warns of nothing about them (the second userbuffer set included)."""
    imported = _import(flags, hardware)
    assert {k: getattr(imported.request.ctx.options, k) for k in options} == options
    assert not any("BF16" in w or "output layer" in w for w in imported.warnings)


def test_bf16_end_layers_without_fp8_change_nothing_and_say_nothing():
    """Megatron-LM reads --first-last-layers-bf16 only under FP8 (transformer_config.py:1527 ``if self.fp8``):
    without it even 40 start layers pass, and the estimate is the plain BF16 one."""
    imported = _import("--first-last-layers-bf16 --num-layers-at-start-in-bf16 40")
    assert not any("BF16" in w for w in imported.warnings)
    assert imported.request.ctx.options.fp8 is None


def test_an_unset_variable_in_a_low_precision_flag_is_an_error_not_a_dropped_flag():
    """--fp4-format changes what runs: a value the script leaves unset stops the import (COST_DESTS)."""
    from planner.megatron.script import COST_DESTS

    assert {"fp4", "first_last_layers_bf16", "num_layers_at_start_in_bf16", "fp8_output_proj"} <= COST_DESTS


@pytest.mark.parametrize(
    "hardware, recipe, allowed",
    [
        # Transformer Engine v2.9-v2.18 _compute_fp8_block_scaling_support: capability >= 9.0 (and CUDA >= 12.9);
        # Blackwell runs it as MXFP8 (pytorch/csrc/extensions/gemm.cpp); _compute_mxfp8_support: 10.0 <= cc < 12.0
        ("dgx-h100-superpod", "blockwise", True),
        ("dgx-h200-superpod", "mxfp8", False),
        ("dgx-b200-superpod", "blockwise", True),
        ("gb200-nvl72", "blockwise", True),
        ("gb300-nvl72", "mxfp8", True),
    ],
)
def test_recipe_by_compute_capability(hardware, recipe, allowed):
    kw = dict(model="llama3-8b", hardware=hardware, gpus=8, tp=2, options={"fp8": "hybrid", "fp8_recipe": recipe})
    if allowed:
        assert api.explain(api.make_request(**kw))["options"]["fp8_recipe"] == recipe
    else:
        with pytest.raises(PlannerError, match=r"compute capability 9 .*allowed: delayed, tensorwise, blockwise$"):
            api.make_request(**kw)


def test_the_cli_refuses_mxfp8_on_hopper_in_one_line():
    line = one_line_error(
        run_cli(["explain", "--model", "llama3-8b", "--hardware", "dgx-h100-superpod", "--gpus", "8", "--fp8", "e4m3",
                 "--fp8-recipe", "mxfp8"])
    )  # fmt: skip
    assert "--fp8-recipe mxfp8 needs Blackwell" in line and line.endswith("allowed: delayed, tensorwise, blockwise")


def _step_s(hardware: str, recipe: str) -> float:
    req = api.make_request(
        model="llama3-8b", hardware=hardware, gpus=8, tp=2, options={"fp8": "hybrid", "fp8_recipe": recipe}
    )
    return api.explain(req, suggest=False)["estimate"]["iteration_s"]


def test_blockwise_casts_on_hopper_at_the_measured_rate():
    """Transformer Engine @d0067d0da6cb docs/examples/gemm_profiling/gemm_profiling.rst, H200 NVL, 5B config
    (M = 15,872), per-layer GEMM time in autocast: FP8Block 22.882 ms against the pre-quantized per-tensor FP8 GEMMs'
    16.785 ms; the 6.097 ms difference moves FP8_CAST_BYTES['blockwise'] = 2 + 2·(1 + 4/128) = 4.0625 bytes for each
    of the 2,483 M elements the 12 GEMMs quantise, at 4.8 TB/s: 2.1015 ms / 6.097 ms = 0.345 of HBM (0.34 in the
    preset, as delayed 0.94 and tensorwise 0.89 come from the same table). Before, blockwise casts ran at η_mem and
    blockwise was priced within 0.3 % of delayed scaling, where TE measures it 1.21 × slower on the GEMMs."""
    from planner.costs.compute import fp8_cast_bytes_per_element

    by_hand = 4.0625 * 2483e6 / 4.8e12 / (22.882e-3 - 16.785e-3)
    assert fp8_cast_bytes_per_element("blockwise", one_copy_serves_both=False) == 4.0625
    assert by_hand == pytest.approx(0.3447, abs=1e-4)
    for name in ("dgx-h100-superpod", "dgx-h200-superpod"):
        assert load_hardware(name).gpu.fp8_cast_hbm_frac["blockwise"] == pytest.approx(by_hand, abs=0.005)
    # TE's autocast order on Hopper, delayed 18.978 < current 20.285 < block 22.882 ms, holds for the whole step
    delayed, current, block = (_step_s("dgx-h100-superpod", r) for r in ("delayed", "tensorwise", "blockwise"))
    assert delayed < current < block


@pytest.mark.parametrize("hardware", ["dgx-b200-superpod", "gb200-nvl72", "gb300-nvl72"])
def test_blockwise_on_blackwell_is_priced_as_the_mxfp8_it_runs_as(hardware):
    """Transformer Engine >= 2.9 emulates FP8 block scaling on Blackwell with MXFP8 (pytorch/csrc/extensions/gemm.cpp:
    the block scales converted to MXFP8's, then the MXFP8 GEMM; quantization.py _compute_fp8_block_scaling_support
    allows capability >= 9.0): the MXFP8 GEMM ratio, the same 4.0625 cast bytes per element, MXFP8's measured cast
    rate. Before, its casts ran at η_mem and blockwise was priced faster than the MXFP8 it runs as (B200 24.24 s
    against 24.47 s a step)."""
    hw = load_hardware(hardware)
    assert hw.gpu.fp8_cast_hbm_frac["blockwise"] == hw.gpu.fp8_cast_hbm_frac["mxfp8"]
    assert _step_s(hardware, "blockwise") == pytest.approx(_step_s(hardware, "mxfp8"), rel=1e-12)


def _bridge(*overrides: str):
    args = ["explain", "--bridge-recipe", "llama3_8b_pretrain_config", "--gpus", "8", "--hardware", "dgx-h100-superpod"]
    for o in overrides:
        args += ["--bridge-override", o]
    return run_cli(args)


def test_a_bridge_config_meets_the_same_checks():
    """Bridge's finalize() runs Megatron-Core's TransformerConfig.__post_init__ (models/transformer_config.py,
    v0.6.0), after MixedPrecisionConfig copied its fields onto the model: delayed scaling with BF16 end layers and
    more end layers than a stage holds are refused there as on the command line; NVFP4 (MixedPrecisionConfig.fp4) is
    refused on this Hopper as Transformer Engine refuses it."""
    delayed = _bridge(
        "mixed_precision=bf16_with_fp8_delayed_scaling_mixed", "mixed_precision.first_last_layers_bf16=true"
    )
    assert "--first-last-layers-bf16 with --fp8-recipe delayed" in one_line_error(delayed)
    many = _bridge(
        "mixed_precision=bf16_with_fp8_current_scaling_mixed", "mixed_precision.num_layers_at_start_in_bf16=40"
    )
    assert "--num-layers-at-start-in-bf16 40: allowed: 0 to 32" in one_line_error(many)
    assert "needs NVFP4 tensor cores" in one_line_error(
        _bridge("mixed_precision=bf16_mixed", "mixed_precision.fp4=e2m1")
    )


def test_bridges_current_scaling_preset_keeps_one_bf16_layer_at_each_end():
    """bf16_with_fp8_current_scaling_mixed sets first_last_layers_bf16 with 1 and 1 layers (mixed_precision.py
    v0.2.1:286-288, v0.6.0:299-301); MixedPrecisionConfig's own defaults are 0 and 0, copied onto the model by every
    preset, so 0 and 0 keep no layer in BF16 and say nothing."""
    said = _bridge("mixed_precision=bf16_with_fp8_current_scaling_mixed")
    assert said.exit_code == 0 and "FP8-hybrid (BF16 first 1, last 1 layers)" in said.stdout
    none = _bridge(
        "mixed_precision=bf16_with_fp8_current_scaling_mixed",
        "mixed_precision.num_layers_at_start_in_bf16=0",
        "mixed_precision.num_layers_at_end_in_bf16=0",
    )
    assert none.exit_code == 0 and "BF16 first" not in none.stdout


def test_the_optimizers_cpu_offload_keeps_fp8_parameters_with_delayed_scaling_only():
    """arguments.py:1889 (validate_args): 'When `--fp8-param-gather` is enabled, the optimizer cpu offload must be
    used in conjunction with `--fp8-recipe delayed`.' The delayed line passes Megatron-LM (megatron_check)."""
    offload = "--optimizer-cpu-offload --use-precision-aware-optimizer --fp8-format hybrid --fp8-param-gather"
    with pytest.raises(PlannerError, match="--fp8-recipe tensorwise: Megatron-LM refuses it"):
        _import(offload + " --fp8-recipe tensorwise")
    assert any("the optimizer's CPU offload" in w for w in _import(offload).warnings)


def test_the_export_of_blockwise_on_blackwell_names_the_transformer_engine_it_needs():
    """Transformer Engine v2.3-v2.8 refuse FP8 block scaling on compute capability 10 at fp8_autocast
    (check_fp8_block_scaling_support: 'FP8 block scaled GEMM requires Hopper and CUDA >= 12.9.'); v2.9 on run it as
    MXFP8. No flag says the version: the Slurm script says it in its header, Hopper's says nothing."""
    args = ["export", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--fp8", "hybrid", "--fp8-recipe",
            "blockwise", "--distributed-optimizer", "--format", "slurm"]  # fmt: skip
    blackwell = run_cli([*args, "--hardware", "dgx-b200-superpod"])
    assert (
        blackwell.exit_code == 0
        and "# - Transformer Engine ≥ 2.9, which runs --fp8-recipe blockwise" in blackwell.stdout
    )
    assert "Transformer Engine ≥ 2.9" not in run_cli([*args, "--hardware", "dgx-h100-superpod"]).stdout
