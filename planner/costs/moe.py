"""Mixture-of-experts layers as today's Megatron-LM runs them: experts on their own grid of
expert tensor parallelism (etp) × expert parallelism (ep) × expert data parallelism, tokens routed
to the top-k experts and moved by the token dispatcher (Megatron-Core moe/, token_dispatcher.py).

Balanced routing gives every GPU the same expert work; dropless routing pays for the busiest
expert (``imbalance`` ≥ 1), a capacity factor caps it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.costs.flops import Gemm
from planner.costs.memory import mlp_activation_tensors
from planner.hardware.collectives import Link, all_gather_time_s, all_to_all_time_s


def expert_token_assignments(
    b: ArrayLike, s: int, t: ArrayLike, c: ArrayLike, k: int, *, imbalance: float, capacity_factor: float | None
) -> np.ndarray:
    """A: (token, expert) pairs one GPU computes per micro-batch.

    Each GPU enters the MoE layer with its T = b·s/(c·t) tokens (sequence-parallel shard; MoE with
    t > 1 requires SP) and each token goes to k experts, so balanced routing gives every GPU T·k
    pairs (the total is conserved across the expert grid). Dropless routing waits for the busiest
    expert, ``imbalance`` × the mean; a capacity factor caps an expert at that many × the mean.
    """
    T = np.asarray(b) * s / (np.asarray(c) * np.asarray(t))
    load = imbalance if capacity_factor is None else min(imbalance, capacity_factor)
    return T * k * load


def expert_gemms(
    A: ArrayLike, h: int, f_e: int, E: int, ep: ArrayLike, etp: ArrayLike, *, gated: bool
) -> dict[str, Gemm]:
    """The expert MLP GEMMs on one GPU for A (token, expert) pairs: its E/ep local experts each see
    A·etp·ep/E tokens at 1/etp of the expert width (grouped GEMM). FLOPs 2·A·h·f_e·(gate + 1)."""
    A, ep, etp = np.asarray(A, dtype=float), np.asarray(ep), np.asarray(etp)
    local = E / ep
    M = A * etp / local
    gate = 2 if gated else 1

    def gemm(N, K):
        Mb, Nb, Kb = np.broadcast_arrays(M, N * 1.0, K * 1.0)
        return Gemm(flops=2.0 * local * Mb * Nb * Kb, M=Mb, N=Nb, K=Kb)

    return {"expert_fc1": gemm(f_e * gate / etp, h), "expert_fc2": gemm(h, f_e / etp)}


alltoall_time_s = all_to_all_time_s  # the token dispatcher's all-to-all: NVLink inside a domain, rail NICs across


def dispatcher_time_s(
    A: ArrayLike,
    T: ArrayLike,
    h: int,
    ep: ArrayLike,
    etp: ArrayLike,
    ep_link: Link,
    etp_link: Link,
    *,
    activation_bytes: int,
    kind: str,
) -> np.ndarray:
    """Forward token movement of one MoE layer (the backward moves as much again).

    alltoall: dispatch and combine are each an all-to-all of the A routed token copies (A·h values)
    over the ep group, plus an all-gather and a reduce-scatter of them over the etp group.
    allgather (Megatron's default): every GPU all-gathers the T tokens of its whole etp·ep group
    and reduce-scatters the results back (token_dispatcher.py, MoEAllGatherTokenDispatcher).
    """
    ep, etp = np.asarray(ep), np.asarray(etp)
    routed = activation_bytes * np.asarray(A) * h
    if kind == "alltoall":
        etp_part = 2 * all_gather_time_s(etp, routed * etp, etp_link)
        return 2 * alltoall_time_s(ep, routed, ep_link) + etp_part
    group = ep * etp
    gathered = activation_bytes * np.asarray(T) * h * group
    return 2 * all_gather_time_s(group, gathered, ep_link)


def moe_mlp_activation_bytes(
    A: ArrayLike, T: ArrayLike, h: int, f_e: int, etp: ArrayLike, *, gated: bool, fp8_inputs: bool = False
) -> np.ndarray:
    """What one MoE layer keeps for the backward in place of the dense MLP's tensors, per GPU:
    the routed token copies at the experts' input (2·A·h, 1 byte each with FP8 inputs), the
    experts' internals at 1/etp width (2·(2 or 3)·A·etp·f_e/etp bytes, ``memory.mlp_activation_tensors``,
    the fc2 input half that with
    FP8), and the router's fp32 probabilities and the combine's input (2·T·h)."""
    A, T = np.asarray(A, dtype=float), np.asarray(T, dtype=float)
    inner = 2.0 * mlp_activation_tensors(gated) - (1.0 if fp8_inputs else 0.0)
    return A * h * (1.0 if fp8_inputs else 2.0) + A * f_e * inner + 2.0 * T * h
