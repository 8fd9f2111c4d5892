"""Attention in per-tensor FP8 on Hopper (fp8_dot_product_attention under the delayed or current-scaling recipe).

Transformer Engine runs those recipes' attention as cuDNN's per-tensor FP8 kernel (dot_product_attention.py @ d0067d0,
its recipe table). cuDNN's own H200 table (NVIDIA/cudnn-frontend @df73764 benchmark/sdpa_benchmark_training/results/
h200_919_only_cudnn/llama3.1_20260227_034703.csv, cuDNN 9.19.1, causal, 64/8 heads, d_h 128) times the FP8 forward at
0.66-0.69 of the 16-bit one and the backward at 0.94 (s 2k) to 1.57 (s 32k): FP8 attention is slower from s 8k on.
It was priced at the 16-bit law before (only MXFP8 had ratios)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.api import make_request
from planner.costs import blocks, compute
from planner.presets import load_hardware

FWD = {2048: 0.690, 4096: 0.692, 8192: 0.668, 16384: 0.667, 32768: 0.660}
BWD = {2048: 0.942, 4096: 1.006, 8192: 1.258, 16384: 1.548, 32768: 1.569}


def test_the_preset_tables_are_cudnn_h200_times():
    """fp8 over bfloat16 milliseconds, from the table: s 4096 forward 0.322 / 0.465 = 0.692, backward 1.459 / 1.450
    = 1.006; s 32768 forward 16.884 / 25.566 = 0.660, backward 118.729 / 75.688 = 1.569."""
    for name in ("dgx-h100-superpod", "dgx-h200-superpod"):
        kernel = load_hardware(name).attention
        assert kernel.fp8_fwd_time_ratio_by_seq == FWD
        assert kernel.fp8_bwd_time_ratio_by_seq == BWD
    assert round(0.322 / 0.465, 3) == FWD[4096] and round(1.459 / 1.450, 3) == BWD[4096]
    assert round(16.884 / 25.566, 3) == FWD[32768] and round(118.729 / 75.688, 3) == BWD[32768]


def test_interpolation_in_log_s_by_hand():
    """Between 4,096 and 8,192 at s = 2^12.5 = 5,793: halfway in log₂ s, (1.006 + 1.258)/2 = 1.132; at s = 6,144
    (log₂ = 12.585): 1.006 + 0.585 × 0.252 = 1.1534; held at the ends: 1,024 → 0.942, 131,072 → 1.569."""
    assert float(compute.time_ratio_at_seq(2**12.5, BWD)) == pytest.approx(1.132, abs=1e-12)
    assert float(compute.time_ratio_at_seq(6144, BWD)) == pytest.approx(1.006 + np.log2(1.5) * 0.252, abs=1e-12)
    assert float(compute.time_ratio_at_seq(1024, BWD)) == 0.942
    assert float(compute.time_ratio_at_seq(131072, BWD)) == 1.569
    grid = compute.time_ratio_at_seq(np.array([2048, 4096, 32768]), FWD)
    assert grid.tolist() == [0.690, 0.692, 0.660]


@given(st.floats(min_value=512, max_value=1e6))
def test_interpolation_stays_within_the_measured_ratios(s):
    r = float(compute.time_ratio_at_seq(s, BWD))
    assert min(BWD.values()) <= r <= max(BWD.values())


def _ctx(recipe: str, dpa: bool, hardware: str = "dgx-h100-superpod", seq: int = 8192):
    return make_request(
        model="llama3-70b", hardware=hardware, gpus=64, tp=4, pp=4, micro_batch=1, global_batch=128, seq_len=seq,
        sequence_parallel=True, options={"fp8": "hybrid", "fp8_recipe": recipe, "fp8_dot_product_attention": dpa},
    ).ctx  # fmt: skip


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_a_causal_call_runs_at_the_tables_ratios(recipe):
    """One causal call of 16 heads at s 8,192: the forward × 0.668, the backward × 1.258 of the 16-bit law's."""
    bf16 = blocks._flash(_ctx(recipe, False), 16, 8192, 8192, 128, 128, causal=True)
    fp8 = blocks._flash(_ctx(recipe, True), 16, 8192, 8192, 128, 128, causal=True)
    assert float(fp8[0] / bf16[0]) == pytest.approx(0.668, rel=1e-12)
    assert float(fp8[1] / bf16[1]) == pytest.approx(1.258, rel=1e-12)


def test_blockwise_and_a_gpu_without_a_table_stay_16_bit():
    """Blockwise scaling has no FP8 attention row in Transformer Engine's recipe table; the A100 has no FP8."""
    assert blocks.fp8_attention_ratios(_ctx("blockwise", True)) is None
    assert blocks.fp8_attention_ratios(_ctx("tensorwise", False)) is None
    ratios = blocks.fp8_attention_ratios(_ctx("tensorwise", True, seq=4096))
    assert (float(ratios[0]), float(ratios[1])) == (0.692, 1.006)
