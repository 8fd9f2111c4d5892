"""Communication time per GPU: tensor-parallel collectives, pipeline point-to-point, data-parallel
gradient reduction, each on the network tier its group spans (planner.hardware.collectives).

Volumes: Narayanan et al. 2021 §3.2 and §4.1; Korthikanti et al. 2022 §4.2.2 (sequence parallel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.hardware.collectives import (
    Link,
    all_gather_time_s,
    all_reduce_time_s,
    in_network_time_s,
    p2p_time_s,
    reduce_scatter_time_s,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def activation_message_bytes(b: ArrayLike, s: int, h: int, c: ArrayLike, *, activation_bytes: int) -> np.ndarray:
    """The b·s·h activation tensor of one micro-batch on one context-parallel rank, in bytes: ε·b·s·h/c
    (Narayanan et al. 2021 §4.1), the message of the TP collectives and of the pipeline's sends."""
    return activation_bytes * np.asarray(b) * s * h / np.asarray(c)


def tp_layer_comm_time_s(
    message_bytes: ArrayLike, t: ArrayLike, link: Link, *, sequence_parallel: np.ndarray
) -> np.ndarray:
    """Forward TP communication of one layer for one micro-batch (the backward has as much).

    Without SP: 2 all-reduces of b·s·h elements (after attention and after the MLP); with SP: 2
    all-gathers + 2 reduce-scatters of the same size, the same bandwidth as 2 all-reduces since a
    ring all-reduce is a reduce-scatter plus an all-gather (Narayanan et al. 2021 §4.1: 8bsh(t−1)/t
    per layer forward+backward; Korthikanti et al. 2022 §4.2.2).
    """
    message = np.asarray(message_bytes)
    t = np.asarray(t)
    with_sp = 2 * (all_gather_time_s(t, message, link) * 2)
    without = 2 * all_reduce_time_s(t, message, link)
    return np.where(sequence_parallel, with_sp, without)


def pp_p2p_time_s(
    message_bytes: ArrayLike,
    t: ArrayLike,
    link: Link,
    tp_link: Link,
    *,
    sequence_parallel: np.ndarray,
    scatter_gather: bool,
) -> np.ndarray:
    """One point-to-point transfer between neighbouring stages, per micro-batch and direction.

    b·s·h elements (Narayanan et al. 2021 §4.1); each TP rank sends its own 1/t with SP (the tensor
    is [s/(c·t), b, h], Megatron schedules.py). The 2021 scatter/gather optimisation sent 1/t per
    rank over the t NICs and all-gathered it on NVLink (Narayanan et al. 2021 §4.1).
    """
    t = np.asarray(t)
    full = np.asarray(message_bytes)
    sharded = p2p_time_s(full / t, link)
    gathered = sharded + all_gather_time_s(t, full, tp_link) if scatter_gather else p2p_time_s(full, link)
    return np.where(sequence_parallel, sharded, gathered)


def dp_grad_reduce_time_s(
    num_params: ArrayLike,
    d: ArrayLike,
    link: Link,
    *,
    grad_bytes: int,
    distributed_optimizer: np.ndarray,
    in_network: bool = False,
) -> np.ndarray:
    """Data-parallel gradient reduction of ``num_params`` gradients over d ranks.

    Plain DDP: an all-reduce in the dtype Megatron reduces them in (fp32 main grads under bf16
    unless --grad-reduce-in-bf16; 16-bit under fp16). Distributed optimizer: a reduce-scatter, each
    rank keeping the shard its optimizer updates (Megatron-LM megatron/core/distributed/
    param_and_grad_buffer.py); the updated parameters' all-gather is costed by the caller.
    ``in_network`` (--use-sharp on a SHARP fabric): across NVLink domains the switches reduce,
    ``collectives.in_network_time_s`` (Megatron-LM parallel_state.py: NCCL_COLLNET_ENABLE on the DP group).
    """
    M = grad_bytes * np.asarray(num_params, dtype=float)
    sharded = np.asarray(distributed_optimizer)
    if sharded.all():  # every plan a reduce-scatter (the all-reduce no plan takes is not computed)
        ring = np.where(sharded, all_gather_time_s(d, M, link), 0.0)
    else:
        ring = np.where(sharded, all_gather_time_s(d, M, link), all_reduce_time_s(d, M, link))
    switches = in_network and link.nodes > 1
    return np.where(switches, in_network_time_s(d, M, link), ring) if np.any(switches) else ring


def hierarchical_grad_reduce_time_s(
    num_params: ArrayLike,
    d_intra: ArrayLike,
    R: ArrayLike,
    intra: Link,
    inter: Link,
    *,
    grad_bytes: int,
    in_network: bool = False,
    whole_buffer: ArrayLike = False,
) -> np.ndarray:
    """The distributed optimizer's gradient reduction with R instances (--num-distributed-optimizer-instances):
    a reduce-scatter over the d·c/R ranks of one instance, then an all-reduce of each rank's 1/(d·c/R)
    shard across the R instances (Megatron-LM param_and_grad_buffer.py start_grad_sync @ d98e8a64:
    reduce-scatter on the intra-instance group, all-reduce on inter_distributed_optimizer_instance_group;
    parallel_state.py: d·c divisible by R). R = 1 is the plain reduce-scatter. ``whole_buffer``: Megatron
    FSDP's optim strategy keeps the gradient buffer whole and all-reduces all of it across the R replicas
    (fsdp/src/megatron_fsdp/param_and_grad_buffer.py, "DP-Outer Gradient Reduction": the whole
    fsdp_grad_buffer.data; a comment there notes the shard alone would do)."""
    n = np.asarray(num_params, dtype=float)
    scatter = dp_grad_reduce_time_s(
        n, d_intra, intra, grad_bytes=grad_bytes, distributed_optimizer=np.asarray(True), in_network=in_network
    )
    across = all_reduce_time_s(R, grad_bytes * n / np.where(whole_buffer, 1.0, np.asarray(d_intra)), inter)
    return scatter + np.where(np.asarray(R) > 1, across, 0.0)


def hsdp_outer_layer_s(
    grad_bytes: ArrayLike,
    param_bytes: ArrayLike,
    N: ArrayLike,
    R: ArrayLike,
    link: Link,
    *,
    grads_sharded: ArrayLike,
    outer_optim: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """(gradient, weight) seconds of one layer's DP-Outer collectives in Megatron FSDP's hybrid mode, R
    replicas of N = d·c/R ranks each, paid once per iteration (Megatron-LM @ d98e8a64, fsdp/src/
    megatron_fsdp/megatron_fsdp.py: outer_fsdp_group_grad_reduce only on the last micro-batch,
    outer_fsdp_group_param_gather only at microbatch_count 0; param_and_grad_buffer.py):
      gradient: HSDP (--outer-dp-sharding-strategy no_shard) all-reduces over R what the inner group left:
                the 1/N shard G/N (optim_grads, optim_grads_params) or the whole G (optim keeps it whole):
                2(R−1)/R · G/N / β; HFSDP (optim) reduce-scatters the shard instead, (R−1)/R · G/N / β;
      weight:   HFSDP only: all-gather over R of the 1/(N·R) shards the optimizer updated into the inner
                shard, (R−1)/R · W/N / β (HSDP: 0, the replicas step alike).
    G and W: the layer's gradient and 16-bit weight bytes; β the bus bandwidth of the group spanning
    the replicas (stride t·N: the ranks of one replica are consecutive, parallel_state.py)."""
    N, G, W = np.asarray(N, dtype=float), np.asarray(grad_bytes, dtype=float), np.asarray(param_bytes, dtype=float)
    left = np.where(grads_sharded, G / N, G)
    grad = np.where(outer_optim, reduce_scatter_time_s(R, left, link), all_reduce_time_s(R, left, link))
    weight = np.where(outer_optim, all_gather_time_s(R, W / N, link), 0.0)
    return grad, weight


def dp_param_gather_time_s(
    num_params: ArrayLike, d: ArrayLike, link: Link, *, param_bytes: float, in_network: bool = False
) -> np.ndarray:
    """The distributed optimizer's all-gather of ``num_params`` updated parameters over d ranks, in
    their gathered dtype (1 byte with --fp8-param-gather); in the switches with ``in_network``."""
    M = param_bytes * np.asarray(num_params, dtype=float)
    ring, switches = all_gather_time_s(d, M, link), in_network and link.nodes > 1
    return np.where(switches, in_network_time_s(d, M, link), ring) if np.any(switches) else ring


def dfa_bucket_params(bucket_mb: float, grad_bytes: int) -> float:
    """Parameters in one bucket of NeMo 1's Apex DistributedFusedAdam: bucket_cap_mb·2²⁰ bytes of the
    gradient-sync dtype (apex/contrib/optimizers/distributed_fused_adam.py: bucket_size =
    1024·1024·bucket_cap_mb/dtype_size, dtype_size of grad_sync_dtype); 200 MB of bf16 is 104.9 M."""
    return bucket_mb * 2**20 / grad_bytes


def ub_sm_charge_s(
    gemm_s: ArrayLike, comm_s: ArrayLike, num_sm: ArrayLike, sm_count: int, *, margin: ArrayLike, sm_comm: ArrayLike
) -> np.ndarray:
    """Extra time of a GEMM beside a userbuffers kernel on n of the GPU's S SMs.

    With the margin (set_sm_margin) cuBLAS gets S − n SMs for the GEMM's whole run:
    G·n/(S − n). Without it the GEMM holds every SM and loses the n the kernel occupies only while
    the kernel runs: during C it advances at (S − n)/S, so it ends C·n/S later, at most G·n/(S − n)
    (the GEMM ends first). A ring exchange's kernel copies on the copy engines (``sm_comm`` False,
    use_ce): only a margin costs. Transformer Engine comm_gemm_overlap.cpp: _math_sms = S − num_sm
    with set_sm_margin, else S; bulk_overlap launches the communication before the GEMM.
    """
    g, c, n = (np.asarray(x, dtype=float) for x in (gemm_s, comm_s, num_sm))
    whole = g * n / (sm_count - n)
    shared = np.where(sm_comm, np.minimum(c * n / sm_count, whole), 0.0)
    return np.where(margin, whole, shared)


def ring_exchange_s(chunks_s: ArrayLike, comm_s: ArrayLike, n: ArrayLike) -> np.ndarray:
    """A GEMM run as n chunks while the collective's pieces travel peer to peer (TE's ring exchange,
    CommOverlapP2PBase split_overlap_ag/rs): the first chunk is local, each of the n − 1 others
    waits for its piece, r = comm/(n − 1), so c + (n − 1)·max(c, r) with c = chunks/n."""
    n = np.asarray(n, dtype=float)
    c, r = np.asarray(chunks_s) / n, np.asarray(comm_s) / np.maximum(n - 1, 1)
    return c + (n - 1) * np.maximum(c, r)


def ring_rs_reordered_s(chunks_s: ArrayLike, comm_s: ArrayLike) -> np.ndarray:
    """A ring-exchanged reduce-scatter whose GEMM chunks a CUDA graph reordered (Transformer Engine before
    v2.16): the pieces travel after the GEMM, U = G_t + C, ``chunks_s`` the GEMM as t chunks (G_t) and
    ``comm_s`` the reduce-scatter's pieces (C).

    CommOverlapP2PBase::split_overlap_rs (comm_gemm_overlap.cpp @ v2.2, lines 950-1040) issues the t
    chunks round-robin on three compute streams that wait only for the main stream, and the send of
    piece i waits for chunk i's stream; nothing orders the chunks among themselves. Launched from a CUDA
    graph they may run in any order while the sends keep theirs: "CG will reorder the GEMM kernels ... but
    will not reorder the relevant communication. This leads to exposed communication" (TE PR #2056,
    commit f2ed86bbf, first in v2.16, tagged 2026-05-29: a tiny kernel and events now chain the chunks).
    The PR's timeline has every piece after the last chunk; so does U."""
    return np.asarray(chunks_s, dtype=float) + np.asarray(comm_s, dtype=float)


def ring_exchange_aggregated_s(chunks_s: ArrayLike, comm_s: ArrayLike, n: ArrayLike) -> np.ndarray:
    """A ring-exchanged all-gather with ``aggregate`` (Transformer Engine CommOverlapP2PBase::split_overlap_ag,
    _aggregate): one piece r = comm/(n − 1) exchanged with the neighbour before any GEMM (the first GEMM's
    stream waits for it), then n/2 GEMMs of two pieces each while pairs of pieces travel two ranks on:
    r + c₂ + (n/2 − 1)·max(c₂, 2r), c₂ = chunks/(n/2), ``chunks_s`` the GEMM run as n/2 chunks."""
    n = np.asarray(n, dtype=float)
    half = np.maximum(n / 2, 1.0)
    c2, r = np.asarray(chunks_s) / half, np.asarray(comm_s) / np.maximum(n - 1, 1)
    return r + c2 + (half - 1) * np.maximum(c2, 2 * r)


def pipelined_rs_s(chunks_s: ArrayLike, comm_s: ArrayLike, n: ArrayLike) -> np.ndarray:
    """A GEMM run as n chunks, each reduce-scattered while the next computes (TE's pipeline,
    CommOverlapBase::split_overlap_rs): c + (n − 1)·max(c, r) + r with c = chunks/n, r = comm/n;
    the last chunk's reduce-scatter is exposed."""
    n = np.asarray(n, dtype=float)
    c, r = np.asarray(chunks_s) / n, np.asarray(comm_s) / n
    return c + (n - 1) * np.maximum(c, r) + r


AMAX_FLOATS_PER_LAYER = (
    12  # delayed scaling: input, weight and output amaxes of the 4 GEMMs (QKV, projection, fc1, fc2)
)


def fp8_amax_reduction_s(m: ArrayLike, v: ArrayLike, all_reduce_s: ArrayLike) -> np.ndarray:
    """Delayed-scaling FP8's amax all-reduces in one iteration, on every GPU's critical path: 2·m·v·T_AR.

    Transformer Engine concatenates the amaxes of one fp8_autocast region and all-reduces them (MAX) over the
    region's fp8_group with ``torch.distributed.all_reduce(..., async_op=False)`` as the outermost autocast
    exits (the forward) and in the backward of the region's first FP8 module (``reduce_and_update_fp8_tensors``,
    ``reduce_and_update_bwd_fp8_tensors``; TE fp8.py / quantization.py); none while a CUDA graph captures the
    region (``_graph``). Megatron-Core wraps each model chunk's TransformerBlock in one autocast for delayed
    scaling (transformer_block.py @ core_v0.12.0: ``use_outer_fp8_context``) with fp8_group = TP×DP×CP
    (``get_amax_reduction_group``; TP×CP with ``tp_only_amax_red``). So 2 per micro-batch and model chunk:
    m micro-batches, v chunks, each T_AR, a latency-bound all-reduce of a few hundred bytes."""
    return 2.0 * np.asarray(m, dtype=float) * np.maximum(np.asarray(v, dtype=float), 1.0) * np.asarray(all_reduce_s)


def tp_pair_exposed_s(
    ag: ArrayLike,
    rs: ArrayLike,
    ar: ArrayLike,
    gemm: dict[str, np.ndarray],
    *,
    sequence_parallel: np.ndarray,
    async_backward: ArrayLike,
    overlap: ArrayLike,
    ub: dict[str, dict[str, np.ndarray]] | None = None,
    sm_count: int = 1,
    reduce_s: ArrayLike = 0.0,
    rs_reordered: ArrayLike = False,
    ub_comm: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed TP time of one column-parallel → row-parallel pair of linears
    (QKV → projection, or fc1 → fc2) for one micro-batch. ``gemm``: forward times of the pair's
    GEMMs, ``in`` and ``out`` (dgrad and wgrad each take as long); ag is the all-gather of the
    column-parallel input, rs the row-parallel output's reduce-scatter (and its gradient's
    all-gather), ar the all-reduce without SP.

    - Without SP: an all-reduce after the row-parallel GEMM; in the backward the column-parallel
      dgrad's all-reduce, which Megatron overlaps with that linear's weight-gradient GEMM
      (LinearWithGradAccumulationAndAsyncCommunication; not the 2021 code: ``async_backward``).
    - With SP: forward all-gather before the column-parallel GEMM and reduce-scatter after the
      row-parallel one, both synchronous. The backward of that reduce-scatter is an all-gather of
      the output gradient that nothing can overlap: Megatron-LM mappings.py,
      _ReduceScatterToSequenceParallelRegion.backward, charged in full. The column-parallel input's
      all-gather overlaps its dgrad GEMM and the dgrad's reduce-scatter its wgrad GEMM (layers.py
      LinearWithGradAccumulationAndAsyncCommunication.backward; Transformer Engine the same).
      ``async_backward`` False (the 2021 code, or the order lost: ``connection_limited``): exposed.
    - ``overlap`` (--tp-comm-overlap, per plan): ``tp_pair_ub_s`` with the userbuffer config ``ub``;
      ``rs_reordered``: a CUDA graph reordered the ring-exchanged reduce-scatter's chunks (``ring_rs_reordered_s``);
      ``ub_comm``: (all-gather, reduce-scatter) as userbuffers moves them, where they differ from NCCL's ag and rs.
    """
    ag, rs, ar = np.asarray(ag), np.asarray(rs), np.asarray(ar)
    g_in = gemm["in"]
    no_sp_fwd = ar
    no_sp_bwd = np.where(async_backward, np.maximum(ar - g_in, 0.0), ar)
    sp_fwd = ag + rs
    overlapped = np.where(async_backward, np.maximum(ag - g_in, 0.0) + np.maximum(rs - g_in, 0.0), ag + rs)
    sp_bwd = ag + overlapped
    if np.any(overlap):  # per plan: with userbuffers where ``overlap`` is set
        ub_ag, ub_rs = ub_comm if ub_comm is not None else (ag, rs)
        ub_fwd, ub_bwd = tp_pair_ub_s(ub_ag, ub_rs, gemm, ub or {}, sm_count, reduce_s, rs_reordered)
        sp_fwd, sp_bwd = np.where(overlap, ub_fwd, sp_fwd), np.where(overlap, ub_bwd, sp_bwd)
    return np.where(sequence_parallel, sp_fwd, no_sp_fwd), np.where(sequence_parallel, sp_bwd, no_sp_bwd)


def tp_pair_ub_s(ag, rs, gemm: dict, ub: dict, sm_count: int, reduce_s, rs_reordered=False) -> tuple:
    """(forward, backward) exposed time of a pair under Transformer Engine userbuffers: the time each
    overlapped GEMM takes with its collective, less the GEMM alone. ``ub``: per GEMM of the pair
    (``in_fprop``, ``out_fprop``, ``out_dgrad``, ``in_dgrad``, ``in_wgrad``) its method, SMs, margin
    and chunks (planner.hardware.userbuffers); ``gemm`` adds the chunked GEMMs' times
    (linears.split_gemms_s): ``in_split_t``, ``out_split_t`` (t token blocks), ``out_split_k`` (the
    pipeline's k column blocks) and, where an all-gather aggregates, ``in_split_half`` and
    ``out_split_half`` (t/2 blocks of two pieces: ``ring_exchange_aggregated_s``). An overlap with
    ``atomic`` runs the GEMM whole,
    one cuBLAS atomic GEMM whose finished chunks release the collective's pieces through counters
    (Transformer Engine comm_gemm_overlap.cpp atomic_gemm_overlap_rs, atomic_gemm_overlap_ag): the
    same pipeline or ring with the unsplit GEMM's time.

    Forward: the input all-gather rings inside the column-parallel GEMM; the output's reduce-scatter
    is pipelined (k chunks, its kernel on n SMs) or rung (t chunks, then ``reduce_s``, the kernel
    summing the t partial chunks; where ``rs_reordered``, the pieces after the chunks:
    ``ring_rs_reordered_s``). Backward: the output gradient's all-gather rings inside the row-parallel
    dgrad; the column-parallel dgrad hides the input's all-gather and its wgrad the dgrad's
    reduce-scatter in bulk, each max(GEMM + SM charge, collective).
    """

    def charged(g, comm, op, sm_comm):
        return g + ub_sm_charge_s(g, comm, op["num_sm"], sm_count, margin=op["margin"], sm_comm=sm_comm)

    def chunks(split, whole, op):  # one GEMM per chunk, or the whole as one atomic GEMM
        return np.where(op.get("atomic", False), whole, split)

    def ring_ag(side, g, comm, op):  # a ring-exchanged all-gather, its chunks one or two (aggregate) per GEMM
        one = ring_exchange_s(charged(chunks(gemm[f"{side}_split_t"], g, op), comm, op, False), comm, t)
        if f"{side}_split_half" not in gemm:
            return one
        two = ring_exchange_aggregated_s(charged(chunks(gemm[f"{side}_split_half"], g, op), comm, op, False), comm, t)
        return np.where(op.get("aggregate", False), two, one)

    g_in, g_out, t = gemm["in"], gemm["out"], gemm["t"]
    in_op, rs_op, dgrad_op = ub["in_fprop"], ub["out_fprop"], ub["out_dgrad"]
    ring_in = ring_ag("in", g_in, ag, in_op)
    piped = pipelined_rs_s(charged(chunks(gemm["out_split_k"], g_out, rs_op), rs, rs_op, True), rs, rs_op["splits"])
    rs_chunks = charged(chunks(gemm["out_split_t"], g_out, rs_op), rs, rs_op, False)
    reordered = np.asarray(rs_reordered) & ~np.asarray(rs_op.get("atomic", False), dtype=bool)  # one atomic GEMM
    rung = np.where(reordered, ring_rs_reordered_s(rs_chunks, rs), ring_exchange_s(rs_chunks, rs, t)) + reduce_s
    fwd = ring_in - g_in + np.where(rs_op["pipeline"], piped, rung) - g_out
    ring_dgrad = ring_ag("out", g_out, rs, dgrad_op)
    bulk = [np.maximum(charged(g_in, ag, ub[k], True), ag) - g_in for k in ("in_dgrad", "in_wgrad")]
    return fwd, ring_dgrad - g_out + bulk[0] + bulk[1]


def connection_limited(
    compute_capability: float, t: ArrayLike, c: ArrayLike, fsdp: ArrayLike, a2a_overlap: ArrayLike
) -> np.ndarray:
    """Plans whose backward TP collectives lose their place ahead of the GEMMs they overlap.

    Megatron-LM relies on CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue: kernels start in the
    order they are launched) to start the SP all-gather and the dgrad reduce-scatter before the
    GEMMs they hide behind (core/tensor_parallel/layers.py: 'Here we rely on
    CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather is scheduled before the input gradient
    computation'). Megatron FSDP needs more than one connection (arguments.py asserts it), and so
    does --overlap-moe-expert-parallel-comm; below compute capability 10 arguments.py (d98e8a64,
    validate_args) warns against either with t > 1 or c > 1 since 'they require different
    CUDA_MAX_CONNECTIONS settings'. Hopper's GEMMs are persistent kernels holding every SM, so a
    collective scheduled after one waits for it: the overlap is lost (Transformer Engine
    comm_gemm_overlap.cpp orders its userbuffers kernels with a launch event on Hopper for this
    reason; --tp-comm-overlap keeps its overlap, the caller's concern).
    """
    split = (np.asarray(t) > 1) | (np.asarray(c) > 1)
    return (compute_capability < 10.0) & split & (np.asarray(fsdp, dtype=bool) | np.asarray(a2a_overlap, dtype=bool))


def ddp_bucket_params(dp_cp: ArrayLike, bucket_size: int | None = None) -> np.ndarray:
    """Megatron's gradient bucket: --ddp-bucket-size parameters when given, else max(40M, 1M·d·c)
    (megatron/training/training.py resolve_ddp_bucket_size; distributed_data_parallel.py when the
    DDP config leaves it None), used with --overlap-grad-reduce on the first pipeline stage's first
    model chunk only: later chunks and stages keep one bucket each (training.py, per-chunk
    disable_bucketing; distributed_data_parallel.py: 'Turn off bucketing if we are on a pipeline
    stage that is not the first')."""
    default = np.maximum(40e6, 1e6 * np.asarray(dp_cp, dtype=float))
    return default if bucket_size is None else np.broadcast_to(float(bucket_size), default.shape)


def ddp_bucket_count(chunk_params: ArrayLike, bucket_params: ArrayLike, tensors: ArrayLike) -> np.ndarray:
    """Buckets Megatron-Core's DDP cuts a chunk of P parameters into: a bucket closes once past B, at the end
    of a parameter (param_and_grad_buffer.py), so ⌈P/B⌉, and never more than the chunk's parameter tensors
    (a B smaller than every tensor, as NeMo 2's MLPerf v5.0 configs' bucket_size 200: one bucket per
    tensor). Llama 3.1 8B's 8.03 B parameters in 134 M buckets: 60."""
    P, B = np.asarray(chunk_params, dtype=float), np.asarray(bucket_params, dtype=float)
    return np.maximum(np.minimum(np.ceil(P / B), np.asarray(tensors, dtype=float)), 1.0)


def bucket_latency_s(n_buckets: ArrayLike, ring_latency: ArrayLike) -> np.ndarray:
    """What a chunk's reduction (or gather) in n_b buckets pays beyond one collective of the whole chunk:
    every bucket is its own ring reduce-scatter (all-gather), each with the ring's latency (Megatron-Core
    param_and_grad_buffer.py start_grad_sync / start_param_sync: one collective per bucket group), while
    the bytes are the same: (n_b − 1)·α_ring. 60 buckets at a 339 µs ring (64 B200 over 8 nodes): 20.0 ms."""
    return (np.asarray(n_buckets, dtype=float) - 1.0) * np.asarray(ring_latency, dtype=float)


def param_gather_exposed_s(
    chunk_gather_s: ArrayLike, first_bucket_s: ArrayLike, fwd_s: ArrayLike, first_frac: ArrayLike
) -> np.ndarray:
    """The distributed optimizer's overlapped parameter all-gather (--overlap-param-gather) left in a chunk's
    first forward: bucket k + 1's gather is dispatched when bucket k's forward starts (Megatron-Core
    param_and_grad_buffer.py finish_param_sync: wait for this bucket, then start_param_sync of the next),
    so the first bucket waits whole and each later gather shows by what it takes beyond the forward of the
    bucket before it; the buckets' gathers queue on one stream:
        exposed = max(G_1, G − F·(1 − f_1))
    G: the chunk's whole gather (every bucket's latency in it), G_1 its first bucket's, F the chunk's forward
    of one micro-batch, f_1 the first bucket's share of the chunk's parameters (the forward of the other
    buckets is what hides the rest)."""
    G, G1, F, f1 = (np.asarray(x, dtype=float) for x in (chunk_gather_s, first_bucket_s, fwd_s, first_frac))
    return np.maximum(G1, G - F * (1.0 - np.minimum(f1, 1.0)))


def dp_exposed_s(
    sync_s: ArrayLike,
    bucket_s: ArrayLike,
    i: ArrayLike,
    p: ArrayLike,
    v: ArrayLike,
    step_bwd_s: ArrayLike,
    *,
    overlap: bool,
    bucketed: ArrayLike | None = None,
    last_chunk_extra_s: ArrayLike = 0.0,
) -> np.ndarray:
    """Gradient reduction of stage i left after stage 0's last backward ends.

    ``sync_s``: the stage's whole reduction (reduce-scatter or all-reduce), v model chunks of
    sync/v each; ``bucket_s``: one bucket of the first chunk (stage 0) or the whole chunk (others);
    ``step_bwd_s``: one chunk's backward of one micro-batch, τ. Without --overlap-grad-reduce the
    reduction starts after the last backward, which stage i finishes i steps early: sync − i·τ.
    With it (schedules.py: a chunk's reduction is launched after its last micro-batch's backward,
    at the same moment on every stage, align_grad_reduce), chunk k's reduction is ready k·p steps
    before the end and the reductions queue on one link, so the last finishes at
    max_k(r_k + (k + 1)·sync/v): for the last chunk r_0 = −i·τ (stage 0: its buckets leave during
    its last backward, r_0 = −τ·(1 − bucket/chunk), and at least its last bucket is exposed), for
    the others r_k = −k·p·τ (the maximum sits at k = 1 or k = v − 1). ``bucketed``: the stages whose
    last chunk leaves in buckets as stage 0's does (default: stage 0 only; every stage under Apex's
    DistributedFusedAdam).
    """
    sync, bucket, tau = (np.asarray(x, dtype=float) for x in (sync_s, bucket_s, step_bwd_s))
    i, p, v = np.asarray(i), np.asarray(p), np.asarray(v)
    if not overlap:
        return np.maximum(sync - i * tau, 0.0)
    extra = np.asarray(last_chunk_extra_s, dtype=float)
    chunk = (sync - extra) / v
    first = i == 0 if bucketed is None else np.asarray(bucketed)
    last_chunk = (
        chunk + extra - i * tau - np.where(first, tau * (1 - np.minimum(bucket / np.maximum(chunk, 1e-30), 1)), 0.0)
    )
    last_chunk = np.maximum(last_chunk, np.where(first, np.minimum(bucket, chunk), 0.0))
    earlier = np.where(v >= 2, np.maximum(2 * chunk - p * tau, sync - (v - 1) * p * tau), 0.0)
    return np.maximum(np.maximum(last_chunk, earlier), 0.0)


def pp_interleaved_exposed_s(
    p2p_s: ArrayLike, m: ArrayLike, v: ArrayLike, step_fwd_s, step_bwd_s, *, sm_share: float = 0.0
) -> np.ndarray:
    """Steady-state sends of the interleaved schedule with its p2p overlap: each of the m·v forward
    and m·v backward chunk-steps sends one activation while the next step computes, so what a send
    takes beyond one chunk-step's compute is exposed (schedules.py, overlap_p2p_comm); the hidden
    rest, min(send, step), costs the compute ``sm_share`` = k/S of itself (the SMs NCCL's send and
    receive kernels hold: collectives.hidden_comm_contention_s)."""
    p2p, fwd, bwd = np.asarray(p2p_s), np.asarray(step_fwd_s), np.asarray(step_bwd_s)
    late = np.maximum(p2p - fwd, 0.0) + np.maximum(p2p - bwd, 0.0)
    hidden = np.minimum(p2p, fwd) + np.minimum(p2p, bwd)
    return np.asarray(m) * np.asarray(v) * (late + sm_share * hidden)
