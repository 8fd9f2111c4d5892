"""Expert-parallel execution: token dispatchers across NVLink domains, deduplicated (flex) dispatch
with group-limited routing, grouped-GEMM padding, the all-to-all overlap and Megatron-LM's rules for
them; each against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.api import explain, make_request
from planner.costs import moe
from planner.costs.estimate import evaluate
from planner.errors import InfeasibleError, PlannerError
from planner.hardware.collectives import group_link
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

H100 = "dgx-h100-superpod"


def _dispatch(kind: str, ep: int, hw=None, **kw) -> float:
    """One MoE layer's forward dispatch + combine with the EP group ``ep`` consecutive GPUs wide."""
    hw = hw or load_hardware(H100)
    A, T, h = 4096 * 8 * 1.1, 4096, 7168
    flex = group_link(hw, ep, 1)
    remote = moe.distinct_domains(256, 8, flex.nodes, **kw) * (flex.nodes - 1) / flex.nodes
    return float(
        moe.dispatcher_time_s(
            A,
            T,
            h,
            ep,
            1,
            group_link(hw, ep, 1),
            group_link(hw, 1, 1),
            activation_bytes=2,
            kind=kind,
            flex_link=flex,
            remote_domains=remote,
        )
    )


@pytest.mark.parametrize("kind", ["alltoall", "allgather", "flex"])
def test_dispatcher_cost_grows_with_the_nodes_the_ep_group_spans(kind):
    # the same tokens per GPU; EP 8 is one DGX H100 node, 16 two, 32 four, 64 eight
    times = [_dispatch(kind, ep) for ep in (8, 16, 32, 64)]
    assert all(b > a for a, b in zip(times, times[1:], strict=False)), times
    # leaving the node is the step: a rail NIC of 50 GB/s against NVLink's 360 GB/s (flex sends each token
    # once per remote node on the rail and spreads the copies on NVLink there, so its step is smaller)
    assert times[1] > (1.05 if kind == "flex" else 2) * times[0]


def test_alltoall_across_two_nodes_by_hand():
    """EP 16 over two DGX H100: of each GPU's M bytes, 7/16 go to its node's peers on NVLink
    (450 GB/s × the preset's NVLink efficiency), 8/16 leave on its own 400 Gb/s rail NIC (× its fitted
    network efficiency); both at once, one latency."""
    hw = load_hardware(H100)
    A, h = 4096 * 8 * 1.1, 7168
    M = 2 * A * h
    cal = hw.calibration
    nvlink, rail = 450e9 * cal.nvlink_bus_efficiency, 400e9 / 8 * cal.a2a_network_efficiency
    one = max(7 / 16 * M / nvlink, 8 / 16 * M / rail) + 8e-6  # leaf switch latency
    got = moe.dispatcher_time_s(
        A, 4096, h, 16, 1, group_link(hw, 16, 1), group_link(hw, 1, 1), activation_bytes=2, kind=1
    )
    assert float(got) == pytest.approx(2 * one)  # dispatch and combine


def test_flex_sends_each_token_once_per_remote_node():
    """DeepSeek-V3 on EP 64 = 8 nodes, 256 experts (32 per node), top-8. Uniform routing touches
    8·(1 − C(224, 8)/C(256, 8)) distinct nodes; with 8 groups and top-4 groups (node-limited routing,
    DeepSeek-V3 §2.1.2) a token chooses 4 of the 8 nodes, then 8 of their 128 experts."""
    uniform = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert float(moe.distinct_domains(256, 8, 8)) == pytest.approx(uniform)
    limited = 4 * (1 - math.comb(96, 8) / math.comb(128, 8))
    assert float(moe.distinct_domains(256, 8, 8, groups=8, group_topk=4)) == pytest.approx(limited)
    assert limited < 4 < uniform
    # so the rail carries ε·T·h·(remote nodes), not the all-to-all's 7/8 of the k copies
    hw = load_hardware(H100)
    link = group_link(hw, 64, 1)
    T, A, h = 4096.0, 4096 * 8 * 1.1, 7168
    remote = limited * 7 / 8
    cal = hw.calibration
    rail = 2 * T * h * remote / (400e9 / 8 * cal.a2a_network_efficiency)
    nvlink = 2 * A * h * 63 / 64 / (450e9 * cal.nvlink_bus_efficiency)
    got = moe.flex_dispatch_time_s(A, T, h, 64, link, activation_bytes=2, remote_domains=remote)
    assert float(got) == pytest.approx(max(rail, nvlink) + 8e-6)  # 8 nodes: inside one leaf group of 32
    assert _dispatch("flex", 64, groups=8, group_topk=4) < _dispatch("flex", 64) < _dispatch("alltoall", 64)


def test_grouped_gemm_pads_each_expert_to_whole_m_blocks():
    # 128-row M blocks: on average half a block is wasted per expert (DeepGEMM's contiguous layout)
    assert float(moe.grouped_gemm_padding(64)) == pytest.approx(2.0)
    assert float(moe.grouped_gemm_padding(4096)) == pytest.approx(1 + 64 / 4096)


def _moe_plans(draw_count=1):
    return st.tuples(
        st.sampled_from(["qwen3-30b-a3b", "gpt-oss-20b", "mixtral-8x7b"]),
        st.sampled_from([1, 2]),  # tp
        st.sampled_from([2, 4, 8]),  # ep
        st.sampled_from([(1, 1), (2, 2), (4, 2)]),  # pp, vpp
        st.sampled_from(["alltoall", "flex"]),
        st.sampled_from(["none", "selective"]),
        st.sampled_from([1, 2]),  # micro-batch
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_moe_plans())
def test_dropping_the_all_to_all_overlap_never_makes_a_plan_faster_where_megatron_does_not_warn(plan):
    name, tp, ep, (pp, vpp), dispatcher, recompute, b = plan
    etp = 1
    kw = dict(
        model=name,
        hardware=H100,
        gpus=64,
        tp=tp,
        ep=ep,
        etp=etp,
        pp=pp,
        vpp=vpp,
        micro_batch=b,
        sequence_parallel=tp > 1,
        recompute=recompute,
        moe_token_dispatcher=dispatcher,
        global_batch=256,
    )
    try:
        with_overlap = make_request(**kw, overlap_moe_expert_parallel_comm=True)
        without = make_request(**kw, overlap_moe_expert_parallel_comm=False)
    except PlannerError:
        return
    grid = PlanGrid.from_plans([with_overlap.plan, without.plan])
    # on the GPU side (the host's pacing of the combined schedule, moe.COMBINED_HOST_US, set to 0: it can make the
    # overlap cost time, as measured on B200, tests/test_combined_host.py)
    with np.errstate(divide="ignore", invalid="ignore"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(moe, "COMBINED_HOST_US", 0.0)
        ev = evaluate(grid, with_overlap.ctx)
    # the dispatch it exposes never grows; the whole step may, only where Megatron-LM warns against the
    # overlap (Hopper with TP > 1: the SP collectives lose their order, docs/cost-model.md §13.3)
    assert ev.time["moe_comm"][0] <= ev.time["moe_comm"][1] * (1 + 1e-12)
    if tp == 1:
        assert ev.iteration_s[0] <= ev.iteration_s[1] * (1 + 1e-12)
    assert ev.peak_memory_bytes[0] >= ev.peak_memory_bytes[1]  # the overlap's extra warm-up chunk


def test_overlap_hides_the_dispatch_behind_the_other_micro_batch():
    kw = dict(model="qwen3-30b-a3b", hardware=H100, gpus=64, ep=64, moe_token_dispatcher="alltoall", global_batch=256)
    plain = explain(make_request(**kw))["estimate"]["time"]
    hidden = explain(make_request(**kw, overlap_moe_expert_parallel_comm=True))["estimate"]["time"]
    assert plain["moe_comm"] > 0
    assert hidden["moe_comm"] < plain["moe_comm"]
    assert hidden["forward"] == pytest.approx(plain["forward"]) and hidden["backward"] == pytest.approx(
        plain["backward"]
    )


def test_shared_experts_hide_the_forward_dispatch():
    kw = dict(
        model="deepseek-v3",
        hardware=H100,
        gpus=1024,
        pp=16,
        ep=64,
        etp=1,
        global_batch=1024,
        pipeline_layout="Et*4|(t*4|)*14tmL",
        moe_token_dispatcher="alltoall",
        recompute="full",
    )
    plain = explain(make_request(**kw))["estimate"]["time"]["moe_comm"]
    overlapped = explain(make_request(**kw, options={"moe_shared_expert_overlap": True}))["estimate"]["time"]
    assert overlapped["moe_comm"] < plain


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(model="gpt-oss-20b", tp=2, ep=4, sequence_parallel=True),
            "supports biases in MoE layers only with etp 1",
        ),
        (dict(model="qwen3-30b-a3b", ep=8, overlap_moe_expert_parallel_comm=True), "alltoall or flex"),
        (
            dict(model="qwen3-30b-a3b", ep=8, pp=2, moe_token_dispatcher="flex", overlap_moe_expert_parallel_comm=True),
            "interleaved chunks when pp > 1",
        ),
        (
            dict(
                model="qwen3-30b-a3b",
                ep=8,
                moe_token_dispatcher="flex",
                recompute="full",
                overlap_moe_expert_parallel_comm=True,
            ),
            "no full recomputation",
        ),
        # with shared experts only (transformer_config.py:1813-1826): Qwen3-30B-A3B has none, DeepSeek-V3 has them
        (dict(model="deepseek-v3", ep=8, options={"moe_shared_expert_overlap": True}), "alltoall or flex"),
    ],
)
def test_megatron_rules_for_expert_parallel_options(kw, message):
    req = make_request(hardware=H100, gpus=64, global_batch=256, **kw)
    with pytest.raises(InfeasibleError, match=message):
        explain(req)


@pytest.mark.parametrize(
    "hardware, recipe, ok",
    [
        ("dgx-h100-superpod", "blockwise", True),  # Transformer Engine: FP8 block scaling from sm_90
        ("dgx-h100-superpod", "mxfp8", False),  # MXFP8 on Blackwell data-centre GPUs only
        ("dgx-b200-superpod", "mxfp8", True),
        ("gb200-nvl72", "mxfp8", True),
    ],
)
def test_fp8_recipes_follow_transformer_engines_support_matrix(hardware, recipe, ok):
    kw = dict(
        model="qwen3-30b-a3b",
        hardware=hardware,
        gpus=64,
        ep=8,
        global_batch=256,
        options={"fp8": "e4m3", "fp8_recipe": recipe},
    )
    if ok:
        assert explain(make_request(**kw))["options"]["fp8_recipe"] == recipe
    else:
        with pytest.raises(PlannerError, match=f"--fp8-recipe {recipe} needs"):
            make_request(**kw)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v3"]),
    st.sampled_from([(1, 1, None), (4, 1, None), (4, 2, None), (16, 1, "Et*4|(t*4|)*14tmL")]),
    st.sampled_from(["none", "selective", "full"]),
    st.booleans(),
)
def test_moe_peak_memory_never_falls_as_the_micro_batch_grows(name, pipeline, recompute, fsdp):
    """What search's smallest-micro-batch-first screening relies on (search._peak_memory)."""
    pp, vpp, layout = pipeline
    if name != "deepseek-v3" and layout or name == "deepseek-v3" and not layout or fsdp and pp > 1:
        return
    plans = []
    for b in (1, 2, 4):
        req = make_request(
            model=name,
            hardware=H100,
            gpus=1024 if layout else 64,
            pp=pp,
            vpp=vpp,
            ep=8,
            etp=1,
            micro_batch=b,
            recompute=recompute,
            fsdp=fsdp,
            distributed_optimizer=True,
            pipeline_layout=layout,
            global_batch=2048,
        )
        plans.append(req.plan)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak = evaluate(PlanGrid.from_plans(plans), req.ctx).peak_memory_bytes
    assert np.all(np.diff(peak) >= 0), peak


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3"])
def test_moe_peak_memory_does_not_depend_on_the_dispatcher(name):
    """What search's screening relies on when it measures one of the plans that differ only in it. The A2A
    overlap keeps one more warm-up chunk with interleaving (Qwen3: p = 2, v = 2, stage 0 holds
    2(p − 1) + (v − 1)·p + 1 = 5 chunks, 6 with the overlap: activations × 6/5); DeepSeek-V3's 16
    stages without interleaving cannot run the overlap in Megatron, and nothing changes."""
    layout = "Et*4|(t*4|)*14tmL" if name == "deepseek-v3" else None
    plans, ctx = [], None
    for dispatcher, overlap in (("allgather", False), ("alltoall", False), ("alltoall", True), ("flex", True)):
        req = make_request(
            model=name,
            hardware=H100,
            gpus=1024 if layout else 64,
            pp=16 if layout else 2,
            vpp=1 if layout else 2,
            ep=8,
            etp=1,
            distributed_optimizer=True,
            pipeline_layout=layout,
            global_batch=2048,
            moe_token_dispatcher=dispatcher,
            overlap_moe_expert_parallel_comm=overlap,
        )
        plans.append(req.plan)
        ctx = req.ctx
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(PlanGrid.from_plans(plans), ctx)
    peak, acts = ev.peak_memory_bytes, ev.memory["activations"]
    assert peak[0] == peak[1] and peak[2] == peak[3]
    if layout:
        assert peak[2] == peak[0]
    else:
        assert float(acts[2] / acts[0]) == pytest.approx(6 / 5)
    assert len(set(ev.iteration_s.tolist())) > 1  # while their times differ
