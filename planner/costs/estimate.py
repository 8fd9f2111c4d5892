"""Compose the cost terms into one estimate per plan, for a grid of any length.

``explain`` evaluates a one-plan grid and ``search`` millions; both call ``evaluate``, which unpacks
the specs into the papers' letters (planner.costs.letters) and composes memory
(planner.costs.stage_memory), per-stage step times (planner.costs.layer_time), pipeline and
data-parallel communication and the schedule into named terms that add up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.costs import Formula, layer_time, memory, memory_parts
from planner.costs import communication as comm
from planner.costs.flop_terms import flop_terms
from planner.costs.layer_time import (
    activation_message,
    compute_formulas,
    layer_time_formulas,
    layer_times,
    stage_step,
    stage_terms,
)
from planner.costs.letters import LAYER_CARRIED, LAYER_KEY, Letters, _per_plan
from planner.costs.linears import tp_link
from planner.costs.pipeline import bubble_time_s, exposed_p2p_transfers, interleaved_wrap_wait_s
from planner.costs.stage_memory import (
    MEMORY_TERMS,
    memory_context_formulas,
    memory_formulas,
    stage_max,
    stage_memory_bytes,
    stage_memory_total,
    stage_memory_total_and_twins,
    stage_params,
)
from planner.hardware.collectives import (
    Link,
    all_reduce_latency_s,
    all_reduce_time_s,
    group_link,
    hidden_comm_contention_s,
    links_of,
    reduce_scatter_time_s,
    ring_latency_s,
    straggler_s,
)
from planner.models.params import bucket_group_tensors, dense_layer_params
from planner.plan import OPTIMIZER_DTYPE_BYTES, Context, CudaGraphImpl, Fp8Recipe, FsdpOuterSharding, ParallelPlan
from planner.space.grid import PlanGrid

ADAM_BYTES_PER_PARAM = {  # HBM traffic of one Adam step per (sharded) parameter
    "bf16": 4 + 8 + 8 + 8 + 2 + 4,  # read fp32 grad; r/w master, m, v; write bf16 weight; zero the grad buffer
    "fp16": 2 + 4 + 8 + 8 + 8 + 2 + 4,  # plus reading the fp16 grad into the fp32 main grad
    "fp32": 4 + 8 + 8 + 8 + 4,
}
TIME_TERMS = (
    "forward",
    "backward",
    "recompute",
    "offload",
    "tp_comm",
    "cp_comm",
    "moe_comm",
    "pp_comm",
    "dp_comm",
    "embedding_comm",
    "bubble",
    "optimizer",
    "stragglers",
)


# arrays: no ==, hash or repr (generating them costs every process's import; numpy arrays have none to give)
@dataclass(frozen=True, eq=False, repr=False)
class Stages:
    """Every pipeline stage of every plan, arrays shaped (plans, largest p); a plan's columns beyond
    its own p are zero. ``forward_s``/``backward_s`` are one micro-batch through the whole stage (a
    chunk of the interleaved schedule takes 1/vpp of it), the forward with its own communication,
    the backward with recomputation and the rest; ``p2p_s`` one transfer between neighbours;
    ``moe_layers`` and ``mtp_layers`` how many of a stage's layers are MoE, and its MTP layers."""

    layers: np.ndarray
    memory: dict[str, np.ndarray]
    forward_s: np.ndarray
    backward_s: np.ndarray
    p2p_s: np.ndarray
    moe_layers: np.ndarray | None = None
    mtp_layers: np.ndarray | None = None


# arrays: no ==, hash or repr (generating them costs every process's import; numpy arrays have none to give)
@dataclass(frozen=True, eq=False, repr=False)
class Evaluation:
    """Arrays over the plans of a grid (most loaded stage for memory, slowest for time); ``stages``
    every stage, when asked for."""

    m: np.ndarray
    time: dict[str, np.ndarray]
    iteration_s: np.ndarray
    memory: dict[str, np.ndarray]
    peak_memory_bytes: np.ndarray
    peak_stage: np.ndarray
    stage_layers_legal: np.ndarray
    flops: dict[str, np.ndarray]
    bubble_frac: np.ndarray
    stages: Stages | None = None
    parts: dict[str, dict[str, np.ndarray]] | None = None  # with ``stages``: parts of the terms, for explain


def group_links(lt: Letters, ctx: Context) -> dict[str, Link]:
    """The links (``collectives.group_link``) of a plan's data-parallel groups (``instance``: one
    distributed-optimizer instance's d·c/R ranks; ``across``: the R instances; with experts, ``expert``: one
    instance's edp/R of the expert data-parallel group, ``expert_across`` its R instances); once per grid, on
    every plan: the links' few dozen elementwise operations on the plans cost less than finding the grid's
    distinct shapes, numbering them and reading every field back per plan (``Letters.once``)."""
    cached = getattr(lt, "_group_links", None)
    if cached is None:
        experts = ctx.model.is_moe
        cached = lt._group_links = _group_links(lt, ctx.hardware, experts)
    return cached


def _group_links(lt: Letters, hw, experts: bool) -> dict[str, Link]:
    instance = lt.N  # d·c/R: one instance's ranks (Megatron FSDP: one replica's), consecutive (parallel_state.py)
    groups = {"instance": (instance, lt.t), "across": (lt.R, lt.t * instance)}
    if experts:
        groups["expert"] = (lt.edp_in, lt.etp * lt.ep)  # one instance's edp/R expert ranks
        groups["expert_across"] = (lt.R, lt.etp * lt.ep * lt.edp_in)
    return links_of(hw, groups)  # one group_link over the groups stacked


def _with_experts(ctx: Context, dense_s, expert_s):
    """A data-parallel term's dense part plus its experts' (``expert_s()``, called only for a model with
    experts: without, the stage holds no expert parameters and each collective of 0 bytes takes 0 s)."""
    return dense_s + expert_s() if ctx.model.is_moe else dense_s


def dp_element_bytes(ctx: Context) -> tuple[int, float]:
    """(bytes per gradient element reduced over DP, bytes per parameter all-gathered). With
    --fp8-param-gather the parameters are gathered in FP8 (1 byte), except MXFP8's: Megatron gathers
    them in 16 bits into the gradient buffer and quantises them into the MXFP8 parameter after the
    gather (--reuse-grad-buf-for-mxfp8-param-ag, which Megatron recommends with MXFP8 and
    Megatron-Bridge's bf16_with_mxfp8_mixed sets: Megatron-LM core_r0.16.0 distributed/
    param_and_grad_buffer.py:340-350, optimizer/optimizer_config.py:364-370). With --fp4-param-gather the NVFP4
    weights' packed E2M1 data, half a byte (param_and_grad_buffer.py nvfp4_packed_numel = numel // 2 @ d98e8a64;
    the block scales are recomputed after the gather: fp4_utils.quantize_nvfp4_param_shard)."""
    prec, opts = ctx.precision, ctx.options
    if prec == "fp32":
        return 4, 4
    grad = 2 if prec == "fp16" or opts.grad_buffer_in_16_bits else 4  # bf16: fp32 main grads (arguments.py:1204-1217)
    fp8_gather = opts.fp8 is not None and opts.fp8_param_gather and opts.fp8_recipe.value != "mxfp8"
    if opts.fp4 is not None and opts.fp4_param_gather:
        return grad, 0.5
    return grad, 1 if fp8_gather else 2


def adam_step_bytes(ctx: Context) -> float:
    """HBM bytes one Adam step moves per sharded parameter (``ADAM_BYTES_PER_PARAM``); with the
    precision-aware optimizer: read the gradient, read and write the master weight (its remainder) and
    m, v in their dtypes, write the 16-bit weight, zero the gradient buffer."""
    opts = ctx.options
    if not opts.use_precision_aware_optimizer:
        return ADAM_BYTES_PER_PARAM[ctx.precision]
    grad = memory.gradient_bytes_per_param(ctx.precision, grads_in_16_bits=opts.grad_buffer_in_16_bits)
    states = memory.optimizer_bytes_per_param(
        ctx.precision,
        precision_aware=True,
        master_bytes=OPTIMIZER_DTYPE_BYTES[opts.main_params_dtype],
        exp_avg_bytes=OPTIMIZER_DTYPE_BYTES[opts.exp_avg_dtype],
        exp_avg_sq_bytes=OPTIMIZER_DTYPE_BYTES[opts.exp_avg_sq_dtype],
    )
    return grad + 2 * states + memory.ACTIVATION_BYTES[ctx.precision] + grad


def _dp_sync(
    lt: Letters, ctx: Context, mem: dict, bwd_mb: np.ndarray, fwd_mb: np.ndarray, rep: np.ndarray, count: np.ndarray
) -> np.ndarray:
    """Exposed data-parallel synchronisation (DDP or distributed optimizer): the gradient reduction of dense
    parameters over d·c and expert parameters over expert-DP as Megatron buckets and launches it
    (communication.dp_exposed_s; Megatron-Core's buckets, ``_bucket_latencies_s``, and NeMo 1's Apex
    DistributedFusedAdam, ``dfa_bucket_mb``, each pay a collective's latency); with the distributed optimizer the
    parameter all-gather, whole after the step or, with --overlap-param-gather, what the first forward leaves
    (``_param_gathers_s``); the hidden rest's SMs (collectives.hidden_comm_contention_s); SHARP in the switches."""
    opts, (grad_bytes, param_bytes) = ctx.options, dp_element_bytes(ctx)
    instance = lt.N  # the ranks one distributed-optimizer instance shards over, d·c/R (experts: edp/R)
    links = group_links(lt, ctx)
    dense_link, dense_across = links["instance"], links["across"]
    sharp = opts.use_sharp and ctx.hardware.network.sharp
    whole = lt.fsdp & ~lt.fsdp_grads  # Megatron FSDP optim: the gradient buffer stays whole
    sharded, replicas = lt.dopt | lt.fsdp, np.any(lt.R > 1)

    def reduce(n, group, link, over=dense_across):
        kw = dict(grad_bytes=grad_bytes, distributed_optimizer=sharded, in_network=sharp)
        plain = comm.dp_grad_reduce_time_s(n, group, link, **kw)
        if not replicas:  # one distributed-optimizer instance everywhere
            return plain
        kw = dict(grad_bytes=grad_bytes, in_network=sharp, whole_buffer=whole)
        return np.where(lt.R > 1, comm.hierarchical_grad_reduce_time_s(n, group, lt.R, link, over, **kw), plain)

    def gather(n, group, link, over=None):
        return comm.dp_param_gather_time_s(n, group, link, param_bytes=param_bytes, in_network=sharp)

    dense, expert = mem["dense_params"], mem["expert_params"]
    chunk_params = (dense + expert) / lt.vpp
    dfa = opts.dfa_bucket_mb is not None
    # per chunk: Apex's buckets, or one (Megatron-Core: stage 0's first chunk aside)
    nb = lt.vpp * (
        np.maximum(np.ceil(chunk_params / comm.dfa_bucket_params(opts.dfa_bucket_mb, grad_bytes)), 1) if dfa else 1.0
    )

    def both(fn):  # the dense and the expert parameters of the stage, each in nb collectives
        dense_s = fn(dense / nb, instance, dense_link, dense_across)
        return nb * _with_experts(
            ctx, dense_s, lambda: fn(expert / nb, lt.edp_in, links["expert"], links["expert_across"])
        )

    first = (rep == 0) | dfa  # the stages whose last chunk leaves in buckets
    per_microbatch = lt.fsdp_grads  # Megatron FSDP optim_grads reduce-scatters every micro-batch (_fsdp_exposed)
    sync, whole_gather = np.where(per_microbatch, 0.0, both(reduce)), both(gather)
    # stage 0's last gradient bucket and first all-gather hold the word table, V·h/t (buckets fill in
    # backward order and close past their size: param_and_grad_buffer.py:980-986)
    ddp_bucket = comm.ddp_bucket_params(lt.d * lt.c, opts.ddp_bucket_size)
    bucket = np.minimum(np.maximum(ddp_bucket, lt.V * lt.h / lt.t), chunk_params)
    bucket = chunk_params * lt.vpp / nb if dfa else bucket
    mcore_buckets = first & (not dfa) & opts.overlap_grad_reduce & ~per_microbatch
    rs_latency_s, gather_latency_s = _bucket_latencies_s(lt, ctx, chunk_params, ddp_bucket, mcore_buckets)
    bucket_s = np.where(per_microbatch, 0.0, np.where(first, reduce(bucket, instance, dense_link), sync / lt.vpp))
    tau_b, tau_f, sync = bwd_mb / lt.vpp, fwd_mb / lt.vpp, sync + rs_latency_s
    kw = dict(overlap=opts.overlap_grad_reduce, bucketed=first, last_chunk_extra_s=rs_latency_s)
    grads = comm.dp_exposed_s(sync, bucket_s, rep, lt.p, lt.vpp, tau_b, **kw)
    whole_first = np.where(first, bucket, chunk_params)
    first_bucket = gather(whole_first, instance, dense_link) if np.any(lt.opg) else 0.0
    gathers = _param_gathers_s(whole_gather, first_bucket, gather_latency_s, tau_f, whole_first / chunk_params, lt.vpp)
    return _exposed_sync(lt, ctx, sync, grads, gathers, rep, tau_f, count)


def _param_gathers_s(whole_s, first_bucket_s, bucket_latency_s, fwd_s, first_frac, v) -> tuple:
    """(the stage's whole parameter all-gather, what of it the first forward leaves exposed): the bucketed chunk
    (one of v) carries its buckets' latencies (``_bucket_latencies_s``); ``communication.param_gather_exposed_s``."""
    chunk_s = whole_s / v + bucket_latency_s
    return whole_s + bucket_latency_s, comm.param_gather_exposed_s(chunk_s, first_bucket_s, fwd_s, first_frac)


def _bucket_latencies_s(lt: Letters, ctx: Context, chunk_params, bucket_params, bucketed) -> tuple:
    """(reduction, gather) seconds Megatron-Core's buckets add on the ``bucketed`` stages (stage 0's first chunk,
    with --overlap-grad-reduce): each of its n_b bucket groups (``communication.ddp_bucket_count`` over
    ``params.bucket_group_tensors``) is its own
    reduce-scatter over one distributed-optimizer instance (and all-reduce of the shard across the R instances)
    and its own all-gather, so n_b − 1 more ring latencies than one collective of the chunk
    (``communication.bucket_latency_s``)."""
    links = group_links(lt, ctx)
    per_layer = dense_layer_params(ctx.model, lt.t)
    low = ctx.options.fp8_param_gather or ctx.options.fp4_param_gather
    tensors = bucket_group_tensors(ctx.model, np.ceil(chunk_params / per_layer), low_precision_params=low)
    n_b = comm.ddp_bucket_count(chunk_params, bucket_params, tensors)
    ring = ring_latency_s(lt.N, links["instance"])
    gather = np.where(bucketed, comm.bucket_latency_s(n_b, ring), 0.0)
    if not np.any(lt.R > 1):  # one instance everywhere: the reduction's are the gather's (ring + 0 s is ring)
        return gather, gather
    # the reduction's: each bucket's reduce-scatter and all-reduce of its shard across the R instances
    across = np.where(lt.R > 1, all_reduce_latency_s(lt.R, links["across"]), 0.0)
    return np.where(bucketed, comm.bucket_latency_s(n_b, ring + across), 0.0), gather


def _exposed_sync(lt: Letters, ctx: Context, sync, grads, gathers: tuple, rep, tau_f, count) -> np.ndarray:
    """The slowest stage's exposed data-parallel time: the gradients' reduction ``grads`` (of ``sync``) and,
    with a sharded optimizer, the weights' all-gather (``gathers``: whole, and its first bucket): whole
    after the optimizer step, or with --overlap-param-gather (per plan) only the first bucket, less the
    i forward steps stage i starts late; and what the hidden rest takes of the compute it hides behind."""
    whole, first_bucket = gathers
    gather_s = np.where(lt.opg, np.maximum(first_bucket - rep * tau_f, 0.0), whole)
    sharded = lt.dopt | lt.fsdp  # the weights are gathered after the optimizer step (FSDP optim, optim_grads)
    exposed = grads + np.where(sharded, gather_s, 0.0)
    hidden = sync - grads + np.where(sharded, whole - gather_s, 0.0)
    contention = hidden_comm_contention_s(hidden, dp_sms(ctx), ctx.hardware.gpu.sm_count)
    return np.max(np.where(count > 0, exposed + contention, 0.0), axis=1, keepdims=True)


def dp_sms(ctx: Context) -> int | None:
    """SMs a data-parallel collective holds: NCCL's own (the hardware's ``nccl_sms``), capped by the
    DP communicator's max_ctas when --nccl-communicator-config-path sets one (Megatron-LM
    parallel_state.get_nccl_options; NVIDIA's MLPerf NeMo configs: dp max_ctas 8)."""
    sms, cap = ctx.hardware.network.nccl_sms, ctx.options.dp_max_ctas
    if sms is None or cap is None:
        return cap if sms is None else sms
    return min(sms, cap)


def _fsdp_exposed(ctx: Context, layer: tuple, n: np.ndarray) -> np.ndarray:
    """Megatron FSDP, per micro-batch on a stage: each layer all-gathers its weights for the forward
    and again for the backward (optim_grads_params only) and reduce-scatters its gradients (optim_grads
    too), prefetched one layer ahead, so only what exceeds the layer's own compute is exposed (ZeRO-3 and
    ZeRO-2; Rajbhandari et al. 2020 §5). With optim the gradients wait for the end of the step, as the
    distributed optimizer's do (``_dp_sync``). Expert weights
    are sharded, gathered and reduced over the expert data-parallel group, the rest over d·c. The
    hidden part still holds NCCL's SMs (collectives.hidden_comm_contention_s). ``layer``: ``_fsdp_layer_s``."""
    gather, scatter, fwd_layer, bwd_layer = layer
    exposed = np.maximum(gather - fwd_layer, 0.0) + np.maximum(gather + scatter - bwd_layer, 0.0)
    hidden = 2 * gather + scatter - exposed
    hw = ctx.hardware
    return n * (exposed + hidden_comm_contention_s(hidden, dp_sms(ctx), hw.gpu.sm_count))


def _fsdp_layer_s(lt: Letters, ctx: Context, step: dict, mem: dict, n: np.ndarray) -> tuple:
    """One layer's Megatron FSDP collectives in every micro-batch (all-gather of its 16-bit weights with
    optim_grads_params, reduce-scatter of its 16-bit gradients with optim_grads too: Megatron FSDP's grad
    comm dtype follows the model's by default), over one replica's N = d·c/R ranks (experts: edp/R), and
    the layer's forward and backward compute they hide behind: (gather, scatter, fwd, bwd) seconds."""
    w_bytes, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    links = group_links(lt, ctx)
    link = links["instance"]
    per = np.maximum(n, 1)
    dense = w_bytes * mem["dense_params"] / per
    expert = w_bytes * mem["expert_params"] / per if ctx.model.is_moe else None
    # the ring all-gather of a layer's weights and reduce-scatter of its gradients move as many bytes over the
    # same ranks: one ring time each (``reduce_scatter_time_s`` is ``all_gather_time_s``)
    ring = _with_experts(
        ctx, reduce_scatter_time_s(lt.N, dense, link), lambda: reduce_scatter_time_s(lt.edp_in, expert, links["expert"])
    )
    gather, scatter = np.where(lt.fsdp_params, ring, 0.0), np.where(lt.fsdp_grads, ring, 0.0)
    return gather, scatter, step["fwd"] / per, (step["bwd"] + step["recompute"]) / per


def _hsdp_outer_s(lt: Letters, ctx: Context, layer: tuple, mem: dict, n: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Megatron FSDP's hybrid mode (R > 1 replicas, optim_grads or optim_grads_params), once per iteration on
    the stage where it shows most: each layer's DP-Outer collectives (``communication.hsdp_outer_layer_s``) join its
    inner ones, the gradients' in the last micro-batch's backward, HFSDP's weight all-gather in the first
    one's forward, and only what then exceeds the layer's compute is exposed (the DP-Outer stream waits
    on the inner reduce-scatter's: both counted in one layer's time). optim reduces at the step
    (``_dp_sync``). ``layer``: the inner collectives and compute (``_fsdp_layer_s``), None where no plan is FSDP."""
    hybrid = lt.fsdp_grads & (lt.R > 1)
    if not np.any(hybrid):
        return np.zeros((len(lt.t), 1))
    w_bytes, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    gather, scatter, fwd, bwd = layer
    hw, per = ctx.hardware, np.maximum(n, 1)
    kw = dict(grads_sharded=True, outer_optim=lt.outer_optim)
    links, outer_g, outer_w = group_links(lt, ctx), 0.0, 0.0
    groups = (("dense_params", lt.N, "across"), ("expert_params", lt.edp_in, "expert_across"))
    for params, inner, link in groups[: 2 if ctx.model.is_moe else 1]:  # without experts, their 0 s are left out
        layer_bytes = w_bytes * mem[params] / per  # each replica's layer, dense then the experts
        g, w = comm.hsdp_outer_layer_s(layer_bytes, layer_bytes, inner, lt.R, links[link], **kw)
        outer_g, outer_w = outer_g + g, outer_w + w
    extra = np.maximum(gather + scatter + outer_g - bwd, 0.0) - np.maximum(gather + scatter - bwd, 0.0)
    extra += np.maximum(gather + outer_w - fwd, 0.0) - np.maximum(gather - fwd, 0.0)
    hidden = outer_g + outer_w - extra
    stage = n * (extra + hidden_comm_contention_s(hidden, dp_sms(ctx), hw.gpu.sm_count))
    return np.max(np.where(hybrid & (count > 0), stage, 0.0), axis=1, keepdims=True)


def _pipeline_comm_s(lt: Letters, ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(one pipeline transfer between neighbouring stages, tp·c·d ranks apart (rank order tp, cp, dp, pp); with tied
    embeddings across stages, the all-reduce of the word table's gradient, V·h/t, between the first and the last
    stage, (p − 1)·t·c·d ranks apart: Megatron-LM finalize_model_grads.py), computed once per distinct shape, the
    two groups' links in one ``links_of``."""
    grad_bytes, _ = dp_element_bytes(ctx)

    def terms(v: Letters) -> tuple[np.ndarray, np.ndarray]:
        groups = {"p2p": (2, v.t * v.c * v.d), "embedding": (2, (v.p - 1) * v.t * v.c * v.d)}
        pp_link, emb_link = links_of(ctx.hardware, groups).values()
        p2p = comm.pp_p2p_time_s(
            activation_message(v),
            v.t,
            pp_link,
            tp_link(v, ctx),
            sequence_parallel=v.sp,
            scatter_gather=ctx.options.pp_scatter_gather,
        )
        emb_grad = v.V * v.h / v.t * grad_bytes
        tied = ctx.model.tied_embeddings & (v.p > 1)
        return p2p, np.where(tied, all_reduce_time_s(2, emb_grad, emb_link), 0.0)

    return lt.once(terms, "pipeline_comm", LAYER_KEY)


def stage_memory_totals(grid: PlanGrid, ctx: Context, recompute_layers: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """(total memory, layers per model chunk) of each kind of stage of every plan (``Letters.type_index``;
    columns no stage fills hold 0): the memory side of ``evaluate`` alone (the search solves block
    recomputation's layer count with it). With ``recompute_layers`` (K counts), the totals of every plan with
    each count in place of its --recompute-num-layers, (K, plans, stages), in one evaluation: the count is a
    letter along a leading axis, so only the terms it reaches (full recomputation's activations and their
    fragmentation) are computed K times, each number as the plan's own evaluation with that count gives it."""
    lt = Letters(grid, ctx)
    if recompute_layers:
        lt.rlayers = np.array(recompute_layers, dtype=float).reshape(-1, 1, 1)
    rep, here = lt.type_index, lt.type_count > 0
    total = np.where(here, stage_memory_total(lt, ctx, rep), 0.0)
    if recompute_layers and total.ndim == 2:  # no plan recomputes fully: the count reached no term
        total = np.broadcast_to(total, (len(recompute_layers), *total.shape))
    return total, np.where(here, lt.stage(rep)["layers"], 0.0) / lt.vpp.astype(float)  # cast once, (N, 1)


def peak_memory_bytes(grid: PlanGrid, ctx: Context) -> np.ndarray:
    """Memory of each plan's most loaded stage (bytes), as ``evaluate`` computes it: search uses it to
    set aside the plans that do not fit before timing the rest. The columns no kind of stage fills
    (``Letters.type_count`` 0) point at rank 0, the first kind's, so their totals repeat its own: the largest
    column is the most loaded stage's without setting them aside."""
    lt = Letters(grid, ctx)
    return stage_max(stage_memory_total(lt, ctx, lt.type_index))


def peak_memory_bytes_and_twins(grid: PlanGrid, ctx: Context, twins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``peak_memory_bytes`` of every plan, and of the plans at ``twins`` (positions) without --tp-comm-overlap,
    each as its own evaluation gives it (``stage_memory_total_and_twins``): search screens a plan and its twin
    in one evaluation."""
    lt = Letters(grid, ctx)
    total, off = stage_memory_total_and_twins(lt, ctx, lt.type_index, twins)
    return stage_max(total), stage_max(off)


def evaluate(grid: PlanGrid, ctx: Context, *, stages: bool = False, time: dict | None = None) -> Evaluation:
    """Estimate every plan of ``grid``: memory of its most loaded stage and its iteration time; with
    ``stages``, also the memory, layers and per-micro-batch times of every pipeline stage. ``time``: the
    plans' time terms as ``iteration_terms`` gave them (search keeps those of the plans it shows), not
    computed again (not with ``stages``)."""
    lt = Letters(grid, ctx)
    # one column per kind of stage (the first rank of each kind; ``count`` ranks share it)
    rep, count = lt.type_index, lt.type_count
    rows = np.arange(len(grid))
    mem = stage_memory_bytes(lt, ctx, rep)
    peak_col = np.argmax(np.where(count > 0, mem["total"], -np.inf), axis=1)
    peak_stage = rep[rows, peak_col]
    if time is None or stages:
        time, slow_col, p2p = _time_terms(lt, ctx, mem)
    iteration = time_total_s(time)
    memory_terms = {k: mem[k][rows, peak_col] for k in (*MEMORY_TERMS, "allocated", "total", "params")}
    return Evaluation(
        m=lt.m[:, 0],
        time=time,
        iteration_s=iteration,
        memory=memory_terms,
        peak_memory_bytes=memory_terms["total"],
        peak_stage=peak_stage,
        stage_layers_legal=lt.split_legal[:, 0],
        flops=flop_terms(lt, ctx),
        bubble_frac=time["bubble"] / iteration,
        stages=_every_stage(lt, ctx, p2p) if stages else None,
        parts=_parts(lt, ctx, peak_stage, rep[rows, slow_col]) if stages else None,
    )


def iteration_s(grid: PlanGrid, ctx: Context) -> np.ndarray:
    """Each plan's iteration time, as ``evaluate`` gives it (``iteration_terms`` summed)."""
    return time_total_s(iteration_terms(grid, ctx))


def iteration_terms(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """Each plan's time terms (``TIME_TERMS``), as ``evaluate`` gives them, without the memory terms the time
    does not read (the data-parallel and optimizer terms read each stage's parameters only): search times the
    plans that fit with them, and keeps those of the plans it may show (``evaluate``'s ``time``)."""
    lt = Letters(grid, ctx)
    params = stage_params(lt, ctx, lt.type_index)
    time, _, _ = _time_terms(lt, ctx, {"dense_params": params["dense"], "expert_params": params["expert"]})
    return time


def time_total_s(time: dict[str, np.ndarray]) -> np.ndarray:
    """The iteration time: the terms summed in ``TIME_TERMS`` order (the one sum of them: search's times and
    ``evaluate``'s are the same floats)."""
    return sum(time[k] for k in TIME_TERMS)


# the floor's slack for rounding: its sum runs in another order than iteration_s's (a few ulp apart)
FLOOR_ROUNDING = 1e-9


def iteration_floor_s(grid: PlanGrid, ctx: Context) -> np.ndarray:
    """A lower bound of each plan's ``iteration_s`` (seconds), far cheaper: search times only the plans whose
    floor could still rank. T, one micro-batch's compute, CP exchange and MoE dispatch through every layer
    of the model (``stage_terms`` of all ranks together), spread over the p stages with the fill and drain
    of the 1F1B schedule (Narayanan et al. 2021 §2.2): T·(m + (p − 1)/v)/p. It is below ``iteration_s``:
    the slowest stage's per-micro-batch time t ≥ T/p, so m·t + (Σ stages − t)/v (its compute, exposed
    communication and bubble, m ≥ 1/v) ≥ T·(m + (p − 1)/v)/p, and every other term is ≥ 0. T is the sum of
    the ranks' terms where each is linear in what its rank holds; MTP layers are left out of it (below the
    sum), and plans with full recomputation and a rank of less than one decoder layer (its recomputed share not
    1) get 0. A plan with block recomputation is bounded by the same plan without recomputation: recomputing
    only adds the forward of its recomputed layers and their collectives once more (``layer_terms``), each
    ≥ 0, which that floor leaves out."""
    if not len(grid):
        return np.zeros(0)
    if np.any(grid.recompute_block):
        block = grid.recompute_block
        grid = replace(grid, recompute=np.where(block, 0, grid.recompute).astype(grid.recompute.dtype))
        grid = replace(grid, recompute_block=np.zeros(len(grid), dtype=bool))
    lt = Letters(grid, ctx)
    whole = lt.whole_model()
    whole["mtp"] = np.zeros_like(whole["mtp"])
    if all(np.all(v == v[0]) for v in whole.values()):  # once per distinct shape
        view, inverse = lt.distinct((*LAYER_KEY, "rc", "rblock"), LAYER_CARRIED)
        total = _floor_step_s(view, ctx, {k: v[:1] for k, v in whole.items()}).take(inverse, axis=0)
    else:
        total = _floor_step_s(lt, ctx, whole)
    linear = ((lt.rc != 2) | (lt.fewest_layers() >= 1)) & (lt.m * lt.vpp >= 1)
    floor = total * (lt.m + (lt.p - 1) / lt.vpp) / lt.p
    return np.where(linear, floor * (1 - FLOOR_ROUNDING), 0.0)[:, 0]


def _floor_step_s(lt: Letters, ctx: Context, whole: dict) -> np.ndarray:
    """T of ``iteration_floor_s``: compute, recomputation, CP and MoE terms of ``stage_terms`` of the whole model."""
    step = stage_terms(lt, ctx, whole, offload=False)
    return np.broadcast_to(step["fwd"] + step["bwd"] + step["recompute"] + step["cp"] + step["moe"], lt.t.shape)


def _time_terms(lt: Letters, ctx: Context, mem: dict) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The time terms of every plan (seconds per iteration, ``TIME_TERMS``; ``mem``: at least each kind of
    stage's ``dense_params`` and ``expert_params``), the column of its slowest kind of stage, and one
    pipeline transfer's time."""
    rep, count, rows = lt.type_index, lt.type_count, np.arange(len(lt.t))
    n, _, _ = lt.stage_info(rep)
    step = stage_step(lt, ctx, rep)
    # the stage's parameters the terms read; without experts a stage holds none of them (0, a number)
    params = {"dense_params": mem["dense_params"], "expert_params": mem["expert_params"] if ctx.model.is_moe else 0.0}
    # one layer's FSDP collectives and compute: the per-micro-batch term's and the hybrid outer term's
    layer = _fsdp_layer_s(lt, ctx, step, params, n) if np.any(lt.fsdp) else None
    fsdp = np.where(lt.fsdp, _fsdp_exposed(ctx, layer, n), 0.0) if layer is not None else 0.0
    fwd, bwd, rec, tp, cp, mo = step["fwd"], step["bwd"], step["recompute"], step["tp"], step["cp"], step["moe"]
    compute = fwd + bwd + rec
    per_mb = compute + step["offload"] + tp + cp + mo + fsdp
    slow_col = _first_max_column(np.where(count > 0, per_mb, -np.inf))
    at = slow_col * len(rows) + rows  # each plan's slowest stage in a column-major (plans, stages) array

    def pick(x):  # the slowest stage's term (a term the same on every stage is its own; a number: 0 s everywhere)
        if np.shape(x) == (len(rows), 1):
            return x
        if not np.ndim(x):
            return np.full((len(rows), 1), float(x))
        x = x if np.shape(x) == per_mb.shape else np.broadcast_to(x, per_mb.shape)
        return (x.ravel(order="F").take(at) if x.flags.f_contiguous else x[rows, slow_col])[:, None]

    slowest = pick(per_mb)
    total = _row_sum(count * per_mb)
    bubble = bubble_time_s(total, slowest, lt.vpp)

    p2p, embedding = _pipeline_comm_s(lt, ctx)
    stage_f, stage_b = fwd + step["comm_fwd"], bwd + rec + tp + cp + mo - step["comm_fwd"]
    fwd_all, bwd_all = pick(stage_f), pick(stage_b)
    dp = _on_rows(~lt.fsdp_params, _dp_sync, lt, ctx, params, bwd + rec, stage_f, rep, count)  # Megatron FSDP: fsdp
    dp = dp + _on_rows(lt.fsdp_grads & (lt.R > 1), _hsdp_outer_s, lt, ctx, layer, params, n, count)
    time = {
        "forward": lt.m * pick(fwd),
        "backward": lt.m * pick(bwd),
        "recompute": lt.m * pick(rec),
        "offload": lt.m * pick(step["offload"]),
        "tp_comm": lt.m * pick(tp),
        "cp_comm": lt.m * pick(cp),
        "moe_comm": lt.m * pick(mo),
        "pp_comm": _pp_exposed_s(lt, ctx, p2p, (fwd_all, bwd_all), (stage_f, stage_b, count)),
        "dp_comm": dp + lt.m * pick(fsdp) + _fp8_amax_sync_s(lt, ctx),
        "embedding_comm": embedding,
        "bubble": bubble,
        "optimizer": _optimizer_step_s(lt, ctx, params, count),
    }
    paced = lt.m * pick(compute) + bubble  # the compute a GPU's pace sets
    time["stragglers"] = straggler_s(paced, lt.world, ctx.hardware.calibration.straggler_sigma)
    return {k: _plan_column(v, len(rows)) for k, v in time.items()}, slow_col, p2p


def _first_max_column(x: np.ndarray) -> np.ndarray:
    """Each row's first column holding its largest value, ``np.argmax(x, axis=1)`` of numbers (no NaN), column by
    column: a later column takes the row only when strictly larger. On the column-major stage arrays numpy's
    argmax copies them row-major and loops row by row (6 times the instructions)."""
    best, col = x[:, 0], np.zeros(len(x), dtype=np.intp)
    for j in range(1, x.shape[1]):
        later = x[:, j] > best
        best, col = np.where(later, x[:, j], best), np.where(later, j, col)
    return col


def _row_sum(x: np.ndarray) -> np.ndarray:
    """Each plan's stages summed ((plans, 1)), in the order numpy sums a row-major row: one after the other below 8
    stages (as a column-major array's columns add, in a few whole-column additions where a row-major copy loops
    row by row: 5 times the instructions; the stage terms are column-major, ``Letters.stage``), pairwise from 8."""
    return np.sum(x if x.shape[1] < 8 else np.ascontiguousarray(x), axis=1, keepdims=True)


def _on_rows(use: np.ndarray, term, lt: Letters, ctx: Context, *args) -> np.ndarray:
    """``term(lt, ctx, *args)``, a (plans, 1) term that is 0 on the plans not in ``use`` ((plans, 1) mask),
    computed on the plans in ``use`` alone (``Letters.take``; ``args``: arrays or dicts of arrays whose first
    axis is the plans, or values every plan shares): each plan's value is the one computed on every plan."""
    use = use[:, 0]
    if use.all():
        return term(lt, ctx, *args)
    out = np.zeros((len(use), 1))
    if use.any():
        rows, n, seen = np.flatnonzero(use), len(use), {}
        out[rows] = term(lt.take(rows), ctx, *(_per_plan(a, rows, n, seen) for a in args))
    return out


def _plan_column(x, n: int) -> np.ndarray:
    """A term of every plan, (n, 1) or broadcast to it, as a new float array of n values."""
    return (x if np.shape(x) == (n, 1) else np.broadcast_to(x, (n, 1)))[:, 0].astype(float)


def _pp_exposed_s(lt: Letters, ctx: Context, p2p: np.ndarray, slowest: tuple, stages: tuple) -> np.ndarray:
    """Exposed pipeline sends: the warm-up and cool-down transfers, and with the interleaved schedule
    (--overlap-p2p-comm) the transfers its fill and drain wait at each wrap from the last stage back to
    the first (``pipeline.interleaved_wrap_wait_s``) and the steady state's sends longer than a
    chunk-step's compute. ``slowest``: the slowest stage's per-micro-batch forward and backward;
    ``stages``: every kind of stage's forward and backward and how many stages share it."""
    hw, opts = ctx.hardware, ctx.options
    (fwd_all, bwd_all), (stage_f, stage_b, count) = slowest, stages
    pp = exposed_p2p_transfers(lt.p, lt.m, lt.vpp, overlap_p2p=opts.overlap_p2p_comm) * p2p
    if opts.overlap_p2p_comm:  # interleaved: sends longer than a chunk-step's compute show
        share = float(hidden_comm_contention_s(1.0, hw.network.nccl_p2p_sms, hw.gpu.sm_count))
        steady = comm.pp_interleaved_exposed_s(p2p, lt.m, lt.vpp, fwd_all / lt.vpp, bwd_all / lt.vpp, sm_share=share)
        used = count > 0
        extra = lt.G - lt.p  # a group of G > p micro-batches gives stage 0 G − p more chunks before each wrap
        slack_f = (
            np.sum(np.where(used, count * (fwd_all - stage_f), 0.0), axis=1, keepdims=True) + extra * fwd_all
        ) / lt.vpp
        slack_b = (
            np.sum(np.where(used, count * (bwd_all - stage_b), 0.0), axis=1, keepdims=True) + extra * bwd_all
        ) / lt.vpp
        wraps = interleaved_wrap_wait_s(p2p, lt.p, lt.vpp, slack_f, slack_b)
        pp = pp + np.where((lt.vpp > 1) & (lt.p > 1), steady + wraps, 0.0)
    return pp


def _fp8_amax_sync_s(lt: Letters, ctx: Context) -> np.ndarray:
    """Delayed-scaling FP8's amax all-reduces (communication.fp8_amax_reduction_s) over the TP×DP×CP group (t·d·c
    consecutive ranks; TP×CP with ``tp_only_amax_red``), at most AMAX_FLOATS_PER_LAYER 4-byte amaxes per layer of
    the stage (a chunk holds 1/v of them; the all-reduce is latency-bound); 0 without FP8, with another recipe,
    or under CUDA graphs."""
    o = ctx.options
    if o.fp8 is None or o.fp8_recipe is not Fp8Recipe.DELAYED or o.cuda_graph_impl is not CudaGraphImpl.NONE:
        return np.zeros_like(np.asarray(lt.m, dtype=float))

    def sync(v: Letters) -> np.ndarray:  # one all-reduce of a stage's amaxes (at most; latency-bound)
        n = v.t * v.c if o.tp_only_amax_red else v.t * v.d * v.c
        amax_bytes = 4.0 * comm.AMAX_FLOATS_PER_LAYER * v.L / v.p
        return all_reduce_time_s(n, amax_bytes, group_link(ctx.hardware, n, 1))

    return comm.fp8_amax_reduction_s(lt.m, lt.vpp, lt.once(sync, "fp8_amax_sync", LAYER_KEY))


def _optimizer_step_s(lt: Letters, ctx: Context, mem: dict, count: np.ndarray) -> np.ndarray:
    """The Adam step of the most loaded stage: ``adam_step_bytes`` per parameter of its shard at η_mem of HBM."""
    hw = ctx.hardware
    shard_dense = np.where(lt.dopt | lt.fsdp, lt.opt_group, 1)
    shard_expert = np.where(lt.dopt | lt.fsdp, lt.opt_group_e, 1)
    adam_params = mem["dense_params"] / shard_dense + mem["expert_params"] / shard_expert
    adam = adam_step_bytes(ctx) * adam_params / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    return np.max(np.where(count > 0, adam, 0.0), axis=1, keepdims=True)


def _parts(lt: Letters, ctx: Context, peak_stage: np.ndarray, slow_stage: np.ndarray) -> dict[str, dict]:
    """The memory parts of the most loaded stage (bytes) and the compute parts of the slowest stage
    (seconds per iteration): what the attention blocks and the experts take of the terms."""
    mem = memory_parts.memory_parts(lt, ctx, peak_stage[:, None])
    step = layer_time.time_parts(lt, ctx, slow_stage[:, None])
    return {
        "memory": {k: np.broadcast_to(v, peak_stage[:, None].shape)[:, 0] * 1.0 for k, v in mem.items()},
        "time": {k: (lt.m * np.broadcast_to(v, slow_stage[:, None].shape))[:, 0] for k, v in step.items()},
    }


def _every_stage(lt: Letters, ctx: Context, p2p: np.ndarray) -> Stages:
    """The same stage terms as ``evaluate``'s first, middle and last stage, for every stage."""
    i = np.arange(int(np.max(lt.p)))[None, :]
    here = i < lt.p
    st = lt.stage(i)
    n = st["layers"]
    mem = stage_memory_bytes(lt, ctx, i)
    step = stage_step(lt, ctx, i)
    comm_all = step["tp"] + step["cp"] + step["moe"]
    forward = step["fwd"] + step["comm_fwd"]
    backward = step["bwd"] + step["recompute"] + comm_all - step["comm_fwd"]
    return Stages(
        layers=np.where(here, n, 0),
        memory={k: np.where(here, v, 0.0) for k, v in mem.items()},
        forward_s=np.where(here, forward, 0.0),
        backward_s=np.where(here, backward, 0.0),
        p2p_s=np.broadcast_to(p2p, lt.p.shape)[:, 0] * 1.0,
        moe_layers=np.where(here, st["moe"], 0),
        mtp_layers=np.where(here, st["mtp"], 0),
    )


def layer_step_times_s(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """One transformer layer's forward and backward time for one micro-batch, with its TP
    communication; the backward includes recomputation (as Korthikanti et al. 2022 Table 4 times it)."""
    lt = Letters(grid, ctx)
    times = layer_times(lt, ctx)
    forward = times["fwd"] + times["tp_fwd"] + times["cp_fwd"] + times["moe_fwd"]
    backward = (
        times["bwd"]
        + times["recompute"]
        + times["tp"]
        + times["cp"]
        + times["moe"]
        - times["tp_fwd"]
        - times["cp_fwd"]
        - times["moe_fwd"]
    )
    return {"forward": forward[:, 0], "backward": backward[:, 0]}


def context_formulas(ctx: Context) -> dict:
    """What ``formulas`` reads of the context alone: computed once for the many plans of one context."""
    return {
        "dp_bytes": dp_element_bytes(ctx),
        "adam_bytes": adam_step_bytes(ctx),
        "stragglers": _straggler_formula(ctx),
        "memory_parts": memory_parts.memory_part_formulas(ctx),
        "time_parts": layer_time.time_part_formulas(ctx),
        "compute": compute_formulas(ctx),
        "memory": memory_context_formulas(ctx),
    }


def formulas(ctx: Context, plan: ParallelPlan, fixed: dict | None = None) -> dict[str, dict[str, Formula]]:
    """Every memory and time term's formula and source for one plan (``evaluate``'s terms); ``fixed``: the
    context's ``context_formulas`` (computed here when not given)."""
    fixed = context_formulas(ctx) if fixed is None else fixed
    grad_bytes, param_bytes = fixed["dp_bytes"]
    pp_text = _pp_formula_text(ctx, plan)
    dp_text = _dp_formula_text(ctx, plan, grad_bytes, param_bytes)
    tied = ctx.model.tied_embeddings and plan.pp > 1
    R = plan.distributed_optimizer_instances
    hfsdp = plan.fsdp and plan.fsdp_outer_sharding is FsdpOuterSharding.OPTIM
    shard = ("d·c" if R == 1 or hfsdp else f"(d·c/{R})") if plan.distributed_optimizer or plan.fsdp else "1"
    time = {
        **layer_time_formulas(ctx, plan, fixed["compute"]),
        "pp_comm": Formula(
            pp_text,
            "Narayanan et al. 2021 §2.2, §4.1; Megatron-LM arguments.py (p2p overlap), schedules.py "
            "(get_schedule_table); pipeline.interleaved_wrap_wait_s",
        ),
        "dp_comm": Formula(
            dp_text + (" (experts over expert-DP)" if ctx.model.is_moe else ""),
            "Megatron-LM distributed optimizer and DDP buckets (param_and_grad_buffer.py start_grad_sync, "
            "finish_param_sync); ring cost Thakur et al. 2005",
        ),
        "embedding_comm": Formula(
            f"all-reduce of V·h/t {grad_bytes}-byte word-embedding grads between first and last stage"
            if tied
            else "0 (untied embeddings or pp = 1)",
            "Megatron-LM finalize_model_grads.py",
        ),
        "bubble": Formula(
            "(Σ stage times − slowest stage time)/v" if plan.pp > 1 else "0 (pp = 1)",
            "Narayanan et al. 2021 §2.2.1-2.2.2: (p − 1)(t_f + t_b)/v",
        ),
        "optimizer": Formula(
            f"{fixed['adam_bytes']:g} bytes of Adam HBM traffic × P_stage/{shard} / (W_HBM·η_mem)",
            "memory-bound estimate of Megatron-LM's fused Adam",
        ),
        "stragglers": fixed["stragglers"],
    }
    return {
        "memory": memory_formulas(ctx, plan, fixed["memory"]),
        "time": time,
        "memory_parts": fixed["memory_parts"],
        "time_parts": fixed["time_parts"],
    }


def _pp_formula_text(ctx: Context, plan: ParallelPlan) -> str:
    """The pp_comm term's formula text: the transfers on the schedule's critical path."""
    sp = plan.sequence_parallel and plan.tp > 1
    message = f"b·s·h{'/(t·c)' if sp else '/c'} × {memory.ACTIVATION_BYTES[ctx.precision]} bytes / β + α"
    if plan.pp == 1:
        return "0 (pp = 1)"
    if plan.vpp > 1 and ctx.options.overlap_p2p_comm:
        return (
            f"2(p − 1) fill-and-drain transfers × ({message}), + at each of the v − 1 wraps of the fill and of the "
            "drain p transfers less the other stages' slack (G = p), + m·v × what each send takes beyond a "
            "chunk-step's compute (the interleaved schedule overlaps the rest; what hides costs the compute "
            f"{ctx.hardware.network.nccl_p2p_sms or 0}/{ctx.hardware.gpu.sm_count} of itself, NCCL's send/receive SMs)"
        )
    if plan.vpp > 1:
        return f"2(m·v + p − 1) transfers × ({message})"
    return f"2(m + p − 1) transfers on the 1F1B critical path × ({message})"


def _straggler_formula(ctx: Context) -> Formula:
    """The stragglers term's formula: the compute-paced time × σ × E[max of N standard normals]."""
    sigma = ctx.hardware.calibration.straggler_sigma
    if sigma is None:
        return Formula("0 (the hardware preset does not model GPU pace variation)", "hardware preset")
    return Formula(
        f"(m·(t_f + t_b + t_rc) + bubble) × σ {sigma:g} × E[max of N = t·c·p·d standard normals] "
        "(Blom: Φ⁻¹((N − 0.375)/(N + 0.25))): every GPU waits for the slowest at the step's synchronisation",
        "Sinha et al. SC22 (GPU pace variation within one SKU); Blom 1958; Abramowitz & Stegun 26.2.23",
    )


def _hybrid_text(plan: ParallelPlan) -> str:
    """What Megatron FSDP's hybrid mode adds to the dp_comm formula: the DP-Outer collectives."""
    R = plan.distributed_optimizer_instances
    if plan.fsdp_outer_sharding is FsdpOuterSharding.OPTIM:
        what = (
            f"HFSDP: reduce-scatter of each layer's 1/N gradient shard across the {R} replicas in the last "
            f"micro-batch's backward, all-gather of its 1/(N·{R}) weight shards in the first one's forward"
        )
    else:
        what = f"HSDP: all-reduce of each layer's 1/N gradient shard across the {R} replicas in the last backward"
    return f"; once per iteration, {what}, beyond the layer's compute with its inner collectives"


def _dp_formula_text(ctx: Context, plan: ParallelPlan, grad_bytes: int, param_bytes: int) -> str:
    """The dp_comm term's formula text: what is reduced and gathered, what overlap hides, and what
    the hidden part costs the compute."""
    opts = ctx.options
    level = plan.fsdp_sharding.code if plan.fsdp else 0
    R = plan.distributed_optimizer_instances
    dc = "d·c" if R == 1 else f"N = d·c/{R} (one of {R} replicas)"
    if level == 3:
        dp_text = (
            "per micro-batch and layer: all-gather of the 16-bit weights (forward and backward) and reduce-scatter "
            f"of the gradients over {dc}, beyond the layer's own compute"
        )
    elif level == 2:
        dp_text = (
            f"per micro-batch and layer: reduce-scatter of the 16-bit gradients over {dc}, beyond the layer's own "
            f"backward (FSDP optim_grads); per iteration: all-gather of {param_bytes}-byte parameters after the step"
        )
    elif plan.distributed_optimizer or plan.fsdp:
        gather = (
            "the all-gather beyond the first forward, max(G_1, G − F·(1 − f_1)) (--overlap-param-gather: bucket "
            "k + 1's gather runs during bucket k's forward; G the chunk's gather, G_1 its first bucket's, F its "
            "forward, f_1 the first bucket's share)"
            if opts.overlap_param_gather
            else f"all-gather of {param_bytes}-byte parameters"
        )
        left = "the whole gradient buffer (FSDP optim keeps it whole)" if plan.fsdp else f"the 1/(d·c/{R}) shard"
        dp_text = (
            f"reduce-scatter of {grad_bytes}-byte gradients over d·c + {gather}"
            if R == 1
            else f"reduce-scatter of {grad_bytes}-byte gradients over d·c/{R} (one optimizer instance), all-reduce "
            f"of {left} across the {R} instances + "
            f"{gather.replace('parameters', f'parameters over d·c/{R}')}"
        )
    else:
        dp_text = f"all-reduce of {grad_bytes}-byte gradients over d·c"
    if level >= 2 and R > 1:
        dp_text += _hybrid_text(plan)
    bucket = "max(40M, 1M·d·c)" if opts.ddp_bucket_size is None else f"{opts.ddp_bucket_size:,}"
    sms = dp_sms(ctx)
    if sms is not None:
        dp_text += f"; + what runs hidden × {sms}/{ctx.hardware.gpu.sm_count} (the SMs NCCL holds beside the compute)"
    if level < 2:
        dp_text += (
            "; --overlap-grad-reduce: each model chunk's reduction starts after its last backward, the first "
            f"stage's first chunk in {bucket}-parameter buckets, each its own reduce-scatter and all-gather with "
            "its ring latency, the last (with the word table) exposed"
            if opts.overlap_grad_reduce
            else ", exposed after the last backward"
        ) + "; stage i drains i backward steps earlier"
    return dp_text
