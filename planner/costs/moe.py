"""Mixture-of-experts layers as today's Megatron-LM runs them: experts on their own grid of
expert tensor parallelism (etp) × expert parallelism (ep) × expert data parallelism, tokens routed
to the top-k experts and moved by the token dispatcher (Megatron-Core moe/, token_dispatcher.py).

Balanced routing gives every GPU the same expert work; dropless routing pays for the busiest
expert (``imbalance`` ≥ 1), a capacity factor caps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.costs import Formula
from planner.costs.compute import eager_bytes_ratio
from planner.costs.flops import Gemm
from planner.costs.memory import mlp_activation_tensors
from planner.hardware.collectives import Link, all_gather_time_s, all_to_all_time_s, nvlink_nccl_time_s

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


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


# HybridEP's metadata preprocessing (DeepEP hybrid-ep branch @ 94a9f8f6, csrc/hybrid_ep/hybrid_ep.cu
# HybridEPBuffer::metadata_preprocessing): once per forward dispatch (HybridEPDispatch.forward; the combine and the
# backward reuse its handle, Megatron-LM fused_a2a.py @ d98e8a64) every rank all-gathers the bool routing maps of the
# flex group (executor.cu allgather_routing_map: torch.distributed.all_gather_into_tensor, NCCL, unless
# enable_custom_allgather, default False and never passed by Megatron-LM) and runs the scan kernel over the gathered
# map (hybrid_ep_backend.cuh ``scan``), on the dispatch's stream, before the dispatch kernel.
ROUTING_MAP_BYTES = 1  # torch.kBool per (token, expert) entry (executor.cu; scan: static_assert(sizeof(bool) == 1))
SCAN_PASSES = 2  # the scan reads its rows twice: step 0 (per-rank counts), step 2 (the exclusive scan itself)
SPARSE_TO_DENSE_BYTES = 4  # int32 per (token, rank of the domain): handle.sparse_to_dense_map
# Blocks of the scan kernel, one per SM (NUM_OF_BLOCKS, __launch_bounds__(256, 1)): Megatron-Core's
# moe_hybridep_num_sms_preprocessing default (transformer_config.py @ d98e8a64; DeepEP's Configurer default too,
# config.cuh). Megatron-Bridge's performance runs give 32 from v0.5.0 (26.06) with the fused grouped MLP and the A2A
# overlap (scripts/performance/utils/overrides.py:243-244; v0.6.0 perf_recipes/{deepseek,gpt_oss,qwen}/common.py):
# the plan option moe_hybridep_num_sms_preprocessing carries it (``scan_bandwidth_bytes_per_s``).
HYBRIDEP_PREPROCESSING_SMS = 108
SCAN_THREADS_PER_BLOCK = 256  # the scan's blocks (hybrid_ep_backend.cuh: __launch_bounds__(NUM_THREADS_PER_BLOCK, 1))


def scan_bandwidth_bytes_per_s(hbm_bytes_per_s: ArrayLike, scan_sms: ArrayLike, sm_count: int) -> np.ndarray:
    """B_scan: the HBM bandwidth HybridEP's scan kernel draws with k blocks (``moe_hybridep_num_sms_preprocessing``,
    one block of 256 threads an SM, each thread loading its token's row of E/D bytes at once):

        B_scan(k) = B_HBM·η_mem · min(1, min(k, S) / min(k_0, S)),   k_0 = 108 (Megatron-Core's default)

    Little's law: a block keeps a fixed number of bytes in flight (256 rows of E/D bytes), so the bandwidth the
    kernel draws grows with its blocks until HBM saturates. The default's price (``metadata_scan_bytes`` at
    B_HBM·η_mem) takes k_0 blocks as saturating; below k_0 the kernel is slower in proportion, above it no faster.
    The saturation point is not identified by any published timing (no scan-kernel measurement at two block
    counts): if k_0 blocks do not saturate either, both times are low by the same factor and the ratio holds.
    Megatron-Bridge's 32 (v0.5.0 scripts/performance/utils/overrides.py:244) on GB200 (S = 148): 32/108 of
    B_HBM·η_mem, the scan 3.375× as long on 32/108 of the SMs, the same SM-seconds."""
    k = np.minimum(np.asarray(scan_sms, dtype=float), sm_count)
    return np.asarray(hbm_bytes_per_s, dtype=float) * np.minimum(1.0, k / min(HYBRIDEP_PREPROCESSING_SMS, sm_count))


def routing_map_allgather_bytes(n: ArrayLike, T: ArrayLike, E: ArrayLike) -> np.ndarray:
    """M: the gathered routing map of HybridEP's metadata preprocessing, n·T·E bytes (each of the n ranks of the
    flex group contributes its bool [T, E] map, ``ROUTING_MAP_BYTES`` an entry; a rank receives (n − 1)·T·E of
    them). GPT-OSS-120B at EP 64, b 4, s 4096: 64 × 16,384 × 128 = 134.2 MB gathered, 132.1 MB received."""
    return ROUTING_MAP_BYTES * np.asarray(n, dtype=float) * np.asarray(T, dtype=float) * np.asarray(E, dtype=float)


def metadata_scan_bytes(n: ArrayLike, T: ArrayLike, E: ArrayLike, domains: ArrayLike, A: ArrayLike) -> np.ndarray:
    """HBM bytes of HybridEP's scan kernel over the gathered map of n ranks × T tokens × E experts, the ranks in
    D NVLink domains (hybrid_ep_backend.cuh ``scan``, hybrid-ep @ 94a9f8f6):

        reads   2 · n·T·E/D          each token's row of its own domain's E/D experts, in step 0 and again in step 2
              + (D − 1)·T·E/D        step 3 (D > 1): its own tokens' rows of the other domains (attn_to_rdma_map)
        writes  4 · n·T              sparse_to_dense_map, an int32 per own-token row and rank of the domain
              + A·E/n                local_expert_routing_map, a bool per received token and local expert (A, the
                                     routed pairs a rank receives, bounds the received tokens)

    The rdma_to_attn_map and attn_to_rdma_map (a bool per token and domain) and the per-block scan states are left
    out (< 0.1 %). The second read is counted from HBM: a map larger than L2 (GPT-OSS at EP 64: 134 MB) has left it
    when step 2 starts; a small one may hit L2 (then 1 read)."""
    n, T, E = (np.asarray(x, dtype=float) for x in (n, T, E))
    D = np.maximum(np.asarray(domains, dtype=float), 1.0)
    reads = ROUTING_MAP_BYTES * (SCAN_PASSES * n * T * E / D + (D - 1) * T * E / D)
    writes = SPARSE_TO_DENSE_BYTES * n * T + ROUTING_MAP_BYTES * np.asarray(A, dtype=float) * E / n
    return reads + writes


def hybridep_metadata_time_s(
    hw,
    n: ArrayLike,
    T: ArrayLike,
    E: ArrayLike,
    A: ArrayLike,
    link: Link,
    *,
    hbm_bytes_per_s: float,
    scan_sms: int = HYBRIDEP_PREPROCESSING_SMS,
) -> tuple[np.ndarray, np.ndarray]:
    """(all-gather, scan kernel) seconds of HybridEP's metadata preprocessing, once per forward dispatch of a MoE
    layer and micro-batch, for a flex group of n ranks (ep·etp) each routing T tokens over E columns (etp·E: the
    flex dispatcher replicates the map over the expert-TP ranks, token_dispatcher.py _initialize_metadata):

        t_ag   = NCCL all-gather of M = n·T·E bytes on the group's link: (n − 1)/n · M/β + ring latency
                 (``collectives.nvlink_nccl_time_s``: the measured table inside one NVLink domain where the preset
                 has one, else ``all_gather_time_s``), 0 for n = 1
        t_scan = ``metadata_scan_bytes`` / B_scan(k)   (``scan_bandwidth_bytes_per_s``: B_HBM·η_mem at the default
                 k = 108 blocks, in proportion below it)

    GPT-OSS-120B at EP 64 on GB200 (b 4, s 4096): 132.1 MB received at 720 GB/s = 183.5 µs + 63 × 5 µs ring
    latency; the scan 272.8 MB at 7.12 TB/s = 38.3 µs."""
    n = np.asarray(n, dtype=float)
    gathered = routing_map_allgather_bytes(n, T, E)
    t_ag = np.where(n > 1, nvlink_nccl_time_s(hw, "all_gather", n, gathered, link), 0.0)
    bandwidth = scan_bandwidth_bytes_per_s(hbm_bytes_per_s, scan_sms, hw.gpu.sm_count)
    scan = metadata_scan_bytes(n, T, E, link.nodes, A) / bandwidth
    return t_ag, np.where(n > 1, scan, 0.0)


def metadata_sm_share(t_ag_s: ArrayLike, t_scan_s: ArrayLike, *, nccl_sms: int | None, scan_sms: int, sm_count: int):
    """f_meta: the share of the SMs HybridEP's metadata takes from the compute beside it, averaged over its time:
    (k_NCCL·t_ag + k_scan·t_scan)/(S·(t_ag + t_scan)), k_NCCL the all-gather's CTAs (the preset's ``nccl_sms``),
    k_scan the scan's blocks (one per SM: --moe-hybridep-num-sms-preprocessing, default 108), S the GPU's SMs.
    0 without metadata."""
    t_ag, t_scan = np.asarray(t_ag_s, dtype=float), np.asarray(t_scan_s, dtype=float)
    held = (nccl_sms or 0) * t_ag + min(scan_sms, sm_count) * t_scan
    total = t_ag + t_scan
    return np.where(total > 0, held / (sm_count * np.maximum(total, 1e-30)), 0.0)


# SMs the dispatcher's communication kernels hold while they run (the compute beside them gets the rest):
# DeepEP 20 (Megatron-Core moe_deepep_num_sms default, transformer_config.py at core_r0.17 and d98e8a64),
# HybridEP 16 (Megatron-Bridge recipes' moe_hybridep_num_sms, recipes/gpt_oss/gpt_oss.py @ v0.4.2),
# NCCL's all-to-all one CTA per p2p channel, 32 assumed (NCCL src/graph/paths.cc: the communicator's
# channels, at most MAXCHANNELS = 64; band 16-64).
COMM_SMS = {"alltoall": 32, "deepep": 20, "hybridep": 16, "ncclep": 32}


def comm_sm_share(kind: ArrayLike, backend: str, sm_count: int, num_sms: int | None = None) -> np.ndarray:
    """f: the share of the GPU's SMs the token dispatcher's kernels take - alltoall (kind 1) NCCL's
    (``COMM_SMS``), flex (kind 2) ``num_sms`` (--moe-flex-dispatcher-num-sms; Megatron-Bridge's
    performance scripts give HybridEP 32, scripts/performance/utils/overrides.py at v0.3.0-v0.5.0) or,
    unset, its backend's default."""
    kind = np.asarray(kind)
    flex = COMM_SMS[backend] if num_sms is None else num_sms
    sms = np.where(kind == 2, flex, COMM_SMS["alltoall"])
    return np.minimum(sms / sm_count, 1.0)


def connection_limited_share(f_sm: ArrayLike, limited: ArrayLike, phi: float | None) -> np.ndarray:
    """f: the share of a hidden dispatch's time the compute-bound kernels beside it lose; f_SM
    (``comm_sm_share``), or max(f_SM, φ) where the plan runs into Hopper's connection limit.

    With TP or CP > 1 on compute capability < 10 the A2A overlap and the sequence-parallel
    collectives need different CUDA_DEVICE_MAX_CONNECTIONS (Megatron-LM arguments.py: 'you can set
    CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32, which depends on which parallelization you want to
    prioritize'; Megatron-Bridge perf_plugins.py v0.2.0-v0.4.0 sets 32 with the overlap). Either way
    kernels wait behind Hopper's persistent GEMMs: with one connection the dispatch queues behind the
    compute, with 32 'communication kernel will be pushed to the end of the GEMM kernel, failing to
    overlap the kernels' (perf_plugins.py), and a GEMM launched while the dispatcher holds SMs runs the
    CTAs that found none as a second wave (f up to 1). φ (``persistent_gemm_comm_share`` of the
    hardware preset, band [f_SM, 1]) reproduces a measured A/B of the overlap at TP 2 on H100; at TP 1
    the SM share alone does (tests/test_moe_physics.py). ``limited``: ``communication.connection_limited``."""
    f = np.asarray(f_sm, dtype=float)
    return f if phi is None else np.where(limited, np.maximum(f, phi), f)


def comm_hbm_share(bytes_moved: ArrayLike, c_s: ArrayLike, hbm_bytes_per_s: float) -> np.ndarray:
    """g: the share of HBM bandwidth an all-to-all takes while it runs: it reads what it sends and
    writes what it receives, 2·M bytes in its time c (M the bytes one GPU moves): g = 2·M/(c·B_HBM),
    at most 1. The compute beside it loses g of its memory-bound part (an assumption: its GEMMs,
    compute-bound, lose nothing). Across nodes it is small (H100: 2 × 50 GB/s of 3.35 TB/s, 3 %);
    inside an NVLink domain it is not (GB200: 2 × 900 GB/s of 8 TB/s, 22 %)."""
    c = np.asarray(c_s, dtype=float)
    return np.where(c > 0, np.minimum(2.0 * np.asarray(bytes_moved) / np.maximum(c, 1e-30) / hbm_bytes_per_s, 1.0), 0.0)


def unpaired_share(p: ArrayLike, m: ArrayLike) -> np.ndarray:
    """u: the share of a rank's forward (and backward) model-chunk steps that run alone under the A2A
    overlap. Only the steady 1F1B phase pairs a forward with a backward; the warm-up forwards and the
    cool-down backwards run alone (Megatron-LM combined_1f1b.py, schedules.py get_pp_rank_microbatches
    @ d98e8a64). Without pipelining the first forward and the last backward: u = 1/m. Interleaved
    (the overlap needs VPP with p > 1), rank i warms up W_i = 2(p − i − 1) + (v − 1)·p + 1 of its m·v
    chunks (the +1: the overlap's extra warm-up step), on average over the ranks W̄ = v·p, so
    u = W̄/(m·v) = p/m. min(1, p/m) covers both."""
    return np.minimum(1.0, np.maximum(np.asarray(p, dtype=float), 1.0) / np.maximum(np.asarray(m, dtype=float), 1.0))


def combined_step_s(
    c_f: ArrayLike,
    c_b: ArrayLike,
    pre_fwd: ArrayLike,
    experts_fwd: ArrayLike,
    pre_bwd: ArrayLike,
    dgrad: ArrayLike,
    wgrad: ArrayLike,
    *,
    sm_share: ArrayLike,
    delay_wgrad: ArrayLike,
    meta_f: ArrayLike = 0.0,
    meta_share: ArrayLike = 0.0,
) -> np.ndarray:
    """One MoE layer's combined forward + backward step under --overlap-moe-expert-parallel-comm, from
    the issue order and the dependencies of TransformerLayerSchedulePlan.run (Megatron-LM
    models/common/model_chunk_schedule_plan.py @ d98e8a64) on a compute and a communication stream:

        comm:    C_b            | D_f → D_b                          | C_f
        compute: P_f            | M_b (dgrad [+ wgrad]) → [W] → M_f  | P_b

    C_b/D_b: combine and dispatch backward (c_b each), D_f/C_f forward (c_f each), P: pre_dispatch (the
    attention half, router, shared experts), M: the routed experts. D_b needs M_b's input gradient; M_f
    needs D_f's tokens; C_f and P_b wait for both, and the next layer's P_f and C_b for C_f and P_b:

        A = max(c_b, P_f + f·c_b)                                              (C_b ‖ P_f)
        B = max(max(M_b + W, c_f) + M_f, max(c_f, M_b) + c_b, X + f·min(c_f + c_b, X))
        C = max(c_f, P_b + f·c_f)                                              (C_f ‖ P_b)

    with X = dgrad + wgrad + M_f the middle's compute, M_b = dgrad and W = wgrad under
    --delay-wgrad-compute (the expert wgrad runs beside D_b), else M_b = dgrad + wgrad and W = 0 (D_b
    waits for the whole expert backward). A compute X beside a collective c that holds a share f of the
    SMs takes X + f·c (``comm_sm_share``); never more than the two run back to back.

    HybridEP's metadata preprocessing (``hybridep_metadata_time_s``, m_f) runs on the communication stream just
    before D_f, so D_f takes m_f + c_f in the middle's first two terms, and the compute beside it loses
    f_meta·min(m_f, X) more (``metadata_sm_share``); 0 for every other dispatcher."""
    f = np.asarray(sm_share, dtype=float)
    c_f, c_b = np.asarray(c_f, dtype=float), np.asarray(c_b, dtype=float)
    meta = np.asarray(meta_f, dtype=float)
    d_f = c_f + meta  # the forward dispatch with the metadata ahead of it
    dgrad, wgrad = np.asarray(dgrad, dtype=float), np.asarray(wgrad, dtype=float)
    m_b = np.where(delay_wgrad, dgrad, dgrad + wgrad)
    compute = dgrad + wgrad + np.asarray(experts_fwd)
    first = np.maximum(c_b, np.asarray(pre_fwd) + f * c_b)
    middle = np.maximum(
        np.maximum(np.maximum(dgrad + wgrad, d_f) + experts_fwd, np.maximum(d_f, m_b) + c_b),
        compute + f * np.minimum(c_f + c_b, compute) + np.asarray(meta_share) * np.minimum(meta, compute),
    )
    last = np.maximum(c_f, np.asarray(pre_bwd) + f * c_f)
    return first + middle + last


# The host side of the combined schedule (--overlap-moe-expert-parallel-comm, Megatron-LM @ d98e8a64). One Python
# thread issues both micro-batches' work, node by node, in TransformerLayerSchedulePlan.run's order
# (models/common/model_chunk_schedule_plan.py:261-301): combine_bwd, pre_dispatch_fwd (attention, router, the
# dispatcher's preprocess), mlp_bwd, dispatch_fwd, mlp_bwd_dw, dispatch_bwd, mlp_fwd, combine_fwd, pre_dispatch_bwd,
# pre_dispatch_bwd_dw; every node runs under an event wait/record and a stream switch (pipeline_parallel/utils.py
# ScheduleNode.stream_acquire_context:323-346), every backward node is its own autograd engine call
# (default_backward_func:225-236: Variable._execution_engine.run_backward). A dropless forward makes the host wait for
# the GPU once a layer: the alltoall dispatcher copies its token counts to the host in dispatch_preprocess
# (transformer/moe/token_dispatcher.py:661, cuda_dtoh_point 'before_permutation_1') and blocks on them before the
# all-to-all (token_dispatch:702, d2h_event.synchronize() at 956-958: the input/output splits are host lists);
# HybridEP without a static budget sizes its buffers from the received count (token_dispatcher.py:1111-1112, 1173-1178)
# and TEGroupedMLP.forward turns the counts into a host list (transformer/moe/experts.py:916-917, .tolist()). In the
# combined order that wait falls in the middle of the pair, after the paired backward's mlp_bwd was issued and before
# its dispatch_bwd, mlp_bwd_dw and pre_dispatch_bwd: the host never gets more than one paired layer ahead of the GPU,
# so the pair lasts at least the host's work for both directions. Without the overlap the backward has no such
# wait (its splits are saved host lists) and its host work runs ahead of the GPU. NVIDIA: "EP Overlap brings extra cpu
# overhead and may cause GPU bubble during execution" (Megatron-LM PR 2184, partial CUDA graphs for the overlap,
# scopes attn, moe_router, moe_preprocess); Megatron-Bridge PR 1760 (a6e92de5f) turned the overlap off for
# Qwen3-235B on B200 "due to CPU overhead".
#
# H_L: the host's work per paired MoE layer (one forward + one backward) outside the experts' per-expert ops, no
# graphs. No op-level host timing of a Megatron layer is published; the published A/Bs of the overlap without CUDA
# graphs identify it. A host-paced step lasts what the host takes, whatever the GPU's, so each A/B's overlapped step
# time is solved for (``host_paced_step_s`` at the A/B's plan; docs/cost-model.md §13.3, hostov20 paragraph):
#   Megatron-Bridge PR 1760 (a6e92de5f) on 64 B200, Qwen3-235B BF16, the overlap alone switched: 17.2 s -> 9,252.1 µs
#   (9,253.1 at t_op 9.06 µs, before GB300 took CUDA's 152 SMs, 2026-12-05; 9,254.4 before Megatron-Core's
#   FP8-parameter bucket groups were counted, bucket_group_tensors, 2026-12-04; 9,255.0 before Megatron-Bridge 25.09's
#   cuDNN 9.11 was priced at the 9.13.1 table, 2026-12-04; 9,254.1 before graphed CP ring steps were priced, §6.7.1;
#   9,796.2 before DGX B200 took DGX H100's fabric factors and GPT-OSS joined t_op's fit, 9,384.3 before t_op pooled
#   only the families within 2 σ of each other, 9,248.7 before GB300's stragglers left their floor, 2026-12-04);
#   the Bridge skill nemo-mbridge-perf-moe-comm-overlap (SKILL.md @ 067f987, PR 3862) on 16 H100, Qwen3-30B BF16
#   alltoall: 31.31 s -> 9,006.6 µs (9,007.1; 9,007.6; 9,008.1; 9,002.3; 9,061.3; 8,999.9). Both at the presets'
#   t_op (9.07 µs): a refit of t_op moves them by 16·6 and 8·6 times its change (the experts' eager ops in H, below).
# Mean 9,129.3 µs (9,130.1 at t_op 9.06), σ 173.6 µs (the two values' sample deviation, 1.9 %; the published times'
# rounding adds < 40 µs).
# Two more A/Bs bound it: yanring/Megatron-MoE-ModelZoo's Qwen3-235B on 256 H100 (x1.119 with the overlap, TP2 DeepEP)
# allows at most about 9.6 ms (above it the overlap cannot gain x1.119 at any φ in its band); PR 1760's MXFP8 pair
# switched VP4 off with the overlap (issue 3399: VP degraded too), so its 20.1 s -> 10,868.1 µs is an upper bound
# (10,869.9 at t_op 9.06 µs, 10,870.3 at t_op 9.07 µs before GB300's 152 SMs, 10,871.8 at t_op 9.06 µs before the
# bucket groups, 10,858.9 at t_op 9.18 µs, 11,081.4 at t_op 7.96 µs, 10,849.7 at 9.23).
# x86 hosts (DGX B200, DGX H100); no A/B on Grace: GB200/GB300 take ρ times as long for the same work (the preset's
# node.host_op_time_ratio, 2.75: TransformerEngine issue 2053's torch.nn.Linear host time, GB200 against a DGX H100's
# Xeon 8480C; ``combined_host_s``). No x86 validation row in the bar is host-paced at this value (each one's GPU step
# is longer), so those rows bound H_L from above and cannot fit it; the GPT-OSS GB200 rows are paced at ρ·H. H_L is the
# combined schedule's host work, the schedule's own included (a model chunk's plan is rebuilt for each micro-batch,
# pipeline_parallel/combined_1f1b.py:377-388), not the two directions issued apart: rows without the overlap whose GPU
# step is shorter than H (MB-26.02-B200-QWEN3-235B-256, H/G 1.19) are priced within 3 % unpaced.
COMBINED_HOST_US = 9129.3


def combined_host_s(
    host_layer_us: float, graphed_share: ArrayLike, expert_host_s: ArrayLike, host_op_ratio: float = 1.0
) -> np.ndarray:
    """H: host seconds to issue one paired MoE layer step of the combined schedule (one micro-batch's forward and
    another's backward of the layer):

        H = ρ·[H_L·(1 − g) + h_e]

    H_L the host work per paired layer outside the experts (``COMBINED_HOST_US``), g the share of it CUDA graphs
    replay without the host (``combined_host_graphed_share``), h_e the experts' eager per-expert and per-layer ops,
    forward + backward (``expert_host_s``, t_op each), ρ the host CPU's time per eager op over that of the x86 hosts
    H_L was solved on (the preset's ``node.host_op_time_ratio``: 1 on DGX, 2.75 on Grace - TransformerEngine issue
    2053, one torch.nn.Linear forward's host time 37.08 µs on GB200 against 13.48 µs on a DGX H100's Xeon 8480C).
    Qwen3-235B on B200 BF16, EP 8 (16 local experts, 2 + 4 ops each at 7.96 µs): 9,222.8 + 16·6·7.96 = 9,987.0 µs;
    GPT-OSS on GB200 (2 local experts, 4 + 7 ops with the biases): 2.75·(9,222.8 + 2·11·7.96) = 25,844.3 µs."""
    host = host_layer_us * 1e-6 * (1.0 - np.asarray(graphed_share, dtype=float)) + np.asarray(expert_host_s)
    return host_op_ratio * host


def host_levelled_both_ways(*, quick_geglu: bool, moe_act_recomputed: bool, unfused: bool, dropless: bool) -> bool:
    """Whether, without the A2A overlap, the host waits for the GPU in every MoE layer's forward *and* backward, so it
    can never bank time across layers in either direction and each layer lasts at least the host's work for it
    (``levelled_layer_excess_s``). Forward: a dropless layer's token counts reach the host before its all-to-all
    (token_dispatcher.py core_r0.16.0 l.899 / core_r0.17.0 l.904, ``d2h_event.synchronize()``; HybridEP's blocking
    dispatch, item (o) of docs/cost-model.md §13.7). Backward: only the quick-GeGLU's ``moe_act`` recompute - its
    ``weighted_bias_quick_geglu_impl`` builds the linear offset with ``torch.tensor(..., device=input.device)``
    (fused_bias_geglu.py l.434 at core_r0.16.0 and core_r0.17.0), a blocking host-to-device copy, and
    ``CheckpointWithoutOutput`` re-runs it when the backward reaches fc2 (experts.py TEGroupedMLP.forward, core_r0.16.0
    l.699, 739-750; core_r0.17.0 l.292, 380-390); TE's fused grouped MLP (``unfused`` False)
    runs the activation in its epilogue. Every other recipe's backward has no sync (the all-to-all's splits are host
    lists saved in the forward), so its host runs ahead there."""
    return bool(quick_geglu and moe_act_recomputed and unfused and dropless)


def levelled_layer_excess_s(gpu_layer_s: ArrayLike, host_s: ArrayLike, levelled: ArrayLike) -> np.ndarray:
    """Seconds a MoE layer (forward + backward of one micro-batch, no A2A overlap) lasts beyond its GPU time when the
    host is levelled with the GPU in both directions every layer (``host_levelled_both_ways``):

        X = max(0, H − G)

    G the layer's GPU time (attention and MoE halves, recomputation, exposed dispatch), H the host's work for it, taken
    as the combined schedule's per pair (``combined_host_s``: one forward and one backward of the layer - an upper
    bound, H_L includes the overlap schedule's own bookkeeping; no published timing gives the eager layer's host work
    without it). 0 where the host can run ahead. GPT-OSS on GB200 (26.02 plan): H 26.41 ms, G 23.80 ms → 2.61 ms."""
    excess = np.maximum(np.asarray(host_s, dtype=float) - np.asarray(gpu_layer_s, dtype=float), 0.0)
    return np.where(np.asarray(levelled, dtype=bool), excess, 0.0)


def host_paced_step_s(gpu_step_s: ArrayLike, host_s: ArrayLike) -> np.ndarray:
    """A paired layer step of the combined schedule paced by whichever is slower, the GPU's critical path
    (``combined_step_s``) or the host issuing both directions (``combined_host_s``): max(step, H). The host waits for
    the GPU once a pair (the dropless forward's token counts), so it cannot bank time across pairs; the GPU cannot run
    work not yet issued. Neither side's partial overlap within the pair is priced (a lower bound on the pair)."""
    return np.maximum(np.asarray(gpu_step_s, dtype=float), np.asarray(host_s, dtype=float))


def overlapped_exposure_s(
    comm_fwd: ArrayLike,
    comm_bwd: ArrayLike,
    pre_fwd: ArrayLike,
    experts_fwd: ArrayLike,
    pre_bwd: ArrayLike,
    experts_bwd: ArrayLike,
    *,
    overlap: ArrayLike,
    sm_share: ArrayLike,
    delay_wgrad: ArrayLike = False,
    unpaired: ArrayLike = 0.0,
    meta_fwd: ArrayLike = 0.0,
    meta_share: ArrayLike = 0.0,
    host_s: ArrayLike = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed dispatch of one MoE layer per micro-batch.

    With --overlap-moe-expert-parallel-comm Megatron-Core runs one micro-batch's forward beside
    another's backward, layer by layer (DeepSeek-V3 §3.2.1): the combined step ``combined_step_s``,
    each all-to-all c half of a direction's dispatch + combine, the expert backward half dgrad, half
    wgrad. Exposed: E = step − (P_f + M_f + P_b + M_b), split between the directions as their
    communication is. The warm-up forwards and cool-down backwards run alone (``unpaired_share`` u):
    E̅ = (1 − u)·E + u·(comm_fwd + comm_bwd). Without the overlap every all-to-all is exposed. On the GPU
    the overlap never costs time (each pair is at most its two parts back to back); the host can make it:
    a paired step lasts at least ``host_s``, the host's work for both directions (``combined_host_s``,
    ``host_paced_step_s``), and what the host adds beyond the GPU's step is charged here, with the exposed
    dispatch. The unpaired steps run as without the overlap.

    ``meta_fwd``: HybridEP's metadata preprocessing of the forward dispatch (``hybridep_metadata_time_s``), hidden
    as D_f is (``combined_step_s``' m_f, its SMs ``meta_share``), exposed whole without the overlap and in the
    unpaired steps; it belongs to the forward."""
    overlap = np.asarray(overlap)
    meta = np.asarray(meta_fwd, dtype=float)
    comm_fwd, comm_bwd = np.asarray(comm_fwd, dtype=float), np.asarray(comm_bwd, dtype=float)
    half = 0.5 * np.asarray(experts_bwd, dtype=float)
    step = combined_step_s(
        0.5 * comm_fwd,
        0.5 * comm_bwd,
        pre_fwd,
        experts_fwd,
        pre_bwd,
        half,
        half,
        sm_share=sm_share,
        delay_wgrad=delay_wgrad,
        meta_f=meta,
        meta_share=meta_share,
    )
    step = host_paced_step_s(step, host_s)
    work = np.asarray(pre_fwd) + np.asarray(experts_fwd) + np.asarray(pre_bwd) + 2 * half
    u = np.asarray(unpaired, dtype=float)
    fwd = comm_fwd + meta
    total = fwd + comm_bwd
    exposed = (1 - u) * np.maximum(step - work, 0.0) + u * total
    share = np.where(total > 0, fwd / np.maximum(total, 1e-30), 0.5)
    return np.where(overlap, exposed * share, fwd), np.where(overlap, exposed * (1 - share), comm_bwd)


# Eager ops a MoE layer issues per local expert and micro-batch (Megatron-Core TEGroupedMLP over
# Transformer Engine's GroupedLinear, core_r0.16-0.18): one GEMM per expert for fc1 and fc2 forward,
# dgrad and wgrad for each backward (TE's grouped GEMM launches one cuBLAS GEMM per expert); FP8
# quantises each expert's fc1 and fc2 input forward and their output gradients backward, per expert,
# in ``FP8_QUANTISE_OPS`` kernels each. Per-tensor current scaling ('tensorwise'): GroupedLinear's
# tex.split_quantize has no fused multi-tensor kernel for it (TE v2.14.1 extensions/cast.cpp
# multi_tensor_quantize_impl: fused for delayed-scaling quantizers only, else each split's
# quantize), and Float8CurrentScalingQuantizer::quantize_impl launches four kernels per tensor
# (TE v2.14.1 pytorch/csrc/quantizer.cpp:857-896 and common/recipe/current_scaling.cu: zero_amax_kernel,
# the amax reduction, nvte_compute_scale_from_amax, nvte_quantize_v2 the cast). MXFP8: one kernel per
# expert and tensor (MXFP8Quantizer::quantize is nvte_quantize_v2 alone, TE v2.12-v2.16 quantizer.cpp),
# which writes the scales already in the GEMM's swizzled layout (GroupedLinear sets optimize_for_gemm on
# its input and output-gradient quantizers: grouped_linear.py v2.12 l.961-971, v2.14 l.1229-1239,
# v2.16 l.1358-1368); the weights' scales are swizzled at the grouped GEMM, one multi-tensor kernel for
# all experts (te_general_grouped_gemm -> multi_tensor_swizzle_scales_for_gemm ->
# nvte_multi_tensor_swizzle_scaling_factors, extensions/gemm.cpp and swizzle.cpp v2.12-v2.16), once per
# grouped GEMM that reads the weights: fc1 and fc2 forward, their dgrads backward (``FP8_LAYER_OPS``,
# per layer, not per expert). fp8_blockwise_scaling.rst: the quantisation, then the scale swizzle;
# fp8_delayed_scaling.rst: one cast, the amax from the history. On Hopper (FP8 GEMMs TN-only, each
# quantisation writes the transposed copy too) TE v2.12-v2.16 differs for two recipes
# (``HOPPER_QUANTISE_OPS``): delayed scaling's split_quantize is one fused nvte_multi_cast_transpose for
# all experts (extensions/cast.cpp multi_tensor_quantize_impl: fused when every quantiser is a
# Float8Quantizer with both layouts allocated), so 0 per expert and one kernel per quantised tensor list
# per layer (fc1 and fc2 inputs forward, their output gradients backward); blockwise is
# Float8BlockQuantizer::quantize's nvte_quantize_v2 alone, its scales never swizzled (swizzle.cpp:
# MXFP8 and NVFP4 only; the conversion to MXFP8 runs on compute capability >= 10 only, gemm.cpp).
# Experts with biases add the fc2 bias expert by expert (TEGroupedMLP._apply_bias: a multiply and an
# add per expert, three ops backward).
EXPERT_GEMM_OPS = (2, 4)
FP8_QUANTISE_OPS = {"delayed": 1, "tensorwise": 4, "mxfp8": 1, "blockwise": 2}
HOPPER_QUANTISE_OPS = {"delayed": 0, "blockwise": 1}  # where Hopper differs from FP8_QUANTISE_OPS
FP8_LAYER_OPS = {"mxfp8": (2, 2)}  # (forward, backward) per MoE layer: the weights' scale swizzles
HOPPER_LAYER_OPS = {"delayed": (2, 2)}  # per MoE layer on Hopper: the fused multi-tensor casts
EXPERT_BIAS_OPS = (2, 3)


def expert_host_ops(fp8_recipe: str | None, *, biased: bool, hopper: bool = False) -> tuple[int, int]:
    """(forward, backward) eager ops per local expert and micro-batch (``EXPERT_GEMM_OPS`` and the rest):
    2 GEMMs forward and 4 backward, + 2·q quantisations each way with FP8 (q = FP8_QUANTISE_OPS of the
    recipe, HOPPER_QUANTISE_OPS where Hopper differs), + the bias (2, 3) for biased experts."""
    q = 0 if fp8_recipe is None else FP8_QUANTISE_OPS[fp8_recipe]
    if hopper and fp8_recipe in HOPPER_QUANTISE_OPS:
        q = HOPPER_QUANTISE_OPS[fp8_recipe]
    fwd, bwd = EXPERT_GEMM_OPS[0] + 2 * q, EXPERT_GEMM_OPS[1] + 2 * q
    if biased:
        fwd, bwd = fwd + EXPERT_BIAS_OPS[0], bwd + EXPERT_BIAS_OPS[1]
    return fwd, bwd


def expert_layer_host_ops(fp8_recipe: str | None, *, hopper: bool = False) -> tuple[int, int]:
    """(forward, backward) eager ops per MoE layer and micro-batch that do not repeat per expert
    (``FP8_LAYER_OPS``: MXFP8's multi-tensor swizzle of the experts' weight scales, one per grouped GEMM
    reading the weights; ``HOPPER_LAYER_OPS``: delayed scaling's fused multi-tensor cast on Hopper);
    (0, 0) for every other recipe and for BF16."""
    table = HOPPER_LAYER_OPS if hopper and fp8_recipe in HOPPER_LAYER_OPS else FP8_LAYER_OPS
    return table.get(fp8_recipe, (0, 0)) if fp8_recipe is not None else (0, 0)


def _host_op_counts(ctx, biased: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """(per expert, per layer) ``expert_host_ops`` and ``expert_layer_host_ops`` of the plan's recipe on
    its GPU (Hopper: compute capability < 10)."""
    opts = ctx.options
    recipe = opts.fp8_recipe.value if opts.fp8 is not None else None
    hopper = ctx.hardware.gpu.compute_capability < 10.0
    return expert_host_ops(recipe, biased=biased, hopper=hopper), expert_layer_host_ops(recipe, hopper=hopper)


def combined_host_graphed_share(attn: float, moe_block: float, router: float, preprocess: float) -> float:
    """g: the share of a paired layer's host work (outside the experts' per-expert ops) that CUDA graphs replay without
    the host, each argument 1 when graphs capture that scope, else 0: g = ½·attn + ½·max(moe, (router + preprocess)/2).
    The attention half and the MoE half each take half of it (the even split τ's graph scopes use, docs/cost-model.md
    §4.4, an assumption); of the MoE half's non-expert work, --cuda-graph-modules moe_router and moe_preprocess
    (the scopes Megatron-LM PR 2184 supports under the overlap "to release cpu pressure") take half each, the
    dispatch, combine and their permutations staying eager (an assumption). Full-iteration graphs: 1."""
    return 0.5 * attn + 0.5 * max(moe_block, 0.5 * (router + preprocess))


def expert_host_time_s(local_experts: ArrayLike, ops: int, *, op_us: float, captured: float) -> np.ndarray:
    """Host time the GPU waits for, per MoE layer and micro-batch: E/ep local experts × ``ops`` eager ops
    × t_op, less the share that never reaches the host (``captured``: 1 with full-iteration CUDA
    graphs, the 'moe' graph scope, or TE's fused grouped MLP, one kernel for all experts). A dropless
    layer synchronises with the host every forward (TEGroupedMLP.forward's tokens_per_expert.tolist();
    the alltoall dispatcher's sync before the expert-parallel all-to-all,
    token_dispatcher.py), so the host has no head start when it reaches the experts: each per-expert launch
    costs t_op (5-25 µs of CPU per PyTorch op: Python, autograd, dispatcher, cudaLaunchKernel).

    Added to the GPU's time whole, even where the experts' GPU time G_e is longer. The sync only levels the host
    with the GPU before the experts (token_dispatcher.py:899, experts.py:645 at core_v0.16.0). After it, TE issues
    one cuBLAS GEMM per expert in a host loop while the GPU runs the earlier ones (TE v2.14.1
    common/gemm/cublaslt_gemm.cu:986-1009, from grouped_linear.py:207, 411, 467-487). So host issue time alone would
    cost max(0, H_e − G_e). The MoE rows in the bar reject that form: ``calibrate --moe`` under it gives t_op
    18.2 ± 1.0 µs and rms log error 0.0568, against 7.61 ± 0.63 µs and 0.0470 with this one; the in-bar median
    goes 3.8 → 4.9 % (docs/cost-model.md §13.3, hostmax20 bullet). So t_op is the per-op cost the step pays,
    whichever side it falls on. The rows cannot split it into host time hidden behind the GPU and per-kernel GPU
    time that is not: X = max(H_e − G_e, β·H_e) fits equally well (rms 0.0468-0.0470) for any β from 0.25 to 1."""
    return np.asarray(local_experts, dtype=float) * ops * op_us * 1e-6 * (1.0 - captured)


def expert_host_s(local_experts: ArrayLike, ctx, *, captured: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) host time of one MoE layer's per-expert eager ops per micro-batch, with the
    recipe's and the model's op counts (``expert_host_ops``) at the preset's ``moe_host_op_us``."""
    (fwd, bwd), (layer_fwd, layer_bwd) = _host_op_counts(ctx, ctx.model.add_bias_linear)
    op_us = ctx.hardware.calibration.moe_host_op_us or 0.0
    return (
        expert_host_time_s(local_experts, fwd, op_us=op_us, captured=captured)
        + expert_host_time_s(1, layer_fwd, op_us=op_us, captured=captured),
        expert_host_time_s(local_experts, bwd, op_us=op_us, captured=captured)
        + expert_host_time_s(1, layer_bwd, op_us=op_us, captured=captured),
    )


# GPU time a CUDA graph spends per kernel node between back-to-back kernels (the previous kernel's drain,
# the next one's launch and ramp), which graphs do not remove: a chain of N no-op kernels captured and
# replayed costs ≈ 15 µs + 0.58 µs·N (N = 8…117; RTX 5070 Ti Laptop, sm_120 Blackwell, CUDA 13.3;
# ahrefs/ocannl issue 488, 2026-07-30, against ≈ 6.4 µs per individually launched kernel).
GRAPH_NODE_GAP_US = 0.58


def graph_node_gap_s(local_experts: ArrayLike, ops: int, *, gap_us: float, graphed: float) -> np.ndarray:
    """GPU time per MoE layer and micro-batch of the per-expert kernels a CUDA graph replays:
    (E/ep)·ops·τ_node·g, τ_node = ``GRAPH_NODE_GAP_US``, g = 1 when a graph captures the unfused expert
    path (whole-layer, full-iteration or the 'moe' scope), else 0 (eager: the host's t_op per op is the
    longer gap, ``expert_host_time_s``; TE's fused grouped MLP: one kernel, no per-expert nodes)."""
    return np.asarray(local_experts, dtype=float) * ops * gap_us * 1e-6 * graphed


# GPU time of one real memory-bound kernel replayed in a CUDA graph, whatever its size, where the no-op chain
# above measures only the gap between nodes: vLLM's static per-tensor FP8 cast (torch.ops._C.
# static_scaled_fp8_quant, one kernel) of a 1 × 2048 tensor takes 0.002 ms on H100 under
# triton.testing.do_bench_cudagraph (vllm-project/vllm PR 33918, 2026-02-05; the table rounds to 1 µs), and
# its dynamic per-tensor quantisation - an amax reduction then the cast, current scaling's structure - 0.007 ms
# (PR 33867, the same harness). Blackwell check: a one-kernel FP8 quantisation of 4 × 2048 on B200 runs 1.74 µs
# (Helion) to 2.82 µs (vLLM's CUDA kernel), pytorch/helion PR 3073 (2026-07-16).
GRAPH_KERNEL_FLOOR_US = 2.0


def expert_graph_gap_s(local_experts: ArrayLike, ctx, *, graphed: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) GPU time of one MoE layer's graphed per-expert kernels beyond their bytes and FLOPs:
    the GEMMs (``EXPERT_GEMM_OPS``) at the node gap τ_node (their small-shape cost is the GEMM law's), every
    other per-expert kernel (quantisation, bias) and the per-layer multi-tensor kernels at the floor of a real
    kernel in a graph F = ``GRAPH_KERNEL_FLOOR_US``:

        t = g·[(E/ep)·(n_gemm·τ_node + (n_ops − n_gemm)·F) + n_layer·F]

    with the recipe's and the model's op counts (``expert_host_ops``); g as in ``graph_node_gap_s``."""
    (fwd, bwd), (layer_fwd, layer_bwd) = _host_op_counts(ctx, ctx.model.add_bias_linear)

    def direction(ops: int, gemms: int, layer: int) -> np.ndarray:
        return (
            graph_node_gap_s(local_experts, gemms, gap_us=GRAPH_NODE_GAP_US, graphed=graphed)
            + graph_node_gap_s(local_experts, ops - gemms, gap_us=GRAPH_KERNEL_FLOOR_US, graphed=graphed)
            + graph_node_gap_s(1, layer, gap_us=GRAPH_KERNEL_FLOOR_US, graphed=graphed)
        )

    return direction(fwd, EXPERT_GEMM_OPS[0], layer_fwd), direction(bwd, EXPERT_GEMM_OPS[1], layer_bwd)


# Megatron-Core's alltoall dispatcher (MoEAlltoAllTokenDispatcher, core_r0.14-0.18) permutes the routed
# copies twice on the way in: by destination rank before the all-to-all (dispatch_preprocess's permute,
# which every dispatcher runs once: blocks.PERMUTE_BYTES) and, with more than one local expert, by local
# expert after it, since they arrive grouped by source rank (dispatch_postprocess's sort_chunks_by_idxs:
# TE's fused moe_sort_chunks_by_index under --moe-permute-fusion, torch.split + cat without it, or the
# drop-and-pad path's transpose().contiguous()); combine_preprocess undoes it before the return
# all-to-all. Each reads 2 and writes 2 bytes per element of the A·h copies. The flex dispatcher
# (DeepEP/HybridEP) and the allgather dispatcher permute once after the exchange.
SORT_CHUNKS_BYTES = 2 * (2 + 2)


def sort_chunks_bytes(A: ArrayLike, h: int, local_experts: ArrayLike, kind: ArrayLike) -> np.ndarray:
    """Forward HBM bytes of the alltoall dispatcher's second permutation and its inverse:
    ``SORT_CHUNKS_BYTES``·A·h when the dispatcher is alltoall (``DISPATCHER_KINDS``) and E/ep > 1, else 0."""
    A = np.asarray(A, dtype=float)
    sorts = (np.asarray(kind) == DISPATCHER_KINDS["alltoall"]) & (np.asarray(local_experts) > 1)
    return SORT_CHUNKS_BYTES * A * h * sorts


# Megatron-Core's token permutation without --moe-permute-fusion (moe_utils.permute / unpermute, the same at
# core_r0.11.0 and d98e8a64): the permute is an index_select of the routed copies (read 2, write 2 an element, what
# the fused permute moves: blocks.PERMUTE_BYTES's first half); the unpermute multiplies the copies by their
# probabilities, allocates a zero output and scatter_add_s the k copies of each token into it through an int64 index
# broadcast over h, atomic adds; backward, the unpermute is a gather (with the probabilities' multiply and their
# gradient's reduction) and the permute an index_add_, atomic adds again.
# Measured: TileOPs PR 608 (tile-ai/TileOPs, 2026-03-19; H200, bf16, top-2, hidden 4096), PyTorch's unpermute - the
# probabilities' multiply, the zero output, scatter_add_ - at 0.22 and 0.25 TB/s over its (k + 1)·T·h·2 bytes
# (T tokens; 0.06 and 0.20 ms at 512 and 2,048 tokens), against 2.9 TB/s for a fused kernel: 0.25 of the H200's
# 4.8 TB/s. Assumed: the backward's index_add_ runs at the same rate (the same atomic accumulation over the same
# bytes), and other GPUs keep the fraction of their HBM bandwidth.
UNFUSED_SCATTER_HBM_FRAC = 0.25 / 4.8
FUSED_UNPERMUTE_BYTES = 2 + 2  # what the priced (fused) unpermute moves an element: blocks.PERMUTE_BYTES's second half


def unfused_permute_extra_bytes(A: ArrayLike, h: int, k: ArrayLike, ratio: float) -> np.ndarray:
    """HBM bytes, at the law W_HBM·η_mem, that Megatron-Core's unfused permutation adds in each pass beyond the fused
    one the block prices: its scatter_add_ (forward) or index_add_ (backward) moves the (A + A/k)·h·2 bytes of A routed
    copies and their A/k tokens at ``UNFUSED_SCATTER_HBM_FRAC`` of HBM, ``ratio`` = η_mem/that fraction times the law's
    time, where the fused unpermute moved FUSED_UNPERMUTE_BYTES·A·h; the index_select, the gather and the
    probabilities' passes cost what the fused kernels' do. Forward and backward alike:
    (A + A/k)·h·2·ratio − 4·A·h. Mixtral 8x7B on B200 (A = 16,384 copies of 8,192 tokens, h 4,096, η_mem 0.89:
    ratio 0.89/0.05208 = 17.09): 3,440.3 − 268.4 = 3,171.8 MB, 0.465 ms at DGX B200's 7.67 TB/s × 0.89."""
    A = np.asarray(A, dtype=float)
    scatter = (A + A / np.asarray(k, dtype=float)) * h * 2 * ratio
    return np.maximum(scatter - FUSED_UNPERMUTE_BYTES * A * h, 0.0)


# Megatron-Core's unfused expert MLP (TEGroupedMLP, core_r0.16-0.18), bytes per (token, expert) pair:
# the activation clamp (--activation-func-clamp-value with --quick-geglu) runs eagerly before the
# fused activation in weighted_bias_quick_geglu_impl (fusions/fused_bias_geglu.py): two clamps and a
# cat over the 2·f_e-wide fc1 output, read 2 and write 2 bytes each, 8 bytes per element = 16 per f_e
# channel; expert biases (--add-bias-linear) add fc2's bias times the router probability expert by
# expert in fp32 (TEGroupedMLP._apply_bias: b·p written in 4 bytes, t + b·p read 2 + 4 and written
# in 4, torch.cat read 4 write 4, cast to 16 bits read 4 write 2: 28 bytes per h channel).
CLAMP_BYTES_PER_F = 16
EXPERT_BIAS_BYTES_PER_H = 28


def expert_extra_bytes(A: ArrayLike, h: int, f_e: int, *, clamp: bool, biased: bool) -> tuple:
    """(activation, output) forward HBM bytes the unfused expert MLP moves beyond the fused activation:
    the clamp ahead of the activation (``CLAMP_BYTES_PER_F``·A·f_e, re-run with the activation under
    --recompute-modules moe_act) and fc2's per-expert bias (``EXPERT_BIAS_BYTES_PER_H``·A·h)."""
    A = np.asarray(A, dtype=float)
    return CLAMP_BYTES_PER_F * A * f_e * clamp, EXPERT_BIAS_BYTES_PER_H * A * h * biased


# Megatron-Core's unfused expert MLP (TEGroupedMLP, core_r0.14-0.18 moe/experts.py) wraps its grouped
# GEMMs in Transformer Engine's Fp8Padding / Fp8Unpadding whenever FP8 is on: each expert's rows must
# come in multiples of the quantisation alignment (Megatron-Core fp8_utils.get_fp8_align_size, TE's
# get_align_size_for_quantization: 32 for MXFP8, 16 for the other recipes). When any local expert's
# count is not such a multiple, Fp8Padding copies the whole routed input into a padded buffer
# (tex.fused_multi_row_padding over every row, TE v2.12-v2.16 pytorch/module/fp8_padding.py) and
# Fp8Unpadding copies the output back (fp8_unpadding.py), each read 2 and written 2 bytes per element
# of the A·h copies; the backward pads and unpads the two gradients the same way. The flex dispatcher
# hands over aligned counts (HybridEP pads each expert's rows in the dispatch, ``pad_multiple``;
# DeepEP in the permute, ``align_size``, core_r0.17 on: token_dispatcher.py), and so does
# --moe-router-padding-for-quantization (moe_utils.skip_routed_expert_padding @ d98e8a64: the experts skip
# Fp8Padding), at the price of its padded rows (``router_padding_rows``); Megatron-Bridge's DeepSeek-V3 and
# Qwen3 recipes leave it off (recipes/qwen/qwen3_moe.py: moe_router_padding_for_fp8 = False at v0.3.0-v0.4.0).
FP8_PADDING_BYTES = 2 * (2 + 2)
FP8_ALIGNMENT = {"mxfp8": 32}  # rows per expert; every other recipe 16


def fp8_padding_bytes(
    A: ArrayLike, h: int, kind: ArrayLike, *, recipe: str | None, counts_per_expert: ArrayLike | None
) -> np.ndarray:
    """Forward HBM bytes (the backward moves as many) of TE's Fp8Padding and Fp8Unpadding around the
    unfused experts: ``FP8_PADDING_BYTES``·A·h with FP8 (``recipe`` not None) behind the alltoall or
    allgather dispatcher when the rows an expert receives are not a multiple of ``FP8_ALIGNMENT``
    (``counts_per_expert`` None: dropless routing, whose counts are the router's; else drop-and-pad's
    fixed count), else 0."""
    A = np.asarray(A, dtype=float)
    if recipe is None:
        return 0.0 * A
    align = FP8_ALIGNMENT.get(recipe, 16)
    unaligned = True if counts_per_expert is None else np.mod(np.asarray(counts_per_expert), align) != 0
    copies = (np.asarray(kind) != DISPATCHER_KINDS["flex"]) & unaligned
    return FP8_PADDING_BYTES * A * h * copies


def router_padding_align(recipe: str | None, *, op_fuser: bool) -> int:
    """Rows per expert --moe-router-padding-for-quantization pads to (moe_utils.get_align_size_for_quantization
    @ d98e8a64): 256 for Transformer Engine's fused grouped MLP (--use-transformer-engine-op-fuser), else
    fp8_utils.get_fp8_align_size: 32 for MXFP8, 16 for the other FP8 recipes."""
    return 256 if op_fuser else FP8_ALIGNMENT.get(recipe or "", 16)


def router_padding_rows(E: int, align: int) -> float:
    """Routed (token, expert) pairs --moe-router-padding-for-quantization adds to one GPU per micro-batch.

    Each rank pads its routing map so that every one of the E experts gets a multiple of ``align`` of its tokens
    (moe_utils.pad_routing_map @ d98e8a64: expert e takes the first (−n_e mod align) tokens not routed to it, real
    tokens dispatched and computed like the others). With counts spread evenly modulo the alignment (random
    routing; --moe-router-force-load-balancing routes on random logits, router.py) a rank adds (align − 1)/2 per
    expert in expectation, E·(align − 1)/2 in all, and the busiest GPU receives as many: its E/ep experts'
    (align − 1)/2 from each of ep ranks.
    """
    return E * (align - 1) / 2.0


def plan_router_padding_rows(options, E: int) -> float:
    """``router_padding_rows`` of a plan's options (PlanOptions): with --moe-router-padding-for-quantization,
    which needs FP8 (the importer refuses it without), else 0."""
    if not (options.moe_router_padding_for_quantization and options.fp8 is not None):
        return 0.0
    align = router_padding_align(options.fp8_recipe.value, op_fuser=options.use_transformer_engine_op_fuser)
    return router_padding_rows(E, align)


def drop_and_pad_rows(T: ArrayLike, k: int, E: int, etp: ArrayLike, ep: ArrayLike, capacity_factor: float):
    """Rows each local expert computes under drop-and-pad: capacity·etp·ep, capacity = ⌈T·k/E·cf⌉ of the
    T tokens a rank routes (moe_utils.get_capacity; MoEAlltoAllTokenDispatcher.preprocess,
    num_tokens_per_local_expert = capacity·tp_size·ep_size with tp the expert tensor-parallel group,
    core_r0.14-0.18)."""
    capacity = np.ceil(np.asarray(T, dtype=float) * k / E * capacity_factor)
    return capacity * np.asarray(etp) * np.asarray(ep)


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
    recipe = opts.fp8_recipe.value if opts.fp8 is not None else None
    (fwd, bwd), (layer_fwd, layer_bwd) = _host_op_counts(ctx, mo.add_bias_linear)
    if opts.use_transformer_engine_op_fuser:
        eager = "; TE's fused grouped MLP: one kernel for all experts, activation and bias in its epilogues"
    else:
        extra = []
        if mo.activation_func_clamp_value is not None:
            extra.append(f"the clamp {CLAMP_BYTES_PER_F}·A·f_e")
        if mo.add_bias_linear:
            extra.append(f"fc2's bias {EXPERT_BIAS_BYTES_PER_H}·A·h")
        frac = ctx.hardware.gpu.eager_hbm_frac
        if extra and frac is not None:  # compute.eager_bytes_ratio: eager ops at their measured share of HBM
            r = eager_bytes_ratio(ctx.hardware.calibration.memory_efficiency, frac)
            extra[-1] += f" (eager ops: × η_mem/η_eager = {r:.4g}, PyTorch's kernels at {frac:g} of HBM)"
        if recipe is not None and not opts.moe_router_padding_for_quantization:
            align = FP8_ALIGNMENT.get(recipe, 16)
            extra.append(
                f"behind the alltoall or allgather dispatcher, TE's padding of each expert's rows to a multiple "
                f"of {align} and back {FP8_PADDING_BYTES}·A·h each pass"
            )
        op_us = ctx.hardware.calibration.moe_host_op_us or 0.0
        eager = (
            f"; host: (E/ep)·({fwd} forward, {bwd} backward ops per expert)"
            + (f" + ({layer_fwd}, {layer_bwd}) per layer (multi-tensor kernels)" if layer_fwd else "")
            + f"·{op_us:g} µs unless CUDA graphs "
            f"capture the experts, then {GRAPH_NODE_GAP_US:g} µs of GPU per graphed GEMM and "
            f"{GRAPH_KERNEL_FLOOR_US:.1f} µs per other graphed kernel"
            + (f"; unfused bytes: {', '.join(extra)}" if extra else "")
        )
    padded, why = "", ""
    if recipe is not None and opts.moe_router_padding_for_quantization:
        align = router_padding_align(recipe, op_fuser=opts.use_transformer_engine_op_fuser)
        padded = " + E·(align − 1)/2"
        why = (
            f"; the router's padding to align {align}, {router_padding_rows(mo.num_experts, align):,.0f} rows "
            "in expectation (--moe-router-padding-for-quantization, moe_utils.py pad_routing_map; "
            "no padding copies then: skip_routed_expert_padding)"
        )
    return Formula(
        f"MoE layers: A = (b·s/(c·t))·k·λ{padded} routed pairs (k = {mo.moe_router_topk} of E = {mo.num_experts}, "
        f"λ: {load}{why}), "
        f"grouped GEMMs 2·A·h·f_e·(γ+1) over the E/ep local experts at f_e/etp (f_e = {mo.expert_ffn}), "
        f"each expert's M padded to {GROUPED_GEMM_TILE_M}-row blocks ((M + {GROUPED_GEMM_TILE_M // 2})/M){eager}",
        "Megatron-Core moe/experts.py (TEGroupedMLP; _apply_bias; fused_bias_geglu.py); DeepGEMM README (M-block "
        "alignment of grouped GEMMs); TE pytorch/module/fp8_padding.py (Fp8Padding, Fp8Unpadding); "
        "Megatron-LM training.py:1255-1296 (e·(f_e·k + f_s) per token); host time per "
        "op: hardware preset moe_host_op_us (megaplan calibrate --moe); GPU gap per graphed kernel: ahrefs/ocannl "
        "issue 488 (no-op chain replayed in a graph: 15 µs + 0.58 µs·N); a real kernel's floor in a graph: "
        "vllm-project/vllm PRs 33918 and 33867 (FP8 casts under do_bench_cudagraph on H100), pytorch/helion PR 3073 "
        "(B200)",
    )


def dispatcher_formula(ctx, plan) -> Formula:
    """The token dispatcher's exposed time, for explain."""
    mo, opts = ctx.model, ctx.options
    kind = plan.moe_token_dispatcher.value
    text = {
        "alltoall": "2 all-to-alls (dispatch, combine) of ε·A·h over ep: "
        "max((k−1)/n·M/β_NVLink, (n−k)/n·M/β_rail) + α, "
        "+ all-gather/reduce-scatter over etp; with E/ep > 1 the received copies sorted by local expert and "
        f"back ({SORT_CHUNKS_BYTES}·A·h bytes more, sort_chunks_by_idxs)",
        "allgather": "all-gather and reduce-scatter of ε·T·h·ep·etp over etp·ep",
        "flex": "flex (DeepEP/HybridEP): each token once per other NVLink domain holding its experts on the rail "
        "(ε·T·h·D_remote / β_rail), forwarded on NVLink (ε·A·h / β_NVLink), whichever is longer",
    }[kind]
    if kind == "flex" and mo.moe_router_num_groups:
        text += (
            f"; group-limited routing (top-{mo.moe_router_group_topk} of {mo.moe_router_num_groups} groups) "
            "bounds the domains a token reaches"
        )
    meta, meta_text = "", ""
    if kind == "flex" and opts.moe_flex_dispatcher_backend.value == "hybridep":
        meta_text = (
            "; + HybridEP's metadata once per forward dispatch, on the dispatch's stream ahead of it: NCCL all-gather "
            "of the bool routing maps (M = n·T·E bytes over the ep·etp group, each rank receiving (n−1)·T·E), then "
            f"the scan kernel on k = {opts.moe_hybridep_num_sms_preprocessing} SMs reading the gathered map twice "
            "(2·n·T·E/D bytes, D NVLink domains) and writing 4·n·T + A·E/n at B_HBM·η_mem·min(1, k/108)"
        )
        meta = (
            "; HybridEP metadata: DeepEP hybrid-ep @ 94a9f8f6 csrc/hybrid_ep/hybrid_ep.cu (metadata_preprocessing), "
            "executor/executor.cu (allgather_routing_map, metadata_preprocess_core), backend/hybrid_ep_backend.cuh "
            "(scan); Megatron-LM fused_a2a.py HybridEPDispatch.forward (num_sms_preprocessing_api: "
            "--moe-hybridep-num-sms-preprocessing, default 108, transformer_config.py @ d98e8a64)"
        )
    hidden = ""
    if plan.overlap_moe_expert_parallel_comm:
        hidden = (
            "; --overlap-moe-expert-parallel-comm: each all-to-all c beside its partner X of the other micro-batch "
            "(combine_bwd ‖ attention fwd, dispatch_fwd ‖ experts dgrad, dispatch_bwd ‖ experts wgrad + fwd, "
            "combine_fwd ‖ attention bwd) exposes max(c, X + f·c) − X, f the SMs the dispatcher takes; "
            "a paired step lasts at least the host's work for both directions, H = ρ·[H_L·(1 − g) + h_e] "
            f"(H_L = {COMBINED_HOST_US:,.1f} µs a paired layer, g its share under CUDA graphs, h_e the experts' "
            f"eager ops, ρ = {ctx.hardware.node.host_op_time_ratio:g} the host CPU's time per op over x86's), the "
            "host's excess charged here"
        )
        phi = ctx.hardware.calibration.persistent_gemm_comm_share
        if phi is not None and ctx.hardware.gpu.compute_capability < 10.0 and (plan.tp > 1 or plan.cp > 1):
            hidden += (
                f", at least φ = {phi:g} here (Hopper's connection limit with TP/CP > 1: kernels wait behind "
                "persistent GEMMs; hardware preset persistent_gemm_comm_share, docs/cost-model.md §13.3)"
            )
    elif opts.moe_shared_expert_overlap and mo.shared_ffn and kind != "allgather":
        hidden = "; --moe-shared-expert-overlap: the forward dispatch hides behind the shared experts"
    from planner.plan import Recompute, RecomputeModule

    selective = plan.recompute is Recompute.SELECTIVE
    if (
        selective
        and not plan.overlap_moe_expert_parallel_comm
        and host_levelled_both_ways(
            quick_geglu=mo.quick_geglu,
            moe_act_recomputed=RecomputeModule.MOE_ACT in opts.recompute_modules,
            unfused=not opts.use_transformer_engine_op_fuser,
            dropless=opts.moe_capacity_factor is None,
        )
    ):
        hidden += (
            "; the host waits for the GPU in both directions every layer (the dispatcher's token counts forward, the "
            "recomputed quick-GeGLU's torch.tensor copy backward): a layer lasts at least H = ρ·[H_L·(1 − g) + h_e] "
            f"(ρ = {ctx.hardware.node.host_op_time_ratio:g}), the excess charged here"
        )
    return Formula(
        f"m × MoE layers × {text}, forward and backward{meta_text}{hidden}",
        "Megatron-Core moe/token_dispatcher.py, models/common/model_chunk_schedule_plan.py (the A2A overlap's "
        "schedule; the host's pacing: TransformerLayerSchedulePlan.run, token_dispatcher.py's token-count sync, "
        "H_L from Megatron-Bridge PR 1760 and the Bridge overlap skill's A/B, docs/cost-model.md §13.3; ρ on Grace: "
        "TransformerEngine issue 2053, the recomputed quick-GeGLU's copy: fusions/fused_bias_geglu.py l.434); "
        "DeepSeek-V3 §3.2 (node-limited dispatch, overlap); all-to-all physics: "
        "planner.hardware.collectives.all_to_all_time_s" + meta,
    )
