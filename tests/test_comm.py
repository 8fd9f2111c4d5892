"""Collectives on the DGX A100 SuperPOD and the communication volumes of Narayanan et al. 2021 §4.1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs.communication import (
    activation_message_bytes,
    dp_grad_reduce_time_s,
    pp_p2p_time_s,
    tp_layer_comm_time_s,
)
from planner.costs.pipeline import exposed_p2p_transfers
from planner.hardware.collectives import (
    Link,
    all_gather_time_s,
    all_reduce_time_s,
    group_link,
    group_nodes,
    p2p_time_s,
    reduce_scatter_time_s,
    tier_index,
)

from conftest import a100

BETA = 100e9  # an arbitrary bus bandwidth, bytes/s
ALPHA = 10e-6  # an arbitrary per-step latency, s
M = 2**30  # message bytes


def link(beta=BETA, alpha=0.0) -> Link:
    return Link(bus_bytes_per_s=np.asarray(beta), latency_s=np.asarray(alpha), nodes=np.asarray(1))


# ----------------------------------------------------------------------------- ring formulas


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_ring_all_reduce_bandwidth_term(n):
    # Thakur, Rabenseifner & Gropp 2005: ring all-reduce moves 2(n − 1)/n · M per GPU
    assert float(all_reduce_time_s(n, M, link())) == pytest.approx(2 * (n - 1) / n * M / BETA, rel=1e-12)


def test_all_reduce_latency_is_ring_or_tree_whichever_is_smaller():
    # ring 2(n − 1)·α; tree 2⌈log₂ n⌉·α (NCCL picks the faster for latency)
    # (a 1-byte message: an empty one issues no collective at all)
    lk = link(alpha=ALPHA)
    assert float(all_reduce_time_s(2, 1, lk)) == pytest.approx(2 * ALPHA)  # ring 2, tree 2
    assert float(all_reduce_time_s(8, 1, lk)) == pytest.approx(6 * ALPHA)  # ring 14, tree 6
    assert float(all_reduce_time_s(1024, 1, lk)) == pytest.approx(20 * ALPHA)  # tree 2·10
    assert float(all_reduce_time_s(1024, 0, lk)) == 0.0
    assert float(all_reduce_time_s(8, M, lk)) == pytest.approx(2 * 7 / 8 * M / BETA + 6 * ALPHA, rel=1e-12)


@pytest.mark.parametrize("n", [2, 8, 16])
def test_all_gather_and_reduce_scatter(n):
    # ring all-gather / reduce-scatter of a gathered M: (n − 1)/n · M/β + (n − 1)α; together they cost
    # one all-reduce's bandwidth (Korthikanti et al. 2022 §4.2.2)
    lk = link(alpha=ALPHA)
    assert float(all_gather_time_s(n, M, lk)) == pytest.approx((n - 1) / n * M / BETA + (n - 1) * ALPHA, rel=1e-12)
    assert float(reduce_scatter_time_s(n, M, lk)) == float(all_gather_time_s(n, M, lk))
    bw_only = link()
    assert float(all_gather_time_s(n, M, bw_only) + reduce_scatter_time_s(n, M, bw_only)) == pytest.approx(
        float(all_reduce_time_s(n, M, bw_only)), rel=1e-12
    )


def test_one_rank_collectives_are_free():
    lk = link(alpha=ALPHA)
    assert float(all_reduce_time_s(1, M, lk)) == 0.0
    assert float(all_gather_time_s(1, M, lk)) == 0.0
    assert float(reduce_scatter_time_s(1, M, lk)) == 0.0


def test_p2p():
    assert float(p2p_time_s(M, link(alpha=ALPHA))) == pytest.approx(M / BETA + ALPHA, rel=1e-12)


# ----------------------------------------------------------------------------- SuperPOD links

# Datasheet values of the DGX A100 SuperPOD preset; the bus efficiencies are calibration data
# (fitted by megaplan calibrate), so they are read from the preset rather than written here.
NVLINK = 300e9  # A100 NVLink3: 600 GB/s per GPU, 300 GB/s each direction
NIC = 200e9 / 8  # one HDR InfiniBand NIC per GPU, 200 Gb/s = 25 GB/s (Narayanan 2021 §5)


def nvlink_bus() -> float:
    return NVLINK * a100().calibration.nvlink_bus_efficiency


def nic_bus() -> float:
    return NIC * a100().calibration.network_bus_efficiency


def tier_latency_us(name: str) -> float:
    return next(tier.latency_us for tier in a100().network.tiers if tier.name == name)


def test_a100_preset_values_used_below():
    hw = a100()
    assert hw.node.nvlink_gbytes_per_s == 300.0 and hw.node.gpus_per_node == 8
    assert (hw.network.nic_gbits_per_s, hw.network.nics_per_node) == (200.0, 8)
    # DGX SuperPOD (A100) reference architecture: 20-node scalable units, 140-node pods; Selene 560 nodes
    assert [(tier.name, tier.max_nodes) for tier in hw.network.tiers] == [("leaf", 20), ("spine", 140), ("core", 560)]


def test_tp_group_of_eight_is_one_node_on_nvlink():
    # Megatron rank order puts the 8 TP ranks on adjacent GPUs: one DGX, NVLink/NVSwitch
    lk = group_link(a100(), 8, 1)
    assert float(lk.nodes) == 1
    assert float(lk.bus_bytes_per_s) == pytest.approx(nvlink_bus(), rel=1e-12)
    assert float(lk.latency_s) == pytest.approx(a100().node.nvlink_latency_us * 1e-6)


def test_dp_group_of_eight_at_stride_eight_spans_eight_nodes_on_one_nic():
    # t = 8: DP peers are 8 ranks apart, one per node; each drives its own rail NIC (25 GB/s)
    lk = group_link(a100(), 8, 8)
    assert float(lk.nodes) == 8
    assert float(lk.bus_bytes_per_s) == pytest.approx(nic_bus(), rel=1e-12)
    assert float(lk.latency_s) == pytest.approx(tier_latency_us("leaf") * 1e-6)  # 8 nodes ≤ 20


def test_group_spanning_two_nodes_gets_eight_nics():
    # a 16-rank TP group at stride 1 covers 2 nodes with 8 members each: 8 NICs' bandwidth per node
    lk = group_link(a100(), 16, 1)
    assert float(lk.nodes) == 2
    assert float(lk.bus_bytes_per_s) == pytest.approx(min(nvlink_bus(), 8 * nic_bus()), rel=1e-12)


def test_group_with_two_members_per_node():
    # 4 ranks at stride 4: 2 nodes, 2 members (2 NICs) on each
    nodes, extent = group_nodes(4, 4, 8)
    assert (float(nodes), float(extent)) == (2, 2)
    assert float(group_link(a100(), 4, 4).bus_bytes_per_s) == pytest.approx(2 * nic_bus(), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 4096), stride=st.integers(1, 4096), domain=st.sampled_from([4, 8, 16, 72]))
def test_group_nodes_count_the_domains_as_the_select_on_the_stride_does(size, stride, domain):
    """``domain_count`` takes min(size, ⌈size·stride/D⌉) for the select it replaces (size where the stride spans a
    domain or more, else the ceiling): the same float, one array of groups or one group. 4 ranks at stride 4 on
    8-GPU nodes: ⌈16/8⌉ = 2 (the select's ceiling); 4 ranks at stride 8: 4 (its size)."""
    for s, k in ((size, stride), (np.array([size, 4, 4], dtype=float), np.array([stride, 4, 8], dtype=float))):
        s, k = np.asarray(s, dtype=float), np.asarray(k, dtype=float)
        select = np.maximum(np.where(k >= domain, s, np.ceil(s * k / domain)), 1)
        nodes, extent = group_nodes(s, k, domain)
        assert np.asarray(nodes).tobytes() == np.asarray(select).tobytes()
        assert np.asarray(extent).tobytes() == np.asarray(np.maximum((s - 1) * k // domain + 1, 1)).tobytes()
    assert [float(group_nodes(4, k, 8)[0]) for k in (4, 8)] == [2.0, 4.0]


@settings(max_examples=200, deadline=None)
@given(extent=st.lists(st.integers(1, 2000), min_size=1, max_size=8), tiers=st.integers(1, 4))
def test_tier_index_is_the_clipped_binary_search(extent, tiers):
    """``tier_index`` counts the tiers below the extent where ``group_link`` searched the max_nodes and clipped to
    the last tier: the same tier for every extent. A100 SuperPOD (20, 140, 560 nodes): 20 nodes in the leaf (0),
    21 on the spine (1), 561 beyond the core, its last tier (2)."""
    leaf = a100().network.tiers[0]
    ladder = [leaf.model_copy(update={"max_nodes": m}) for m in (20, 140, 560, 1500)[:tiers]]
    e = np.array(extent, dtype=float)[:, None]
    search = np.take(np.arange(tiers), np.searchsorted([t.max_nodes for t in ladder], e), mode="clip")
    assert tier_index(ladder, e).tolist() == search.tolist()
    assert tier_index(a100().network.tiers, np.array([20.0, 21.0, 561.0])).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "stride_nodes, tier",
    [
        (1, "leaf"),  # extent 2 nodes: one scalable unit (≤ 20)
        (19, "leaf"),  # extent 20: still one scalable unit
        (20, "spine"),  # extent 21: one pod (≤ 140)
        (139, "spine"),  # extent 140
        (140, "core"),  # extent 141: across pods (≤ 560)
        (559, "core"),  # extent 560: all of Selene
        (800, "core"),  # beyond the last tier: its latency
    ],
)
def test_tier_latency_by_extent(stride_nodes, tier):
    # a pair of ranks stride_nodes·8 GPUs apart spans stride_nodes + 1 nodes
    lk = group_link(a100(), 2, stride_nodes * 8)
    assert float(lk.latency_s) == pytest.approx(tier_latency_us(tier) * 1e-6)
    assert float(lk.bus_bytes_per_s) == pytest.approx(nic_bus(), rel=1e-12)  # non-blocking fat tree


def test_tier_latencies_grow_outwards():
    assert tier_latency_us("leaf") < tier_latency_us("spine") < tier_latency_us("core")


def test_group_link_broadcasts():
    lk = group_link(a100(), np.array([1, 8, 8, 2]), np.array([1, 1, 8, 8]))
    np.testing.assert_allclose(lk.bus_bytes_per_s, [nvlink_bus(), nvlink_bus(), nic_bus(), nic_bus()], rtol=1e-12)


# ----------------------------------------------------------------------------- volumes

b, s, h = 1, 2048, 12288
MESSAGE = float(activation_message_bytes(b, s, h, 1, activation_bytes=2))  # 2·b·s·h bytes: one 16-bit activation tensor


def test_activation_message_is_bsh_16_bit_elements():
    # Narayanan et al. 2021 §4.1: the tensor between layers and stages has b·s·h elements; CP splits s
    assert MESSAGE == 2 * 1 * 2048 * 12288
    assert float(activation_message_bytes(2, s, h, 4, activation_bytes=4)) == 4 * 2 * s * h / 4


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tp_layer_comm_without_sp_is_two_all_reduces(t):
    # Narayanan et al. 2021 §4.1: 2 all-reduces of b·s·h 16-bit elements per layer in the forward
    # (8bsh(t − 1)/t per layer forward + backward, bytes-wise 2·2(t − 1)/t·2bsh per direction)
    got = tp_layer_comm_time_s(MESSAGE, t, link(), sequence_parallel=np.array(False))
    assert float(got) == pytest.approx(2 * 2 * (t - 1) / t * 2 * b * s * h / BETA, rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tp_layer_comm_with_sp_has_the_same_bandwidth(t):
    # Korthikanti et al. 2022 §4.2.2: all-gather + reduce-scatter cost the same bandwidth as an all-reduce
    with_sp = tp_layer_comm_time_s(MESSAGE, t, link(), sequence_parallel=np.array(True))
    without = tp_layer_comm_time_s(MESSAGE, t, link(), sequence_parallel=np.array(False))
    assert float(with_sp) == pytest.approx(float(without), rel=1e-12)
    # latency: 2 × (AG + RS) = 4(t − 1)α against 2 all-reduces' 2·min(2(t − 1), 2⌈log₂t⌉)α
    lat = tp_layer_comm_time_s(MESSAGE, t, link(alpha=ALPHA), sequence_parallel=np.array(True))
    assert float(lat) - float(with_sp) == pytest.approx(4 * (t - 1) * ALPHA, rel=1e-9)


def test_tp_comm_at_t1_is_zero():
    lk = link(alpha=ALPHA)
    for sp in (False, True):
        assert float(tp_layer_comm_time_s(MESSAGE, 1, lk, sequence_parallel=np.array(sp))) == 0.0


def test_pp_p2p_volumes():
    # Narayanan et al. 2021 §4.1: b·s·h per micro-batch per boundary; with the 2021 scatter/gather,
    # b·s·h/t per rank over the t NICs, then an all-gather on NVLink; with SP each rank sends its 1/t
    t, tp_beta = 8, 200e9
    full = 2 * b * s * h
    plain = pp_p2p_time_s(MESSAGE, t, link(), link(tp_beta), sequence_parallel=np.array(False), scatter_gather=False)
    assert float(plain) == pytest.approx(full / BETA, rel=1e-12)
    sg = pp_p2p_time_s(MESSAGE, t, link(), link(tp_beta), sequence_parallel=np.array(False), scatter_gather=True)
    assert float(sg) == pytest.approx(full / t / BETA + (t - 1) / t * full / tp_beta, rel=1e-12)
    sp = pp_p2p_time_s(MESSAGE, t, link(), link(tp_beta), sequence_parallel=np.array(True), scatter_gather=False)
    assert float(sp) == pytest.approx(full / t / BETA, rel=1e-12)


@pytest.mark.parametrize(
    "p, m, vpp, overlap, expected",
    [
        (1, 64, 1, True, 0),  # no pipeline, no transfers
        (16, 96, 1, True, 2 * (96 + 15)),  # 1F1B: every micro-batch's forward and backward + fill/drain
        (16, 96, 1, False, 2 * (96 + 15)),
        (8, 64, 3, False, 2 * (64 * 3 + 7)),  # interleaved sends vpp times as much (Narayanan 2021 §2.2.2)
        (8, 64, 3, True, 2 * 7),  # interleaved with p2p overlap: only fill and drain exposed
    ],
)
def test_exposed_p2p_transfers(p, m, vpp, overlap, expected):
    assert float(exposed_p2p_transfers(p, m, vpp, overlap_p2p=overlap)) == expected


def test_dp_grad_reduce():
    # plain DDP: all-reduce of fp32 gradients (4 bytes per parameter under bf16);
    # distributed optimizer: reduce-scatter of the gradients (its parameter all-gather is costed apart)
    n, d = 1e9, 8
    plain = dp_grad_reduce_time_s(n, d, link(), grad_bytes=4, distributed_optimizer=np.array(False))
    assert float(plain) == pytest.approx(2 * (d - 1) / d * 4 * n / BETA, rel=1e-12)
    dist = dp_grad_reduce_time_s(n, d, link(), grad_bytes=4, distributed_optimizer=np.array(True))
    assert float(dist) == pytest.approx((d - 1) / d * 4 * n / BETA, rel=1e-12)
    one = dp_grad_reduce_time_s(n, 1, link(alpha=ALPHA), grad_bytes=4, distributed_optimizer=np.array(False))
    assert float(one) == 0.0
