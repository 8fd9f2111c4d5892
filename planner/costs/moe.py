"""Mixture-of-experts layers as today's Megatron-LM runs them: experts on their own grid of
expert tensor parallelism (etp) × expert parallelism (ep) × expert data parallelism, tokens routed
to the top-k experts and moved by the token dispatcher (Megatron-Core moe/, token_dispatcher.py).

Balanced routing gives every GPU the same expert work; dropless routing pays for the busiest
expert (``imbalance`` ≥ 1), a capacity factor caps it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.costs import Formula
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

DISPATCHER_KINDS = {"allgather": 0, "alltoall": 1, "flex": 2}  # planner.plan.DISPATCHER_CODES
GROUPED_GEMM_TILE_M = 128  # rows of a grouped GEMM's M block: each expert's tokens are padded to it


def grouped_gemm_padding(M: ArrayLike) -> np.ndarray:
    """(M + pad)/M: a grouped GEMM computes each expert's tokens in whole M blocks of 128 rows
    (DeepGEMM README, deepseek-ai/DeepGEMM: each expert segment of the contiguous layout is aligned
    to the GEMM M block size), so with token counts that fall anywhere in a block an expert wastes
    half a block on average: M_pad = M + 128/2. Fine-grained experts that see a few hundred tokens
    lose a noticeable share; experts with thousands, little."""
    M = np.asarray(M, dtype=float)
    return (M + GROUPED_GEMM_TILE_M / 2) / np.maximum(M, 1e-9)


def distinct_domains(
    E: int, k: int, domains: ArrayLike, *, groups: int | None = None, group_topk: int | None = None
) -> np.ndarray:
    """Expected NVLink domains a token's k experts live in, with the E experts spread evenly over
    ``domains`` domains (ranks hold contiguous experts, Megatron-Core's expert placement) and routing
    uniform over the allowed experts: D·(1 − Π_{j<k} (M − M/D − j)/(M − j)) for k draws without
    replacement from M experts in D equal bins. Group-limited routing (``--moe-router-num-groups``
    G, ``--moe-router-group-topk`` g; DeepSeek-V3 §2.1.2's node-limited routing) first picks g of
    the G groups: the pool shrinks to g·E/G experts in the domains those groups cover."""
    D = np.maximum(np.asarray(domains, dtype=float), 1.0)
    pool = np.full(np.shape(D), float(E))
    bins = D
    if groups:
        per_group_domains = np.maximum(D / groups, 1.0)  # a group spans D/G domains when G < D
        chosen = np.where(
            groups >= D,
            D * (1 - _miss(float(groups), float(group_topk), D)),  # distinct domains of g groups, G/D per domain
            group_topk * per_group_domains,
        )
        pool = np.full(np.shape(D), group_topk * E / groups)
        bins = np.maximum(np.minimum(chosen, D), 1.0)
    return bins * (1 - _miss(pool, float(k), bins))


def _miss(pool: ArrayLike, draws: float, bins: ArrayLike) -> np.ndarray:
    """Probability that ``draws`` picks without replacement from ``pool`` items in ``bins`` equal
    bins all miss one given bin."""
    pool, bins = np.asarray(pool, dtype=float), np.asarray(bins, dtype=float)
    others = pool - pool / bins
    prob = np.ones(np.broadcast(pool, bins).shape)
    for j in range(int(draws)):
        prob = prob * np.clip((others - j) / np.maximum(pool - j, 1e-9), 0.0, 1.0)
    return prob


def flex_dispatch_time_s(
    A: ArrayLike, T: ArrayLike, h: int, n: ArrayLike, link: Link, *, activation_bytes: int, remote_domains: ArrayLike
) -> np.ndarray:
    """One direction of the flex dispatcher (DeepEP's, HybridEP's normal kernels; DeepSeek-V3 §3.2.2):
    a token goes once over the rail to each other NVLink domain holding one of its experts
    (``remote_domains``, deduplicated) and is forwarded on NVLink to the experts' GPUs there, so the
    rail carries ε·T·h·(remote domains) and NVLink ε·A·h·(n−1)/n, both at once:
    max(rail bytes/β_rail, NVLink bytes/β_NVLink) + α. Inside one domain it is NVLink only."""
    n = np.asarray(n, dtype=float)
    nvlink = link.bus_bytes_per_s if link.nvlink_bytes_per_s is None else link.nvlink_bytes_per_s
    rail = link.bus_bytes_per_s if link.rail_bytes_per_s is None else link.rail_bytes_per_s
    on_nvlink = activation_bytes * np.asarray(A) * h * (n - 1) / np.maximum(n, 1) / nvlink
    on_rail = activation_bytes * np.asarray(T) * h * np.asarray(remote_domains) / rail
    return np.where(n > 1, np.maximum(on_nvlink, np.where(link.nodes > 1, on_rail, 0.0)) + link.latency_s, 0.0)


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
    kind: ArrayLike,
    flex_link: Link | None = None,
    remote_domains: ArrayLike = 0.0,
) -> np.ndarray:
    """Forward token movement of one MoE layer: dispatch and combine (the backward moves as much again).

    kind 1, alltoall: dispatch and combine are each an all-to-all of the A routed token copies (A·h
    values) over the ep group, plus an all-gather and a reduce-scatter of them over the etp group.
    kind 0, allgather (Megatron's default): every GPU all-gathers the T tokens of its whole etp·ep
    group and reduce-scatters the results back (token_dispatcher.py, MoEAllGatherTokenDispatcher).
    kind 2, flex: one group over etp·ep (MoEFlexTokenDispatcher), each of the A·etp copies
    deduplicated per NVLink domain on the rail (``flex_dispatch_time_s``).
    """
    if isinstance(kind, str):
        kind = DISPATCHER_KINDS[kind]
    ep, etp, kind = np.asarray(ep), np.asarray(etp), np.asarray(kind)
    routed = activation_bytes * np.asarray(A) * h
    etp_part = 2 * all_gather_time_s(etp, routed * etp, etp_link)
    alltoall = 2 * alltoall_time_s(ep, routed, ep_link) + etp_part
    group = ep * etp
    gathered = activation_bytes * np.asarray(T) * h * group
    allgather = 2 * all_gather_time_s(group, gathered, ep_link)
    if flex_link is None:
        flex = alltoall
    else:
        flex = 2 * flex_dispatch_time_s(
            np.asarray(A) * etp,
            np.asarray(T) * etp,
            h,
            group,
            flex_link,
            activation_bytes=activation_bytes,
            remote_domains=remote_domains,
        )
    return np.where(kind == 1, alltoall, np.where(kind == 2, flex, allgather))


def overlapped_exposure_s(
    comm_fwd: ArrayLike, comm_bwd: ArrayLike, compute_fwd: ArrayLike, compute_bwd: ArrayLike, *, overlap: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed dispatch of one MoE layer per micro-batch. With
    --overlap-moe-expert-parallel-comm Megatron-Core runs one micro-batch's forward beside another's
    backward, layer by layer (the 1F1B all-to-all overlap; DeepSeek-V3 §3.2.1's computation-
    communication overlap): the forward's dispatch and combine hide behind the other micro-batch's
    backward compute of that layer and the backward's behind the forward compute, so each exposes
    max(0, comm − compute of the other direction); never more than without the overlap."""
    overlap = np.asarray(overlap)
    fwd = np.where(overlap, np.maximum(np.asarray(comm_fwd) - compute_bwd, 0.0), comm_fwd)
    bwd = np.where(overlap, np.maximum(np.asarray(comm_bwd) - compute_fwd, 0.0), comm_bwd)
    return fwd, bwd


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


def expert_formula(ctx) -> Formula:
    """The routed experts' compute, for explain."""
    mo, opts = ctx.model, ctx.options
    load = (
        f"capacity factor {opts.moe_capacity_factor:g}"
        if opts.moe_capacity_factor is not None
        else f"dropless, busiest expert {opts.moe_load_imbalance:g} × the mean"
    )
    return Formula(
        f"MoE layers: A = (b·s/(c·t))·k·λ routed pairs (k = {mo.moe_router_topk} of E = {mo.num_experts}, λ: {load}), "
        f"grouped GEMMs 2·A·h·f_e·(γ+1) over the E/ep local experts at f_e/etp (f_e = {mo.expert_ffn}), "
        f"each expert's M padded to {GROUPED_GEMM_TILE_M}-row blocks ((M + {GROUPED_GEMM_TILE_M // 2})/M)",
        "Megatron-Core moe/experts.py (TEGroupedMLP); DeepGEMM README (M-block alignment of grouped GEMMs); "
        "Megatron-LM training.py:1255-1296 (e·(f_e·k + f_s) per token)",
    )


def dispatcher_formula(ctx, plan) -> Formula:
    """The token dispatcher's exposed time, for explain."""
    mo, opts = ctx.model, ctx.options
    kind = plan.moe_token_dispatcher.value
    text = {
        "alltoall": "2 all-to-alls (dispatch, combine) of ε·A·h over ep: "
        "max((k−1)/n·M/β_NVLink, (n−k)/n·M/β_rail) + α, "
        "+ all-gather/reduce-scatter over etp",
        "allgather": "all-gather and reduce-scatter of ε·T·h·ep·etp over etp·ep",
        "flex": "flex (DeepEP/HybridEP): each token once per other NVLink domain holding its experts on the rail "
        "(ε·T·h·D_remote / β_rail), forwarded on NVLink (ε·A·h / β_NVLink), whichever is longer",
    }[kind]
    if kind == "flex" and mo.moe_router_num_groups:
        text += (
            f"; group-limited routing (top-{mo.moe_router_group_topk} of {mo.moe_router_num_groups} groups) "
            "bounds the domains a token reaches"
        )
    hidden = ""
    if plan.overlap_moe_expert_parallel_comm:
        hidden = (
            "; --overlap-moe-expert-parallel-comm: each direction hides behind the other micro-batch's layer compute"
        )
    elif opts.moe_shared_expert_overlap and mo.shared_ffn and kind != "allgather":
        hidden = "; --moe-shared-expert-overlap: the forward dispatch hides behind the shared experts"
    return Formula(
        f"m × MoE layers × {text}, forward and backward{hidden}",
        "Megatron-Core moe/token_dispatcher.py; DeepSeek-V3 §3.2 (node-limited dispatch, overlap); "
        "all-to-all physics: planner.hardware.collectives.all_to_all_time_s",
    )
