"""The fabric at scale and what hidden communication costs, each term by hand: the SMs an NCCL
kernel holds beside the compute it hides behind (DP, FSDP, CP, PP), the wait for the slowest of N
GPUs, and the non-blocking SuperPOD tiers the presets declare."""

from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.costs.communication import pp_interleaved_exposed_s
from planner.costs.estimate import evaluate
from planner.costs.letters import Letters
from planner.costs.stage_memory import stage_memory_bytes
from planner.fidelity.validate import on_hardware
from planner.hardware.collectives import (
    all_gather_time_s,
    expected_max_normal,
    group_link,
    hidden_comm_contention_s,
    p2p_time_s,
    straggler_s,
)
from planner.presets import load_hardware, preset_names
from planner.space.grid import PlanGrid

H100_SHARE = 24 / 132  # 24 NCCL CTAs of H100's 132 SMs: a collective
P2P_SHARE = 2 / 132  # a send/receive to one network peer: 2 channels


def test_a_hidden_collective_leaves_the_compute_its_share_of_sms():
    # 1 s of NCCL beside the compute: 24 of 132 SMs busy, 24/132 s of compute left to do
    assert float(hidden_comm_contention_s(1.0, 24, 132)) == pytest.approx(0.181818, rel=1e-5)
    assert float(hidden_comm_contention_s(0.5, None, 132)) == 0.0  # a preset that does not charge it


@pytest.mark.parametrize(
    "n, expected",  # E[max of n standard normals], Harter 1961 (Biometrika 48) tables
    [(1, 0.0), (2, 0.5642), (10, 1.5388), (100, 2.5076), (1000, 3.2414)],
)
def test_expected_maximum_of_n_normals_against_the_tables(n, expected):
    assert float(expected_max_normal(n)) == pytest.approx(expected, abs=0.03)


def test_the_slowest_of_8192_gpus_sets_the_pace():
    # 10 s of compute, σ = 1.1 %: 10 × 0.011 × E[max of 8192] (3.787) = 0.417 s
    e = float(expected_max_normal(8192))
    assert e == pytest.approx(3.79, abs=0.02)
    assert float(straggler_s(10.0, 8192, 0.011)) == pytest.approx(10.0 * 0.011 * e)
    assert float(straggler_s(10.0, 8192, None)) == 0.0


def test_interleaved_sends_hidden_behind_a_chunk_step_still_cost_their_sms():
    # m = 8, v = 2: 16 forward and 16 backward chunk-steps of 2 and 4 ms; a 1 ms send hides in each,
    # and takes 24/132 of 1 ms from each step's compute: 32 × 1 ms × 24/132
    got = float(pp_interleaved_exposed_s(1e-3, 8, 2, 2e-3, 4e-3, sm_share=H100_SHARE))
    assert got == pytest.approx(32 * 1e-3 * H100_SHARE)
    # a 3 ms send shows 1 ms beyond each forward step and hides 2 + 3 ms
    got = float(pp_interleaved_exposed_s(3e-3, 8, 2, 2e-3, 4e-3, sm_share=H100_SHARE))
    assert got == pytest.approx(16 * (1e-3 + (2e-3 + 3e-3) * H100_SHARE))


def _without_nccl_sms(req):
    hw = req.ctx.hardware
    network = hw.network.model_copy(update={"nccl_sms": None, "nccl_p2p_sms": None})
    return on_hardware(req, hw.model_copy(update={"network": network}))


def _time(req, term):
    return float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).time[term][0])


def test_data_parallel_reduction_hidden_behind_the_backward_costs_its_sms():
    # one stage (pp = 1), distributed optimizer, both overlaps: the reduce-scatter of the fp32
    # gradients and the all-gather of the bf16 parameters over d = 16 (stride t = 8: one GPU per
    # node, 16 nodes, one leaf) take R + G; what is not exposed runs beside the compute and costs
    # 24/132 of itself
    req = api.make_request(
        model="llama3-8b",
        hardware="dgx-h100-superpod",
        gpus=128,
        tp=8,
        global_batch=128,
        seq_len=8192,
        sequence_parallel=True,
        distributed_optimizer=True,
        options={"overlap_grad_reduce": True, "overlap_param_gather": True},
    )
    plain = _without_nccl_sms(req)
    exposed = _time(plain, "dp_comm")
    hw = req.ctx.hardware
    link = group_link(hw, 16, 8)
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    params = float(stage_memory_bytes(lt, req.ctx, np.zeros((1, 1), dtype=int))["dense_params"][0, 0])
    total = float(all_gather_time_s(16, 4 * params, link) + all_gather_time_s(16, 2 * params, link))
    assert _time(req, "dp_comm") == pytest.approx(exposed + (total - exposed) * H100_SHARE, rel=1e-6)


def test_context_parallel_ring_hidden_behind_attention_costs_its_sms():
    # Llama 3 8B, t = 8, c = 2 on two nodes, s = 131072: each layer's ring hop (b·s/c·2·g·d_h/t bf16
    # keys and values, 33.5 MB, on one 400 Gb/s NIC) hides behind the attention step, once in the
    # forward and twice (dK, dV too) in the backward; all that remains is 2/132 of the hidden time
    req = api.make_request(
        model="llama3-8b",
        hardware="dgx-h100-superpod",
        gpus=16,
        tp=8,
        cp=2,
        seq_len=131072,
        global_batch=8,
        sequence_parallel=True,
    )
    assert _time(_without_nccl_sms(req), "cp_comm") == 0.0
    chunk = 2 * 1 * (131072 / 2) * (2 * 8 * 128) / 8
    hop = float(p2p_time_s(chunk, group_link(req.ctx.hardware, 2, 8)))
    layers, m = 32, 8
    assert _time(req, "cp_comm") == pytest.approx(m * layers * (hop + 2 * hop) * P2P_SHARE, rel=1e-6)


@pytest.mark.parametrize("name", preset_names("hardware"))
def test_every_preset_states_its_tiers_oversubscription_and_nccl_sms(name):
    hw = load_hardware(name)
    assert hw.network.nccl_sms == 24 and "forum" in hw.network.sources["nccl_sms"]
    assert hw.network.nccl_p2p_sms == 2 and "paths.cc" in hw.network.sources["nccl_p2p_sms"]
    for tier in hw.network.tiers:  # DGX SuperPOD reference architectures: non-blocking, 1:1
        assert tier.bandwidth_frac == 1.0 and "1:1" in tier.sources["bandwidth_frac"]
    assert hw.calibration.band("straggler_sigma") == (0.0, 0.03)  # Sinha et al. SC22: 8-22 % spread


def test_fsdp_gathers_hidden_behind_each_layer_cost_their_sms():
    # Megatron FSDP over d = 16 (t = 1, two nodes): per micro-batch and layer an all-gather of the
    # layer's bf16 weights for the forward, again for the backward, and a reduce-scatter of its
    # gradients, G + G + R with R = G (same bytes, same ring); the m·n·3G not exposed cost 24/132
    req = api.make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=16, global_batch=32, seq_len=4096, fsdp=True
    )
    exposed = _time(_without_nccl_sms(req), "dp_comm")
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    per_layer = float(stage_memory_bytes(lt, req.ctx, np.zeros((1, 1), dtype=int))["dense_params"][0, 0]) / 32
    gather = float(all_gather_time_s(16, 2 * per_layer, group_link(req.ctx.hardware, 16, 1)))
    m, layers = 2, 32
    total = m * layers * 3 * gather
    assert _time(req, "dp_comm") == pytest.approx(exposed + (total - exposed) * H100_SHARE, rel=1e-6)


def test_a_larger_job_waits_longer_for_its_slowest_gpu():
    # the same Llama 3.1 405B plan per GPU on 1,024 and 8,192 H100 (σ = 1.1 %, the anchor of its band):
    # the stragglers term grows as E[max of N], 3.234 → 3.787 (the compute it multiplies is the same)
    hw = load_hardware("dgx-h100-superpod")
    hw = hw.model_copy(update={"calibration": hw.calibration.model_copy(update={"straggler_sigma": 0.011})})

    def stragglers(gpus):
        req = api.make_request(
            hardware=hw,
            model="llama3.1-405b",
            gpus=gpus,
            tp=8,
            pp=8,
            cp=2,
            vpp=8,
            global_batch=gpus // 16 * 24 // 8,
            seq_len=8192,
            sequence_parallel=True,
        )
        return _time(req, "stragglers")

    ratio = float(expected_max_normal(8192) / expected_max_normal(1024))
    assert stragglers(8192) / stragglers(1024) == pytest.approx(ratio, rel=1e-9)
    assert stragglers(1024) > 0
