"""The evidence of an NVFP4 plan: the 17 NVFP4 validation rows (Megatron-Bridge performance summary archive @ 067f987,
releases 26.02-26.06) count as settings that exercise NVFP4 on Blackwell - GB200's 9 fitted (they fit its NVFP4 GEMM
ratio), GB300's 8 held out (they judge its measured ratio out of sample) - and an NVFP4 plan's band is those rows'
out-of-sample residuals (planner.fidelity.evidence.band_parts, nvfp4_fit.band_log_errors; docs/cost-model.md §4.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import make_request
from planner.cli import cli
from planner.fidelity import evidence, nvfp4_fit
from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import predictions, prepare
from planner.plan import ParallelPlan
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

GB200, GB300, B200, B300 = "gb200-nvl72", "gb300-nvl72", "dgx-b200-superpod", "dgx-b300-superpod"
RECIPE_70B = dict(tp=2, pp=4, dp=8, vpp=5, sequence_parallel=True, distributed_optimizer=True)

MLPERF_405B = "llama3.1-405b (MLPerf llama31_405b: Mixtral 8x22B's vocabulary)"
MLPERF_8B = "llama3-8b (Llama 3.1 8B)"


def _request(hardware: str):
    return make_request(
        model="llama3-70b",
        hardware=hardware,
        gpus=64,
        global_batch=256,
        seq_len=8192,
        options={"fp4": "e2m1", "tp_comm_overlap": True},  # the recipe's TP overlap, as every Blackwell TP run has
    )


def test_the_band_of_a_small_set_of_residuals_by_hand():
    """r = ln(predicted/published) of four rows: -0.05, 0.02, 0.10, -0.03.
    RMS: √((0.0025 + 0.0004 + 0.0100 + 0.0009)/4) = √(0.0138/4) = √0.00345 = 0.058737; largest |r| 0.10.
    With σ_cal = 0.012: ε₀ = √(0.00345 + 0.000144) = √0.003594 = 0.059950, δ = max(0.10, ε₀) = 0.10;
    a plan with one feature no setting exercises: √(0.003594 + 0.0100) = √0.013594 = 0.116594."""
    rms, worst = nvfp4_fit.log_band([-0.05, 0.02, 0.10, -0.03])
    assert rms == pytest.approx(0.058737, abs=1e-6) and worst == pytest.approx(0.10, abs=1e-12)
    base, per = evidence.nvfp4_band_parts(rms, worst, 0.012)
    assert base == pytest.approx(0.059950, abs=1e-6) and per == pytest.approx(0.10, abs=1e-12)
    assert math.sqrt(base**2 + 1 * per**2) == pytest.approx(0.116594, abs=1e-6)
    # δ is never below ε₀: three rows all 5 % off, σ_cal 0.03 → ε₀ = √(0.0025 + 0.0009) = 0.058310 > 0.05
    base, per = evidence.nvfp4_band_parts(*nvfp4_fit.log_band([0.05, -0.05, 0.05]), 0.03)
    assert base == pytest.approx(0.058310, abs=1e-6) and per == base


def test_nvfp4_plans_take_their_rows_band_per_preset():
    """The shipped figures (calibrate --nvfp4 --write): GB200 ε_nv 0.071, δ 0.124, σ_cal 0.013 → ε₀ = √(0.005041 +
    0.000169) = √0.005210 = 0.072180, its 13 rows with NVIDIA's MLPerf v5.1 NVFP4 8B on 8 GB200 (2026-12-05; ε_nv 0.074
    → ε₀ 0.075133 on the 12 before); GB300 ε_nv 0.059 → √(0.003481 + 0.000081) = √0.003562 = 0.059682 with its 8B on
    8 GB300 (0.064 → 0.064630 before); DGX B200 from its own 7 single-node MLPerf v5.1 rows, out of sample (GB200's
    carried before): ε_nv 0.068, δ 0.079, σ_cal 0.013 → √(0.004624 + 0.000169) = √0.004793 = 0.069231. Before:
    (σ_cal 0.014 and 0.075313 before Megatron-Bridge 25.09's cuDNN 9.11 was priced at
    the 9.13.1 table, 2026-12-04), its 9 Bridge rows out of sample with MLPerf v5.1's 3 NVFP4 405B rows, since the
    graphed CP ring steps are priced (docs/cost-model.md §6.7.1; ε_nv 0.078, δ 0.130, σ_cal 0.013 before; ε_nv 0.088
    on the 9 alone, 2026-12-04; ε_nv 0.081, δ 0.122, σ_cal 0.011 before the refit with NeMo 25.02/25.04's cuDNN
    9.7.0 attention, 2026-12-04; ε_nv 0.082, δ 0.123 before the eager ops' Blackwell bandwidth, eager23);
    GB300 ε_nv 0.064, δ 0.114, σ_cal 0.009 with MLPerf v5.1's theia_ngpu512 row (-9.0 %; -14.5 % and ε_nv 0.076,
    δ 0.157 before the graphed ring steps) beside Bridge's 8 (ε_nv
    0.059, δ 0.114 on the 8, 2026-12-04; ε_nv 0.056, δ 0.107 while its stragglers' σ sat at the band's floor, 0,
    before stop 43; ε_nv 0.074, δ 0.138, σ_cal 0.008 while x½ sat at 112.1, before its sm_100 kernel prior: gb300x20)
    → √(0.004096 + 0.000081) = √0.004177 = 0.064630."""
    # GB300's δ 0.113 since it takes CUDA's 152 SMs (2026-12-05; 0.114 at the die's 160)
    expected = {GB200: (0.072180, 0.124), GB300: (0.059682, 0.113), B200: (0.069231, 0.079)}
    for name, (base, per) in expected.items():
        req = _request(name)
        got = evidence.band_parts(req.ctx)
        assert got == pytest.approx((base, per), abs=1e-6), name
        assert "NVFP4 rows" in evidence.band_rows(req.ctx)
    # a BF16 plan on the same preset keeps the dense rows' band, and names no other rows
    bf16 = make_request(model="llama3-70b", hardware=GB200, gpus=64, global_batch=256, seq_len=8192)
    acc = bf16.ctx.hardware.accuracy
    assert evidence.band_parts(bf16.ctx) == (acc.band_frac, acc.max_error_frac)
    assert evidence.band_rows(bf16.ctx) is None


def test_the_shipped_bands_are_the_rows_out_of_sample_residuals():
    bands = nvfp4_fit.band_log_errors()
    assert {name: (b["bearing"], len(b["log_errors"])) for name, b in bands.items()} == {
        GB200: ("fitted", 13),  # Bridge's 9 fit the ratio, MLPerf v5.1's 4 judge it
        GB300: ("held out", 10),  # its ratio measured (TE's B300 profile)
        B200: ("carried", 7),  # GB200's ratio, judged by MLPerf v5.1's seven single-node runs
        B300: ("held out", 2),  # its ratio measured (TE's B300 profile), judged by Nebius's and Lenovo's runs
    }
    for name, donor in ((GB200, GB200), (GB300, GB300), (B200, B200), (B300, B300)):
        acc = load_hardware(name).accuracy
        rms, worst = nvfp4_fit.log_band(list(bands[donor]["log_errors"].values()))
        assert (acc.nvfp4_validation_error_frac, acc.nvfp4_max_error_frac) == (round(rms, 3), round(worst, 3)), (
            f"{name}: run megaplan calibrate --nvfp4 --write presets/hardware"
        )
        assert f"{len(bands[donor]['log_errors'])} NVFP4 rows on {donor}" in acc.sources["nvfp4_validation_error_frac"]
    # GB200's rows out of sample, each predicted at the ratio fitted without its model, are farther off in RMS than
    # the same rows in sample at the shipped ratio: the fitted spread with the leave-one-model-out drift on top
    runs = nvfp4_fit.fit_runs()
    in_sample = predictions(runs, [prepare(r) for r in runs])
    rms_in, _ = nvfp4_fit.log_band([math.log(p / r.published) for p, r in zip(in_sample, runs, strict=True)])
    assert rms_in < load_hardware(GB200).accuracy.nvfp4_validation_error_frac


def test_the_rows_bear_on_nvfp4_as_fitted_or_held_out():
    runs = load_runs()
    nvfp4 = [r for r in runs if nvfp4_fit.is_nvfp4(r)]
    kinds = {(r.hardware, evidence.bearing(r)) for r in nvfp4}
    # MLPerf v5.1's NVFP4 rows (405B: 3 on GB200, 1 on GB300; 8B on 8 GPUs: 1 on GB200, 1 on GB300, 7 on B200) judge
    # the ratios out of sample: GB200's is fitted on Megatron-Bridge's rows alone (nvfp4_fit.FIT_SOURCE)
    # and 2 on HGX B300 (Nebius, Lenovo)
    held = {(GB200, "held out"), (GB300, "held out"), (B200, "held out"), (B300, "held out")}
    assert kinds == {(GB200, "fitted")} | held and len(nvfp4) == 32
    assert {r.source for r in nvfp4 if (r.hardware, evidence.bearing(r)) == (GB200, "held out")} == {"MLPerf Training"}
    assert all(not r.fit for r in nvfp4)  # never in the dense fit (their GEMMs would alias into η_fp8)
    cards = [r for r in load_moe_runs() if r.held_out]
    assert cards and {evidence.bearing(r) for r in cards} == {"held out"}  # the verification cards: the same kind
    settings_ = [s for s in evidence.reference_settings(10) if 5 in s.codes["fp8"]]
    # (preset, model, TP, PP, VPP, held out, rows): GB200 70B TP2 PP4 V5 (26.02-26.04.01), 405B TP4 PP16 V8 and V4
    # (26.02.01's table VP 4); GB300 70B TP1 PP4 V5 (3 rows), 405B TP4 PP8 V4 (26.02-26.06, 5 rows); MLPerf v5.1's
    # Llama 3.1 8B TP1 b2 on 8 GPUs: B200 (7 systems of 5 submitters: one setting), GB200 and GB300 (NVIDIA's)
    got = sorted(
        (s.hardware, s.model, *(dict(s.key[2])[k] for k in ("tp", "pp", "vpp")), s.held_out, len(s.rows))
        for s in settings_
    )
    assert got == [
        (B200, MLPERF_8B, 1, 1, 1, True, 7),
        (B300, MLPERF_8B, 1, 1, 1, True, 2),
        (GB200, "llama3-70b", 2, 4, 5, False, 4),
        (GB200, MLPERF_8B, 1, 1, 1, True, 1),
        (GB200, "llama3.1-405b", 4, 16, 4, False, 1),
        (GB200, "llama3.1-405b", 4, 16, 8, False, 4),
        (GB200, MLPERF_405B, 4, 8, 8, True, 3),
        (GB300, "llama3-70b", 1, 4, 5, True, 3),
        (GB300, MLPERF_8B, 1, 1, 1, True, 1),
        (GB300, "llama3.1-405b", 4, 8, 4, True, 5),
        (GB300, MLPERF_405B, 2, 8, 8, True, 1),
    ]
    assert not any(s.fit_rows for s in settings_)  # no row of the dense fit: the preset's fit counts none


def test_nvfp4_on_blackwell_is_validated_not_extrapolated():
    req = _request(GB200)
    grid = PlanGrid.from_plans([ParallelPlan(**RECIPE_70B)])
    ev = evidence.plan_evidence(grid, req.ctx, 64)
    got = evidence.evidence_json(ev, 0, (0.0, 0.0, 0.0), evidence.band_rows(req.ctx))
    fp4 = next(f for f in got["features"] if f["kind"] == "fp8")
    # 5 and 2 before MLPerf v5.1's 405B, 7 and 4 before its 8B on 8 B200, GB200 and GB300, 10 and 7 before B300's
    assert fp4 == {"feature": "NVFP4", "kind": "fp8", "settings": 11, "held_out": 8}
    assert got["extrapolated"] == [] and list(ev.extrapolated) == [0]
    assert list(evidence.extrapolated_features(grid, req.ctx, 64)) == [0]
    assert got["band_rows"].startswith("13 NVFP4 rows on gb200-nvl72 (MLPerf Training; Megatron-Bridge performance")


def test_explain_names_the_rows_count_and_source_on_one_line():
    args = ["explain", "--model", "llama3-70b", "--hardware", GB300, "--gpus", "64", "--global-batch", "256"]
    args += ["--seq-len", "8192", "--fp4", "e2m1", "--tp", "2", "--pp", "4", "--vpp", "5", "--distributed-optimizer"]
    out = CliRunner().invoke(cli, args, env={"COLUMNS": "400"}).stdout
    line = next(x for x in out.splitlines() if x.startswith("runs"))
    assert line == (
        "runs  validated by 11 settings on Blackwell (fewest: NVFP4, 8 of them held out); band ± 6.0 % from 10 NVFP4 "
        "rows on gb300-nvl72 (MLPerf Training; Megatron-Bridge performance summary) out of sample (its NVFP4 GEMM "
        "ratio measured, not fitted): RMS of ln(predicted/published) 5.9 % (calibrate --nvfp4)"
    )
    assert "0 runs" not in out and "extrapolated" not in line


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-0.4, 0.4, allow_nan=False), min_size=1, max_size=20),
    st.floats(0.0, 0.05, allow_nan=False),
    st.integers(0, 4),
)
def test_the_band_is_never_narrower_than_the_rows_spread(residuals, sigma_cal, n):
    """Whatever the rows' residuals: ε₀ ≥ their RMS ≥ their standard deviation and ≥ |their mean| (the spread and
    the bias both inside), δ ≥ ε₀ and δ ≥ every |r|, and the band of a plan widens with each unexercised feature."""
    rms, worst = nvfp4_fit.log_band(residuals)
    base, per = evidence.nvfp4_band_parts(rms, worst, sigma_cal)
    r = np.asarray(residuals)
    tol = 1e-12
    assert base + tol >= rms and rms + tol >= r.std() and rms + tol >= abs(r.mean())
    assert per + tol >= base and per + tol >= np.max(np.abs(r))
    assert math.sqrt(base**2 + (n + 1) * per**2) >= math.sqrt(base**2 + n * per**2)
