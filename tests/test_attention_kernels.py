"""The attention-kernel law against the published kernel tables it is fitted to
(presets/reference/attention_kernels.csv), and its shape: efficiency rises with the sequence length."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs.compute import flash_attention_efficiency, flash_attention_flops, flash_attention_time_s
from planner.fidelity.kernels import fit_generation, head_dim_exponents, kernel_errors, kernel_rows
from planner.presets import load_hardware

PRESET_OF = {  # one preset per compute capability whose attention section the tables fitted
    "8.0": "dgx-a100-superpod",
    "9.0": "dgx-h100-superpod",
    "10.0": "gb200-nvl72",
    "10.3": "gb300-nvl72",
}
PARAMS = [
    "fwd_efficiency",
    "fwd_row_overhead",
    "fwd_diagonal_overhead",
    "fwd_head_dim_exponent",
    "fwd_mla_factor",
    "bwd_efficiency",
    "bwd_row_overhead",
    "bwd_diagonal_overhead",
    "bwd_head_dim_exponent",
    "bwd_mla_factor",
]


def preset_params(cc: str) -> dict[str, float]:
    att = load_hardware(PRESET_OF[cc]).attention
    return {k: getattr(att, k) for k in PARAMS}


@pytest.mark.parametrize("cc", sorted(PRESET_OF))
def test_attention_law_within_ten_percent_of_every_cited_kernel_row(cc):
    rows = kernel_errors(cc, preset_params(cc))
    assert len(rows) >= 20  # A100 23 (FA2, Dao 2023 Fig. 4); H200 20; GB200 30; GB300 30 (cudnn-frontend)
    worst = max(rows, key=lambda re: abs(re[1]))
    assert abs(worst[1]) <= 0.10, (worst[0], worst[1])


def test_a100_flashattention2_row_by_hand():
    # Dao 2023 Fig. 4: FA2 forward+backward, A100, causal, head dim 128, s = 16384, 16k tokens: 189 TFLOP/s.
    # By hand: batch 1 × 16 heads; forward 4·16·s²·128/2 FLOPs, backward 2.5×; each pass at its own η.
    att = load_hardware("dgx-a100-superpod").attention
    s, bh, d = 16384, 16, 128
    f_fwd = 4 * bh * s * s * d / 2
    eta_f = att.fwd_efficiency * s / (s + 2 * att.fwd_row_overhead + att.fwd_diagonal_overhead)
    eta_b = att.bwd_efficiency * s / (s + 2 * att.bwd_row_overhead + att.bwd_diagonal_overhead)
    t = f_fwd / (312e12 * eta_f) + 2.5 * f_fwd / (312e12 * eta_b)
    tflops = 3.5 * f_fwd / t / 1e12
    assert tflops == pytest.approx(189, rel=0.10)
    fwd, bwd = flash_attention_time_s(bh, s, s, d, d, causal=True, kernel=att, peak_flops_per_s=312e12)
    assert float(fwd + bwd) == pytest.approx(t, rel=1e-12)


def test_preset_attention_sections_are_the_fit_of_the_tables():
    # the numbers in gb200-nvl72.yaml are what planner.fidelity.kernels derives from the repository's CSV
    fitted = fit_generation("10.0")
    ours = preset_params("10.0")
    for k, v in fitted.items():
        assert ours[k] == pytest.approx(v, rel=1e-3, abs=0.05), k


def test_hopper_head_width_exponents_from_the_fa3_paper_rows():
    # Shah et al. 2024 Fig. 5 (cuDNN 9.1, H100), non-causal forward at 16k: 413 (hd 64) / 595 (hd 128)
    # TFLOP/s -> α = ln(413/595)/ln(1/2) = 0.527; the fit averages every pair at s ≥ 4k
    alpha = head_dim_exponents()
    assert np.log(413 / 595) / np.log(0.5) == pytest.approx(0.527, abs=0.001)
    assert 0.45 <= alpha["fwd"] <= 0.6 and 0.2 <= alpha["bwd"] <= 0.3
    assert load_hardware("dgx-h100-superpod").attention.fwd_head_dim_exponent == pytest.approx(alpha["fwd"], abs=1e-3)


def test_every_row_names_its_source():
    for row in kernel_rows():
        assert row.source and ("arXiv" in row.source or "@" in row.source)


@settings(max_examples=40, deadline=None)
@given(
    cc=st.sampled_from(sorted(PRESET_OF)),
    s=st.integers(256, 65536),
    causal=st.booleans(),
    d=st.sampled_from([64, 128, 256]),
    p=st.sampled_from(["fwd", "bwd"]),
)
def test_efficiency_rises_with_sequence_length_and_stays_below_its_ceiling(cc, s, causal, d, p):
    q = preset_params(cc)
    kw = dict(
        causal=causal,
        eta_max=q[f"{p}_efficiency"],
        row_overhead=q[f"{p}_row_overhead"],
        diagonal_overhead=q[f"{p}_diagonal_overhead"],
        head_dim_exponent=q[f"{p}_head_dim_exponent"],
    )
    short, long = flash_attention_efficiency(s, d, d, **kw), flash_attention_efficiency(2 * s, d, d, **kw)
    assert 0 < float(short) < float(long) < q[f"{p}_efficiency"]


def test_flops_convention_backward_is_two_and_a_half_forwards():
    f, b = flash_attention_flops(8, 4096, 4096, 128, 128, causal=True)
    assert float(f) == 4 * 8 * 4096 * 4096 * 128 / 2  # 4·bh·s²·d, halved for the causal mask
    assert float(b) == 2.5 * float(f)
    f_mla, b_mla = flash_attention_flops(1, 1024, 1024, 192, 128, causal=False)
    assert float(b_mla) / float(f_mla) == pytest.approx((3 * 192 + 2 * 128) / (192 + 128))  # 2.6 for MLA


def test_implied_attention_ratio_by_hand():
    # a 10 s predicted step of which 4 s attention, published 12 s: the attention took 4 + 2 = 6 s, 1.5x the law
    from planner.fidelity.kernels import implied_attention_ratio

    assert implied_attention_ratio(10.0, 12.0, 4.0) == pytest.approx(1.5)
    assert implied_attention_ratio(10.0, 10.0, 4.0) == pytest.approx(1.0)  # as predicted: the law's speed
    assert implied_attention_ratio(10.0, 9.0, 4.0) == pytest.approx(0.75)  # faster than the law


def test_law_ratio_of_flashattention2_on_h100_by_hand():
    # FA3 paper Fig. 5: FlashAttention-2, H100 at 1830 MHz (peak 989.4 x 1830/1980 = 914.4), causal forward,
    # d_h 128, s 16384, 16 heads: 335 TFLOP/s. The H100 law: eta = 0.7183 * 16384 / (16384 + 2*289.1 + 333.4)
    # = 0.7183 * 0.94729 = 0.68044; law time / measured time = 335 / (914.4 * 0.68044) = 335 / 622.2, so the
    # kernel took 622.2 / 335 = 1.857x the law's time
    from planner.fidelity.kernels import law_ratios
    from planner.presets import load_hardware

    params = load_hardware("dgx-h100-superpod").attention.model_dump()
    got = [
        q
        for row, q in law_ratios("H100-SXM5-80GB", params, "FlashAttention-2")
        if row.pass_ == "fwd" and row.causal and row.s == 16384 and row.d_qk == 128
    ]
    assert got == [pytest.approx(1.857, abs=0.002)]


def test_release_time_ratio_of_b200_cudnn_9131_at_8k_by_hand():
    # MLPerf v5.1's B200 image installs cuDNN 9.13.1.26, the release of B200's cudnn-frontend table
    # (@0b1577c8c834): causal, b 1, 128 heads, d 128, s 8192, forward 1384.2 and backward 994.9 TFLOP/s.
    # Forward FLOPs 4·128·8192²·128/2 = 2.1990e12 -> 1.5887 ms; backward 2.5x -> 5.4976e12 / 994.9e12 = 5.5258 ms.
    # Against the law (its per-pass ratios 1.0049 and 1.1054 at 8k): (1.5887 + 5.5258) / (1.5887/1.0049 +
    # 5.5258/1.1054) = 7.1145 / (1.5810 + 4.9989) = 7.1145 / 6.5799 = 1.081 - the one ratio a row of that image pays
    from planner.fidelity.kernels import law_ratios, release_time_ratio
    from planner.presets import load_hardware

    params = load_hardware("dgx-b200-superpod").attention.model_dump()
    kernel = "cuDNN fused attention (cuDNN frontend)"
    q = {r.pass_: ratio for r, ratio in law_ratios("B200", params, kernel) if r.s == 8192}
    assert q == {"fwd": pytest.approx(1.0049, abs=5e-4), "bwd": pytest.approx(1.1054, abs=5e-4)}
    fwd, bwd = 4 * 128 * 8192**2 * 128 / 2 / 1384.2e12, 2.5 * 4 * 128 * 8192**2 * 128 / 2 / 994.9e12
    by_hand = (fwd + bwd) / (fwd / q["fwd"] + bwd / q["bwd"])
    got = release_time_ratio("B200", kernel, params, 8192, causal=True, max_s=8192)
    assert got == pytest.approx(by_hand, rel=2e-3) and got == pytest.approx(1.081, abs=0.001)
    # unmasked rows only by default (the FA2 ratio's): B200's table has none
    with pytest.raises(ValueError, match="no unmasked"):
        release_time_ratio("B200", kernel, params)
