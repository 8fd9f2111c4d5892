"""--tp-comm-overlap as Transformer Engine runs it: each overlapped GEMM's method, SMs and margin from
a userbuffer config (Megatron-Bridge's preset, TE's defaults, or the user's YAML), every term by
hand; and Hopper's connection limit (Megatron FSDP or the expert all-to-all overlap with TP)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import api
from planner.costs import estimate, flops
from planner.costs.communication import (
    connection_limited,
    fp8_amax_reduction_s,
    pipelined_rs_s,
    ring_exchange_aggregated_s,
    ring_exchange_s,
    ring_rs_reordered_s,
    tp_pair_exposed_s,
    tp_pair_ub_s,
    ub_sm_charge_s,
)
from planner.costs.estimate import evaluate
from planner.costs.letters import Letters
from planner.costs.linears import split_gemms_s, tp_formula
from planner.fidelity.runs import load_runs, reduces_amax_over_tp_only, te_reorders_graphed_rs
from planner.fidelity.validate import prepare
from planner.hardware import userbuffers
from planner.hardware.collectives import all_gather_time_s, group_link, measured_collective_time_s, nvlink_nccl_time_s
from planner.hardware.userbuffers import UbConfig, bridge_presets, plan_configs, plan_ops, resolved_op
from planner.plan import CudaGraphImpl, Fp8Recipe
from planner.presets import presets_root
from planner.space.grid import PlanGrid

H100_SMS = 132  # H100 SXM5


def op(pipeline=False, num_sm=1, margin=False, splits=4):
    return {"pipeline": np.array(pipeline), "num_sm": np.array(float(num_sm)), "margin": np.array(margin)} | {
        "splits": np.array(float(splits))
    }


def test_sm_charge_follows_the_share_of_the_gemm():
    # margin: the GEMM on 132 − 24 SMs all along: 1 ms × 24/108
    assert float(ub_sm_charge_s(1e-3, 1e-4, 24, H100_SMS, margin=True, sm_comm=True)) == pytest.approx(1e-3 * 24 / 108)
    # no margin (Bridge's bulk overlaps): 4 SMs lost only while the 0.1 ms kernel runs: 0.1 ms × 4/132
    assert float(ub_sm_charge_s(1e-3, 1e-4, 4, H100_SMS, margin=False, sm_comm=True)) == pytest.approx(1e-4 * 4 / 132)
    # a kernel longer than the GEMM: the GEMM ends on 128 SMs, 1 ms × 4/128
    assert float(ub_sm_charge_s(1e-3, 1.0, 4, H100_SMS, margin=False, sm_comm=True)) == pytest.approx(1e-3 * 4 / 128)
    # a ring exchange copies on the copy engines: no charge without the margin, 1 SM's with it
    assert float(ub_sm_charge_s(1e-3, 1e-4, 1, H100_SMS, margin=False, sm_comm=False)) == 0.0
    assert float(ub_sm_charge_s(1e-3, 1e-4, 1, H100_SMS, margin=True, sm_comm=False)) == pytest.approx(1e-3 / 131)


def test_ring_exchange_and_pipeline_by_hand():
    # 4 chunks of 0.2 ms, 3 pieces of 0.1 ms: the pieces hide, 0.8 ms; of 0.3 ms: 0.2 + 3 × 0.3
    assert float(ring_exchange_s(0.8e-3, 0.3e-3, 4)) == pytest.approx(0.8e-3)
    assert float(ring_exchange_s(0.8e-3, 0.9e-3, 4)) == pytest.approx(0.2e-3 + 3 * 0.3e-3)
    # pipeline of 4: chunks of 0.1 ms, reduce-scatters of 0.05 ms: 0.1 + 3 × 0.1 + the last 0.05
    assert float(pipelined_rs_s(0.4e-3, 0.2e-3, 4)) == pytest.approx(0.45e-3)
    # comm-bound: the scatters queue behind the first chunk, 0.1 + 4 × 0.2
    assert float(pipelined_rs_s(0.4e-3, 0.8e-3, 4)) == pytest.approx(0.1e-3 + 4 * 0.2e-3)


def test_an_aggregated_ring_exchange_by_hand():
    # TE split_overlap_ag with aggregate, t = 4: one piece (0.3 ms / 3 = 0.1 ms) from the neighbour before any
    # GEMM, then 2 GEMMs of two pieces (0.84 ms as 2 chunks: 0.42 ms each) while the pair travels (0.2 ms)
    assert float(ring_exchange_aggregated_s(0.84e-3, 0.3e-3, 4)) == pytest.approx(0.1e-3 + 0.42e-3 + 0.42e-3)
    # comm-bound (1.5 ms: pieces of 0.5, pairs of 1.0 ms): 0.5 + 0.42 + 1.0
    assert float(ring_exchange_aggregated_s(0.84e-3, 1.5e-3, 4)) == pytest.approx(0.5e-3 + 0.42e-3 + 1.0e-3)
    # t = 8: 1 piece, then 4 GEMMs of 2 pieces: 0.1/7 + 0.21 + 3 × 0.21
    assert float(ring_exchange_aggregated_s(0.84e-3, 0.1e-3, 8)) == pytest.approx(0.1e-3 / 7 + 4 * 0.21e-3)


def test_the_nemo1_gpt3_config_aggregates_only_fc2_dgrad():
    # nemo_megatron/cfg/gpt3_175b_hydra.yaml @ v25.04: fc2_dgrad {method: ring_exchange, aggregate: 1}; TE reads
    # aggregate only for a ring-exchanged all-gather, and t must split in pairs
    cfg = userbuffers.load_config_file(str(presets_root() / "userbuffers" / "nemo1_gpt3_175b_h100.yaml"))
    t = np.array([4, 8, 3])
    got = {name: resolved_op(cfg, name, t)["aggregate"].tolist() for name in userbuffers.OPS}
    assert got["fc2_dgrad"] == [True, True, False]
    assert all(v == [False, False, False] for name, v in got.items() if name != "fc2_dgrad")
    assert resolved_op(None, "fc2_dgrad", t)["aggregate"].tolist() == [False] * 3  # TE's default


AG, RS = 0.12e-3, 0.12e-3  # seconds: GPT-3 175B's 50 MB activation all-gathered over 4 H100s (made round)
GEMM = {  # QKV → projection of GPT-3 175B at t = 4, b = 1 (ms, made round)
    "in": np.array(0.68e-3),
    "out": np.array(0.24e-3),
    "in_split_t": np.array(0.70e-3),
    "out_split_t": np.array(0.25e-3),
    "out_split_k": np.array(0.245e-3),
    "t": np.array(4.0),
}


def test_gpt3_bridge_config_by_hand():
    # Bridge userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048: proj_fprop pipeline 24 SMs (margin) in 4,
    # qkv_fprop / proj_dgrad rings on the copy engines, qkv_dgrad and qkv_wgrad bulk on 4 SMs, no margin
    ub = {
        "in_fprop": op(),
        "out_fprop": op(pipeline=True, num_sm=24, margin=True),
        "out_dgrad": op(),
        "in_dgrad": op(num_sm=4),
        "in_wgrad": op(num_sm=4),
    }
    fwd, bwd = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0)
    ring_in = 0.70e-3 / 4 + 3 * max(0.70e-3 / 4, AG / 3)  # 0.70 ms: the pieces hide
    chunk = 0.245e-3 * 132 / 108 / 4  # a quarter of the projection on 108 SMs
    piped = chunk + 3 * max(chunk, RS / 4) + RS / 4
    assert float(fwd) == pytest.approx(ring_in - 0.68e-3 + piped - 0.24e-3)
    ring_dgrad = 0.25e-3 / 4 + 3 * max(0.25e-3 / 4, RS / 3)
    bulk = 0.68e-3 + AG * 4 / 132  # the all-gather's 0.12 ms on 4 of 132 SMs
    assert float(bwd) == pytest.approx(ring_dgrad - 0.24e-3 + 2 * (bulk - 0.68e-3))
    # far below the NCCL path's 0.24 ms forward (AG + RS) and 0.12 ms backward (the output-gradient AG)
    nccl = tp_pair_exposed_s(AG, RS, 2 * AG, GEMM, sequence_parallel=np.array(True), async_backward=True, overlap=False)
    assert float(fwd) < float(nccl[0]) and float(bwd) < float(nccl[1])


def test_an_atomic_gemm_runs_whole_and_releases_the_chunks():
    # TE atomic_gemm_overlap_rs: one atomic GEMM of the whole projection (0.24 ms, not 4 chunks of 0.245/4)
    # on 132 − 24 SMs, its 4 chunks reduce-scattered as the counters release them, the last exposed
    ub = {k: op() for k in ("in_fprop", "out_dgrad", "in_dgrad", "in_wgrad")}
    ub["out_fprop"] = op(pipeline=True, num_sm=24, margin=True) | {"atomic": np.array(True)}
    fwd, _ = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0)
    ring_in = 0.70e-3 / 4 + 3 * max(0.70e-3 / 4, AG / 3)
    chunk = 0.24e-3 * 132 / 108 / 4
    assert float(fwd) == pytest.approx(ring_in - 0.68e-3 + chunk + 3 * max(chunk, RS / 4) + RS / 4 - 0.24e-3)
    # the same on a ring (atomic_gemm_overlap_ag): the QKV GEMM whole, 0.68 ms, its pieces hidden
    ub["in_fprop"] = op() | {"atomic": np.array(True)}
    atomic_in, _ = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0)
    assert float(fwd) - float(atomic_in) == pytest.approx(ring_in - 0.68e-3)


def test_an_aggregated_dgrad_ring_waits_for_the_first_piece():
    # fc2_dgrad of NeMo 1's GPT-3 config (aggregate: 1): the projection's dgrad as 2 GEMMs of 1024 rows (0.243 ms
    # together) after the first 0.04 ms piece; the bulk overlaps at 1 SM on the copy engines' ring cost nothing
    ub = {k: op() for k in ("in_fprop", "out_fprop", "in_dgrad", "in_wgrad")}
    ub["out_dgrad"] = op() | {"aggregate": np.array(True)}
    gemm = GEMM | {"out_split_half": np.array(0.243e-3)}
    _, bwd = tp_pair_ub_s(AG, RS, gemm, ub, H100_SMS, reduce_s=0.0)
    bulk = 2 * (0.68e-3 + AG * 1 / 132 - 0.68e-3)
    assert float(bwd) == pytest.approx(RS / 3 + 0.243e-3 / 2 + max(0.243e-3 / 2, 2 * RS / 3) - 0.24e-3 + bulk)
    # without aggregate: 4 GEMMs of 512 rows (0.25 ms), nothing waited for
    _, plain = tp_pair_ub_s(AG, RS, gemm, ub | {"out_dgrad": op()}, H100_SMS, reduce_s=0.0)
    assert float(plain) == pytest.approx(0.25e-3 - 0.24e-3 + bulk)


def test_mlperf_gpt3_runs_read_their_own_userbuffer_config():
    # mlcommons training_results v4.0/v4.1, conf/tp_overlap/h100tp4mbs{1,2}.yaml with the launch configs'
    # variables: v4.1 (n32, n64) and v4.0 n64 the projection's reduce-scatter behind an atomic GEMM, fc2 rung;
    # v4.0 n1344/n1452 (mbs 1) fc2 pipelined on 4 SMs behind an atomic GEMM, the projection in 4 chunk GEMMs
    def ops(rid):
        req = prepare(next(r for r in load_runs() if r.id == rid))
        configs, index = plan_configs(req.ctx.options.tp_comm_overlap_cfg, 9.0, True, 12288, 2048, [4], [2])
        return plan_ops(configs, index, np.array([4]))

    o = ops("MLPERF-v4.1-eos_n32_ngc24.09_nemo-gpt3")
    assert bool(o["proj_fprop"]["atomic"][0]) and bool(o["proj_fprop"]["pipeline"][0])
    assert not o["fc2_fprop"]["pipeline"][0] and not o["fc2_fprop"]["atomic"][0]
    assert [float(o[k]["num_sm"][0]) for k in userbuffers.BULK_OPS] == [2.0, 4.0, 2.0, 2.0]
    o = ops("MLPERF-v4.0-eos-dfw_n1452_ngc24.04_nemo-gpt3")
    assert not o["proj_fprop"]["atomic"][0] and float(o["proj_fprop"]["num_sm"][0]) == 24.0
    assert bool(o["fc2_fprop"]["atomic"][0]) and bool(o["fc2_fprop"]["pipeline"][0])
    assert float(o["fc2_fprop"]["num_sm"][0]) == 4.0 and float(o["fc2_fprop"]["splits"][0]) == 4.0
    cfg = userbuffers.load_config_file(str(presets_root() / "userbuffers" / "mlperf_v41_gpt3_h100_tp4_mbs2.yaml"))
    assert "proj_fprop pipeline ×4 atomic GEMM 24 SMs margin" in userbuffers.describe(cfg, 4)


def test_ring_exchanged_reduce_scatter_adds_its_final_sum():
    ub = {k: op() for k in ("in_fprop", "out_fprop", "out_dgrad", "in_dgrad", "in_wgrad")}
    base, _ = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0)
    summed, _ = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=2e-5)
    assert float(summed - base) == pytest.approx(2e-5)


def test_te_defaults():
    # transformer_engine/pytorch/module/base.py @ v2.9 get_default_config
    t = np.array(8)
    ring = resolved_op(None, "qkv_fprop", t)
    assert (bool(ring["pipeline"]), float(ring["num_sm"]), bool(ring["margin"]), float(ring["splits"])) == (
        False,
        1.0,
        False,
        8.0,
    )
    pipe = resolved_op(None, "fc2_fprop", t)
    assert (bool(pipe["pipeline"]), float(pipe["num_sm"]), bool(pipe["margin"]), float(pipe["splits"])) == (
        True,
        16.0,
        True,
        4.0,
    )
    bulk = resolved_op(None, "fc1_wgrad", t)
    assert (float(bulk["num_sm"]), bool(bulk["margin"])) == (16.0, True)


def test_which_config_a_plan_runs():
    t, b = np.array([4, 4, 8, 4]), np.array([1, 2, 1, 1])
    bridge = userbuffers.load_config_file("bridge")
    assert plan_configs(None, 9.0, False, 12288, 2048, t, b)[0] == [None]  # Megatron-LM without a file: TE's
    configs, index = plan_configs(bridge, 9.0, False, 12288, 2048, t, b)
    names = [configs[i].name if configs[i] else "TE" for i in index]
    # b = 2 takes the mbs1 preset as Bridge's GPT-3 175B recipe does; t = 8 has none: TE's defaults
    assert names == ["Megatron-Bridge userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"] * 2 + ["TE"] + [
        "Megatron-Bridge userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"
    ]
    fp8, i8 = plan_configs(bridge, 9.0, True, 12288, 2048, t[:1], b[:1])
    assert fp8[int(i8[0])].name.endswith("userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048")
    blackwell, ib = plan_configs(bridge, 10.0, False, 12288, 2048, t[:1], b[:1])
    assert blackwell[int(ib[0])].name.endswith("userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048")
    ampere, ia = plan_configs(bridge, 8.0, False, 12288, 2048, t[:1], b[:1])
    assert ampere[int(ia[0])] is None
    ops = plan_ops(configs, index, t)
    np.testing.assert_array_equal(ops["proj_fprop"]["num_sm"], [24, 24, 16, 24])  # Bridge 24, TE 16
    np.testing.assert_array_equal(ops["qkv_dgrad"]["margin"], [False, False, True, False])


def test_bridge_presets_are_complete():
    presets = bridge_presets()
    assert len(presets) == 17  # comm_overlap.py @ v0.6.0: 19 TransformerLayerTPOverlapCfg, less 2 LoRA
    for p in presets:
        assert set(p.ops) == set(userbuffers.OPS)
        assert all(o.method in userbuffers.ALLOWED[name] for name, o in p.ops.items())


def test_a_user_file_lays_its_entries_over_te_defaults(tmp_path):
    f = tmp_path / "ub.yaml"
    f.write_text("qkv_dgrad: {num_sm: 4, set_sm_margin: false, cga_size: 2}\nproj_fprop: {method: ring_exchange}\n")
    cfg = userbuffers.load_config_file(str(f))
    assert resolved_op(cfg, "qkv_dgrad", np.array(4))["num_sm"] == 4
    assert not resolved_op(cfg, "qkv_dgrad", np.array(4))["margin"]
    assert resolved_op(cfg, "qkv_wgrad", np.array(4))["num_sm"] == 16  # not in the file: TE's default
    assert not resolved_op(cfg, "proj_fprop", np.array(4))["pipeline"]
    with pytest.raises(ValueError, match="allowed: ring_exchange"):
        UbConfig(name="x", ops=(("qkv_fprop", {"method": "bulk"}),))
    with pytest.raises(ValueError, match="not a userbuffers GEMM"):
        UbConfig(name="x", ops=(("attn_fprop", {}),))


def _with_overlap(run_id: str, on: bool, split_us: float | None = None) -> float:
    run = next(r for r in load_runs() if r.id == run_id)
    req = prepare(run)
    ctx = dataclasses.replace(req.ctx, options=req.ctx.options.model_copy(update={"tp_comm_overlap": on}))
    if split_us is not None:
        ctx = _with_split(ctx, split_us)
    return float(evaluate(PlanGrid.from_plans([req.plan]), ctx).iteration_s[0])


def test_a_graph_reordered_ring_reduce_scatter_sends_after_the_gemm():
    # TE < 2.16 under CUDA graphs (PR #2056): the chunks (0.25 ms as 4) run first, the pieces (0.12 ms) after them
    assert float(ring_rs_reordered_s(0.25e-3, 0.12e-3)) == pytest.approx(0.37e-3)
    ub = {k: op() for k in ("in_fprop", "out_fprop", "out_dgrad", "in_dgrad", "in_wgrad")}  # rings, no margin
    ordered, bwd = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0)
    reordered, bwd_graphed = tp_pair_ub_s(AG, RS, GEMM, ub, H100_SMS, reduce_s=0.0, rs_reordered=True)
    # ordered: 0.0625 + 3 × max(0.0625, 0.04) = 0.25 ms, every piece hidden; reordered: 0.25 + 0.12 ms
    rung = 0.25e-3 / 4 + 3 * max(0.25e-3 / 4, RS / 3)
    assert float(reordered - ordered) == pytest.approx(0.25e-3 + RS - rung) == pytest.approx(0.12e-3)
    assert float(bwd_graphed) == float(bwd)  # the backward's rings are all-gathers (split_overlap_ag): unchanged
    # a pipelined reduce-scatter (CommOverlapBase) and an atomic GEMM (one kernel) are not the PR's path
    for out_op in (op(pipeline=True, num_sm=24, margin=True), op() | {"atomic": np.array(True)}):
        u = ub | {"out_fprop": out_op}
        same = tp_pair_ub_s(AG, RS, GEMM, u, H100_SMS, 0.0)[0], tp_pair_ub_s(AG, RS, GEMM, u, H100_SMS, 0.0, True)[0]
        assert float(same[0]) == float(same[1])


def test_which_runs_predate_the_graph_reorder_fix():
    # TE v2.16 (tagged 2026-05-29): a container tag before 26.06, or an MLPerf v4/v5 round without one
    assert te_reorders_graphed_rs("NeMo 25.04.00 (nemotron/launch.sh FW_VERSION=25.04.00)")
    assert te_reorders_graphed_rs("NeMo 26.04.01 container (Megatron-Bridge)")
    assert te_reorders_graphed_rs("MLPerf Training v4.1, preview submission (container tag not in dir name)")
    assert not te_reorders_graphed_rs("NeMo 26.06 container (Megatron-Bridge)")
    runs = {r.id: r for r in load_runs()}
    graphed = prepare(runs["DGXC-v25.05.05-GB200-Nemotron4-340B-fp8-n128"])
    assert graphed.ctx.options.ub_graph_reorders_rs
    assert any("PR #2056" in a for a in runs["DGXC-v25.05.05-GB200-Nemotron4-340B-fp8-n128"].assumptions)
    # Nemotron-4 340B FP8 on 128 GB200 (TE graphs, Bridge's b200 preset: proj_fprop and fc2_fprop rung):
    # the step is longer where the graph reorders the reduce-scatters, and only its forward TP term moves
    fixed = dataclasses.replace(
        graphed,
        ctx=dataclasses.replace(
            graphed.ctx, options=graphed.ctx.options.model_copy(update={"ub_graph_reorders_rs": False})
        ),
    )
    ev_bug, ev_fix = (evaluate(PlanGrid.from_plans([r.plan]), r.ctx) for r in (graphed, fixed))
    moved = {k for k in ev_bug.time if float(np.asarray(ev_bug.time[k])[0]) != float(np.asarray(ev_fix.time[k])[0])}
    assert float(ev_bug.iteration_s[0]) > float(ev_fix.iteration_s[0]) and "tp_comm" in moved
    assert "PR #2056" in tp_formula(graphed.ctx, graphed.plan).text
    assert "PR #2056" not in tp_formula(fixed.ctx, fixed.plan).text


@pytest.mark.parametrize(
    "run_id",
    [
        "DGXC-v25.04-H100-GPT3-175B-bf16-n128",
        "DGXC-v25.04-H100-GPT3-175B-fp8-n128",
        "DGXC-v25.04-H100-Llama3.1-405B-bf16-n512",
        "DGXC-v25.04-H100-Llama3.1-405B-fp8-n512",
    ],
)
def test_nvidia_recipes_are_faster_with_tp_overlap(run_id):
    # the DGX Cloud recipes run --tp-comm-overlap on H100 (GPT-3: NeMo 1's hydra userbuffer config;
    # Llama 3.1: Bridge's presets for these shapes), each chunk priced alone at the GEMM law (no preset carries
    # gemm_split_us yet); without it the TP collectives are NCCL's at OpenXLA's measured H100 times. GPT-3 bf16 on
    # 128: 8.61 s on, 8.66 s off (8.47 s off when NCCL was priced at 0.8 of NVLink, 314 GB/s at 48 MiB)
    assert _with_overlap(run_id, True) < _with_overlap(run_id, False)


def test_the_dgx_cloud_gpt3_runs_read_their_own_userbuffer_config():
    # nemo_megatron/cfg/gpt3_175b_hydra.yaml @ v25.04: one config for bf16 and fp8, both row-parallel
    # outputs pipelined (proj 24 SMs, fc2 20 SMs, the margin), qkv_wgrad bulk on 8 SMs
    for rid in ("DGXC-v25.04-H100-GPT3-175B-bf16-n128", "DGXC-v25.04-H100-GPT3-175B-fp8-n2048"):
        req = prepare(next(r for r in load_runs() if r.id == rid))
        lt_t, lt_b = np.array([4]), np.array([1])
        cfg = req.ctx.options.tp_comm_overlap_cfg
        configs, index = plan_configs(cfg, 9.0, "fp8" in rid, 12288, 2048, lt_t, lt_b)
        ops = plan_ops(configs, index, lt_t)
        got = [(bool(ops[k]["pipeline"][0]), float(ops[k]["num_sm"][0])) for k in ("proj_fprop", "fc2_fprop")]
        assert got == [(True, 24.0), (True, 20.0)] and float(ops["qkv_wgrad"]["num_sm"][0]) == 8.0
        assert bool(ops["fc2_fprop"]["margin"][0]) and "nemo1_gpt3_175b_h100.yaml" in cfg.name


def _ops(rid: str, t: int, h: int, s: int) -> tuple[dict, str]:
    req = prepare(next(r for r in load_runs() if r.id == rid))
    lt_t, lt_b = np.array([t]), np.array([1])
    cfg = req.ctx.options.tp_comm_overlap_cfg
    configs, index = plan_configs(cfg, 9.0 if "B200" not in rid else 10.0, True, h, s, lt_t, lt_b)
    ops = plan_ops(configs, index, lt_t)
    return {k: {f: float(v[0]) for f, v in op.items()} for k, op in ops.items()}, cfg.name


def test_nemo_22_runs_read_the_userbuffer_presets_of_their_release():
    # NeMo 2.2 (nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py @ v2.2.0, and at d2b21556f245, the
    # commit DGX Cloud v25.04's setup.sh checks out) defines presets under Megatron-Bridge's names whose fields differ.
    # Its Llama 3.1 405B presets (h16384 tp8 cp2, b200 h16384 tp4 cp2) aggregate their all-gather rings, which the law's
    # chunk price over-rewards (the same 405B bf16 plan on 512 H100: 19.78 s with them, 19.81 s with Bridge's; the model
    # 2.8 % apart): those runs keep Bridge's presets (docs/cost-model.md §6.3.1)
    for rid in ("DGXC-v25.04-H100-Llama3.1-405B-bf16-n512", "NEMODOC-25.02-B200-Llama3.1-405B-n128"):
        assert next(r for r in load_runs() if r.id == rid).request["options"]["tp_comm_overlap_cfg"] == "bridge"
    # userbuffers_fp8_h100_h8192_tp4 (Llama 3 70B FP8): proj_fprop on 24 SMs and fc2_fprop on 16, both pipelined
    ops, _ = _ops("DGXC-v25.04-H100-Llama3-70B-fp8-n64", 4, 8192, 8192)
    assert [(ops[k]["pipeline"], ops[k]["num_sm"]) for k in ("proj_fprop", "fc2_fprop")] == [(1.0, 24.0), (1.0, 16.0)]
    # userbuffers_fp8_h100_h12288_tp4 (NeMo 25.02's GPT-3 175B FP8 on H100): proj_fprop pipelined on 24 SMs, fc2 rung
    ops, _ = _ops("NEMODOC-25.02-H100-GPT3-175B-n512", 4, 12288, 2048)
    assert [(ops[k]["pipeline"], ops[k]["num_sm"]) for k in ("proj_fprop", "fc2_fprop")] == [(1.0, 24.0), (0.0, 1.0)]
    # NeMo 25.02's Nemotron-4 340B FP8 on B200 runs the bf16 preset (v2.2.0 has no fp8 one for h18432 tp8): fc2_fprop
    # pipelined on 24 SMs, where the fp8 preset (NeMo 2.3+, Bridge) rings it
    ops, name = _ops("NEMODOC-25.02-B200-Nemotron4-340B-n128", 8, 18432, 4096)
    assert "nemo_v220_nemotron4_340b_b200" in name
    assert (ops["fc2_fprop"]["pipeline"], ops["fc2_fprop"]["num_sm"]) == (1.0, 24.0)
    # DGX Cloud v25.05.05 checks out NeMo 6f2c6fdaffcc, whose presets are Bridge's: no file of its own
    run = next(r for r in load_runs() if r.id == "DGXC-v25.05.05-H100-Llama3.1-405B-fp8-n512")
    assert run.request["options"]["tp_comm_overlap_cfg"] == "bridge"


def _with_split(ctx, split_us):
    """The context on a GPU whose ``gemm_split_us`` is ``split_us`` (None: each chunk at the GEMM law)."""
    gpu = ctx.hardware.gpu.model_copy(update={"gemm_split_us": split_us})
    return dataclasses.replace(ctx, hardware=ctx.hardware.model_copy(update={"gpu": gpu}))


def _law_chunks(ctx):
    return _with_split(ctx, None)


SM90_SPLIT_US = 5.64  # mean of OpenXLA's sm_90 per-GEMM split cost at n = 4096 (below, measured)


def test_without_a_measured_split_cost_chunks_run_at_the_efficiency_of_their_share():
    # QKV of GPT-3 175B at t = 4, b = 1: M = 2048 tokens, N = 3·12288/4, K = 12288; 4 chunks of 512 rows
    req = api.make_request(model="gpt3-175b", hardware="dgx-h100-superpod", gpus=8, tp=4, sequence_parallel=True)
    ctx = _law_chunks(req.ctx)
    cal, peak = ctx.hardware.calibration, ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
    M, N, K = 2048.0, 9216.0, 12288.0
    F = 2 * M * N * K

    def law(m):  # compute.gemm_efficiency written out
        x = cal.gemm_half_dim
        return cal.gemm_efficiency * m / (m + x) * N / (N + x) * K / (K + x)

    g = [flops.Gemm(flops=np.array(F), M=np.array(M), N=np.array(N), K=np.array(K))]
    alone = split_gemms_s(g, 4, ctx, fp8=False)
    assert float(alone) == pytest.approx(F / (peak * law(512.0)))  # each chunk at 512 rows' efficiency
    shared = split_gemms_s(g, 4, ctx, fp8=False, concurrent=3)
    assert float(shared) == pytest.approx(F / (peak * law(1536.0)))  # 3 chunks at once: 1536 rows'
    whole = F / (peak * law(M))
    assert whole < float(shared) < float(alone)


def test_a_split_gemm_costs_the_whole_plus_a_measured_cost_per_gemm():
    # fc1 of GPT-3 175B at t = 4, b = 1 on H100: M = 2048, N = 4·12288/4, K = 12288, as 4 chunks of 512 rows:
    # the whole GEMM at the law + 3 more GEMMs × 5.64 µs (gemm_split_us, OpenXLA's sm_90 table) = +16.9 µs
    req = api.make_request(model="gpt3-175b", hardware="dgx-h100-superpod", gpus=8, tp=4, sequence_parallel=True)
    assert req.ctx.hardware.gpu.gemm_split_us is None  # no preset carries it yet (docs/cost-model.md §6.3.1)
    req = dataclasses.replace(req, ctx=_with_split(req.ctx, SM90_SPLIT_US))
    cal, peak = req.ctx.hardware.calibration, req.ctx.hardware.gpu.peak_flops_per_s(req.ctx.precision)
    M, N, K = 2048.0, 12288.0, 12288.0
    x = cal.gemm_half_dim
    whole = 2 * M * N * K / (peak * cal.gemm_efficiency * M / (M + x) * N / (N + x) * K / (K + x))
    g = [flops.Gemm(flops=np.array(2 * M * N * K), M=np.array(M), N=np.array(N), K=np.array(K))]
    assert float(split_gemms_s(g, 4, req.ctx, fp8=False)) == pytest.approx(whole + 3 * 5.64e-6)
    # the pipeline's 4 column blocks pay the same; two GEMMs (MLA's up-projections) each pay it
    assert float(split_gemms_s(g, 4, req.ctx, fp8=False, dim="N")) == pytest.approx(whole + 3 * 5.64e-6)
    assert float(split_gemms_s(g + g, 4, req.ctx, fp8=False)) == pytest.approx(2 * whole + 6 * 5.64e-6)
    # the GEMM law's row term would charge 12× as much: (2048/(2048 + x½))/(512/(512 + x½)) − 1 of the whole
    law = float(split_gemms_s(g, 4, _law_chunks(req.ctx), fp8=False)) - whole
    assert law == pytest.approx(whole * ((2048 / (2048 + x)) / (512 / (512 + x)) - 1))
    assert law > 10 * 3 * 5.64e-6


# OpenXLA's measured H100 (sm_90) and B200 (sm_100) BF16 matmul throughput, FLOP/s (tensorflow/tensorflow
# third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h @ 372d578bb861, kDefaultMatmulPTable):
# batch 1, n = 4096, (m, k); and sm_90's (batch b, m = 512, k = 4096): b chunks in flight in one kernel
XLA_H100_BF16_N4096 = {(2048, 512): 450395060402684, (512, 512): 236298816901408}
XLA_H100_BF16_N4096 |= {(2048, 1024): 594212409518539, (512, 1024): 373345557719054}
XLA_H100_BF16_N4096 |= {(2048, 2048): 715350982011992, (512, 2048): 522247968871595}
XLA_H100_BF16_N4096 |= {(2048, 4096): 753643516181744, (512, 4096): 644116271145770}
XLA_B200_BF16_N4096 = {(2048, 512): 620525506898793, (512, 512): 272730968757937}
XLA_B200_BF16_N4096 |= {(2048, 1024): 888675211255948, (512, 1024): 442187511170596}
XLA_B200_BF16_N4096 |= {(2048, 2048): 1142696410522465, (512, 2048): 689899172114689}
XLA_B200_BF16_N4096 |= {(2048, 4096): 1338569417117924, (512, 4096): 941001762830695}
XLA_H100_BATCHED_512_N4096_K4096 = {2: 734684792336640, 4: 730064133265340}


def _extra_per_gemm_us(table, k):
    """(4·t_512 − t_2048)/3: what each of the 3 more GEMMs adds when 2048 rows run as 4 GEMMs of 512."""
    t512, t2048 = (2 * m * 4096 * k / table[(m, k)] for m in (512, 2048))
    return (4 * t512 - t2048) / 3 * 1e6


def test_the_split_cost_is_a_fixed_cost_per_gemm_as_measured():
    # sm_90: 5.76, 5.70, 5.92, 5.17 µs at k = 512 … 4096 (8× the work), mean 5.64 = the H100 preset's
    h100 = [_extra_per_gemm_us(XLA_H100_BF16_N4096, k) for k in (512, 1024, 2048, 4096)]
    assert h100 == [pytest.approx(v, abs=0.01) for v in (5.76, 5.70, 5.92, 5.17)]
    b200 = [_extra_per_gemm_us(XLA_B200_BF16_N4096, k) for k in (512, 1024, 2048, 4096)]
    assert b200 == [pytest.approx(v, abs=0.01) for v in (5.89, 6.51, 6.58, 7.23)]
    assert (sum(h100) / 4, sum(b200) / 4) == (pytest.approx(SM90_SPLIT_US, abs=0.005), pytest.approx(6.55, abs=0.005))
    # the chunked GEMM over the whole, measured, falls from 1.91 to 1.17 as k grows 8×; the GEMM law's row term
    # prices every k alike ((2048/(2048 + x½))/(512/(512 + x½)), 1.24 at x½ 176): the whole at the law + 3 × 5.64 µs
    # follows the measurement (2.05, 1.60, 1.32, 1.17 on the shipped factors) within 10 % at every k
    req = api.make_request(model="gpt3-175b", hardware="dgx-h100-superpod", gpus=8, tp=4, sequence_parallel=True)
    req = dataclasses.replace(req, ctx=_with_split(req.ctx, SM90_SPLIT_US))
    x = req.ctx.hardware.calibration.gemm_half_dim
    for k in (512, 1024, 2048, 4096):
        g = [flops.Gemm(flops=np.array(2 * 2048 * 4096 * k), M=np.array(2048.0), N=np.array(4096.0), K=np.array(k))]
        measured = XLA_H100_BF16_N4096[(2048, k)] / XLA_H100_BF16_N4096[(512, k)]
        whole = float(split_gemms_s(g, 1, req.ctx, fp8=False))
        priced = float(split_gemms_s(g, 4, req.ctx, fp8=False)) / whole
        law = float(split_gemms_s(g, 4, _law_chunks(req.ctx), fp8=False)) / whole
        assert priced == pytest.approx(measured, rel=0.10)
        assert law == pytest.approx((2048 / (2048 + x)) / (512 / (512 + x)))
    assert measured < law < XLA_H100_BF16_N4096[(2048, 512)] / XLA_H100_BF16_N4096[(512, 512)]
    # chunks in flight together (one batched kernel) cost less again: 1.026 (2), 1.032 (4) of the whole at k = 4096
    xla = XLA_H100_BF16_N4096
    assert [xla[(2048, 4096)] / XLA_H100_BATCHED_512_N4096_K4096[b] for b in (2, 4)] == [
        pytest.approx(1.026, abs=5e-4),
        pytest.approx(1.032, abs=5e-4),
    ]


def test_with_the_measured_split_cost_gpt3_bf16_gains_from_the_overlap():
    # DGX Cloud GPT-3 175B bf16 on 128 H100 (TP4 PP8 V6 b1, NeMo 1's userbuffer config): with its 512-row chunks
    # at the law's row term the overlap gains little (8.61 s on, 8.66 off on the shipped factors); with the measured
    # 5.64 µs per more GEMM more (8.23 s on): the law charged fc1's and fc2_dgrad's chunks 202 µs a layer each
    rid = "DGXC-v25.04-H100-GPT3-175B-bf16-n128"
    off, law_on = _with_overlap(rid, False), _with_overlap(rid, True)
    measured_on = _with_overlap(rid, True, split_us=SM90_SPLIT_US)
    assert _with_overlap(rid, False, split_us=SM90_SPLIT_US) == pytest.approx(off)  # nothing split without it
    assert measured_on < law_on < off


def test_connection_limit_truth_table():
    # Megatron-LM arguments.py (d98e8a64): compute capability < 10, t > 1 or c > 1, FSDP or the A2A overlap
    t, c = np.array([2, 1, 1, 2, 2]), np.array([1, 2, 1, 1, 1])
    fsdp, a2a = np.array([True, True, True, False, False]), np.array([False, False, False, True, False])
    np.testing.assert_array_equal(connection_limited(9.0, t, c, fsdp, a2a), [True, True, False, True, False])
    assert not connection_limited(10.0, t, c, fsdp, a2a).any()  # Blackwell: no such limit


def test_lost_ordering_exposes_the_backward_collectives():
    # the SP input all-gather and dgrad reduce-scatter no longer start ahead of dgrad and wgrad
    g = {"in": np.array(2e-3), "out": np.array(1e-3)}
    kept = tp_pair_exposed_s(3e-3, 3e-3, 6e-3, g, sequence_parallel=np.array(True), async_backward=True, overlap=False)
    lost = tp_pair_exposed_s(3e-3, 3e-3, 6e-3, g, sequence_parallel=np.array(True), async_backward=False, overlap=False)
    assert float(kept[1]) == pytest.approx(3e-3 + 1e-3 + 1e-3)
    assert float(lost[1]) == pytest.approx(3 * 3e-3)


def test_fsdp_with_tp_on_hopper_pays_for_the_lost_overlap():
    def tp_comm(hardware: str) -> float:
        req = api.make_request(
            model="llama3-70b", hardware=hardware, gpus=64, tp=4, pp=1, fsdp=True, sequence_parallel=True
        )
        ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
        no = api.make_request(model="llama3-70b", hardware=hardware, gpus=64, tp=4, pp=1, sequence_parallel=True)
        ev_no = evaluate(PlanGrid.from_plans([no.plan]), no.ctx)
        return float(ev.time["tp_comm"][0]) / float(ev_no.time["tp_comm"][0])

    assert tp_comm("dgx-h100-superpod") > 1.0  # the dgrad/wgrad overlaps lost
    assert tp_comm("dgx-b200-superpod") == pytest.approx(1.0)  # Blackwell keeps them


times = st.floats(1e-6, 1e-2)


@settings(max_examples=60, deadline=None)
@given(
    g_in=times,
    g_out=times,
    comm=times,
    extra=st.floats(1.0, 1.5),
    n_sm=st.integers(1, 32),
    margin=st.booleans(),
    aggregate=st.booleans(),
)
def test_userbuffers_never_hide_more_than_the_whole(g_in, g_out, comm, extra, n_sm, margin, aggregate):
    # chunked GEMMs take at least the whole GEMM, so each overlapped GEMM takes at least itself: exposure ≥ 0,
    # and more communication never exposes less
    gemm = {"in": np.array(g_in), "out": np.array(g_out), "t": np.array(4.0)}
    gemm |= {"in_split_t": np.array(g_in * extra), "out_split_t": np.array(g_out * extra)}
    gemm |= {"out_split_k": np.array(g_out * extra)}
    ub = {k: op(pipeline=k == "out_fprop", num_sm=n_sm, margin=margin) for k in ("in_fprop", "out_fprop")}
    ub |= {k: op(num_sm=n_sm, margin=margin) for k in ("out_dgrad", "in_dgrad", "in_wgrad")}
    if aggregate:  # TE's aggregate: t/2 GEMMs of two pieces, the halves at least the whole
        gemm |= {"in_split_half": np.array(g_in * extra), "out_split_half": np.array(g_out * extra)}
        ub = {k: v | {"aggregate": np.array(k in ("in_fprop", "out_dgrad"))} for k, v in ub.items()}
    f1, b1 = tp_pair_ub_s(comm, comm, gemm, ub, H100_SMS, 0.0)
    f2, b2 = tp_pair_ub_s(2 * comm, 2 * comm, gemm, ub, H100_SMS, 0.0)
    assert float(f1) >= 0 and float(b1) >= 0
    assert float(f2) >= float(f1) - 1e-15 and float(b2) >= float(b1) - 1e-15


def test_the_config_file_exports_and_imports_as_megatron_reads_it(tmp_path):
    from planner.megatron import export
    from planner.megatron.importer import import_megatron

    f = tmp_path / "ub.yaml"
    f.write_text("proj_fprop: {method: ring_exchange, num_sm: 1, set_sm_margin: true}\n")
    kw = dict(model="gpt3-175b", hardware="dgx-h100-superpod", gpus=64, tp=4, pp=8, sequence_parallel=True)
    req = api.make_request(**kw, options={"tp_comm_overlap": True, "tp_comm_overlap_cfg": str(f)})
    argv = export.megatron_argv(req)
    assert argv[argv.index("--tp-comm-overlap-cfg") + 1] == str(f)
    back = import_megatron(export.flags_text(req), gpus=64, hardware="dgx-h100-superpod")
    assert back.request.ctx.options == req.ctx.options
    # a script whose file is not on this machine: said, and TE's defaults assumed
    f.unlink()
    away = import_megatron(export.flags_text(req), gpus=64, hardware="dgx-h100-superpod")
    assert away.request.ctx.options.tp_comm_overlap_cfg is None
    assert any("not on this machine" in w for w in away.warnings)


def test_nccl_tp_collectives_at_openxla_measured_h100_times():
    # OpenXLA's sm_90 collective table (presets/hardware/dgx-h100-superpod.yaml nccl_nvlink_us): an all-gather of
    # 48 MiB (GPT-3 175B's b·s·h·2 bytes, 2048 × 12288 × 2 = 50.3 MB) on 4 H100 lies between the measured 32 MiB
    # (113.3 µs) and 64 MiB (195.8 µs): 113.3 + (195.8 − 113.3)·16/32 = 154.55 µs; below 1 MiB the 1 MiB time;
    # beyond 2 GiB the last segment's bandwidth: 4846.6 + 2048·(4846.6 − 2473.0)/1024 = 9593.8 µs
    sizes, times = [1, 32, 64, 1024, 2048], [20.5, 113.3, 195.8, 2473.0, 4846.6]
    got = measured_collective_time_s(sizes, times, np.array([48, 0.25, 4096, 0]) * 2**20) * 1e6
    assert got.tolist() == pytest.approx([154.55, 20.5, 9593.8, 0.0])
    req = api.make_request(model="gpt3-175b", hardware="dgx-h100-superpod", gpus=8, tp=4, sequence_parallel=True)
    hw, msg = req.ctx.hardware, 2048 * 12288 * 2
    link = group_link(hw, 4, 1)
    assert float(nvlink_nccl_time_s(hw, "all_gather", 4, msg, link)) == pytest.approx(154.55e-6, rel=1e-3)
    # reduce-scatter: 123.6 + (224.4 − 123.6)·0.5 = 174.0 µs; the ring formula at 0.8 of NVLink gave 119.9 µs
    assert float(nvlink_nccl_time_s(hw, "reduce_scatter", 4, msg, link)) == pytest.approx(174.0e-6, rel=1e-3)
    assert float(all_gather_time_s(4, msg, link)) == pytest.approx(0.75 * msg / 360e9 + 3 * 5e-6)
    # a TP group across two nodes (t = 16) is not in the NVLink table: the ring formula on its link
    wide = group_link(hw, 16, 1)
    assert float(nvlink_nccl_time_s(hw, "all_gather", 16, msg, wide)) == float(all_gather_time_s(16, msg, wide))
    assert float(nvlink_nccl_time_s(hw, "all_gather", 1, msg, link)) == 0.0


def _dp_comm_s(req, **options) -> float:
    ctx = dataclasses.replace(req.ctx, options=req.ctx.options.model_copy(update=options))
    return float(np.asarray(evaluate(PlanGrid.from_plans([req.plan]), ctx).time["dp_comm"])[0])


def test_delayed_fp8_amax_all_reduces_by_hand():
    # 2 per micro-batch and model chunk (the autocast's exit, its first module's backward), each T_AR
    assert float(fp8_amax_reduction_s(64, 6, 128e-6)) == pytest.approx(2 * 64 * 6 * 128e-6)
    assert float(fp8_amax_reduction_s(8, 1, 20e-6)) == pytest.approx(2 * 8 * 20e-6)  # no interleaving: v = 1
    # DGX Cloud GPT-3 175B FP8 on 2048 H100 (TP4 PP8 V6 DP64, GBS 4096, b 1: m = 64): the amax group TP×DP is 256
    # consecutive ranks on 32 nodes (leaf tier, α 8 µs): a tree all-reduce of 2·⌈log₂256⌉·8 = 128 µs (576 bytes:
    # 12 amaxes × 12 layers of the stage, the bandwidth term 5 ns); TP only (tp_only_amax_red): 4 ranks on NVLink,
    # 2·⌈log₂4⌉·5 = 20 µs. 768 all-reduces: 98.30 ms against 15.36 ms, 82.94 ms apart
    req = prepare(next(r for r in load_runs() if r.id == "DGXC-v25.04-H100-GPT3-175B-fp8-n2048"))
    assert not req.ctx.options.tp_only_amax_red  # NeMo 1's hydra config leaves Megatron-Core's default
    dp_wide, tp_only = _dp_comm_s(req), _dp_comm_s(req, tp_only_amax_red=True)
    assert dp_wide - tp_only == pytest.approx(768 * (128e-6 - 20e-6), rel=1e-3)
    # none under CUDA graphs (TE skips the reduction in a captured autocast) or with another recipe
    assert _amax_sync_s(req) == pytest.approx(768 * 128e-6, rel=1e-3)
    assert _amax_sync_s(req, cuda_graph_impl=CudaGraphImpl.TRANSFORMER_ENGINE) == 0.0
    assert _amax_sync_s(req, fp8_recipe=Fp8Recipe.TENSORWISE) == 0.0
    assert _amax_sync_s(req, fp8=None) == 0.0


def _amax_sync_s(req, **options) -> float:
    ctx = dataclasses.replace(req.ctx, options=req.ctx.options.model_copy(update=options))
    grid = PlanGrid.from_plans([req.plan])
    return float(np.asarray(estimate._fp8_amax_sync_s(Letters(grid, ctx), ctx)).ravel()[0])


def test_which_runs_reduce_amaxes_over_tp_only():
    # NVIDIA's MLPerf v4.1 and v5 NeMo configs set tp_only_amax_red (TP_ONLY_AMAX_RED, default True); v4.0's
    # GPT-3 config and the DGX Cloud NeMo releases do not
    assert reduces_amax_over_tp_only("MLPerf Training v4.1") and reduces_amax_over_tp_only("MLPerf Training v5.0")
    assert not reduces_amax_over_tp_only("MLPerf Training v4.0") and not reduces_amax_over_tp_only("NeMo 25.04")
    # NeMo 2's GPT-3 175B performance script sets it (v2.2.0 scripts/llm/performance/pretrain_gpt3_175b.py, v2.3.0
    # and v2.4.0 scripts/performance/llm/): the NeMo 25.02-25.07 pages' GPT-3 rows; no other model's script does
    assert reduces_amax_over_tp_only("NeMo 25.02 container (NeMo 2.x)", "GPT3-175B")
    assert not reduces_amax_over_tp_only("NeMo 25.02 container (NeMo 2.x)", "Llama3-70B")
    assert not reduces_amax_over_tp_only("NeMo 24.12 (nemo_megatron/launch.sh FW_VERSION=24.12)", "GPT3-175B")


def test_nemo_2502_gpt3_amaxes_over_tp_only_by_hand():
    # NeMo 25.02's GPT-3 175B FP8 (delayed) on 512 B200: TP4 PP4 V6 DP32, GBS 2048, b 2, so m = 2048/(2·32) = 32
    # and 2·m·v = 384 all-reduces of 12 amaxes × 4 B × 24 layers = 1,152 B. Over TP only: 4 ranks on NVLink (α 5 µs),
    # min(ring 2·3·5, tree 2·⌈log₂4⌉·5) = 20 µs + 2·(3/4)·1152/720e9 = 2.4 ns; over TP×DP, Megatron-Core's default:
    # 128 ranks on 16 nodes (leaf tier, α 8 µs), tree 2·7·8 = 112 µs + 2·(127/128)·1152/340e9 = 6.7 ns. 7.68 ms
    # against 43.0 ms a step
    req = prepare(next(r for r in load_runs() if r.id == "NEMODOC-25.02-B200-GPT3-175B-n512"))
    assert req.ctx.options.tp_only_amax_red
    assert _amax_sync_s(req) == pytest.approx(384 * (20e-6 + 2.4e-9), rel=1e-4)
    assert _amax_sync_s(req, tp_only_amax_red=False) == pytest.approx(384 * (112e-6 + 6.7e-9), rel=1e-4)
