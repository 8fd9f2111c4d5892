"""The mixture-of-experts validation rows: every published MoE run with a complete configuration in
presets/reference/moe_runs.csv becomes a plan Megatron-LM accepts and is predicted in tokens/s per GPU."""

import pytest

from planner import api
from planner.fidelity.moe_runs import MOE_METRIC, load_moe_runs, moe_reference_rows
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import validate
from planner.presets import load_hardware


@pytest.fixture(scope="module")
def result():
    return validate()


@pytest.fixture(scope="module")
def moe(result):
    return result["moe"]


def test_every_moe_row_is_a_legal_plan_and_cited(moe):
    rows = moe_reference_rows()
    assert len(moe["runs"]) == len(rows) == 60
    assert all(r["source"].startswith("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary") for r in rows)
    assert not any("25.11" in r["run_id"] for r in rows)  # that release's table is held out
    for run in load_moe_runs():
        req = api.make_request(hardware=load_hardware(run.hardware), **run.request)
        assert api.explain(req)["legal"], run.id


def test_moe_rows_are_tokens_per_second_per_gpu(moe):
    run = next(r for r in load_moe_runs() if r.id == "MB-25.09-H100-DSV3-1024")
    row = next(r for r in moe["runs"] if r["id"] == run.id)
    assert run.metric == MOE_METRIC and row["published"] == 1297  # 25.09 table: 1,297 tokens/s/GPU
    est = api.explain(api.make_request(hardware=load_hardware(run.hardware), **run.request))["estimate"]
    assert row["predicted"] == pytest.approx(8192 * 4096 / est["iteration_s"] / 1024)


def test_moe_summary_is_reported_apart_from_the_fitted_runs(result, moe):
    assert result["summary"]["runs"] == len(load_runs())  # the dense runs the factors are fitted on and checked by
    assert moe["summary"]["runs"] == 60
    assert set(moe["summary"]["by_source"]) == {
        "Megatron-Bridge perf. tables, MoE on H100",
        "Megatron-Bridge perf. tables, MoE on B200",
        "Megatron-Bridge perf. tables, MoE on GB200",
    }
