"""megaplan calibrate's fit: bounded least squares on log errors, standard errors from the Jacobian,
and factors the runs cannot identify reported as such, never parked at a bound. On four published
H100 runs whose 'published' values are the planner's own predictions with known factors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.fidelity.calibrate import FIT_FIELDS, fit, fit_runs, with_calibration
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import predict
from planner.presets import load_hardware

IDS = (
    "DGXC-v25.04-H100-Llama3-8B-bf16-n8",
    "DGXC-v25.04-H100-Llama3-8B-fp8-n8",
    "DGXC-v25.04-H100-Llama3-70B-bf16-n64",
    "DGXC-v25.04-H100-Llama3-70B-fp8-n64",
)
TRUTH = {"gemm_efficiency": 0.72, "fp8_gemm_efficiency": 0.64}


@pytest.fixture(scope="module")
def synthetic():
    """The four runs, 'published' as predicted with TRUTH (and a known ±1 % pattern of noise)."""
    hw = with_calibration(load_hardware("dgx-h100-superpod"), TRUTH)
    runs = [r for r in load_runs() if r.id in IDS]
    exact = [replace(r, published=predict(r, hw)) for r in runs]
    noise = np.array([0.01, -0.01, -0.01, 0.01])
    noisy = [replace(r, published=r.published * np.exp(e)) for r, e in zip(exact, noise, strict=True)]
    return exact, noisy


@pytest.fixture(scope="module")
def clean_fit(synthetic):
    exact, _ = synthetic
    return fit("dgx-h100-superpod", exact, ("gemm_efficiency", "fp8_gemm_efficiency", "network_bus_efficiency"))


@pytest.fixture(scope="module")
def noisy_fit(synthetic):
    """The GEMM efficiencies fitted to the noisy runs (read by three tests, none changes it)."""
    _, noisy = synthetic
    return fit("dgx-h100-superpod", noisy, ("gemm_efficiency", "fp8_gemm_efficiency"))


def test_least_squares_recovers_known_factors_and_says_which_it_cannot(clean_fit):
    f = clean_fit
    assert f.runs == 4
    for name, value in TRUTH.items():
        assert f.factors[name].status == "fitted"
        assert f.factors[name].value == pytest.approx(value, rel=1e-3)
    # the runs' DP traffic is hidden behind their backward: the NIC efficiency moves nothing by 1 %
    net = f.factors["network_bus_efficiency"]
    assert net.status == "not identifiable" and "1%" in net.why
    assert net.value == load_hardware("dgx-h100-superpod").calibration.network_bus_efficiency  # kept, not parked
    assert f.loss == pytest.approx(0.0, abs=1e-8)


def test_standard_errors_grow_with_the_scatter_of_the_runs(noisy_fit, clean_fit):
    scattered = noisy_fit
    for name in TRUTH:
        assert clean_fit.factors[name].sigma < 1e-3 < scattered.factors[name].sigma < 0.05
        lo, hi = scattered.factors[name].band
        assert lo < scattered.factors[name].value < hi and scattered.factors[name].at_bound is None


def test_fewer_runs_than_factors_fit_the_first_in_priority(synthetic):
    exact, _ = synthetic
    f = fit("dgx-h100-superpod", exact[:2], FIT_FIELDS, max_factors=1)
    fitted = [n for n, ff in f.factors.items() if ff.status == "fitted"]
    assert fitted == ["gemm_efficiency"]


def test_a_fit_with_no_run_of_the_preset_says_so_instead_of_failing(synthetic):
    # fit_a2a on rows none of which is in the fit (two Qwen3-30B H100 rows set apart) raised numpy's
    # "zero-size array to reduction operation maximum"; with no run every factor keeps its held value
    # (the preset's, or its own kernel prior with priors=True) and says why
    exact, _ = synthetic
    f = fit("gb200-nvl72", exact, ("gemm_efficiency", "fp8_gemm_efficiency"))  # the four runs are H100's
    cal = load_hardware("gb200-nvl72").calibration
    assert f.runs == 0 and f.loss == 0.0 and f.sources == []
    for name in ("gemm_efficiency", "fp8_gemm_efficiency"):
        assert f.factors[name].status == "not identifiable"
        assert f.factors[name].value == getattr(cal, name)
        assert "no run of gb200-nvl72" in f.factors[name].why


def test_the_a2a_fit_on_rows_set_apart_reports_nothing_measured():
    from planner.fidelity.moe_fit import A2A_FACTOR, fit_a2a, load_moe_runs

    apart = [r for r in load_moe_runs() if r.id == "MB-26.02-H100-QWEN3-30B-16"]
    assert len(apart) == 1 and not apart[0].fit
    f = fit_a2a("dgx-h100-superpod", apart)
    assert f.runs == 0 and f.factors[A2A_FACTOR].status == "not identifiable"
    assert f.factors[A2A_FACTOR].value == load_hardware("dgx-h100-superpod").calibration.a2a_network_efficiency


def test_a_weak_scaling_series_counts_its_ends_once_each():
    runs = [r for r in load_runs() if r.id.startswith("DGXC-v25.04-H100-Llama3-70B-bf16-")]
    assert len(runs) == 6  # 64 ... 2048 GPUs, 2 sequences per GPU each
    kept = fit_runs(runs)
    assert sorted(r.request["gpus"] for r in kept) == [64, 2048]


def test_the_factor_table_prints_sigma_the_prediction_spread_and_why_a_bound_is_physical(noisy_fit):
    from rich.console import Console

    from planner.fidelity.calibrate import FactorFit, Fit
    from planner.report.fidelity import factors_table

    spread = noisy_fit.to_json()
    floor = Fit("x", {"layer_overhead_us": FactorFit(0.0, (0, 2000), "fitted", 0.0, "lower")}, 0.0, 3).to_json()
    console = Console(width=120, record=True)
    console.print(factors_table("dgx-h100-superpod", spread), factors_table("x", floor))
    text = " ".join(console.export_text().split())  # titles wrap to the table
    assert 0 < spread["prediction_sigma"] < 0.02 and "the factors' σ on a prediction" in text
    assert "at its lower bound (0, the physical floor)" in text


def test_leave_one_source_out_drift_is_the_range_of_the_refits(synthetic):
    # the four noisy runs as two sources of two runs each: each refit leaves one source out, and the
    # factor's drift is the range of the two refits' values (planner.fidelity.calibrate.loso_drift)
    from planner.fidelity.calibrate import leave_one_source_out, loso_drift

    _, noisy = synthetic
    two = [replace(r, source="A" if "-8B-" in r.id else "B") for r in noisy]  # each: one model, bf16 and fp8
    fields = ("gemm_efficiency", "fp8_gemm_efficiency")
    full = fit("dgx-h100-superpod", two, fields)
    by_source = leave_one_source_out(two, "dgx-h100-superpod", full, priors=False)
    assert set(by_source) == {"A", "B"}
    kept = {s: [r for r in two if r.source != s] for s in "AB"}
    alone = {s: fit("dgx-h100-superpod", kept[s], fields, start=full.values, anchor=full.values) for s in "AB"}
    drift = loso_drift(full, by_source)
    for name in fields:
        values = sorted(alone[s].values[name] for s in "AB")
        assert drift[name].sources == 2
        assert (drift[name].low, drift[name].high) == pytest.approx(values, rel=1e-3)
        assert drift[name].low < drift[name].high  # the ±1 % noise moves each refit
    assert loso_drift(full, {"A": by_source["A"]}) == {}  # one source: nothing to hold out


def test_validate_reports_each_factors_drift_from_the_preset(tmp_path):
    # a preset written with its drift reads back; validate's factor summary turns [0.78, 0.83] around
    # 0.80 into max(|0.78 − 0.80|, |0.83 − 0.80|)/0.80 = 3.75 %
    from planner.fidelity.preset_text import calibration_block
    from planner.fidelity.validate import fitted_factors
    from planner.hardware.calibration import Calibration, Drift

    hw = load_hardware("dgx-h100-superpod")
    cal = hw.calibration
    gemm = cal.factors["gemm_efficiency"].model_copy(
        update={"status": "fitted", "sigma": 0.02, "loso": Drift(low=0.78, high=0.83, sources=4)}
    )
    cal = cal.model_copy(update={"gemm_efficiency": 0.8, "factors": {**cal.factors, "gemm_efficiency": gemm}})
    import yaml

    text = calibration_block(cal)
    assert "loso: {low: 0.78, high: 0.83, sources: 4}" in text
    back = Calibration.model_validate(yaml.safe_load(text)["calibration"])
    assert back.factors["gemm_efficiency"].loso == Drift(low=0.78, high=0.83, sources=4)
    row = fitted_factors(["dgx-h100-superpod"], {"dgx-h100-superpod": hw.model_copy(update={"calibration": cal})})
    entry = row["dgx-h100-superpod"]["gemm_efficiency"]
    assert entry["loso"] == [0.78, 0.83] and entry["loso_sources"] == 4
    assert entry["drift_pct"] == pytest.approx(3.75)
    with pytest.raises(ValueError, match="low <= high"):
        Drift(low=0.9, high=0.8, sources=2)


def test_a_factor_never_at_bound_pushed_to_its_bound_is_not_identified():
    # runs 'published' with stragglers of σ = 0.06 (twice the band's top, 0.03): the fit would park σ at
    # 0.03; it is reported as not identifiable and kept at its anchor (0), never parked there
    from planner.fidelity.calibrate import _pushed_to_bound

    assert _pushed_to_bound(0.03, (0.0, 0.03)) == "upper" and _pushed_to_bound(0.029, (0.0, 0.03)) is None
    assert _pushed_to_bound(0.0, (0.0, 0.03)) is None  # 0: the physical floor, a value the runs may hold
    assert _pushed_to_bound(0.45, (0.45, 0.98)) == "lower"
    # the GB200 refit of 2026-12-01: η_net 0.4558 in [0.45, 0.95] is 0.0058 = 1.2 % of the band from its
    # floor, the stragglers' σ 0.0298 in [0, 0.03] 0.0002 = 0.7 % from its top: both at the bound (2 %)
    assert _pushed_to_bound(0.4558, (0.45, 0.95)) == "lower" and _pushed_to_bound(0.0298, (0.0, 0.03)) == "upper"
    assert _pushed_to_bound(0.45 + 0.03 * 0.5, (0.45, 0.95)) is None  # 3 % of the band away: the runs' value
    hw = with_calibration(load_hardware("dgx-h100-superpod"), {"gemm_efficiency": 0.72, "straggler_sigma": 0.06})
    ends = ("Llama3-8B-bf16-n8", "Llama3-8B-bf16-n128", "Llama3-70B-bf16-n64", "Llama3-70B-bf16-n2048")
    runs = [r for r in load_runs() if r.id in {f"DGXC-v25.04-H100-{e}" for e in ends}]
    slow = [replace(r, published=predict(r, hw)) for r in runs]
    f = fit(hw, slow, ("straggler_sigma",), start={"straggler_sigma": 0.015}, anchor={"straggler_sigma": 0.0})
    sigma = f.factors["straggler_sigma"]
    assert sigma.status == "not identifiable" and "upper bound (0.03)" in sigma.why
    assert sigma.value == 0.0  # the anchor, not the bound


def test_calibrate_moe_refreshes_each_presets_moe_band():
    # the MoE rows' RMS and largest |ln| error with the refitted factors become the preset's MoE band:
    # 11 rows, RMS 0.1, largest 0.2 -> 0.100 and 0.200; a preset without MoE rows keeps its own
    from planner.fidelity.moe_fit import moe_accuracy

    hw = load_hardware("dgx-h100-superpod")
    acc = moe_accuracy(hw, {"rms_log_error": 0.1, "max_abs_log_error": 0.2, "runs": 11})
    assert (acc.moe_validation_error_frac, acc.moe_max_error_frac) == (0.1, 0.2)
    assert (
        "11 MoE rows in the bar" in acc.sources["moe_validation_error_frac"]
        and "10.0 %" in acc.sources["moe_validation_error_frac"]
    )
    assert acc.validation_error_frac == hw.accuracy.validation_error_frac  # the dense band untouched
    assert moe_accuracy(hw, None) is None


def test_validate_prints_the_drift_table_in_80_columns():
    from rich.console import Console

    from planner.report.fidelity import drift_table

    factors = {
        "dgx-h100-superpod": {
            "gemm_efficiency": {
                "value": 0.8,
                "status": "fitted",
                "sigma": 0.02,
                "band": [0.68, 0.95],
                "loso": [0.78, 0.83],
                "loso_sources": 4,
                "drift_pct": 3.75,
            },
            "straggler_sigma": {
                "value": 0.0237,
                "status": "fitted",
                "sigma": 0.0095,
                "band": [0, 0.03],
                "loso": None,
                "loso_sources": None,
                "drift_pct": None,
            },
        }
    }
    console = Console(width=80, record=True)
    console.print(drift_table(factors))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    row = next(line for line in text.splitlines() if "gemm_efficiency" in line)
    assert "0.78–0.83" in row and "3.8%" in row and "0.8" in row
    assert "4 sources" in next(line for line in text.splitlines() if "dgx-h100-superpod" in line)
    assert "—" in next(line for line in text.splitlines() if "straggler_sigma" in line)


def test_a_value_no_held_out_fit_supports_is_set_by_the_sources_disagreement():
    """A100's τ at the last calibration: 253.4 ± 130.9 µs on both sources, 389.1 and 484.7 µs on each
    alone: 389.1 − 253.4 = 135.7 > σ 130.9, so no subset supports it (reported not identifiable);
    with σ 140 it is within one σ of a refit, and a value inside the range is supported by it."""
    from planner.fidelity.calibrate import FactorFit, Fit, set_by_disagreement
    from planner.hardware.calibration import Drift

    def check(value, sigma, low=389.1, high=484.7):
        full = Fit("a100", {"layer_overhead_us": FactorFit(value, (0, 2000), "fitted", sigma)}, 0.0, 24)
        return set_by_disagreement(full, {"layer_overhead_us": Drift(low=low, high=high, sources=2)})

    why = check(253.4, 130.9)["layer_overhead_us"]
    assert "389.1-484.7" in why and "253.4 ± 1.3e+02" in why and "disagreement" in why
    assert check(253.4, 140.0) == {}  # 135.7 < 140
    assert check(400.0, 10.0) == {}  # inside the range
    assert "layer_overhead_us" in check(600.0, 100.0)  # 600 − 484.7 = 115.3 > 100, above the range


def test_a_held_factor_is_reported_not_identifiable_at_the_presets_value(synthetic, noisy_fit):
    from planner.fidelity.calibrate import hold_disagreeing

    _, noisy = synthetic
    full = noisy_fit
    held = hold_disagreeing("dgx-h100-superpod", noisy, full, {"fp8_gemm_efficiency": "set by disagreement"})
    fp8 = held.factors["fp8_gemm_efficiency"]
    preset = load_hardware("dgx-h100-superpod").calibration.fp8_gemm_efficiency
    assert fp8.status == "not identifiable" and fp8.value == preset and fp8.why == "set by disagreement"
    assert held.factors["gemm_efficiency"].status == "fitted"


def test_any_factor_the_runs_push_to_a_bound_is_not_identified():
    # the charter's rule for every factor, not only the stragglers' σ: H100 runs 'published' as if its GEMMs
    # ran at η 0.99 (above the band's top, 0.95) push η to 0.95; the band, not the runs, would set it, so it
    # is reported not identifiable and kept at its anchor (0.82), never shipped at 0.95
    hw = with_calibration(load_hardware("dgx-h100-superpod"), {"gemm_efficiency": 0.99})
    ends = ("Llama3-8B-bf16-n8", "Llama3-70B-bf16-n64")
    runs = [r for r in load_runs() if r.id in {f"DGXC-v25.04-H100-{e}" for e in ends}]
    fast = [replace(r, published=predict(r, hw)) for r in runs]
    base = load_hardware("dgx-h100-superpod")
    f = fit(base, fast, ("gemm_efficiency",), start={"gemm_efficiency": 0.9}, anchor={"gemm_efficiency": 0.82})
    eta = f.factors["gemm_efficiency"]
    assert eta.status == "not identifiable" and "upper bound (0.95)" in eta.why
    assert eta.value == 0.82


@pytest.mark.parametrize(
    "preset", ["dgx-a100-superpod", "dgx-h100-superpod", "dgx-b200-superpod", "gb200-nvl72", "gb300-nvl72"]
)
def test_every_shipped_fitted_factor_is_pinned_within_half_its_band_and_its_own_value(preset):
    """The identifiability rule on what ships: a factor called fitted has σ ≤ half its band and σ ≤ its value (a
    positive factor whose one-σ interval reaches zero is not measured). GB300's x½ came out 112.1 ± 220 in a band
    [32, 1024]: σ 22 % of the band (under the half-band rule alone, "fitted") and 196 % of the value - reported not
    identifiable since stop 34, its τ then 659.3 ± 153 µs (± 380 beside it), and kept at 112.1. With the sm_100 kernel
    prior (497 ± 13 %, gb300x20) the runs give it 64 % of its information: 447.8 ± 44 (457.6, 66 %, while GB300's
    stragglers' σ sat at its band's floor, before stop 43); τ is then the factor they cannot tell from the FP8 GEMM
    rate and the stragglers (a trial fit puts it at 0.003 ± 246 µs; σ 215 % of its value while σ sat at 0), kept at
    GB200's fitted 430.2 µs, not at the 659.3 of the fit that had left x½ at 112.1."""
    hw = load_hardware(preset)
    for name, factor in hw.calibration.factors.items():
        if factor.status != "fitted" or factor.sigma is None:
            continue
        value = getattr(hw.calibration, name)
        low, high = factor.band
        assert factor.sigma <= 0.5 * (high - low) and factor.sigma <= abs(value), (preset, name, value, factor.sigma)
    if preset == "gb300-nvl72":
        cal = hw.calibration
        half = cal.factors["gemm_half_dim"]
        assert half.status == "fitted" and half.prior.value == 497 and half.prior.sigma == 0.13
        # 446.8 since GB300 takes CUDA's 152 SMs (2026-12-05; 447.8 at the die's 160)
        assert cal.gemm_half_dim == pytest.approx(446.8, abs=0.1) and half.sigma == pytest.approx(44, abs=1)
        assert "the runs give 64% of its information" in half.source
        tau = cal.factors["layer_overhead_us"]
        assert tau.status == "not identifiable" and "against a trial value of 0.00" in tau.source and tau.sigma is None
        assert cal.layer_overhead_us == 430.2  # gb200-nvl72's fitted τ at the time (its source says so)


def _with_prior(hw, name: str, value: float, sigma: float):
    """``hw`` with a kernel prior on its factor ``name``."""
    from planner.hardware.calibration import Prior

    cal = hw.calibration
    factor = cal.factors[name].model_copy(update={"prior": Prior(value=value, sigma=sigma)})
    return hw.model_copy(update={"calibration": cal.model_copy(update={"factors": {**cal.factors, name: factor}})})


def test_a_factor_the_runs_cannot_identify_keeps_its_kernel_prior_not_the_last_fit(synthetic):
    """GB300's x½ sat at 112.1, the value of a fit whose σ was 198 % of it, while the kernel table's shape law
    puts it at 497 ± 13 %: a factor the runs cannot identify keeps its own kernel prior. On the four H100 runs
    the NIC efficiency moves no prediction by 1 %; given a prior of 0.60 it is kept at 0.60, not at the
    preset's 0.7227, and without priors (or without a prior) at the preset's value."""
    from planner.fidelity.calibrate import held_value
    from planner.fidelity.writer import fitted_calibration

    exact, _ = synthetic
    base = load_hardware("dgx-h100-superpod")
    hw = _with_prior(base, "network_bus_efficiency", 0.60, 0.10)
    fields = ("gemm_efficiency", "fp8_gemm_efficiency", "network_bus_efficiency")
    full = fit(hw, exact, fields, priors=True)
    net = full.factors["network_bus_efficiency"]
    assert net.status == "not identifiable" and "1%" in net.why and net.informed is None
    assert net.value == 0.60 and base.calibration.network_bus_efficiency == 0.7227
    assert fit(hw, exact, fields, priors=False).factors["network_bus_efficiency"].value == 0.7227
    assert held_value(base.calibration, "network_bus_efficiency", priors=True) == 0.7227  # no prior: the preset's
    # a ratio prior (η_fp8 per η) is no value of the factor itself: the preset's value is kept
    gb200 = load_hardware("gb200-nvl72").calibration
    assert gb200.factors["fp8_gemm_efficiency"].prior.per == "gemm_efficiency"
    assert held_value(gb200, "fp8_gemm_efficiency", priors=True) == gb200.fp8_gemm_efficiency
    assert held_value(gb200, "gemm_half_dim", priors=True) == 497  # its own prior
    # the preset written says where the value comes from: its prior, not "kept at" the last fit's source
    written = fitted_calibration(hw.calibration, full, "4 runs").factors["network_bus_efficiency"]
    assert written.source.endswith("kept at: its kernel prior, 0.6") and written.prior.value == 0.60


def test_a_carried_preset_takes_its_held_out_runs_error_as_its_band():
    # calibrate --write hands a family member without fitted rows its held-out rows' figures, marked held_out
    # (calibrate.run_calibration): RMS 0.1009 and max 0.1412 over 3 runs -> 0.101 and 0.141, named as held out;
    # without any row it keeps the donor's, named as an assumption
    from planner.fidelity.calibrate import Fit
    from planner.fidelity.writer import fitted_accuracy
    from planner.hardware.spec import Accuracy

    fit_ = Fit(hardware="dgx-h100-superpod", factors={}, loss=0.0, runs=54, prediction_sigma=0.007)
    stats = {"runs": 3, "rms_log_error": 0.1009, "max_abs_log_error": 0.1412, "held_out": True}
    fields = ("validation_error_frac", "calibration_uncertainty_frac", "max_error_frac")
    donor = Accuracy(
        validation_error_frac=0.022,
        calibration_uncertainty_frac=0.007,
        max_error_frac=0.064,
        sources=dict.fromkeys(fields, "the donor's runs"),
    )
    acc = fitted_accuracy(fit_, stats, carried_from="dgx-h100-superpod", donor=donor)
    assert (acc.validation_error_frac, acc.max_error_frac, acc.calibration_uncertainty_frac) == (0.101, 0.141, 0.007)
    assert (
        "over this preset's 3 held-out runs (validated out of sample, never fitted)"
        in acc.sources["validation_error_frac"]
    )
    assert acc.sources["validation_error_frac"].endswith("with dgx-h100-superpod's factors")
    assert acc.held_out_runs == 3 and acc.sources["held_out_runs"] == (
        "this preset's own 3 runs, held out (its factors are dgx-h100-superpod's)"
    )
    none = fitted_accuracy(fit_, None, carried_from="dgx-h100-superpod", donor=donor)
    assert none.validation_error_frac == 0.022 and "no run on this preset" in none.sources["validation_error_frac"]
    assert none.held_out_runs is None and "held_out_runs" not in none.sources


def test_a_fit_never_frees_more_factors_than_runs_and_keeps_a_runs_noise_as_its_sigma(synthetic):
    # two exact runs and every factor asked for, no cap given: at most two factors are fitted (they fit the runs
    # exactly), and with no degree of freedom left their σ comes from one run's own scatter, RUN_NOISE = 4 %, not
    # from the zero residual (a trial fit of H200's three MLPerf rows once "fitted" all seven factors at σ 0)
    from planner.fidelity.calibrate import RUN_NOISE

    exact, _ = synthetic
    f = fit("dgx-h100-superpod", exact[:2], FIT_FIELDS)
    fitted = [n for n, ff in f.factors.items() if ff.status == "fitted"]
    assert 1 <= len(fitted) <= 2
    assert all(f.factors[n].sigma > 0.1 * RUN_NOISE * f.factors[n].value for n in fitted)
    capped = [ff.why for ff in f.factors.values() if "fewer runs than factors" in ff.why]
    assert capped and all("2 runs can fit 2 factors" in why for why in capped)
