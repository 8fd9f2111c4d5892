"""Scaling sweep and the smallest cluster (`megaplan sweep`, `megaplan search --min-gpus`)."""

from __future__ import annotations

import pytest

from planner import api
from planner.errors import InfeasibleError, PlannerError
from planner.plan import Recompute, RecomputeMethod, StageSplit
from planner.runs.min_gpus import lower_bound_gpus, min_gpus
from planner.runs.sweep import parse_gpu_sizes, sweep
from planner.space.candidates import Pins


@pytest.mark.parametrize(
    "text, sizes",
    [
        ("64:4096", [64, 128, 256, 512, 1024, 2048, 4096]),
        ("128:4096", [128, 256, 512, 1024, 2048, 4096]),
        ("100:300", [100, 200]),  # doubling from LO, never past HI
        ("64,128,256", [64, 128, 256]),
        ("256, 64,128,64", [64, 128, 256]),  # sorted, once each
        ("512", [512]),
    ],
)
def test_parse_gpu_sizes(text, sizes):
    assert parse_gpu_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "64:", "4096:64", "0:64", "a,b", "64;128", "1:1000000000000"])
def test_parse_gpu_sizes_rejects(text):
    with pytest.raises(PlannerError, match="--gpus"):
        parse_gpu_sizes(text)


@pytest.fixture(scope="module")
def gpt3_sweep():
    req = api.make_request(model="gpt3-175b")
    return sweep(req.ctx, parse_gpu_sizes("128:4096"))


def test_sweep_throughput_grows_and_efficiency_is_relative(gpt3_sweep):
    rows = gpt3_sweep["rows"]
    assert [r["gpus"] for r in rows] == [128, 256, 512, 1024, 2048, 4096]
    tps = [r["plan"]["estimate"]["tokens_per_s"] for r in rows]
    assert all(b > a for a, b in zip(tps, tps[1:], strict=False))  # throughput grows with GPUs
    eff = [r["scaling_efficiency"] for r in rows]
    assert eff[0] == 1.0 and gpt3_sweep["baseline_gpus"] == 128
    for r, e in zip(rows, eff, strict=False):  # (tokens/s ÷ N) / (tokens/s₀ ÷ N₀)
        assert e == pytest.approx(r["plan"]["estimate"]["tokens_per_s"] / r["gpus"] / (tps[0] / 128))
    assert all(0.5 < e <= 1.1 for e in eff)  # above 1 where more GPUs admit a better plan (FSDP at 256)
    assert eff[-1] < eff[0]  # the fixed global batch 1536 leaves less per GPU at 4096 GPUs


def test_sweep_days_to_train(gpt3_sweep):
    for r in gpt3_sweep["rows"]:
        est = r["plan"]["estimate"]
        assert est["train_days"] == pytest.approx(300e9 / est["tokens_per_s"] / 86_400)
    days = [r["plan"]["estimate"]["train_days"] for r in gpt3_sweep["rows"]]
    assert all(b < a for a, b in zip(days, days[1:], strict=False))


def test_sweep_size_without_plan():
    req = api.make_request(model="gpt3-175b")
    with pytest.raises(InfeasibleError, match="no plan on 8 GPUs"):
        sweep(req.ctx, [8, 128])
    out = sweep(req.ctx, [8, 40, 128], skip_infeasible=True)
    assert [r["plan"] is None for r in out["rows"]] == [True, True, False]
    assert "more than 72.8 GiB" in out["rows"][0]["no_plan"]  # 79.15 GiB less the 8 % headroom
    assert "no legal plan" in out["rows"][1]["no_plan"]  # 40 = 8·5: 96 layers, batch 1536 and 96 heads all refuse 5
    assert out["baseline_gpus"] == 128 and out["rows"][2]["scaling_efficiency"] == 1.0


# ----------------------------------------------------------------------------- smallest cluster

ERA_2021 = dict(
    precision="fp16",
    options=dict(attention_kernel="unfused", pp_scatter_gather=True, overlap_p2p_comm=False, async_tp_comm=False),
)
PINS_2021 = Pins(
    recompute=Recompute.FULL,
    recompute_method=RecomputeMethod.UNIFORM,
    sequence_parallel=False,
    distributed_optimizer=False,
    stage_split=StageSplit.EVEN,
    overlap_grad_reduce=False,
    overlap_param_gather=False,
    tp_comm_overlap=False,
)


def _smallest(hardware: str, era: str) -> int:
    if era == "2021":
        req = api.make_request(model="gpt3-175b", hardware=hardware, **ERA_2021)
        return min_gpus(req.ctx, PINS_2021).sizes[0]["gpus"]
    return min_gpus(api.make_request(model="gpt3-175b", hardware=hardware).ctx).sizes[0]["gpus"]


def test_smallest_cluster_gpt3_175b():
    """GPT-3 175B, global batch 1536, seq 2048. Found (today's calibration):

    | hardware          | 2021 options | today's options |
    |-------------------|--------------|-----------------|
    | A100 40 GB        | 192 GPUs     | 96 GPUs         |
    | A100 80 GB        | 64 GPUs      | 48 GPUs         |

    2021: full recompute, no SP, no distributed optimizer, fp16, unfused attention, an even layer
    split. The 2021 plans need the 8 % headroom and the process's own memory (CUDA context, NCCL
    buffers, fragmentation), which moved the 40 GB answer from 128 GPUs to 144 (TP 6 PP 24, 34.3 GiB)
    and the 80 GB one from 48 to 64; TP groups inside a node leave 144 no plan (TP 6 straddles 8-GPU
    nodes; TP 8 PP 6 needs 79 GiB), 160 and 176 none at all, so 192 (TP 4 PP 48, 30.4 GiB).
    Today: flash attention, bf16, any
    recompute, SP and distributed optimizer (TP 4 PP 24 full recompute + SP on 40 GB; TP 8 PP 6 SP
    on 80 GB). On 80 GB the weights, fp32 main grads and Adam states alone need ≥ 38-42 GPUs
    (18 or 20 bytes per parameter), so both eras land on the first legal node count above.
    """
    found = {
        (hw, era): _smallest(hw, era)
        for hw in ("dgx-a100-40gb-superpod", "dgx-a100-superpod")
        for era in ("2021", "today")
    }
    for era in ("2021", "today"):
        assert found[("dgx-a100-40gb-superpod", era)] >= found[("dgx-a100-superpod", era)]
    for hw in ("dgx-a100-40gb-superpod", "dgx-a100-superpod"):
        assert found[(hw, "today")] <= found[(hw, "2021")]
    assert found[("dgx-a100-40gb-superpod", "2021")] == 192
    assert found[("dgx-a100-40gb-superpod", "today")] == 96
    assert found[("dgx-a100-superpod", "2021")] == 64
    assert found[("dgx-a100-superpod", "today")] == 48


def test_min_gpus_result_shape_and_bound():
    req = api.make_request(model="gpt3-175b", hardware="dgx-a100-40gb-superpod")
    fit = min_gpus(req.ctx)
    # 175B params × 18 bytes (bf16 + distributed optimizer, all sharded) over the 39.49 GiB PyTorch can allocate,
    # less the 8 % headroom and the 1 GiB CUDA context: 174.6e9 · 18 / ((39.49 · 0.92 − 1) · 2^30) = 82.1
    assert fit.lower_bound_gpus == lower_bound_gpus(req.ctx) == 83
    sizes = [s["gpus"] for s in fit.sizes]
    assert sizes[0] == 96 and len(sizes) == 4 and all(n % 8 == 0 for n in sizes) and sizes == sorted(sizes)
    assert all(s["plan"]["estimate"]["fits"] for s in fit.sizes)
    assert set(fit.tried) == {88}  # tried below the answer (from the bound's node count, 11 nodes), with its reason
    assert all(n < 96 for n in fit.tried)


def _searched_sizes(monkeypatch) -> list[int]:
    """The GPU counts min_gpus searches, in order."""
    from planner.runs import min_gpus as module

    sizes, search = [], module.search
    monkeypatch.setattr(module, "search", lambda ctx, n, *a, **k: sizes.append(n) or search(ctx, n, *a, **k))
    return sizes


@pytest.mark.parametrize("scan_first", [8, 1])
def test_min_gpus_searches_no_size_above_the_answer_before_it(monkeypatch, scan_first):
    # bound 83 GPUs: 11 nodes, the first power of two from it 16. Scanning 11, 12 first finds 96 without the
    # 1.4 M-plan search of 128 GPUs it made before; with one node count scanned first (88: no plan) it doubles
    # to 128 and scans 12 nodes up to it: the same answer and the same sizes tried below it either way
    from planner.runs import min_gpus as module

    monkeypatch.setattr(module, "SCAN_FIRST", scan_first)
    sizes = _searched_sizes(monkeypatch)
    fit = min_gpus(api.make_request(model="gpt3-175b", hardware="dgx-a100-40gb-superpod").ctx)
    assert [s["gpus"] for s in fit.sizes] == [96, 112, 128, 144] and set(fit.tried) == {88}
    assert sizes[:3] == ([88, 96, 104] if scan_first == 8 else [88, 128, 96])


def test_min_gpus_with_no_plan_anywhere_says_up_to_which_size(monkeypatch):
    from planner.runs import min_gpus as module

    monkeypatch.setattr(module, "MAX_GPUS", 64)
    sizes = _searched_sizes(monkeypatch)
    req = api.make_request(model="gpt3-175b", hardware="dgx-a100-40gb-superpod")
    with pytest.raises(InfeasibleError, match=r"^no plan fits gpt3-175b on up to 128 GPUs of dgx-a100-40gb-superpod; "):
        min_gpus(req.ctx, Pins(tp=8, pp=8, dp=1))  # 64 GPUs a plan: none above 64 (the bound, 88, is above)
    assert sizes == [88, 96, 104, 112, 120, 128]  # 11 to 16 nodes: the first scan reaches the power of two, 16


def test_min_gpus_small_model_below_one_node():
    # 1.7B: 1.7e9 × 18 bytes ≈ 30 GB fits one 80 GB GPU with recomputation
    fit = min_gpus(api.make_request(model="gpt-1.7b").ctx)
    assert fit.sizes[0]["gpus"] == 1
    assert [s["gpus"] for s in fit.sizes][1:] == [8, 16, 24]


def test_sweep_and_smallest_cluster_titles_name_the_precision_as_search_does():
    # the three titles share one description of the setup (report.search.setup_words): sweep's and --min-gpus's
    # said "bf16" for an FP8 run before
    from conftest import run_cli

    args = ["--model", "gpt3-175b", "--hardware", "dgx-h100-superpod", "--global-batch", "256", "--fp8", "hybrid"]
    setup = "global batch 256 × seq 2048, bf16, FP8, flash attention"
    sweep_out = run_cli(["sweep", *args, "--gpus", "128,256"], env={"COLUMNS": "120"})
    assert sweep_out.exit_code == 0 and sweep_out.output.startswith(f"gpt3-175b on dgx-h100-superpod: {setup}\n")
    fit = run_cli(["search", *args, "--min-gpus"], env={"COLUMNS": "120"})
    assert fit.exit_code == 0 and fit.output.startswith(f"Smallest cluster for gpt3-175b on dgx-h100-superpod: {setup}")
    search = run_cli(["search", *args, "--gpus", "128"], env={"COLUMNS": "120"})
    assert search.exit_code == 0 and search.output.startswith(f"gpt3-175b on 128 GPUs of dgx-h100-superpod: {setup}")
