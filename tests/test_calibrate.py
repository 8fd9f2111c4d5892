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


def test_standard_errors_grow_with_the_scatter_of_the_runs(synthetic, clean_fit):
    _, noisy = synthetic
    scattered = fit("dgx-h100-superpod", noisy, ("gemm_efficiency", "fp8_gemm_efficiency"))
    for name in TRUTH:
        assert clean_fit.factors[name].sigma < 1e-3 < scattered.factors[name].sigma < 0.05
        lo, hi = scattered.factors[name].band
        assert lo < scattered.factors[name].value < hi and scattered.factors[name].at_bound is None


def test_fewer_runs_than_factors_fit_the_first_in_priority(synthetic):
    exact, _ = synthetic
    f = fit("dgx-h100-superpod", exact[:2], FIT_FIELDS, max_factors=1)
    fitted = [n for n, ff in f.factors.items() if ff.status == "fitted"]
    assert fitted == ["gemm_efficiency"]


def test_a_weak_scaling_series_counts_its_ends_once_each():
    runs = [r for r in load_runs() if r.id.startswith("DGXC-v25.04-H100-Llama3-70B-bf16-")]
    assert len(runs) == 6  # 64 ... 2048 GPUs, 2 sequences per GPU each
    kept = fit_runs(runs)
    assert sorted(r.request["gpus"] for r in kept) == [64, 2048]


def test_the_factor_table_prints_sigma_the_prediction_spread_and_why_a_bound_is_physical(synthetic):
    from rich.console import Console

    from planner.fidelity.calibrate import FactorFit, Fit
    from planner.report.fidelity import factors_table

    _, noisy = synthetic
    spread = fit("dgx-h100-superpod", noisy, ("gemm_efficiency", "fp8_gemm_efficiency")).to_json()
    floor = Fit("x", {"layer_overhead_us": FactorFit(0.0, (0, 2000), "fitted", 0.0, "lower")}, 0.0, 3).to_json()
    console = Console(width=120, record=True)
    console.print(factors_table("dgx-h100-superpod", spread), factors_table("x", floor))
    text = " ".join(console.export_text().split())  # titles wrap to the table
    assert 0 < spread["prediction_sigma"] < 0.02 and "the factors' σ on a prediction" in text
    assert "at its lower bound (0, the physical floor)" in text
