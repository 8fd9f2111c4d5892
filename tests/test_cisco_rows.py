"""Cisco's MLPerf v5.1 Llama 3.1 8B on 64 and 128 H100 over Ethernet: one micro-batch a step without CUDA graphs,
held out (docs/cost-model.md §10.1)."""

import dataclasses

import numpy as np
import pytest

from planner.costs.estimate import evaluate
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import prepare, validate
from planner.space.grid import PlanGrid

N8 = "MLPERF-v5.1-Cisco-hpf_n8-H100-llama31_8b"
N16 = "MLPERF-v5.1-Cisco-hpf_n16-H100-llama31_8b"
UF_N8 = "MLPERF-v5.1-hpg.dgxb200x8.n8-llama31_8b"


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in validate()["runs"]}


@pytest.fixture(scope="module")
def requests():
    runs = {r.id: r for r in load_runs()}
    return {rid: prepare(runs[rid]) for rid in (N8, N16, UF_N8)}


def _step_s(req, **options) -> tuple[float, float]:
    ctx = dataclasses.replace(req.ctx, options=req.ctx.options.model_copy(update=options)) if options else req.ctx
    ev = evaluate(PlanGrid.from_plans([req.plan]), ctx)
    return float(np.ravel(ev.iteration_s)[0]), float(np.ravel(ev.time["dp_comm"])[0])


def test_the_rows_read_cisco_s_launch_files(requests):
    # config_DGXH100_8x8x1xtp1pp1cp1.sh and config_DGXH100_16x8x1xtp2pp1cp1.sh: MICRO_BATCH_SIZE=1, GBS 64 (the log's
    # global_batch_size, gradient_accumulation_steps 1), CP 1; conf/custom.yaml's bucket_size default 64 (parameters:
    # every parameter its own bucket), the dp communicator's max_ctas 8, FP8 delayed scaling with FP8 parameters,
    # MCORE_CUDA_GRAPH=False
    for rid, tp in ((N8, 1), (N16, 2)):
        req = requests[rid]
        plan, o = req.plan, req.ctx.options
        shape = (plan.tp, plan.pp, plan.cp, plan.dp, plan.micro_batch, req.ctx.training.global_batch)
        assert shape == (tp, 1, 1, 64, 1, 64)
        assert o.ddp_bucket_size == 64 and o.dp_max_ctas == 8 and not o.use_sharp
        assert o.fp8_recipe.value == "delayed" and o.fp8_param_gather and o.grad_reduce_in_bf16
        assert o.cuda_graph_impl.value == "none" and o.tp_only_amax_red
    assert not requests[N8].ctx.options.tp_comm_overlap
    # TP 2: pretrain.py's own TransformerLayerTPOverlapCfg, not conf/tp_overlap/h100tp2mbs1.yaml
    cfg = dict(requests[N16].ctx.options.tp_comm_overlap_cfg.ops)
    assert (cfg["qkv_wgrad"].method, cfg["qkv_wgrad"].num_sm, cfg["qkv_wgrad"].set_sm_margin) == ("bulk", 24, False)
    assert [cfg[k].num_sm for k in ("qkv_dgrad", "fc1_dgrad", "fc1_wgrad")] == [2, 2, 2]
    proj = cfg["proj_fprop"]
    assert (proj.method, proj.num_sm, proj.set_sm_margin) == ("pipeline", 24, True)
    assert (cfg["fc2_fprop"].num_sm, cfg["fc2_fprop"].num_splits) == (8, 4)
    assert {cfg[k].method for k in ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad")} == {"ring_exchange"}


def test_both_rows_are_held_out_and_predicted_fast(rows):
    # 0.7205 s and 0.4851 s: the medians of 10 runs' median train_step_time each; predicted 0.573 and 0.324 s
    for rid, published, low, high in ((N8, 0.7205, -21.5, -19.5), (N16, 0.4851, -34.0, -32.0)):
        row = rows[rid]
        assert row["hardware"] == "dgx-h100-superpod" and not row["in_fit"] and row["in_bar"]
        assert row["published"] == pytest.approx(published)
        assert low < row["error_pct"] < high


def test_the_miss_is_one_per_step_time_at_both_sizes_and_not_nvidias_implementations(rows, requests):
    # what a step takes beyond the model: 0.7205 - 0.573 = 0.147 s at TP 1, 0.4851 - 0.324 = 0.161 s at TP 2, though
    # TP 2 halves the compute a GPU does (0.53 -> 0.28 s) - a cost per step, not per FLOP. It is 1.8-1.9x the whole
    # data-parallel time the model gives either plan (0.083 s with nothing overlapped: the same at both, the node's
    # rails carry the same bytes), so no exposure of the modelled collectives covers it. NVIDIA's own v5.1
    # implementation on 64 B200 (University of Florida: the same DP 64 traffic, full-iteration graphs, 134M-parameter
    # buckets) misses by 2 ms
    misses = {}
    for rid in (N8, N16, UF_N8):
        step, _ = _step_s(requests[rid])
        misses[rid] = rows[rid]["published"] - step
        whole_dp = _step_s(requests[rid], overlap_grad_reduce=False, overlap_param_gather=False)[1]
        assert whole_dp == pytest.approx(0.083, abs=0.002)
    assert misses[N8] == pytest.approx(0.147, abs=0.004) and misses[N16] == pytest.approx(0.161, abs=0.004)
    assert misses[N8] / 0.083 > 1.7 and abs(misses[UF_N8]) < 0.005
