"""Why Megatron-LM's own counts differ from megaplan's, each reason with its source line and the parameters or FLOPs
it moves: the reasons add up to the whole difference for every preset, so explain never shows two unexplained numbers.

Megatron-LM's prints (megatron_check @ d98e8a64 on each preset's exported flags, tp 1): GPT-OSS-120B "Total number of
parameters in billions: 78.57", "Total number of active parameters in billions: 4.52" (published 116.8B total, OpenAI
model card); DeepSeek-V3 682.53 / 49.06 (published 671B + MTP, 37B active: DeepSeek-V3 report)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from planner import api
from planner.costs.flops import Shape, megatron_flop_gaps, model_flops
from planner.models.params import megatron_count_gaps, param_counts
from planner.presets import load_model, preset_names
from planner.report.memory import megatron_estimate_view

MODELS = preset_names("models")


def _gap(gaps, words: str):
    (gap,) = [g for g in gaps if words in g.what]
    return gap


def render_plain(view, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(view)
    return " ".join(console.export_text().split())


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from([1, 2, 4, 8]))
def test_the_reasons_add_up_to_the_whole_parameter_difference(name, t):
    m = load_model(name)
    mine, theirs = param_counts(m), param_counts(m, padded_for_t=t, megatron=True)
    gaps = megatron_count_gaps(m, t)
    assert sum(g.total for g in gaps) == pytest.approx(mine.total - theirs.total, abs=0.5)
    assert sum(g.active for g in gaps) == pytest.approx(mine.active - theirs.active, abs=0.5)
    assert all(g.source.startswith("theoretical_memory_usage.py:") for g in gaps)


def test_gpt_oss_120b_the_quick_geglu_gate_is_the_38_billion():
    m = load_model("gpt-oss-120b")
    gaps = megatron_count_gaps(m, 1)
    L, E, k, h, f_e, a, g, d = 36, 128, 4, 2880, 2880, 64, 8, 64
    # line 21: --quick-geglu counts fc1 as h·f_e, not 2·h·f_e: each routed expert loses one h × f_e matrix and its
    # f_e bias: 36·128·2880·2881 = 38,233,866,240 (active: 4 experts, 1,194,808,320)
    gate = _gap(gaps, "gated only with --swiglu")
    assert gate.source.startswith("theoretical_memory_usage.py:21,")
    assert (
        (gate.total, gate.active) == (L * E * f_e * (h + 1), L * k * f_e * (h + 1)) == (38_233_866_240, 1_194_808_320)
    )
    # no biases: QKV (a + 2g)·d and the projection's h per layer, each expert's fc1 f_e and fc2 h
    bias = _gap(gaps, "no linear biases")
    assert bias.total == L * ((a + 2 * g) * d + h + E * (f_e + h)) == 26_830_080
    assert bias.active == L * ((a + 2 * g) * d + h + k * (f_e + h)) == 1_117_440
    # V = 201088 = 128·1571 needs no padding at t = 1; the 64 sinks of each of the 36 layers
    sinks = _gap(gaps, "sinks")
    assert len(gaps) == 3  # V = 201088 = 128·1571: nothing padded at t = 1
    assert sinks.total == L * a == 2304
    assert round(param_counts(m, padded_for_t=1, megatron=True).total / 1e9, 2) == 78.57  # Megatron's print
    assert round(param_counts(m).total / 1e9, 1) == 116.8  # the model card's


def test_deepseek_v3_mtp_experts_counted_active_are_megatrons_extra_11_billion():
    m = load_model("deepseek-v3")
    gaps = megatron_count_gaps(m, 8)
    h, E, k, f_e = 7168, 256, 8, 2048
    # lines 179-183: the MTP depth's MoE layer counted active with all 256 experts: (256 − 8)·3·h·f_e more
    active = _gap(gaps, "whole MTP block")
    assert active.total == 0 and active.active == -(E - k) * 3 * h * f_e == -10_921_967_616
    # lines 170-173: the depth's 2h·h projection and three RMSNorms (ν = 1) not counted
    extras = _gap(gaps, "2h·h projection")
    assert extras.total == extras.active == 2 * h * h + 3 * h == 102_781_952
    # line 95: V = 129280 padded to a multiple of 128·8: 130048, 768 more rows in each of the two tables
    padding = _gap(gaps, "padded")
    assert padding.total == -768 * h * 2 == -11_010_048
    assert round(param_counts(m, padded_for_t=1, megatron=True).active / 1e9, 2) == 49.06  # Megatron's print (tp 1)


def test_dense_presets_without_biases_agree_but_for_padding():
    for name in ("nemotron-4-15b", "nemotron-4-340b", "mixtral-8x22b"):
        assert megatron_count_gaps(load_model(name), 8) == []  # V = 256000 = 128·8·250; 32768 = 128·8·32
    (pad,) = megatron_count_gaps(load_model("llama3-8b"), 8)
    assert pad.total == -(129024 - 128256) * 4096 * 2  # 128256 padded to 128·8·126 = 129024, untied
    (pad,) = megatron_count_gaps(load_model("grok1-314b"), 8)  # the same tokenizer, h 6144
    assert pad.total == -(129024 - 128256) * 6144 * 2


def test_flop_reasons_add_up_and_name_megatrons_lines():
    for name in MODELS:
        m = load_model(name)
        B, s, V = 2, 4096, m.vocab_size
        gaps = megatron_flop_gaps(B, s, V, m)
        mine = model_flops(B, s, V, Shape.of(m))
        theirs = model_flops(B, s, V, Shape.of(m, megatron=True), attention_frac=0.5)
        assert sum(g.flops for g in gaps) == pytest.approx(mine - theirs, rel=1e-12, abs=1.0)
        assert all(g.source.startswith("training.py:") for g in gaps)


def test_flop_reasons_by_hand():
    # llama3-8b, one sequence of 8192: the core's score and context GEMMs, 2·2·s²·a·d forward, × 3 with the
    # backward, over 32 layers; Megatron halves it (training.py:1168)
    m = load_model("llama3-8b")
    s, a, d, L = 8192, 32, 128, 32
    (causal,) = megatron_flop_gaps(1, s, m.vocab_size, m)
    assert causal.flops == 3 * 2 * s * s * a * d * L
    # gpt-oss-120b: --quick-geglu counted as two GEMMs (training.py:1070): each of the k = 4 experts' gate GEMM,
    # 2·h·f_e a token, × 3, over 36 layers
    g = load_model("gpt-oss-120b")
    gate = _gap(megatron_flop_gaps(1, 4096, 201088, g), "gated")
    assert gate.flops == 3 * 2 * 4096 * 2880 * 2880 * 4 * 36


def test_explain_names_each_reason_with_its_numbers():
    req = api.make_request(model="gpt-oss-120b", gpus=64, ep=8, hardware="dgx-h100-superpod")
    text = render_plain(megatron_estimate_view(api.explain(req, suggest=False)), width=300)
    assert "Total number of parameters in billions: 78.57" in text
    assert "38.2 B fewer (1.19 B fewer active)" in text and "theoretical_memory_usage.py:21" in text
    assert "training.py:1070" in text and "training.py:1163-1170" in text
    ds = api.make_request(
        model="deepseek-v3", gpus=256, tp=8, ep=32, sequence_parallel=True, hardware="dgx-h100-superpod"
    )
    text = render_plain(megatron_estimate_view(api.explain(ds, suggest=False)), width=300)
    assert "Total number of active parameters in billions: 49.07" in text
    assert "10.9 B more active" in text and "theoretical_memory_usage.py:179-183" in text
    # multi-latent attention: Megatron splits all of it over t; TE keeps per layer h·r_q + r_q + h·(r_kv + d_r) + r_kv
    # = 7168·1536 + 1536 + 7168·576 + 512 = 15,140,864 whole on every rank: (1 − 1/8) of it over 61 layers + 1 MTP
    assert (
        f"{62 * 7 / 8 * 15_140_864 / 1e9:.3g} B fewer parameters on the first stage"
        == "0.821 B fewer parameters on the first stage"
    )
    assert "0.821 B fewer parameters on the first stage" in text and "multi_latent_attention.py:526-527" in text
