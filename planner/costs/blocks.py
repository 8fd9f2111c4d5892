"""The blocks a transformer layer is made of, for one micro-batch on one GPU: the attention half
(full or sliding-window; grouped-query or multi-latent), the dense MLP half and the
mixture-of-experts half (routed experts, shared experts, token dispatch). ``layer_time.stage_step``
adds them up stage by stage.

Compute: GEMMs on the shape-dependent roofline (planner.costs.compute), in FP8 for the linear
layers when enabled; memory-bound ops over HBM; the attention core unfused or flash. Exposed
communication: tensor-parallel collectives (less what overlap hides), context-parallel ring
exchange of keys and values (less what attention compute hides), the MoE token dispatcher.
"""

from __future__ import annotations

import numpy as np

from planner.costs import communication as comm
from planner.costs import compute, flops, memory, moe
from planner.costs.letters import Letters
from planner.costs.mla import mla_gather_width, mla_letters
from planner.hardware.collectives import all_gather_time_s, group_link, p2p_time_s
from planner.plan import Context, CudaGraphImpl, CudaGraphModule, PlanOptions, RecomputeModule

FP8_CAST_BYTES = 2 + 1  # quantising a 16-bit linear input to FP8: read 2, write 1
PERMUTE_BYTES = 2 * (2 + 2)  # MoE permute and unpermute of routed tokens: read, write


def gemm_times(gemms: dict, ctx: Context, *, fp8: bool) -> dict[str, np.ndarray]:
    cal, gpu = ctx.hardware.calibration, ctx.hardware.gpu
    peak = gpu.peak_flops_per_s(ctx.precision)
    fp8_peak = (gpu.peak_fp8_tflops or 0) * 1e12
    out = {}
    for name, g in gemms.items():
        linear = name not in flops.ATTENTION_CORE
        if fp8 and linear:
            out[name] = compute.gemm_time_s(
                g, peak_flops_per_s=fp8_peak, eta_max=cal.fp8_gemm_efficiency, half_dim=cal.gemm_half_dim
            )
        else:
            out[name] = compute.gemm_time_s(
                g, peak_flops_per_s=peak, eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim
            )
    return out


def _attention_core(
    lt: Letters, ctx: Context, gemms: dict, gtime: dict, softmax_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) time of the attention core: scores, softmax/dropout, context."""
    cal, peak = ctx.hardware.calibration, ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
    if lt.unfused:
        fwd = sum(gtime[k] for k in flops.ATTENTION_CORE) + softmax_s
        return fwd, compute.BACKWARD_GEMM_FACTOR * fwd
    fwd = compute.flash_attention_time_s(gemms, peak_flops_per_s=peak, efficiency=cal.flash_attention_efficiency)
    return fwd, compute.FLASH_BACKWARD_FACTOR * fwd


def _cp_ring_exposed(lt: Letters, ctx: Context, core_fwd, core_bwd) -> tuple[np.ndarray, np.ndarray]:
    """Context parallelism's ring: c − 1 steps, each passing a b·(s/c)·(2·g·d_h/t) chunk of keys and
    values (MLA: the per-head n·(d_qk + d_r + d_v)) to the next rank (dK, dV too in the backward)
    while attending to the chunk in hand, so a step costs max(transfer, attention/c) (Liu et al. 2023,
    Ring Attention; Megatron-Core CP)."""
    domain = ctx.hardware.nvlink_domain_gpus
    stride = np.where(lt.t * lt.c <= domain, lt.t, domain)  # neighbours on NVLink while the ring fits a domain
    link = group_link(ctx.hardware, 2, stride)
    chunk = lt.act_bytes * lt.b * (lt.s / lt.c) * lt.kv_width / lt.t
    step = p2p_time_s(chunk, link)
    steps = lt.c - 1
    fwd = steps * np.maximum(step - core_fwd / lt.c, 0.0)
    bwd = steps * np.maximum(2 * step - core_bwd / lt.c, 0.0)
    return fwd, bwd


def activation_message(lt: Letters) -> np.ndarray:
    """ε·b·s·h/c: the activation tensor the TP collectives and the pipeline's sends move."""
    return comm.activation_message_bytes(lt.b, lt.s, lt.h, lt.c, activation_bytes=lt.act_bytes)


def tp_collectives_s(lt: Letters, ctx: Context) -> np.ndarray:
    """One layer's forward TP collectives for one micro-batch on the tp group's link (once per grid)."""
    cached = getattr(lt, "_tp_collectives", None)
    if cached is None:
        link = group_link(ctx.hardware, lt.t, 1)
        cached = comm.tp_layer_comm_time_s(activation_message(lt), lt.t, link, sequence_parallel=lt.sp)
        lt._tp_collectives = cached
    return cached


def _tp_half_s(lt: Letters, ctx: Context, gather_width: float | None = None) -> np.ndarray:
    """One block's forward TP collectives (attention or MLP): one all-gather and one reduce-scatter of
    ε·b·s·h/c with SP (the all-gather ``gather_width`` channels wide, MLA's latents), else one
    all-reduce: half of ``tp_collectives_s``."""
    whole = tp_collectives_s(lt, ctx) / 2
    if gather_width is None:
        return whole
    link = group_link(ctx.hardware, lt.t, 1)  # MLA only
    gathered = activation_message(lt) * gather_width / lt.h
    return np.where(lt.sp, all_gather_time_s(lt.t, gathered, link) + whole / 2, whole)


def graphed_frac(opts: PlanOptions, *, moe_layer: bool = False) -> float:
    """Share of a layer's kernels CUDA graphs launch without the host: all of it with whole-layer or
    full-iteration graphs, half per captured block (attention; MLP or MoE) otherwise (an assumption:
    the host time splits evenly between the two blocks)."""
    return 0.5 * _graphed(opts, CudaGraphModule.ATTN) + 0.5 * _graphed(
        opts, CudaGraphModule.MOE if moe_layer else CudaGraphModule.MLP
    )


def _graphed(opts: PlanOptions, module: CudaGraphModule) -> float:
    """1 when CUDA graphs launch ``module``'s block (attention, MLP or MoE) without the host, else 0."""
    impl = opts.cuda_graph_impl
    if impl is CudaGraphImpl.NONE:
        return 0.0
    if impl is CudaGraphImpl.FULL_ITERATION or not opts.cuda_graph_modules:
        return 1.0
    return float(module in opts.cuda_graph_modules)


def _half_overhead(ctx: Context, module: CudaGraphModule) -> float:
    """Half the per-layer host and launch time τ (each block, attention and MLP, launches half of a
    layer's kernels), less what CUDA graphs replay without the host."""
    return 0.5 * ctx.hardware.calibration.layer_overhead_us * 1e-6 * (1.0 - _graphed(ctx.options, module))


def _timed(lt: Letters, ctx: Context, linear, core_fwd, core_bwd, elementwise, tp_raw, overhead=0.0, sel=0.0) -> dict:
    """Forward and backward compute of a block: 2× the GEMMs, the attention core's own backward,
    2× the elementwise bytes; its raw forward TP collectives (``layer_terms`` decides what of the
    layer's collectives its GEMMs hide); and ``sel``, what selective recomputation runs again of it."""
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    fwd = linear + core_fwd + elementwise / hbm + overhead
    bwd = (
        compute.BACKWARD_GEMM_FACTOR * linear
        + core_bwd
        + compute.BACKWARD_ELEMENTWISE_FACTOR * elementwise / hbm
        + compute.BACKWARD_GEMM_FACTOR * overhead
    )
    zero = 0.0 * fwd
    return dict(
        fwd=fwd,
        bwd=bwd,
        linear=linear + zero,
        tp_raw=tp_raw + zero,
        core_fwd=core_fwd + zero,
        sel=sel + zero,
        cp_fwd=zero,
        cp_bwd=zero,
        moe_fwd=zero,
        moe_bwd=zero,
    )


def attention_block(lt: Letters, ctx: Context, *, window: bool = False) -> dict[str, np.ndarray]:
    """One layer's attention half for one micro-batch on one GPU: its linear GEMMs (QKV and
    projection, or MLA's down-, up- and output projections), the attention core (causal, or over a
    sliding window of W keys: ``flops.core_fraction``), the input norm and residual add, FP8 casts,
    the per-layer launch overhead τ, its TP collectives and the context-parallel ring."""
    mo = ctx.model
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    kinds = dict(sequence_parallel=lt.sp, gated=lt.gated, unfused_attention=lt.unfused, dropout=lt.dropout)
    parts = compute.elementwise_bytes(
        lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, attention_dropout=lt.attn_dropout, **kinds
    )
    sbh = lt.b * lt.s * lt.h / lt.c
    if mo.multi_latent_attention:
        gemms = flops.mla_gemms(lt.b, lt.s, lt.h, lt.a, mla_letters(mo), lt.t, lt.c, sequence_parallel=lt.sp)
        r_q, r_kv = mo.q_lora_rank or 0, mo.kv_lora_rank
        # the two latent norms read and write their r channels on the rank's tokens
        latent_norms = 4.0 * (r_q + r_kv) * sbh / lt.h / np.where(lt.sp, lt.t, 1)
        fp8_inputs = 1 + (r_q + r_kv) / lt.h + lt.a * mo.v_head_dim / (lt.h * lt.t)
        tp_raw = _tp_half_s(lt, ctx, mla_gather_width(mo))
    else:
        gemms = flops.layer_gemms(lt.b, lt.s, lt.h, lt.a, lt.g, lt.dh, lt.f, lt.t, lt.c, gated=lt.gated)
        gemms = {k: v for k, v in gemms.items() if k not in ("fc1", "fc2")}
        latent_norms = 0.0
        fp8_inputs = 1 + lt.a * lt.dh / (lt.h * lt.t)
        tp_raw = _tp_half_s(lt, ctx)
    gtime = gemm_times(gemms, ctx, fp8=lt.fp8)
    core_fwd, core_bwd = _attention_core(lt, ctx, gemms, gtime, parts["attention_softmax"] / hbm)
    if window and mo.window is not None and not lt.unfused:
        scale = flops.core_fraction(lt.s, mo.window, causal=True) / flops.core_fraction(lt.s, None, causal=True)
        core_fwd, core_bwd = core_fwd * scale, core_bwd * scale
    linear = sum(v for k, v in gtime.items() if k not in flops.ATTENTION_CORE)
    elementwise = parts["norm_residual"] / 2 + latent_norms  # the unfused softmax is in the core's time
    if lt.fp8:  # quantise the attention's linear inputs to FP8
        elementwise = elementwise + FP8_CAST_BYTES * sbh * fp8_inputs
    modules = ctx.options.recompute_modules
    sel = core_fwd * (RecomputeModule.CORE_ATTN in modules)
    if mo.multi_latent_attention and RecomputeModule.MLA_UP_PROJ in modules:  # Q, K, V from the latents again
        sel = sel + sum(gtime[k] for k in ("q_up", "kv_up") if k in gtime)
    overhead = _half_overhead(ctx, CudaGraphModule.ATTN)
    block = _timed(lt, ctx, linear, core_fwd, core_bwd, elementwise, tp_raw, overhead, sel)
    block["cp_fwd"], block["cp_bwd"] = _cp_ring_exposed(lt, ctx, core_fwd, core_bwd)
    return block


def _mlp_elementwise(lt: Letters) -> dict[str, np.ndarray]:
    """``compute.elementwise_bytes`` of a layer whose MLP half is being costed (no attention softmax)."""
    kinds = dict(sequence_parallel=lt.sp, gated=lt.gated, unfused_attention=False, dropout=lt.dropout)
    return compute.elementwise_bytes(lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, **kinds)


def dense_mlp_block(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """One layer's dense MLP half: fc1 and fc2, the activation, the pre-MLP norm and residual, FP8
    casts and its TP collectives."""
    parts = _mlp_elementwise(lt)
    gemms = flops.mlp_gemms(lt.b * lt.s / lt.c, lt.h, lt.f, lt.t, gated=lt.gated)
    linear = sum(gemm_times(gemms, ctx, fp8=lt.fp8).values())
    elementwise = parts["norm_residual"] / 2 + parts["mlp_activation"]
    if lt.fp8:  # quantise the fc1 and fc2 inputs
        elementwise = elementwise + FP8_CAST_BYTES * lt.b * lt.s * lt.h / lt.c * (1 + lt.f / (lt.h * lt.t))
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    again = RecomputeModule.MLP in ctx.options.recompute_modules  # --recompute-modules mlp: its forward again
    sel = again * (linear + parts["mlp_activation"] / hbm)
    overhead = _half_overhead(ctx, CudaGraphModule.MLP)
    return _timed(lt, ctx, linear, 0.0, 0.0, elementwise, _tp_half_s(lt, ctx), overhead, sel)


def moe_mlp_block(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """One layer's mixture-of-experts half: the routed experts' grouped GEMMs over the A (token,
    expert) pairs of the busiest GPU (M blocks padded, ``moe.grouped_gemm_padding``), their
    activation and the permutation of the routed copies, the shared experts (a TP-split MLP of width
    f_s with its collectives), and the token dispatcher, exposed as far as the shared experts
    (--moe-shared-expert-overlap) or the other micro-batch (--overlap-moe-expert-parallel-comm)
    do not hide it."""
    mo, opts, hw = ctx.model, ctx.options, ctx.hardware
    A = moe.expert_token_assignments(
        lt.b, lt.s, lt.t, lt.c, lt.k, imbalance=opts.moe_load_imbalance, capacity_factor=opts.moe_capacity_factor
    )
    T = lt.tokens_per_gpu()
    egemms = moe.expert_gemms(A, lt.h, lt.f_e, lt.E, lt.ep, lt.etp, gated=lt.gated)
    pad = moe.grouped_gemm_padding(egemms["expert_fc1"].M)
    experts = sum(gemm_times(egemms, ctx, fp8=lt.fp8).values()) * pad
    elementwise = 2.0 * memory.mlp_activation_tensors(lt.gated) * A * lt.f_e + PERMUTE_BYTES * A * lt.h
    sbh = lt.b * lt.s * lt.h / lt.c
    elementwise = elementwise + _mlp_elementwise(lt)["norm_residual"] / 2  # the pre-MLP norm and residual
    if lt.fp8:  # quantise the routed copies at fc1 and fc2
        elementwise = elementwise + FP8_CAST_BYTES * A * (lt.h + lt.f_e / lt.etp)
    if lt.f_s:
        sgemms = flops.mlp_gemms(lt.b * lt.s / lt.c, lt.h, lt.f_s, lt.t, gated=lt.gated, prefix="shared_")
        shared = sum(gemm_times(sgemms, ctx, fp8=lt.fp8).values())
        shared_elementwise = 2.0 * memory.mlp_activation_tensors(lt.gated) * sbh * lt.f_s / (lt.h * lt.t)
        shared_tp = _tp_half_s(lt, ctx)
    else:
        shared, shared_elementwise, shared_tp = 0.0, 0.0, 0.0
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    modules = opts.recompute_modules
    act = 2.0 * memory.mlp_activation_tensors(lt.gated) * A * lt.f_e
    if RecomputeModule.MOE in modules:  # the MoE block's forward again (its dispatch too: ``layer_terms``)
        sel = experts + shared + (act + PERMUTE_BYTES * A * lt.h + shared_elementwise) / hbm
    else:  # moe_act: the experts' activation function again; shared_experts: their forward again
        sel = (RecomputeModule.MOE_ACT in modules) * act / hbm
        sel = sel + (RecomputeModule.SHARED_EXPERTS in modules) * (shared + shared_elementwise / hbm)
    overhead = _half_overhead(ctx, CudaGraphModule.MOE)
    block = _timed(
        lt, ctx, experts + shared, 0.0, 0.0, elementwise + shared_elementwise, shared_tp + 0.0 * A, overhead, sel
    )
    ep_link, etp_link = group_link(hw, lt.ep, lt.etp), group_link(hw, lt.etp, 1)
    flex_link = group_link(hw, lt.ep * lt.etp, 1)
    remote = (
        moe.distinct_domains(
            lt.E, lt.k, flex_link.nodes, groups=mo.moe_router_num_groups, group_topk=mo.moe_router_group_topk
        )
        * (flex_link.nodes - 1)
        / flex_link.nodes
    )
    dispatch = moe.dispatcher_time_s(
        A,
        T,
        lt.h,
        lt.ep,
        lt.etp,
        ep_link,
        etp_link,
        activation_bytes=lt.act_bytes,
        kind=lt.dispatcher,
        flex_link=flex_link,
        remote_domains=remote,
    )
    shared_fwd = shared + shared_elementwise / hbm
    if opts.moe_shared_expert_overlap:  # the shared experts run while the tokens travel (alltoall/flex)
        hide = np.where(lt.dispatcher > 0, shared_fwd, 0.0)
        dispatch_fwd = np.maximum(dispatch - hide, 0.0)
        dispatch_bwd = np.maximum(dispatch - compute.BACKWARD_GEMM_FACTOR * hide, 0.0)
    else:
        dispatch_fwd, dispatch_bwd = dispatch, dispatch
    block["moe_fwd"], block["moe_bwd"] = dispatch_fwd + 0 * A, dispatch_bwd + 0 * A
    block["expert_linear"], block["shared_linear"] = experts, shared + 0.0 * A
    return block


def sum_blocks(*blocks: dict) -> dict[str, np.ndarray]:
    return {k: sum(b[k] for b in blocks) for k in blocks[0]}


def layer_parts(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """The blocks every stage is made of, once per grid: ``attention`` (full), ``window`` (sliding
    window), ``dense`` and ``moe`` MLP halves, with A2A overlap applied to the MoE layer (its
    dispatch hidden behind the other micro-batch's whole layer)."""
    cached = getattr(lt, "_layer_parts", None)
    if cached is not None:
        return cached
    mo = ctx.model
    out = {"attention": attention_block(lt, ctx), "dense": dense_mlp_block(lt, ctx)}
    out["window"] = attention_block(lt, ctx, window=True) if mo.window is not None else out["attention"]
    if mo.is_moe:
        block = moe_mlp_block(lt, ctx)
        attn = out["attention"]
        fwd, bwd = moe.overlapped_exposure_s(
            block["moe_fwd"],
            block["moe_bwd"],
            attn["fwd"] + block["fwd"],
            attn["bwd"] + block["bwd"],
            overlap=lt.a2a_overlap,
        )
        block["moe_fwd"], block["moe_bwd"] = fwd, bwd
        out["moe"] = block
    lt._layer_parts = out
    return out


def layer_terms(lt: Letters, ctx: Context, blk: dict) -> dict[str, np.ndarray]:
    """A layer's per-micro-batch terms from its blocks: recomputation (full: the forward again with its
    collectives and dispatch; selective: what --recompute-modules names, the MoE block with its
    dispatch), exposed TP, CP and MoE communication.
    TP: with --tp-comm-overlap the forward collectives pipeline with the GEMMs they feed (Transformer
    Engine userbuffers); the backward's overlap the weight-gradient GEMMs (as many FLOPs as the
    forward's) with the asynchronous TP collectives, over the whole layer."""
    opts = ctx.options
    hidden = np.maximum(blk["tp_raw"] - blk["linear"], 0.0)
    tp_fwd = np.where(lt.sp, hidden, blk["tp_raw"]) if opts.tp_comm_overlap else blk["tp_raw"]
    tp_bwd = hidden if opts.async_tp_comm or opts.tp_comm_overlap else blk["tp_raw"]
    blk = {**blk, "tp_fwd": tp_fwd, "tp_bwd": tp_bwd}
    again = np.where(lt.rc == 2, 2.0, 1.0)  # full recompute runs the forward's communication once more
    moe_again = np.where((lt.rc == 1) & (RecomputeModule.MOE in opts.recompute_modules), 2.0, again)
    return {
        "fwd": blk["fwd"],
        "bwd": blk["bwd"],
        "recompute": np.where(lt.rc == 2, blk["fwd"], np.where(lt.rc == 1, blk["sel"], 0.0)),
        "linear": blk["linear"],
        "tp": blk["tp_fwd"] * again + blk["tp_bwd"],
        "cp": blk["cp_fwd"] * again + blk["cp_bwd"],
        "moe": blk["moe_fwd"] * moe_again + blk["moe_bwd"],
        "tp_fwd": blk["tp_fwd"],
        "cp_fwd": blk["cp_fwd"],
        "moe_fwd": blk["moe_fwd"],
    }


def layer_times(lt: Letters, ctx: Context, *, moe_layer: bool = False) -> dict[str, np.ndarray]:
    """Per-layer, per-micro-batch times (seconds) of a full-attention layer with a dense (or MoE)
    MLP: compute ``fwd``/``bwd``/``recompute``; exposed TP collectives ``tp``, context-parallel ring
    ``cp`` and MoE token dispatch ``moe`` (forward, backward and recompute), with their forward
    parts ``*_fwd``."""
    parts = layer_parts(lt, ctx)
    return layer_terms(lt, ctx, sum_blocks(parts["attention"], parts["moe" if moe_layer else "dense"]))
