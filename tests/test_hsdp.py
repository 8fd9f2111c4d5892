"""--num-distributed-optimizer-instances (issue 18): the optimizer sharded over d·c/R ranks, gradients
reduce-scattered in an instance and all-reduced across instances; by hand, and the flag both ways."""

import numpy as np
import pytest

from planner.api import explain, make_request
from planner.costs.communication import hierarchical_grad_reduce_time_s, hsdp_outer_layer_s
from planner.errors import PlannerError
from planner.hardware.collectives import Link
from planner.megatron.export import flags_text
from planner.megatron.importer import import_megatron
from planner.plan import plan_label


def _link(gbytes_per_s: float) -> Link:
    one = np.array([1.0])
    return Link(bus_bytes_per_s=np.array([gbytes_per_s * 1e9]), latency_s=0 * one, nodes=2 * one)


def test_two_level_reduction_by_hand():
    """1e9 gradients of 4 bytes (4 GB) over 16 ranks in 2 instances of 8: a reduce-scatter of 4 GB over 8
    ranks at 40 GB/s, 7/8 · 4e9/40e9 = 0.0875 s, then an all-reduce of each rank's 4e9/8 = 0.5 GB shard
    over the 2 instances at 20 GB/s, 2·(1/2) · 0.5e9/20e9 = 0.025 s: 0.1125 s (latencies 0)."""
    got = hierarchical_grad_reduce_time_s(1e9, 8, 2, _link(40), _link(20), grad_bytes=4)
    assert got[0] == pytest.approx(0.0875 + 0.025, rel=1e-12)
    one = hierarchical_grad_reduce_time_s(1e9, 16, 1, _link(40), _link(20), grad_bytes=4)
    assert one[0] == pytest.approx(15 / 16 * 4e9 / 40e9, rel=1e-12)  # R = 1: the plain reduce-scatter


def test_instances_multiply_the_optimizer_and_the_flag_round_trips():
    base = dict(model="llama3-70b", hardware="dgx-h100-superpod", gpus=512, tp=4, pp=4, sequence_parallel=True)
    base.update(distributed_optimizer=True, options=dict(overlap_grad_reduce=True, overlap_param_gather=True))
    one, two = (explain(make_request(**base, distributed_optimizer_instances=r))["estimate"] for r in (1, 2))
    assert two["memory"]["optimizer"] == pytest.approx(2 * one["memory"]["optimizer"], rel=1e-9)
    assert two["memory"]["weights"] == one["memory"]["weights"]
    assert two["time"]["dp_comm"] > one["time"]["dp_comm"]  # the shard's all-reduce across instances
    req = make_request(**base, distributed_optimizer_instances=2)
    flags = flags_text(req)
    assert "--num-distributed-optimizer-instances 2" in flags
    assert import_megatron(flags, gpus=512).request.plan.distributed_optimizer_instances == 2
    with pytest.raises(PlannerError, match="needs --use-distributed-optimizer or Megatron FSDP"):
        make_request(**{**base, "distributed_optimizer": False}, distributed_optimizer_instances=2)


def test_outer_collectives_by_hand():
    """One layer's DP-Outer collectives (Megatron FSDP hybrid mode), G = W = 1e9 bytes, N = 8 ranks per
    replica, R = 4 replicas at 20 GB/s, latencies 0:
      HSDP (no_shard), gradients sharded: all-reduce of G/N = 1.25e8 B: 2·(3/4)·1.25e8/20e9 = 9.375 ms, no gather;
      HFSDP (optim): reduce-scatter of G/N, (3/4)·1.25e8/20e9 = 4.6875 ms, and all-gather of W/N, 4.6875 ms;
      HSDP with optim (gradient buffer whole): all-reduce of G, 2·(3/4)·1e9/20e9 = 75 ms."""
    link = _link(20)
    g, w = hsdp_outer_layer_s(1e9, 1e9, 8, 4, link, grads_sharded=True, outer_optim=False)
    assert (g[0], w[0]) == (pytest.approx(9.375e-3, rel=1e-12), 0.0)
    g, w = hsdp_outer_layer_s(1e9, 1e9, 8, 4, link, grads_sharded=True, outer_optim=True)
    assert (g[0], w[0]) == (pytest.approx(4.6875e-3, rel=1e-12), pytest.approx(4.6875e-3, rel=1e-12))
    g, _ = hsdp_outer_layer_s(1e9, 1e9, 8, 4, link, grads_sharded=False, outer_optim=False)
    assert g[0] == pytest.approx(0.075, rel=1e-12)
    # the same whole-buffer rule in the step-time reduction (FSDP optim): 4 GB over 8 then all of it over 2
    whole = hierarchical_grad_reduce_time_s(1e9, 8, 2, _link(40), _link(20), grad_bytes=4, whole_buffer=True)
    assert whole[0] == pytest.approx(0.0875 + 2 * 0.5 * 4e9 / 20e9, rel=1e-12)


FSDP_BASE = dict(model="llama3-70b", hardware="dgx-h100-superpod", gpus=64, tp=1, pp=1, fsdp=True)
FSDP_BASE.update(distributed_optimizer=True, recompute="full")


def _fsdp(R: int, outer: str = "no_shard", sharding: str = "optim_grads_params") -> dict:
    req = make_request(
        **FSDP_BASE, distributed_optimizer_instances=R, fsdp_outer_sharding=outer, fsdp_sharding=sharding
    )
    return explain(req)["estimate"]


def test_hybrid_memory_shards_over_one_replica():
    """Weights and gradients P/(d·c/R) + the working layers: linear in R, so (m8 − m1)/(m2 − m1) = 7 exactly;
    the optimizer P·12/(d·c/R): 8 times R = 1's at R = 8 (HSDP), and R = 1's with HFSDP (sharded over all d·c)."""
    one, two, eight, hfsdp = _fsdp(1), _fsdp(2), _fsdp(8), _fsdp(8, "optim")
    for term in ("weights", "gradients"):
        m1, m2, m8 = (e["memory"][term] for e in (one, two, eight))
        assert (m8 - m1) / (m2 - m1) == pytest.approx(7.0, rel=1e-9)
        assert hfsdp["memory"][term] == pytest.approx(m8, rel=1e-12)
    assert eight["memory"]["optimizer"] == pytest.approx(8 * one["memory"]["optimizer"], rel=1e-9)
    assert hfsdp["memory"]["optimizer"] == pytest.approx(one["memory"]["optimizer"], rel=1e-9)


def test_hybrid_plans_are_named_exported_imported_and_extrapolated():
    req = make_request(**FSDP_BASE, distributed_optimizer_instances=8, fsdp_outer_sharding="optim")
    pj = explain(req)
    assert "HFSDP×8" in plan_label(pj["parallel"])
    assert "HSDP:og×8" in plan_label(
        {**pj["parallel"], "fsdp_sharding": "optim_grads", "fsdp_outer_sharding": "no_shard"}
    )
    flags = flags_text(req)
    assert "--num-distributed-optimizer-instances 8" in flags and "--outer-dp-sharding-strategy optim" in flags
    back = import_megatron(flags, gpus=64).request.plan
    assert (back.distributed_optimizer_instances, back.fsdp_outer_sharding.value) == (8, "optim")
    assert "Megatron FSDP HFSDP" in pj["evidence"]["extrapolated"]
    assert "HFSDP" in pj["estimate"]["formulas"]["time"]["dp_comm"]["formula"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(distributed_optimizer_instances=1, fsdp_outer_sharding="optim"), "needs --num-distributed-optimizer"),
        (
            dict(distributed_optimizer_instances=8, fsdp_outer_sharding="optim", fsdp_sharding="optim_grads"),
            "optim_grads_params",
        ),
    ],
)
def test_hybrid_plans_megatron_refuses(fields, message):
    with pytest.raises(PlannerError, match=message):
        make_request(**FSDP_BASE, **fields)


def test_replicas_must_divide_the_data_parallel_groups():
    with pytest.raises(PlannerError, match="divide d·c = 64 and the expert data-parallel size 64"):
        explain(make_request(**FSDP_BASE, distributed_optimizer_instances=3))


def test_search_tries_the_replica_that_fills_an_nvlink_domain():
    """Llama 3 70B on 64 H100 (8 per node), FSDP pinned: every hybrid plan's replica is one node,
    t·d·c/R = 8 (R = t·d·c/8), HFSDP at optim_grads_params and HSDP at optim_grads; a pinned R and outer
    strategy give only those."""
    from planner.search import search
    from planner.space.candidates import Pins

    req = make_request(model="llama3-70b", hardware="dgx-h100-superpod", gpus=64, global_batch=128)
    result = search(req.ctx, 64, Pins(fsdp=True), top=1000, rank_by="estimate")
    hybrid = [p["parallel"] for p in result.plans if p["parallel"]["distributed_optimizer_instances"] > 1]
    assert result.hybrid_variants > 0 and hybrid
    for par in hybrid:
        assert par["tp"] * par["dp"] * par["cp"] // par["distributed_optimizer_instances"] == 8
        want = "optim" if par["fsdp_sharding"] == "optim_grads_params" else "no_shard"
        assert par["fsdp_outer_sharding"] == want
    pinned = search(req.ctx, 64, Pins(fsdp=True, distributed_optimizer_instances=2, fsdp_outer_sharding="optim"))
    assert all(
        (p["parallel"]["distributed_optimizer_instances"], p["parallel"]["fsdp_outer_sharding"]) == (2, "optim")
        for p in pinned.plans
    )
