"""NVLink domains and the all-to-all: which path each byte of a group's traffic takes.

All-to-all across nodes runs at each GPU's own rail NIC, inside a node (or an NVL72 rack) on
NVLink; the hand computations below use the presets' datasheet numbers and read only the
efficiencies (calibration data) from the preset.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs import moe
from planner.hardware.collectives import all_gather_time_s, all_to_all_time_s, group_link
from planner.hardware.spec import NodeSpec
from planner.presets import load_hardware

M = 2**28  # bytes each rank sends in all


def h100():
    return load_hardware("dgx-h100-superpod")


def gb200():
    return load_hardware("gb200-nvl72")


def test_all_to_all_inside_one_dgx_runs_on_nvlink():
    hw = h100()
    nvlink = 450e9 * hw.calibration.nvlink_bus_efficiency  # NVLink4: 450 GB/s each direction
    got = all_to_all_time_s(8, M, group_link(hw, 8, 1))
    assert float(got) == pytest.approx(7 / 8 * M / nvlink + hw.node.nvlink_latency_us * 1e-6, rel=1e-12)


def test_all_to_all_across_two_dgx_nodes_runs_at_one_nic_per_gpu():
    # ep = 16 at stride 1: 8 members in each of 2 nodes. Each GPU sends 7 pieces of M/16 over NVLink
    # and 8 pieces over its own 400 Gb/s ConnectX-7 (50 GB/s), not over the node's 8 NICs together.
    hw = h100()
    nvlink = 450e9 * hw.calibration.nvlink_bus_efficiency
    rail = 400e9 / 8 * hw.calibration.a2a_network_efficiency  # the all-to-all's own efficiency (MoE rows)
    leaf = hw.network.tiers[0].latency_us * 1e-6
    link = group_link(hw, 16, 1)
    expected = max(7 / 16 * M / nvlink, 8 / 16 * M / rail) + leaf
    assert float(all_to_all_time_s(16, M, link)) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(8 / 16 * M / rail + leaf)  # the rail is the bottleneck
    # the same group's ring collectives drive 8 NICs per node, each at the rings' η_net
    ring = 400e9 / 8 * hw.calibration.network_bus_efficiency
    assert float(link.bus_bytes_per_s) == pytest.approx(min(nvlink, 8 * ring))


def test_the_all_to_all_and_the_rings_take_their_own_network_efficiency():
    # η_a2a 0.5 and η_net 0.8 (made up): the all-to-all's rail is 50 GB/s × 0.5 = 25 GB/s, a DP ring of
    # one member per node (dp 4 at stride 8) 50 GB/s × 0.8 = 40 GB/s; without η_a2a the rail takes η_net
    from planner.fidelity.calibrate import with_calibration

    hw = with_calibration(h100(), {"a2a_network_efficiency": 0.5, "network_bus_efficiency": 0.8})
    assert float(group_link(hw, 16, 1).rail_bytes_per_s) == pytest.approx(25e9)
    assert float(group_link(hw, 4, 8).bus_bytes_per_s) == pytest.approx(40e9)
    plain = with_calibration(hw, {"a2a_network_efficiency": None})
    assert float(group_link(plain, 16, 1).rail_bytes_per_s) == pytest.approx(40e9)


def test_gb200_node_is_a_compute_tray_inside_a_72_gpu_nvlink_domain():
    hw = gb200()
    assert (hw.gpus_per_node, hw.nvlink_domain_gpus, hw.network.nics_per_node) == (4, 72, 4)
    nvlink = 900e9 * hw.calibration.nvlink_bus_efficiency  # NVLink5: 900 GB/s each direction
    for size in (8, 16, 64, 72):  # TP or EP groups across compute trays of one rack stay on NVLink
        lk = group_link(hw, size, 1)
        assert float(lk.nodes) == 1 and float(lk.bus_bytes_per_s) == pytest.approx(nvlink)
        assert float(all_to_all_time_s(size, M, lk)) == pytest.approx(
            (size - 1) / size * M / nvlink + hw.node.nvlink_latency_us * 1e-6, rel=1e-12
        )


def test_gb200_all_to_all_across_two_racks():
    # ep = 144 at stride 1: 72 members in each of 2 racks; half of every GPU's data crosses its own NIC
    hw = gb200()
    nvlink = 900e9 * hw.calibration.nvlink_bus_efficiency
    rail = 400e9 / 8 * hw.calibration.network_bus_efficiency
    lk = group_link(hw, 144, 1)
    assert float(lk.nodes) == 2
    leaf = hw.network.tiers[0].latency_us * 1e-6  # 2 racks = 36 compute trays, inside a scalable unit
    assert float(all_to_all_time_s(144, M, lk)) == pytest.approx(
        max(71 / 144 * M / nvlink, 72 / 144 * M / rail) + leaf, rel=1e-12
    )


def test_gb200_data_parallel_ring_across_racks():
    # t·c·p = 72 inside a rack, dp = 4 across racks at stride 72: one member per rack, one rail NIC
    hw = gb200()
    lk = group_link(hw, 4, 72)
    assert float(lk.nodes) == 4
    assert float(lk.bus_bytes_per_s) == pytest.approx(400e9 / 8 * hw.calibration.network_bus_efficiency)
    # dp = 8 at stride 36: two members per rack drive two NICs
    assert float(group_link(hw, 8, 36).bus_bytes_per_s) == pytest.approx(2 * float(lk.bus_bytes_per_s))


def test_moe_dispatcher_all_to_all_is_the_collective():
    hw = h100()
    A, h = 4096 * 2 * 1.1, 4096  # tokens × top-2 × imbalance, hidden
    routed = 2 * A * h  # bf16 token copies
    ep_link = group_link(hw, 16, 1)
    got = moe.dispatcher_time_s(A, 4096, h, 16, 1, ep_link, group_link(hw, 1, 1), activation_bytes=2, kind="alltoall")
    assert float(got) == pytest.approx(2 * float(all_to_all_time_s(16, routed, ep_link)), rel=1e-12)


def test_nvlink_domain_must_hold_whole_nodes():
    with pytest.raises(ValueError, match="whole number of nodes"):
        NodeSpec(
            gpus_per_node=4,
            nvlink_gbytes_per_s=900.0,
            nvlink_latency_us=5.0,
            nvlink_domain_gpus=70,
            sources=dict.fromkeys(
                ("gpus_per_node", "nvlink_gbytes_per_s", "nvlink_latency_us", "nvlink_domain_gpus"), "test"
            ),
        )


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([2, 4, 8, 16, 32, 64, 128]), stride=st.sampled_from([1, 2, 8, 16]))
def test_all_to_all_is_never_faster_than_the_nvlink_bound(n, stride):
    # whatever the layout, (n−1)/n of the data leaves the GPU at no more than the NVLink rate,
    # and across domains an all-to-all is at least as slow as an all-gather of the same bytes at the same
    # NIC efficiency (H100's all-to-all has its own, fitted on the MoE rows: set to the rings' here)
    from planner.fidelity.calibrate import with_calibration

    for hw in (with_calibration(h100(), {"a2a_network_efficiency": None}), gb200()):
        lk = group_link(hw, n, stride)
        a2a = float(all_to_all_time_s(n, M, lk))
        nvlink = hw.node.nvlink_bytes_per_s * hw.calibration.nvlink_bus_efficiency
        assert a2a >= (n - 1) / n * M / nvlink
        if float(lk.nodes) > 1:
            assert a2a + 1e-12 >= float(all_gather_time_s(n, M, lk)) - (n - 2) * float(lk.latency_s)


def test_one_rank_all_to_all_is_free():
    assert float(all_to_all_time_s(1, M, group_link(h100(), 1, 1))) == 0.0
    np.testing.assert_array_equal(all_to_all_time_s(np.array([1, 1]), M, group_link(h100(), 1, 1)), [0.0, 0.0])
