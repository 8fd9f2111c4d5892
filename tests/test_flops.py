"""FLOP counts against the papers' closed forms and Korthikanti et al. 2022 Table 5."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs.flops import (
    Shape,
    korthikanti_eq8_flops,
    layer_forward_flops,
    layer_gemms,
    logits_gemm,
    model_flops,
    recompute_flops,
)

PEAK_A100 = 312e12  # Narayanan et al. 2021 §5: A100 16-bit tensor-core peak


# (name, L, h, a) of the GPT shapes in Korthikanti et al. 2022 Table 3 / Narayanan et al. 2021 Table 1
GPT_SHAPES = [
    ("22B", 48, 6144, 64),
    ("175B", 96, 12288, 96),
    ("530B", 105, 20480, 128),
    ("1T", 128, 25600, 160),
    ("1.7B", 24, 2304, 24),
]
V, S = 51200, 2048


def gpt_model_flops(B, s, L, h, a, **kw):
    # GPT shapes: g = a, d = h/a, f = 4h, no gating
    return model_flops(B, s, V, Shape(L, h, a, a, h // a, 4 * h, gated=False), **kw)


def gpt_recompute_flops(B, s, L, h, a, code):
    return float(recompute_flops(B, s, Shape(L, h, a, a, h // a, 4 * h, gated=False), recompute=np.array(code)))


def test_layer_gemms_gpt_shape_is_24bsh2_plus_4bs2h():
    # Narayanan et al. 2021, Appendix: forward per layer QKV 6Bsh², scores 2Bs²h, attention over
    # values 2Bs²h, projection 2Bsh², MLP 16Bsh² (fc1 8Bsh², fc2 8Bsh²); total 24Bsh² + 4Bs²h
    b, s, h, a = 2, 2048, 12288, 96
    g = layer_gemms(b, s, h, a, a, h // a, 4 * h, 1, gated=False)
    expected = {
        "qkv": 6 * b * s * h**2,
        "attention_scores": 2 * b * s**2 * h,
        "attention_context": 2 * b * s**2 * h,
        "projection": 2 * b * s * h**2,
        "fc1": 8 * b * s * h**2,
        "fc2": 8 * b * s * h**2,
    }
    assert {k: float(v.flops) for k, v in g.items()} == pytest.approx(expected, rel=1e-12)
    assert float(layer_forward_flops(g)) == pytest.approx(24 * b * s * h**2 + 4 * b * s**2 * h, rel=1e-12)


def test_layer_gemms_split_over_tensor_parallel_ranks():
    # Megatron's TP splits every GEMM of a layer over t ranks: (24bsh² + 4bs²h)/t per GPU
    b, s, h, a, t = 1, 2048, 12288, 96, 8
    g = layer_gemms(b, s, h, a, a, h // a, 4 * h, t, gated=False)
    assert float(layer_forward_flops(g)) == pytest.approx((24 * b * s * h**2 + 4 * b * s**2 * h) / t, rel=1e-12)
    # per-GPU GEMM shapes: QKV is (b·s) × h × 3h/t, fc2 is (b·s) × (4h/t) × h
    assert (float(g["qkv"].M), float(g["qkv"].N), float(g["qkv"].K)) == (b * s, 3 * h / t, h)
    assert (float(g["fc2"].M), float(g["fc2"].N), float(g["fc2"].K)) == (b * s, h, 4 * h / t)


def test_layer_gemms_gqa_and_swiglu():
    # Llama-3-8B layer, T = b·s tokens: QKV 2·T·h·(a + 2g)·d, projection 2·T·a·d·h,
    # SwiGLU fc1 (gate + up) 2·T·h·2f, fc2 2·T·f·h
    b, s, h, a, g, d, f = 1, 8192, 4096, 32, 8, 128, 14336
    T = b * s
    gm = layer_gemms(b, s, h, a, g, d, f, 1, gated=True)
    assert float(gm["qkv"].flops) == 2 * T * h * (a + 2 * g) * d
    assert float(gm["fc1"].flops) == 2 * T * h * 2 * f
    assert float(gm["fc2"].flops) == 2 * T * f * h
    assert float(gm["attention_scores"].flops) == 2 * b * a * s * s * d


def test_logits_gemm():
    # output layer: 2·b·s·h·V/t forward FLOPs (Narayanan et al. 2021 App.: 2BshV)
    assert float(logits_gemm(4, 2048, 12288, 51200, 8).flops) == 2 * 4 * 2048 * 12288 * 51200 / 8


@pytest.mark.parametrize("name, L, h, a", GPT_SHAPES)
@pytest.mark.parametrize("B", [1, 64, 1536])
def test_model_flops_is_korthikanti_eq7(name, L, h, a, B):
    # Korthikanti et al. 2022, Appendix A, Eq. (7): model FLOPs = 72·B·L·s·h²·(1 + s/(6h) + V/(12hL))
    eq7 = 72 * B * L * S * h**2 * (1 + S / (6 * h) + V / (12 * h * L))
    assert gpt_model_flops(B, S, L, h, a) == pytest.approx(eq7, rel=1e-3)


@pytest.mark.parametrize("name, L, h, a", GPT_SHAPES)
def test_full_recompute_flops_is_narayanan_eq3(name, L, h, a):
    # Narayanan et al. 2021 Eq. (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full recomputation
    B = 1536
    eq3 = 96 * B * S * L * h**2 * (1 + S / (6 * h) + V / (16 * L * h))
    total = gpt_model_flops(B, S, L, h, a) + gpt_recompute_flops(B, S, L, h, a, 2)
    assert total == pytest.approx(eq3, rel=1e-3)


@pytest.mark.parametrize("name, L, h, a", GPT_SHAPES)
def test_megatron_logged_flops_halve_the_attention_scores(name, L, h, a):
    # Megatron-LM num_floating_point_operations (megatron/training/training.py), causal mask:
    # 72·B·s·L·h²·(1 + s/(12h) + V/(12hL))
    B = 512
    logged = 72 * B * S * L * h**2 * (1 + S / (12 * h) + V / (12 * h * L))
    assert gpt_model_flops(B, S, L, h, a, attention_frac=0.5) == pytest.approx(logged, rel=1e-3)


def test_megatron_logged_flops_gqa_swiglu():
    # Megatron-LM transformer_flops, dense model with d = h/a (megatron/training/training.py):
    # F = 6·B·s·L·h²·[e·f/h + 2(1 + g/a) + s/h] + 6·B·s·h·V, e = 3 with SwiGLU
    B, s, L, h, a, g, f, Vp = 128, 8192, 32, 4096, 32, 8, 14336, 128256
    e = 3
    logged = 6 * B * s * L * h**2 * (e * f / h + 2 * (1 + g / a) + s / h) + 6 * B * s * h * Vp
    got = model_flops(B, s, Vp, Shape(L, h, a, g, h // a, f, gated=True), attention_frac=0.5)
    assert got == pytest.approx(logged, rel=1e-9)


@pytest.mark.parametrize("name, L, h, a", GPT_SHAPES)
def test_selective_recompute_flops_honest_count(name, L, h, a):
    # Selective recompute re-runs QKᵀ and softmax·V once: 4·B·s²·h per layer (Korthikanti et al.
    # 2022 §5), giving 72·B·L·s·h²·(1 + 2s/(9h) + V/(12hL)) (not Eq. 8's s/(3h); docs/cost-model.md §3)
    B = 64
    honest = 72 * B * L * S * h**2 * (1 + 2 * S / (9 * h) + V / (12 * h * L))
    total = gpt_model_flops(B, S, L, h, a) + gpt_recompute_flops(B, S, L, h, a, 1)
    assert total == pytest.approx(honest, rel=1e-3)
    assert gpt_recompute_flops(B, S, L, h, a, 1) == pytest.approx(L * 4 * B * S**2 * h, rel=1e-12)
    assert gpt_recompute_flops(B, S, L, h, a, 0) == 0.0


def test_recompute_flops_order_none_selective_full():
    L, h, a = 96, 12288, 96
    none, sel, full = (gpt_recompute_flops(8, S, L, h, a, c) for c in (0, 1, 2))
    assert none < sel < full
    # full recompute is one more forward of every layer: L·(24Bsh² + 4Bs²h)
    assert full == pytest.approx(L * (24 * 8 * S * h**2 + 4 * 8 * S**2 * h), rel=1e-12)


def test_recompute_flops_vectorised_over_codes():
    L, h, a = 24, 2304, 24
    got = recompute_flops(4, S, Shape(L, h, a, a, h // a, 4 * h, gated=False), recompute=np.array([0, 1, 2, 1]))
    want = [0.0, L * 4 * 4 * S**2 * h, L * (24 * 4 * S * h**2 + 4 * 4 * S**2 * h), L * 4 * 4 * S**2 * h]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_eq8_is_as_printed():
    # Korthikanti et al. 2022 Eq. (8): 72·B·L·s·h²·(1 + s/(3h) + V/(12hL))
    B, L, h = 64, 96, 12288
    assert korthikanti_eq8_flops(B, S, L, h, V) == pytest.approx(
        72 * B * L * S * h**2 * (1 + S / (3 * h) + V / (12 * h * L)), rel=1e-12
    )


# Korthikanti et al. 2022 Table 5 (selective recompute + SP rows): model, B, GPUs, iteration time,
# published MFU and HFU (%); Korthikanti et al. 2022 Table 5. The 22B row's 1.10 s is rounded, hence ±0.3 points.
TABLE_5 = [
    ("22B", 48, 6144, 64, 4, 8, 1.10, 41.5, 43.7, 0.3),
    ("175B", 96, 12288, 96, 64, 64, 13.75, 51.4, 52.8, 0.1),
    ("530B", 105, 20480, 128, 280, 280, 37.83, 56.0, 57.0, 0.15),
    ("1T", 128, 25600, 160, 512, 512, 71.49, 56.3, 57.0, 0.1),
]


@pytest.mark.parametrize("name, L, h, a, B, gpus, seconds, mfu, hfu, tol", TABLE_5)
def test_korthikanti_table_5_mfu_and_hfu(name, L, h, a, B, gpus, seconds, mfu, hfu, tol):
    # MFU = Eq. 7 / (time · GPUs · 312e12); HFU = Eq. 8 / (time · GPUs · 312e12)  (K22 §6.3)
    per_gpu_peak = seconds * gpus * PEAK_A100
    assert 100 * gpt_model_flops(B, S, L, h, a) / per_gpu_peak == pytest.approx(mfu, abs=tol)
    assert 100 * korthikanti_eq8_flops(B, S, L, h, V) / per_gpu_peak == pytest.approx(hfu, abs=tol)


@pytest.mark.parametrize("L, h, a, published", [(96, 12288, 96, 2.7), (105, 20480, 128, 1.6)])
def test_eq8_selective_overhead_gpt3_and_mt_nlg(L, h, a, published):
    # Korthikanti et al. 2022 §5: selective recomputation's FLOP overhead is 2.7 % for GPT-3 and
    # 1.6 % for MT-NLG (Eq. 8 over Eq. 7)
    overhead = korthikanti_eq8_flops(1, S, L, h, V) / gpt_model_flops(1, S, L, h, a) - 1
    assert round(100 * overhead, 1) == published


@pytest.mark.parametrize("L, h, a, published", [(96, 12288, 96, 1.8), (48, 6144, 64, 3.4)])
def test_eq8_overcounts_the_honest_selective_count(L, h, a, published):
    # the honest count is 1.8 % below Eq. 8 for 175B and 3.4 % for 22B
    honest = gpt_model_flops(1, S, L, h, a) + gpt_recompute_flops(1, S, L, h, a, 1)
    assert round(100 * (korthikanti_eq8_flops(1, S, L, h, V) / honest - 1), 1) == published


def test_causal_mfu_halves_the_attention_core_by_hand():
    """MFU as people compare it (issue 18): Megatron-LM and Megatron-Bridge count causal attention as
    half the s² pairs. By hand for GPT-3 175B (L 96, h 12288, B 1536, s 2048): the cores QKᵀ and A·V are
    2·B·s²·h FLOPs each forward, ×3 with the backward, so halving them removes
    ½ · 3 · 4·B·s²·h · L = 6·96·1536·2048²·12288 = 4.5599e16 FLOPs per iteration."""
    from planner.api import explain, make_request

    req = make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, sequence_parallel=True, distributed_optimizer=True)
    est = explain(req)["estimate"]
    full = est["mfu"] * est["iteration_s"] * 1024 * 312e12
    causal = est["mfu_causal"] * est["iteration_s"] * 1024 * 312e12
    assert full - causal == pytest.approx(6 * 96 * 1536 * 2048**2 * 12288, rel=1e-9)
    assert full - causal == pytest.approx(4.5599e16, rel=1e-4)
    assert est["mfu_peak"] == "bf16"
