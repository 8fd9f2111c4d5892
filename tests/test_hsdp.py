"""--num-distributed-optimizer-instances (issue 18): the optimizer sharded over d·c/R ranks, gradients
reduce-scattered in an instance and all-reduced across instances; by hand, and the flag both ways."""

import numpy as np
import pytest

from planner.api import explain, make_request
from planner.costs.communication import hierarchical_grad_reduce_time_s
from planner.errors import PlannerError
from planner.hardware.collectives import Link
from planner.megatron.export import flags_text
from planner.megatron.importer import import_megatron


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
    with pytest.raises(PlannerError, match="without Megatron FSDP"):
        make_request(**{**base, "fsdp": True}, distributed_optimizer_instances=2)
