"""The mixture-of-experts validation rows: every published MoE run with a complete configuration in
presets/reference/moe_runs.csv becomes a plan Megatron-LM accepts and is predicted in tokens/s per GPU."""

import pytest

from planner import api
from planner.fidelity.moe_runs import MOE_METRIC, load_moe_runs, moe_reference_rows
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import predict, validate
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


def test_superseded_and_regressed_rows_are_reported_apart_with_their_evidence(moe):
    flagged = {r["id"]: r for r in moe["runs"] if not r["in_fit"]}
    # the 26.06.01 GPT-OSS regression the table footnotes, the two 26.02 Qwen3-30B rows of the dropless
    # regression (Megatron-Bridge issue 1998) and the three 25.09 rows whose same plan ran faster in 26.02
    # by more than megaplan gives the settings that changed; the other five 25.09 rows have no such
    # evidence and are in the bar
    assert set(flagged) == {
        "MB-26.06.01-GB200-GPTOSS120B-64", "MB-26.02-B200-QWEN3-30B-8", "MB-26.02-H100-QWEN3-30B-16",
        "MB-25.09-GB200-DSV3-256", "MB-25.09-GB200-QWEN3-30B-8", "MB-25.09-H100-QWEN3-235B-256",
    }  # fmt: skip
    assert all(any(a.startswith("reported apart - ") for a in r["assumptions"]) for r in flagged.values())
    assert "28,947 (26.06)" in " ".join(flagged["MB-26.06.01-GB200-GPTOSS120B-64"]["assumptions"])
    assert "1,204 -> 1,633" in " ".join(flagged["MB-25.09-H100-QWEN3-235B-256"]["assumptions"])
    summary = moe["summary"]
    assert summary["in_bar"]["runs"] == 54 and sum(s["runs"] for s in summary["by_hardware_assumed"].values()) == 6


def test_25_09_rows_apart_ran_faster_later_than_the_model_explains():
    """Each 25.09 row kept apart has its plan measured again in 26.02 faster by more than megaplan gives the
    settings that changed (batch, FP8 recipe, token drop, graphs) - by 9 % or more: the rest is the software
    (DeepSeek-V3 GB200 1.145 published / 1.048 modelled, Qwen3-30B GB200 1.145 / 1.042 since current scaling's
    four kernels per expert quantisation, Qwen3-235B H100 1.356 / 1.025)."""
    runs = {r.id: r for r in load_moe_runs()}
    for old, new, published in (
        ("MB-25.09-GB200-DSV3-256", "MB-26.02-GB200-DSV3-256", 3955 / 3454),
        ("MB-25.09-GB200-QWEN3-30B-8", "MB-26.02-GB200-QWEN3-30B-8", 26084 / 22775),
        ("MB-25.09-H100-QWEN3-235B-256", "MB-26.02-H100-QWEN3-235B-256", 1633 / 1204),
    ):
        assert runs[new].published / runs[old].published == pytest.approx(published)
        model = predict(runs[new]) / predict(runs[old])
        assert published / model > 1.09, (old, model)


def test_moe_rows_in_the_bar_by_model(moe):
    """DeepSeek-V3 and the two Qwen3 models within reach of the bar (median ≤ 9 %, no row beyond 31 %:
    the widest, Qwen3-30B-A3B's 25.09 FP8 row on 8 B200, 30 % too slow, its FP8 rows on 16 H100 11-13 % too
    fast, docs/cost-model.md §13.7);
    GPT-OSS-120B still predicted too fast on Blackwell (§13.7, not explained here)."""
    by_model = moe["summary"]["by_model"]
    for name, tag in (("deepseek-v3", "-DSV3-"), ("qwen3-235b-a22b", "-QWEN3-235B-"), ("qwen3-30b-a3b", "-QWEN3-30B-")):
        assert by_model[name]["median_abs_error_pct"] <= 9.0, name
        rows = [r for r in moe["runs"] if r["in_fit"] and tag in r["id"]]
        # 31 %: Qwen3-30B FP8-CS on 8 B200 (25.09, token drop, 16 local experts) -30.4 % since current scaling's
        # quantisation counts its four kernels per expert (TE quantizer.cpp; -18.3 % with two), t_op not refitted
        assert all(abs(r["error_pct"]) <= 31.0 for r in rows), name
    assert by_model["gpt-oss-120b"]["runs"] == 14
    assert moe["summary"]["in_bar"]["median_abs_error_pct"] <= 8.0


def test_expandable_segments_as_each_release_launched():
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True where the release's launcher sets it (Megatron-Bridge
    v0.5.0 executors.py PERF_ENV_VARS from 26.06; v0.3.0/v0.4.0 perf_plugins.py: DeepSeek-V3 on H100 in
    26.02, on H100 and GB200 in 26.04; v0.2.0: no MoE run in 25.09): the fragmentation term is then 0."""
    runs = {r.id: r.request["options"].get("expandable_segments") for r in load_moe_runs()}
    assert runs["MB-26.06-GB200-QWEN3-30B-8"] and runs["MB-26.08-GB200-GPTOSS120B-64"]
    assert runs["MB-26.04-GB200-DSV3-256"] and runs["MB-26.04.01-GB200-DSV3-256"]
    assert not runs["MB-26.02-GB200-DSV3-256"]  # v0.3.0 sets it for DeepSeek-V3 on H100 only
    assert not runs["MB-26.04-B200-QWEN3-30B-8"] and not runs["MB-25.09-H100-DSV3-1024"]
    assert sum(bool(v) for v in runs.values()) == 15  # 13 rows of 26.06-26.08 and the two DSv3 GB200 26.04 rows


def test_optimizer_and_fp8_weights_as_each_recipe_ran():
    """DeepSeek-V3's recipe: TE's precision-aware Adam with bf16 moments and main gradients (Megatron-Bridge
    recipes/deepseek/deepseek_v3.py); the performance scripts' post-overrides: precision-aware for every
    bf16 run; both FP8 mixed-precision configs: fp8_param_gather. By hand for DeepSeek-V3 on 256 GB200
    (26.02): Adam's states go from 12 bytes per parameter (fp32 master, m, v) to 2 + 2 + 2 (the fp32
    master as its 16-bit remainder beside the bf16 weight, m and v in bf16): exactly half."""
    runs = {r.id: r for r in load_moe_runs()}
    dsv3 = runs["MB-26.02-GB200-DSV3-256"].request["options"]
    assert dsv3["use_precision_aware_optimizer"] and dsv3["fp8_param_gather"]
    assert dsv3["exp_avg_dtype"] == dsv3["exp_avg_sq_dtype"] == dsv3["main_grads_dtype"] == "bf16"
    bf16 = runs["MB-26.04-GB200-GPTOSS120B-64"].request["options"]
    assert bf16["use_precision_aware_optimizer"] and "exp_avg_dtype" not in bf16 and "fp8_param_gather" not in bf16
    qwen_fp8 = runs["MB-26.04-H100-QWEN3-30B-16"].request["options"]
    assert qwen_fp8["fp8_param_gather"] and "use_precision_aware_optimizer" not in qwen_fp8

    def optimizer_gib(options):
        req = dict(runs["MB-26.02-GB200-DSV3-256"].request, options=options)
        return api.explain(api.make_request(hardware=load_hardware("gb200-nvl72"), **req))["estimate"]["memory"][
            "optimizer"
        ]

    plain = {
        k: v
        for k, v in dsv3.items()
        if k not in ("use_precision_aware_optimizer", "exp_avg_dtype", "exp_avg_sq_dtype", "main_grads_dtype")
    }
    assert optimizer_gib(dsv3) == pytest.approx(optimizer_gib(plain) * 6 / 12, rel=1e-9)
