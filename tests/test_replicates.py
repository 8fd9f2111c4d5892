"""Replicates: configurations megaplan cannot tell apart (every input it reads equal), measured more than once.
Their scatter is a floor under any estimate's error on them, and the measured counterpart of calibrate.RUN_NOISE."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from planner.cli import cli
from planner.fidelity.validate import pooled_log_sigma, replicate_scatter, validate


def test_pooled_sigma_by_hand():
    """One group 1.0, 1.1, 0.9: ln 0, 0.09531, −0.10536, mean −0.00335, deviations² 0.0000112 + 0.0097340 + 0.0104060
    = 0.0201512, σ = √(0.0201512/2) = 0.10038. A second group 2.0, 2.0 adds nothing to the sum and one degree of
    freedom: √(0.0201512/3) = 0.08196. A lone value is no replicate."""
    sigma, dof, groups = pooled_log_sigma([1.0, 1.1, 0.9], ["a", "a", "a"])
    assert (round(sigma, 5), dof, groups) == (0.10038, 2, 1)
    sigma, dof, groups = pooled_log_sigma([1.0, 1.1, 0.9, 2.0, 2.0, 5.0], ["a", "a", "a", "b", "b", "c"])
    assert (round(sigma, 5), dof, groups) == (0.08196, 3, 2)
    assert pooled_log_sigma([1.0, 2.0], ["a", "b"]) == (None, 0, 0)


@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=8), st.floats(0.1, 10.0))
def test_the_scatter_ignores_scale(values, scale):
    """ln(published) differences: a group measured in other units (seconds or milliseconds) scatters the same."""
    keys = ["g"] * len(values)
    a, b = pooled_log_sigma(values, keys)[0], pooled_log_sigma([v * scale for v in values], keys)[0]
    assert a == pytest.approx(b, abs=1e-9)


def test_clusters_and_releases_are_pooled_apart():
    got = replicate_scatter(
        [1.0, 1.02, 3.0, 3.3], ["a", "a", "b", "b"], ["MLPerf Training", "MLPerf Training", "x", "x"]
    )
    assert got["clusters"] == {"sigma_log": pytest.approx(math.log(1.02) / math.sqrt(2)), "dof": 1, "groups": 1}
    assert got["releases"] == {"sigma_log": pytest.approx(math.log(1.1) / math.sqrt(2)), "dof": 1, "groups": 1}


def test_the_shipped_rows_replicates():
    """The dense rows: 6 groups of MLPerf submitters' systems (σ 1.0 %: the seven B200s of the NVFP4 8B config, eos and
    Azure at 10,752 H100, ...) and 18 of later releases (σ 3.1 %: DGX Cloud v25.04 → v25.05.05, Megatron-Bridge 26.02
    → 26.04.01); the MoE rows' releases 7.3 % over 29 groups. RUN_NOISE (0.04) sits above the dense releases'."""
    from planner.fidelity.calibrate import RUN_NOISE

    result = validate()
    rep = result["summary"]["replicates"]
    assert (rep["clusters"]["groups"], rep["clusters"]["dof"]) == (6, 11)
    assert (rep["releases"]["groups"], rep["releases"]["dof"]) == (18, 32)
    assert rep["clusters"]["sigma_log"] == pytest.approx(0.0097, abs=5e-4)
    assert rep["releases"]["sigma_log"] == pytest.approx(0.0305, abs=5e-4)
    assert rep["releases"]["sigma_log"] < RUN_NOISE
    moe = result["moe"]["summary"]["replicates"]["releases"]
    # 29 groups with Megatron-Bridge's B300 rows (25 and 7.8 % before)
    assert moe["groups"] == 29 and moe["sigma_log"] == pytest.approx(0.0735, abs=1e-3)


def test_validate_says_it_in_one_line():
    out = CliRunner().invoke(cli, ["validate"], env={"COLUMNS": "400"}).stdout
    line = next(x for x in out.splitlines() if x.startswith("Replicates among the dense runs"))
    assert "across MLPerf submitters' systems of one round σ 1.0 % (6 groups" in line
    assert "across later releases σ 3.1 % (18 groups, 32 degrees of freedom)" in line
