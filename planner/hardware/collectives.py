"""Collective costs on a SuperPOD, by which tier of the network a group spans.

Megatron orders ranks tp, cp, ep, dp, pp (parallel_state.py:617): a group is ``size`` ranks
``stride`` apart. Inside one NVLink domain (a DGX node's NVSwitch, or the 72 GPUs of a GB200
NVL72 rack) it runs on NVLink; across domains each GPU has its own rail NIC, so a ring with k
members per domain drives k NICs, while an all-to-all leaves each GPU on its own NIC. A DGX
SuperPOD fat tree is non-blocking: the tier (leaf inside a scalable unit, spine inside a pod,
core across pods) sets the latency, and the bandwidth only where a tier is oversubscribed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from planner.hardware.spec import HardwareSpec

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Link:
    """What one GPU of a group sees: the ring bus bandwidth (bytes/s) NCCL's ring collectives reach,
    the per-step latency (s), the NVLink domains the group spans (``nodes``: DGX nodes, or NVL72
    racks), and for all-to-all the two paths a GPU's traffic takes: NVLink to the members of its
    own domain and its own rail NIC to the rest (default: the ring bandwidth, one domain)."""

    bus_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    nodes: np.ndarray
    nvlink_bytes_per_s: np.ndarray | None = None
    rail_bytes_per_s: np.ndarray | None = None
    members_per_domain: np.ndarray | None = None
    nvlink_latency_s: np.ndarray | None = None  # a ring's steps inside a domain (default: latency_s)


def group_nodes(size: ArrayLike, stride: ArrayLike, domain_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """(units of ``domain_gpus`` consecutive GPUs holding the group's members, extent in such units
    from the first member to the last): NVLink domains with the domain size, nodes with GPUs per node."""
    size, stride = np.asarray(size), np.asarray(stride)
    return domain_count(size, stride, domain_gpus), domain_extent(size, stride, domain_gpus)


def domain_count(size: np.ndarray, stride: np.ndarray, domain_gpus: int) -> np.ndarray:
    """``group_nodes``' units holding the members: ``size`` where the stride spans a unit or more, else
    ⌈size·stride/domain⌉, at least 1. That is min(size, ⌈size·stride/domain⌉) for group sizes ≥ 0 (a stride of a
    unit or more puts the ceiling at size or above, a shorter one at size or below: rounding is monotone and
    size itself a float), one ufunc where a select on the stride would be two."""
    return np.maximum(np.minimum(size, np.ceil(size * stride / domain_gpus)), 1)


def domain_extent(size: np.ndarray, stride: np.ndarray, domain_gpus: int) -> np.ndarray:
    """``group_nodes``' extent: units from the first member, rank 0, to the last, ⌊(size − 1)·stride/domain⌋ + 1, at
    least 1. The floor of the quotient is the floor division's for whole numbers (the quotient of q·D + r, r < D,
    rounds to q + r/D, below q + 1 while q < 2⁵²/D), in two vectorised ufuncs where float ``//`` loops element by
    element (8 times the instructions)."""
    return np.maximum(np.floor((size - 1) * stride / domain_gpus) + 1, 1)


def group_link(hw: HardwareSpec, size: ArrayLike, stride: ArrayLike) -> Link:
    """Bus bandwidth and latency for a group of ``size`` ranks ``stride`` apart.

    Inside one NVLink domain: NVLink·η_nvl. Across domains: a ring with k members per domain drives
    k rail NICs, min(NVLink, k·NIC·η_net·frac_tier); one GPU's rail, which the all-to-all's pieces for
    other domains leave on, is NIC·η_a2a·frac_tier (η_a2a: the all-to-all's own efficiency where the
    preset fits one on the MoE rows, else η_net), NIC the compute bandwidth per GPU (NICs per node /
    GPUs per node). The tier is chosen by the group's
    extent in nodes against the preset tiers' ``max_nodes``.
    """
    cal, net, node = hw.calibration, hw.network, hw.node
    size, stride = np.asarray(size), np.asarray(stride)
    domains = domain_count(size, stride, hw.nvlink_domain_gpus)
    extent = domain_extent(size, stride, node.gpus_per_node)
    per_domain = size / domains
    nvlink = node.nvlink_bytes_per_s * cal.nvlink_bus_efficiency
    nic_per_gpu = net.nic_bytes_per_s * net.nics_per_node / node.gpus_per_node
    tier = tier_index(net.tiers, extent)
    tier_latency = np.take([t.latency_us for t in net.tiers], tier)
    tier_frac = np.take([t.bandwidth_frac for t in net.tiers], tier)
    a2a = cal.a2a_network_efficiency or cal.network_bus_efficiency  # the all-to-all's own, where fitted
    rail = nic_per_gpu * a2a * tier_frac
    ring_rail = nic_per_gpu * cal.network_bus_efficiency * ring_uplink_share(tier_frac, net.tiers[0].max_nodes, size)
    one_domain = domains <= 1
    return Link(
        bus_bytes_per_s=np.where(one_domain, nvlink, np.minimum(nvlink, per_domain * ring_rail)),
        latency_s=np.where(one_domain, node.nvlink_latency_us, tier_latency) * 1e-6,
        nodes=domains,
        nvlink_bytes_per_s=np.full(np.shape(domains), float(nvlink)),
        rail_bytes_per_s=np.where(one_domain, nvlink, rail),
        members_per_domain=per_domain,
        nvlink_latency_s=np.full(np.shape(domains), node.nvlink_latency_us * 1e-6),
    )


def tier_index(tiers: list, extent: np.ndarray) -> np.ndarray:
    """The innermost of the ``tiers`` (strictly growing ``max_nodes``) whose max_nodes holds a group of ``extent``
    nodes, the last beyond them all: how many of the others' max_nodes are below the extent (one comparison per
    tier where a binary search per element costs 7 times the instructions)."""
    tier = np.zeros(np.shape(extent), dtype=np.intp)
    for t in tiers[:-1]:
        tier += extent > t.max_nodes
    return tier


def links_of(hw: HardwareSpec, groups: dict[str, tuple[ArrayLike, ArrayLike]]) -> dict[str, Link]:
    """``group_link`` of several groups of the same plans, ``groups`` naming each (size, stride), in one
    evaluation over the groups stacked (every term is elementwise, so each group's link is the one
    ``group_link`` gives it alone)."""
    shape = np.broadcast_shapes(*(np.shape(x) for pair in groups.values() for x in pair))
    rows = shape[0] if shape else 1
    shape = shape or (1,)
    size = np.concatenate([np.broadcast_to(s, shape) for s, _ in groups.values()])
    stride = np.concatenate([np.broadcast_to(k, shape) for _, k in groups.values()])
    link = group_link(hw, size, stride)
    return {
        name: Link(**{f.name: getattr(link, f.name)[j * rows : (j + 1) * rows] for f in fields(Link)})
        for j, name in enumerate(groups)
    }


def ring_uplink_share(tier_frac: ArrayLike, leaf_nodes: int, size: ArrayLike) -> np.ndarray:
    """The share of a NIC's bandwidth a ring of ``size`` > 2 ranks keeps on a tier whose uplinks are
    oversubscribed ``1/tier_frac`` : 1. On a rail-optimised fat tree each leaf serves one rail of
    L = ``leaf_nodes`` nodes and has L·frac uplinks; a ring in node order crosses a leaf's uplinks
    in two flows (in and out), the concurrent rings of one rail and leaf being one group, so the
    ring keeps min(1, frac·L/2) of the rail (at 1:1, and up to L/2:1, all of it). Traffic in
    which every node of the leaf sends across - an all-to-all, the sends between pipeline stages,
    ``size`` ≤ 2 - shares the uplinks L ways: frac (NVIDIA DGX SuperPOD reference architectures:
    rail-optimised leaves, one per rail per scalable unit)."""
    frac = np.asarray(tier_frac, dtype=float)
    return np.where(np.asarray(size) > 2, np.minimum(1.0, frac * leaf_nodes / 2), frac)


def _on_link(link: Link, name: str, n: np.ndarray, fn) -> np.ndarray:
    """``fn(n, link)``, kept on the (frozen) ``link`` with the n it was asked for, so the next call with the
    same n (the same array: a plan's group size, asked again and again by the collectives on its link) reads it
    back: the data-parallel terms ask each link's latency a dozen times per grid."""
    kept = link.__dict__.get(name)
    if kept is not None and kept[0] is n:
        return kept[1]
    out = fn(n, link)
    object.__setattr__(link, name, (n, out))  # n held with it: its id cannot be reused meanwhile
    return out


def ring_latency_s(n: ArrayLike, link: Link) -> np.ndarray:
    """Latency of one pass of a pipelined ring over n ranks in D NVLink domains: each chunk crosses
    n − 1 edges, on average D·(n − 1)/n of them between domains (α of the network tier) and the rest
    on NVLink (α_NVLink), as NCCL's own model charges its inter- and intra-node steps (NVIDIA/nccl
    src/graph/tuning.cc, ring latency = Σ steps' intra or inter latency). One domain: (n − 1)·α."""
    return _on_link(link, "_ring_latency", np.asarray(n, dtype=float), _ring_latency_s)


def _ring_latency_s(n: np.ndarray, link: Link) -> np.ndarray:
    if link.nvlink_latency_s is None:
        return (n - 1) * link.latency_s
    D = np.minimum(np.asarray(link.nodes, dtype=float), n)
    inter = np.where(D > 1, D * (n - 1) / np.maximum(n, 1), 0.0)
    return inter * link.latency_s + (n - 1 - inter) * np.where(D > 1, link.nvlink_latency_s, link.latency_s)


def all_reduce_time_s(n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Ring all-reduce, 2(n−1)/n · M/β, with the latency of a ring (2(n−1)α) or a tree
    (2⌈log₂n⌉α), whichever NCCL would pick (Thakur, Rabenseifner & Gropp 2005). 0 at n = 1 and for
    an empty message (no collective is issued: a dense model's expert gradients)."""
    n, M = np.asarray(n, dtype=float), np.asarray(message_bytes, dtype=float)
    return np.where(M > 0, 2 * (n - 1) / n * M / link.bus_bytes_per_s + all_reduce_latency_s(n, link), 0.0)


def all_reduce_latency_s(n: ArrayLike, link: Link) -> np.ndarray:
    """An all-reduce's latency: a ring's 2(n−1)α (``ring_latency_s`` twice) or a tree's 2⌈log₂n⌉α, whichever
    is less, as NCCL picks (Thakur, Rabenseifner & Gropp 2005). 0 at n = 1."""
    return _on_link(link, "_all_reduce_latency", np.asarray(n, dtype=float), _all_reduce_latency_s)


def _all_reduce_latency_s(n: np.ndarray, link: Link) -> np.ndarray:
    return np.minimum(2 * ring_latency_s(n, link), 2 * np.ceil(np.log2(np.maximum(n, 1))) * link.latency_s)


def all_gather_time_s(n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Ring all-gather (or reduce-scatter) of a gathered message of M bytes: (n−1)/n · M/β +
    (n−1)α (Thakur et al. 2005), the steps inside NVLink domains at their own α (``ring_latency_s``).
    0 at n = 1 and for an empty message."""
    n, M = np.asarray(n, dtype=float), np.asarray(message_bytes, dtype=float)
    return np.where(M > 0, (n - 1) / n * M / link.bus_bytes_per_s + ring_latency_s(n, link), 0.0)


reduce_scatter_time_s = all_gather_time_s

MIB = 2**20


def measured_collective_time_s(sizes_mib: ArrayLike, times_us: ArrayLike, message_bytes: ArrayLike) -> np.ndarray:
    """A collective's time read off a measured table of (size, time) points: linear in size between the
    points, the smallest point's time below it (latency-bound: NCCL's time is flat there), the last
    segment's bandwidth beyond the largest; 0 for an empty message. An all-gather of 48 MiB on 4 H100
    between the measured 32 MiB (113.3 µs) and 64 MiB (195.8 µs): 154.6 µs."""
    x = np.asarray(sizes_mib, dtype=float) * MIB
    y = np.asarray(times_us, dtype=float) * 1e-6
    M = np.asarray(message_bytes, dtype=float)
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
    t = np.where(M > x[-1], y[-1] + (M - x[-1]) * slope, np.interp(M, x, y))
    return np.where(M > 0, t, 0.0)


def nvlink_nccl_time_s(hw: HardwareSpec, op: str, n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """An NCCL ``op`` (all_gather, reduce_scatter, all_reduce) of a whole tensor of M bytes over n ranks: the
    hardware's measured table (``node.nccl_nvlink_us``) where the group stays inside one NVLink domain and the
    table has its size n, else the ring formula on the link (``all_gather_time_s``, ``all_reduce_time_s``)."""
    n, M = np.asarray(n), np.asarray(message_bytes, dtype=float)
    formula = all_reduce_time_s(n, M, link) if op == "all_reduce" else all_gather_time_s(n, M, link)
    table = (hw.node.nccl_nvlink_us or {}).get(op, {})
    inside = np.asarray(link.nodes) <= 1
    for size, points in table.items():
        measured = inside & (n == size)
        if np.any(measured):  # a size no plan has leaves the formula as it is
            sizes, times = zip(*points, strict=True)
            formula = np.where(measured, measured_collective_time_s(sizes, times, M), formula)
    return np.where(n > 1, formula, 0.0)


def all_to_all_time_s(n: ArrayLike, send_bytes: ArrayLike, link: Link) -> np.ndarray:
    """All-to-all in which each of n ranks sends M = ``send_bytes`` in all, M/n to every rank.

    Of the M/n pieces, k − 1 go to the members of the sender's own NVLink domain (k members per
    domain) over NVLink, n − k across domains over the sender's own rail NIC - not the node's
    aggregate, since every GPU of the node is sending its own share at the same time. The two paths
    run at once: max((k−1)/n · M/β_NVLink, (n−k)/n · M/β_rail) + α. PyTorch's all_to_all_single
    posts every peer's ncclSend/ncclRecv in one NCCL group (torch/csrc/cuda/nccl.cpp
    all2all_single_equal_split), so the latency is paid once, not per peer. 0 at n = 1.
    Inside one domain this is (n−1)/n · M/β_NVLink + α.
    """
    n = np.asarray(n, dtype=float)
    M = np.asarray(send_bytes, dtype=float)
    nvlink = link.bus_bytes_per_s if link.nvlink_bytes_per_s is None else link.nvlink_bytes_per_s
    rail = link.bus_bytes_per_s if link.rail_bytes_per_s is None else link.rail_bytes_per_s
    k = n if link.members_per_domain is None else np.minimum(link.members_per_domain, n)
    inside = (k - 1) / np.maximum(n, 1) * M / nvlink
    outside = (n - k) / np.maximum(n, 1) * M / rail
    return np.where(n > 1, np.maximum(inside, outside) + link.latency_s, 0.0)


def in_network_time_s(n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """A reduction done in the switches (SHARP through NCCL's CollNet): each GPU's share of the
    M bytes crosses its own rail once into the aggregation tree and once back, M/β, and the tree
    adds one pass up and down its tiers, 2α, whatever n: against a ring's 2(n−1)/n·M/β + 2(n−1)α
    all-reduce (Graham et al. 2016, 'Scalable Hierarchical Aggregation Protocol (SHArP)'; NVIDIA
    HPC-X NCCL-RDMA-SHARP plugins), and its (n−1)/n·M/β + (n−1)α reduce-scatter or all-gather
    (SHARP 3.5.2 with NCCL ≥ 2.20: reduce-scatter and all-gather as well as all-reduce). β: the
    group's bus bandwidth (``Link``: its members' rails per domain). 0 at n = 1 and for an empty
    message."""
    n, M = np.asarray(n, dtype=float), np.asarray(message_bytes, dtype=float)
    return np.where((n > 1) & (M > 0), M / link.bus_bytes_per_s + 2 * link.latency_s, 0.0)


def p2p_time_s(message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Point-to-point send of M bytes: M/β + α."""
    return np.asarray(message_bytes) / link.bus_bytes_per_s + link.latency_s


def cp_graphed_step_s(c: ArrayLike, step_us: float | None, graphed: float) -> np.ndarray:
    """Time one pass (forward or backward) of one layer's context-parallel ring adds beyond its attention,
    transfers and contention when CUDA graphs replay the attention block:

        t = c · κ · g   for c > 1;  0 at c = 1 (Transformer Engine takes no ring path)

    c ring steps a pass (Transformer Engine AttnFuncWithCPAndKVP2P: c attention steps forward and c
    backward), κ the preset's ``cp_graphed_step_us`` (fitted on the graphed CP runs; None: not modelled),
    g = 1 when graphs launch the attention block, else 0: the runs without graphs measure no such cost
    (GB300's fit puts κ at 0 on them), and the graphed ones do (docs/cost-model.md §6.7.1)."""
    c = np.asarray(c)
    kappa = 0.0 if step_us is None else step_us * 1e-6 * graphed
    return np.where(c > 1, c * kappa, 0.0)


def hidden_comm_contention_s(hidden_s: ArrayLike, nccl_sms: int | None, sm_count: int) -> np.ndarray:
    """Compute lost to a collective that runs hidden behind it: for the T_hidden seconds an NCCL
    kernel runs beside the compute, it holds k SMs (one CTA per channel) of the S the compute would
    use, so the compute advances at (S − k)/S and T_hidden·k/S of it is left to do afterwards.

    k: 24 CTAs for an ncclAllGather beside a GEMM on H100 (nsys; NVIDIA developer forum thread 337991,
    'Compute-Communication Overlap Causes Severe GEMM Performance Degradation'); 24/132 = 18 % agrees
    with the 18.9 % mean compute slowdown measured under overlapped collectives on A100, H100, MI250
    and MI210 (Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
    Learning, arXiv:2507.03114). 0 when the preset gives no ``nccl_sms``.
    """
    if nccl_sms is None:
        return np.zeros_like(np.asarray(hidden_s, dtype=float))
    return np.asarray(hidden_s, dtype=float) * nccl_sms / sm_count


def expected_max_normal(n: ArrayLike) -> np.ndarray:
    """E[max of n independent standard normals], by Blom's (1958) plotting position
    Φ⁻¹((n − 0.375)/(n + 0.25)), Φ⁻¹ of an upper-tail p by Abramowitz & Stegun 26.2.23
    (t = √(−2 ln(1 − p)), t − (c₀ + c₁t + c₂t²)/(1 + d₁t + d₂t² + d₃t³), |error| < 4.5·10⁻⁴).
    0 at n = 1; 1.42 at 8; 3.85 at 10,000."""
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    tail = 1.0 - (n - 0.375) / (n + 0.25)  # 1 − p
    t = np.sqrt(-2.0 * np.log(tail))
    num = 2.515517 + 0.802853 * t + 0.010328 * t**2
    den = 1.0 + 1.432788 * t + 0.189269 * t**2 + 0.001308 * t**3
    return np.maximum(t - num / den, 0.0)


def straggler_s(paced_s: ArrayLike, n_gpus: ArrayLike, sigma: float | None) -> np.ndarray:
    """What a synchronous step loses to the slowest of its N GPUs: each GPU's pace varies by σ
    (same SKU; manufacturing and power management), every GPU waits for the slowest at the step's
    synchronisation, so the compute-paced time T stretches by σ·E[max of N]: T·σ·E[max_N z]
    (``expected_max_normal``). σ's anchor: 8 % mean (max 22 %) performance variation across the GPUs
    of one cluster, outliers 1.5× the median (Sinha et al., SC22, 'Not All GPUs Are Created Equal',
    Summit, Vortex, Frontera, Longhorn, Corona). 0 when the preset does not model it."""
    if sigma is None:
        return np.zeros_like(np.asarray(paced_s, dtype=float))
    n = np.asarray(n_gpus, dtype=float)
    one = n.size > 1 and n.min() == n.max()  # one GPU count for every plan (a search's): E[max] computed once
    e = np.full(n.shape, expected_max_normal(n.flat[:1])[0]) if one else expected_max_normal(n)
    return np.asarray(paced_s, dtype=float) * sigma * e
