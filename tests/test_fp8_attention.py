"""MXFP8 attention (fp8_dot_product_attention under the MXFP8 recipe): the FP8 kernel's time from the
16-bit law at cuDNN's measured ratios, its backward over the whole causal square (compute.fp8_attention_time_s)."""

from __future__ import annotations

import pytest

from planner.costs import compute
from planner.fidelity.moe_runs import fp8_attention, moe_reference_rows
from planner.presets import load_hardware


def test_fp8_attention_time_by_hand():
    # forward 0.391 ms × 0.834 = 0.326094 ms; the window's backward 0.465 ms is replaced by the whole
    # causal square's 1.198 ms × 1.089 = 1.304622 ms
    fwd, bwd = compute.fp8_attention_time_s(0.391e-3, 0.465e-3, 1.198e-3, fwd_ratio=0.834, bwd_ratio=1.089)
    assert float(fwd) == pytest.approx(0.326094e-3, rel=1e-9)
    assert float(bwd) == pytest.approx(1.304622e-3, rel=1e-9)


def test_gb200_ratios_are_cudnn_llama_rows():
    # cuDNN 9.22 GB200 llama3.1 table, causal s 4096: mxfp8 / bfloat16 = 0.326/0.391 and 1.305/1.198
    kernel = load_hardware("gb200-nvl72").attention
    assert kernel.mxfp8_fwd_time_ratio == pytest.approx(0.326 / 0.391, abs=5e-4)
    assert kernel.mxfp8_bwd_time_ratio == pytest.approx(1.305 / 1.198, abs=5e-4)


def test_b200_carries_gb200s_ratios_as_its_16_bit_law_does():
    """No B200 MXFP8 attention table is published; its 16-bit law is GB200's fit (the same sm100 die and kernels),
    and so are its MXFP8 ratios (it priced MXFP8 attention at the 16-bit law before)."""
    b200, gb200 = (load_hardware(n).attention for n in ("dgx-b200-superpod", "gb200-nvl72"))
    assert (b200.mxfp8_fwd_time_ratio, b200.mxfp8_bwd_time_ratio) == (0.834, 1.089)
    assert (b200.fwd_efficiency, b200.bwd_efficiency) == (gb200.fwd_efficiency, gb200.bwd_efficiency)


def test_gb300_ratios_are_cudnn_llama_rows():
    # cuDNN 9.22 GB300 llama3.1 table, causal s 4096: mxfp8 / bfloat16 = 0.242/0.323 and 1.203/1.101
    kernel = load_hardware("gb300-nvl72").attention
    assert kernel.mxfp8_fwd_time_ratio == pytest.approx(0.242 / 0.323, abs=5e-4)
    assert kernel.mxfp8_bwd_time_ratio == pytest.approx(1.203 / 1.101, abs=5e-4)


@pytest.mark.parametrize(("preset", "measured_s"), [("gb200-nvl72", 2.080e-3), ("gb300-nvl72", 1.871e-3)])
def test_window_backward_in_mxfp8_matches_cudnn_gpt_oss_table(preset, measured_s):
    # out of sample: cuDNN's GPT-OSS tables (b 2, 128 heads, d_h 64, window 128, s 4096) time the MXFP8
    # backward at 2.080 ms on GB200 (BF16: 0.465 ms) and 1.871 ms on GB300 (BF16: 0.442 ms; gpt_oss/gb300
    # gpt_oss_20260424_100022.csv); the law's causal-square backward at d_h 64 times the GPU's llama ratio
    # must land within 25 % (the window law's own tolerance, test_attention_kernels)
    hw = load_hardware(preset)
    k = hw.attention
    peak = hw.gpu.peak_flops_per_s("bf16")
    shape = dict(causal=True, kernel=k, peak_flops_per_s=peak)
    win = compute.flash_attention_time_s(256, 4096, 4096, 64, 64, window=128, **shape)
    square = compute.flash_attention_time_s(256, 4096, 4096, 64, 64, **shape)
    _, bwd = compute.fp8_attention_time_s(
        win[0], win[1], square[1], fwd_ratio=k.mxfp8_fwd_time_ratio, bwd_ratio=k.mxfp8_bwd_time_ratio
    )
    assert float(bwd) == pytest.approx(measured_s, rel=0.25)
    assert float(bwd) > 3 * float(win[1])  # the FP8 backward does not skip the window's masked tiles


def test_fp8_attention_rows_follow_their_recipes():
    rows = {r["run_id"]: r for r in moe_reference_rows()}
    assert fp8_attention(rows["MB-26.06-GB200-GPTOSS120B-64"])
    assert fp8_attention(rows["MB-26.08-GB200-QWEN3-235B-256"])
    assert not fp8_attention(rows["MB-26.08-GB200-DSV3-256"])  # DeepSeek-V3's GB200 recipe leaves it off
    assert not fp8_attention(rows["MB-26.04-GB200-GPTOSS120B-64"])  # BF16, before 26.06
    # DeepSeek-V3's GB300 MXFP8 recipe turns it on (v0.5.0 deepseek_workload_base_configs.py:74,
    # v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py:144), from 26.06 only
    assert fp8_attention(rows["MB-26.06-GB300-DSV3-256"]) and fp8_attention(rows["MB-26.08-GB300-DSV3-256"])
    assert not fp8_attention(rows["MB-26.04.01-GB300-DSV3-256"])


def test_explain_names_the_fp8_attention_it_prices():
    from planner.costs.layer_time import layer_time_formulas
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.validate import prepare

    runs = {r.id: r for r in load_moe_runs()}
    fp8 = prepare(runs["MB-26.06-GB200-GPTOSS120B-64"])
    bf16 = prepare(runs["MB-26.04-GB200-GPTOSS120B-64"])
    assert "in MXFP8 × 1.089 over the whole causal square" in layer_time_formulas(fp8.ctx, fp8.plan)["backward"].text
    assert "MXFP8" not in layer_time_formulas(bf16.ctx, bf16.plan)["backward"].text


def test_mxfp8_output_layer_rows_follow_their_recipes():
    """fp8_output_proj: DeepSeek-V3 and GPT-OSS-120B MXFP8 recipes on GB200/GB300 from 26.06 (Bridge v0.5.0
    deepseek_llm_pretrain.py:82, 122; gpt_oss_llm_pretrain.py:426, 458); never Qwen3; none before 26.06."""
    from planner.fidelity.moe_runs import fp8_output_layer

    rows = {r["run_id"]: r for r in moe_reference_rows()}
    for rid in ("MB-26.06-GB200-DSV3-256", "MB-26.08-GB300-DSV3-256", "MB-26.06-GB200-GPTOSS120B-64"):
        assert fp8_output_layer(rows[rid]), rid
    for rid in ("MB-26.04.01-GB300-DSV3-256", "MB-26.08-GB200-QWEN3-235B-256", "MB-26.04-GB200-GPTOSS120B-64"):
        assert not fp8_output_layer(rows[rid]), rid
