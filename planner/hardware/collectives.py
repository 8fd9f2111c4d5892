"""Collective costs on a SuperPOD, by which tier of the network a group spans.

Megatron orders ranks tp, cp, ep, dp, pp (parallel_state.py:617): a group is ``size`` ranks
``stride`` apart. Inside one node it runs on NVLink/NVSwitch; across nodes each GPU has its own
rail NIC, so a group with k members per node drives k NICs. A DGX SuperPOD fat tree is
non-blocking: the tier (leaf inside a scalable unit, spine inside a pod, core across pods) sets
the latency, and the bandwidth only where a tier is oversubscribed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.hardware.spec import HardwareSpec


@dataclass(frozen=True)
class Link:
    """What one GPU of a group sees: NCCL bus bandwidth (bytes/s) and per-step latency (s)."""

    bus_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    nodes: np.ndarray


def group_nodes(size: ArrayLike, stride: ArrayLike, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """(nodes holding the group's members, extent in nodes from first to last member)."""
    size, stride = np.asarray(size), np.asarray(stride)
    nodes = np.where(stride >= gpus_per_node, size, np.ceil(size * stride / gpus_per_node))
    extent = (size - 1) * stride // gpus_per_node + 1
    return np.maximum(nodes, 1), np.maximum(extent, 1)


def group_link(hw: HardwareSpec, size: ArrayLike, stride: ArrayLike) -> Link:
    """Bus bandwidth and latency for a group of ``size`` ranks ``stride`` apart."""
    cal, net, node = hw.calibration, hw.network, hw.node
    gpn = node.gpus_per_node
    nodes, extent = group_nodes(size, stride, gpn)
    per_node = np.asarray(size) / nodes
    nvlink = node.nvlink_bytes_per_s * cal.nvlink_bus_efficiency
    nic_per_gpu = net.nic_bytes_per_s * net.nics_per_node / gpn
    tier_latency = np.full(np.shape(extent), net.tiers[-1].latency_us, dtype=float)
    tier_frac = np.full(np.shape(extent), net.tiers[-1].bandwidth_frac, dtype=float)
    for tier in reversed(net.tiers):
        inside = extent <= tier.max_nodes
        tier_latency = np.where(inside, tier.latency_us, tier_latency)
        tier_frac = np.where(inside, tier.bandwidth_frac, tier_frac)
    network = np.minimum(nvlink, per_node * nic_per_gpu * cal.network_bus_efficiency * tier_frac)
    one_node = nodes <= 1
    return Link(
        bus_bytes_per_s=np.where(one_node, nvlink, network),
        latency_s=np.where(one_node, node.nvlink_latency_us, tier_latency) * 1e-6,
        nodes=nodes,
    )


def all_reduce_time_s(n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Ring all-reduce, 2(n−1)/n · M/β, with the latency of a ring (2(n−1)α) or a tree
    (2⌈log₂n⌉α), whichever NCCL would pick (Thakur, Rabenseifner & Gropp 2005). 0 at n = 1."""
    n = np.asarray(n, dtype=float)
    steps = np.minimum(2 * (n - 1), 2 * np.ceil(np.log2(np.maximum(n, 1))))
    return 2 * (n - 1) / n * np.asarray(message_bytes) / link.bus_bytes_per_s + steps * link.latency_s


def all_gather_time_s(n: ArrayLike, message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Ring all-gather (or reduce-scatter) of a gathered message of M bytes: (n−1)/n · M/β +
    (n−1)α (Thakur et al. 2005). 0 at n = 1."""
    n = np.asarray(n, dtype=float)
    return (n - 1) / n * np.asarray(message_bytes) / link.bus_bytes_per_s + (n - 1) * link.latency_s


reduce_scatter_time_s = all_gather_time_s


def p2p_time_s(message_bytes: ArrayLike, link: Link) -> np.ndarray:
    """Point-to-point send of M bytes: M/β + α."""
    return np.asarray(message_bytes) / link.bus_bytes_per_s + link.latency_s
