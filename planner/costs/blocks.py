"""The blocks a transformer layer is made of, for one micro-batch on one GPU: the attention half
(full or sliding-window; grouped-query or multi-latent), the dense MLP half and the
mixture-of-experts half (routed experts, shared experts, token dispatch). ``layer_time.stage_step``
adds them up stage by stage.

Compute: GEMMs on the shape-dependent roofline (planner.costs.compute), in FP8 for the linear
layers when enabled, with the FP8 casts of the recipe; memory-bound ops over HBM; the attention
core unfused or the GPU's flash kernel law. Exposed communication: each block's tensor-parallel
collectives (less what overlap hides, plus what overlap costs the GEMMs), the context-parallel ring
exchange of keys and values (less what one step of attention hides), the MoE token dispatcher.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.costs import communication as comm
from planner.costs import compute, flops, memory, moe
from planner.costs.letters import LAYER_KEY, Letters
from planner.costs.linears import cast_bytes, fp8_cast_bytes, gemm_times, tp_pair_s
from planner.costs.mla import mla_gather_width, mla_letters
from planner.hardware.collectives import cp_graphed_step_s, group_link, hidden_comm_contention_s, p2p_time_s
from planner.plan import Context, CudaGraphModule, PlanOptions, RecomputeModule

PERMUTE_BYTES = 2 * (2 + 2)  # MoE permute and unpermute of routed tokens: read, write


def _flash(ctx: Context, bh, s_q, s_kv, d_qk: float, d_v: float, *, causal: bool, window: int | None = None):
    """(forward, backward) seconds of one flash-attention call: the GPU's 16-bit kernel law, or with
    ``fp8_dot_product_attention`` under the MXFP8 recipe the FP8 kernel's (``compute.fp8_attention_time_s``:
    the preset's time ratios, the backward over the whole causal square); both times the measured ratio of the
    release that ran them to the law (``PlanOptions.attention_time_ratio``, 1 for today's kernels)."""
    hw = ctx.hardware

    def law(w):
        return compute.flash_attention_time_s(
            bh,
            s_q,
            s_kv,
            d_qk,
            d_v,
            causal=causal,
            kernel=hw.attention,
            peak_flops_per_s=hw.gpu.peak_flops_per_s(ctx.precision),
            scale=hw.calibration.attention_scale,
            window=w,
        )

    fwd, bwd = law(window)
    release = ctx.options.attention_time_ratio  # the kernels of an older release: time x its measured ratio
    ratios = fp8_attention_ratios(ctx, np.sqrt(np.asarray(s_q, dtype=float) * np.asarray(s_kv, dtype=float)))
    if ratios is None:
        return fwd * release, bwd * release
    square_bwd = bwd if window is None else law(None)[1]
    fwd, bwd = compute.fp8_attention_time_s(fwd, bwd, square_bwd, fwd_ratio=ratios[0], bwd_ratio=ratios[1])
    return fwd * release, bwd * release


def fp8_attention_ratios(ctx: Context, s=None) -> tuple | None:
    """The FP8 attention kernel's (forward, backward) time ratios to the 16-bit one, when the plan runs
    attention in FP8 and the GPU preset has them. Transformer Engine's recipe table (dot_product_attention.py
    @ d0067d0): MXFP8 attention follows the MXFP8 recipe (the preset's scalars); the delayed and current-scaling
    recipes run the per-tensor FP8 kernel (``compute.time_ratio_at_seq`` of the preset's tables at the call's
    length ``s``, the training sequence when None). Blockwise has no FP8 attention row there, and a GPU without
    the table has no published one here: both stay at the 16-bit law. Under NVFP4 (``fp4``) Transformer Engine runs
    the attention in per-tensor FP8 (current scaling for Q, K, V, O and their gradients, delayed for S and dP) when
    NVTE_DPA_FP8_RECIPE=Float8CurrentScaling, which the export sets (dot_product_attention.py's recipe table,
    "NVFP4 | FP8CS"; MLPerf v5.1's NVFP4 Llama 3.1 8B configs, config_common_fp4.sh): the per-tensor tables."""
    opts, kernel = ctx.options, ctx.hardware.attention
    if not (opts.fp8_dot_product_attention and (opts.fp8 is not None or opts.fp4 is not None)):
        return None
    recipe = "tensorwise" if opts.fp8 is None else opts.fp8_recipe.value
    if recipe == "mxfp8":
        if kernel.mxfp8_fwd_time_ratio is None or kernel.mxfp8_bwd_time_ratio is None:
            return None
        return kernel.mxfp8_fwd_time_ratio, kernel.mxfp8_bwd_time_ratio
    if recipe not in ("delayed", "tensorwise") or not kernel.fp8_fwd_time_ratio_by_seq:
        return None
    at = ctx.training.seq_len if s is None else s
    fwd = compute.time_ratio_at_seq(at, kernel.fp8_fwd_time_ratio_by_seq)
    return fwd, compute.time_ratio_at_seq(at, kernel.fp8_bwd_time_ratio_by_seq)


def attention_core_s(
    lt: Letters, ctx: Context, gtime: dict, softmax_s: np.ndarray, d_qk: float, d_v: float
) -> dict[str, np.ndarray]:
    """Forward and backward time of the attention core, and one context-parallel ring step's.

    Unfused: the scores and context GEMMs and the softmax/dropout bytes, the backward twice that.
    Flash: the GPU's kernel law on the b·a/t query heads (head widths d_qk for the scores, d_v for
    the context; MLA's 192/128 at the kernel tables' MLA factor). Under context parallelism each
    rank holds two chunks of s/(2c) (Megatron's load-balanced split) and runs one causal step over
    its own chunks and c − 1 unmasked steps over half-length blocks - all s/c queries against s/(2c)
    keys, or half the queries against s/c - which sum to a causal s²/(2c) (Transformer Engine
    AttnFuncWithCPAndKVP2P). ``step_*`` is one unmasked step, the compute a ring transfer hides behind.
    """
    if lt.unfused:
        fwd = sum(gtime[k] for k in flops.ATTENTION_CORE) + softmax_s
        step = fwd / lt.c
        return {"fwd": fwd, "bwd": compute.BACKWARD_GEMM_FACTOR * fwd, "step_fwd": step, "step_bwd": 2 * step}
    bh, s_loc = lt.b * lt.a / lt.t, lt.s / lt.c
    own_f, own_b = _flash(ctx, bh, s_loc, s_loc, d_qk, d_v, causal=True)
    early_f, early_b = _flash(ctx, bh, s_loc, s_loc / 2, d_qk, d_v, causal=False)
    late_f, late_b = _flash(ctx, bh, s_loc / 2, s_loc, d_qk, d_v, causal=False)
    step_f, step_b = (early_f + late_f) / 2, (early_b + late_b) / 2
    return {
        "fwd": own_f + (lt.c - 1) * step_f,
        "bwd": own_b + (lt.c - 1) * step_b,
        "step_fwd": step_f,
        "step_bwd": step_b,
    }


def _window_core(lt: Letters, ctx: Context, core: dict, d_qk: float, d_v: float) -> dict[str, np.ndarray]:
    """The attention core of a sliding-window layer (W keys): the kernel law over the s·W band, each
    row walking W keys (``compute.flash_attention_efficiency``; cuDNN's GPT-OSS window tables show
    the band running at 150-200 TFLOP/s on Blackwell, far below full causal attention). Under
    context parallelism the causal core is scaled to the band's share of its pairs."""
    W = ctx.model.window
    scale = flops.core_fraction(lt.s, W, causal=True) / flops.core_fraction(lt.s, None, causal=True)
    bh, s_loc = lt.b * lt.a / lt.t, lt.s / lt.c
    fwd, bwd = _flash(ctx, bh, s_loc, s_loc, d_qk, d_v, causal=True, window=W)
    alone = lt.c == 1
    out = {k: v * scale for k, v in core.items()}
    out["fwd"], out["bwd"] = np.where(alone, fwd, out["fwd"]), np.where(alone, bwd, out["bwd"])
    return out


def _cp_ring_exposed(lt: Letters, ctx: Context, core: dict) -> tuple[np.ndarray, np.ndarray]:
    """Context parallelism's ring: c − 1 transfers of a b·(s/c)·(2·g·d_h/t) chunk of keys and values
    (MLA: the per-head n·(d_qk + d_r + d_v)) to the next rank (dK, dV too in the backward), each
    hidden only while the step of attention computed meanwhile lasts: c − 1 times
    max(0, transfer − step) (Liu et al. 2023, Ring Attention; Transformer Engine AttnFuncWithCPAndKVP2P);
    the hidden min(transfer, step) still holds NCCL's SMs (collectives.hidden_comm_contention_s); under
    CUDA graphs each of the c steps a pass costs the preset's κ more (collectives.cp_graphed_step_s)."""
    hw = ctx.hardware
    domain = hw.nvlink_domain_gpus
    stride = np.where(lt.t * lt.c <= domain, lt.t, domain)  # neighbours on NVLink while the ring fits a domain
    link = group_link(hw, 2, stride)
    chunk = lt.act_bytes * lt.b * (lt.s / lt.c) * lt.kv_width / lt.t
    step = p2p_time_s(chunk, link)
    steps = lt.c - 1

    def exposed(transfer, compute):
        hidden = np.minimum(transfer, compute)
        contention = hidden_comm_contention_s(hidden, hw.network.nccl_p2p_sms, hw.gpu.sm_count)
        return steps * (np.maximum(transfer - compute, 0.0) + contention)

    graphed = cp_graphed_step_s(lt.c, hw.calibration.cp_graphed_step_us, _graphed(ctx.options, CudaGraphModule.ATTN))
    return exposed(step, core["step_fwd"]) + graphed, exposed(2 * step, core["step_bwd"]) + graphed


def graphed_frac(opts: PlanOptions, *, moe_layer: bool = False) -> float:
    """Share of a layer's kernels CUDA graphs launch without the host: all of it with whole-layer or
    full-iteration graphs, half per captured block (attention; MLP or MoE) otherwise (an assumption:
    the host time splits evenly between the two blocks)."""
    return 0.5 * _graphed(opts, CudaGraphModule.ATTN) + 0.5 * _graphed(
        opts, CudaGraphModule.MOE if moe_layer else CudaGraphModule.MLP
    )


def _combined_host_graphed(opts: PlanOptions) -> float:
    """``moe.combined_host_graphed_share`` of the plan's CUDA graph scopes."""
    return moe.combined_host_graphed_share(
        _graphed(opts, CudaGraphModule.ATTN),
        _graphed(opts, CudaGraphModule.MOE),
        _graphed(opts, CudaGraphModule.MOE_ROUTER),
        _graphed(opts, CudaGraphModule.MOE_PREPROCESS),
    )


def _graphed(opts: PlanOptions, module: CudaGraphModule) -> float:
    """1 when CUDA graphs launch ``module``'s block (attention, MLP or MoE) without the host, else 0."""
    return float(opts.graphs_launch(module))


def _half_overhead(ctx: Context, module: CudaGraphModule) -> float:
    """Half the per-layer host and launch time τ (each block, attention and MLP, launches half of a
    layer's kernels), less what CUDA graphs replay without the host."""
    return 0.5 * ctx.hardware.calibration.layer_overhead_us * 1e-6 * (1.0 - _graphed(ctx.options, module))


def _timed(
    lt: Letters, ctx: Context, linear, core_fwd, core_bwd, elementwise, tp, overhead=0.0, sel=0.0, casts=(0.0, 0.0)
) -> dict:
    """Forward and backward compute of a block: 2× the GEMMs, the attention core's own backward,
    2× the elementwise bytes, ``casts`` (forward, backward bytes: the FP8 casts, an op-by-op activation's
    extra); its exposed TP collectives ``tp`` (forward, backward); and ``sel``, what selective
    recomputation runs again of it."""
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    fwd = linear + core_fwd + (elementwise + casts[0]) / hbm + overhead
    bwd = (
        compute.BACKWARD_GEMM_FACTOR * linear
        + core_bwd
        + (compute.BACKWARD_ELEMENTWISE_FACTOR * elementwise + casts[1]) / hbm
        + compute.BACKWARD_GEMM_FACTOR * overhead
    )
    zero = 0.0 * fwd
    mem = (elementwise + casts[0] + compute.BACKWARD_ELEMENTWISE_FACTOR * elementwise + casts[1]) / hbm
    return dict(
        fwd=fwd,
        bwd=bwd,
        mem=mem + zero,
        linear=linear + zero,
        tp_fwd=tp[0] + zero,
        tp_bwd=tp[1] + zero,
        core_fwd=core_fwd + zero,
        sel=sel + zero,
        cp_fwd=zero,
        cp_bwd=zero,
        moe_fwd=zero,
        moe_bwd=zero,
        host_excess=zero,
    )


def attention_block(lt: Letters, ctx: Context, *, window: bool = False) -> dict[str, np.ndarray]:
    """One layer's attention half for one micro-batch on one GPU: its linear GEMMs (QKV and
    projection, or MLA's down-, up- and output projections), the attention core (causal, or over a
    sliding window of W keys: ``flops.core_fraction``), the input norm and residual add, FP8 casts,
    the per-layer launch overhead τ, its TP collectives and the context-parallel ring."""
    mo = ctx.model
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    kinds = dict(sequence_parallel=lt.sp, gated=lt.gated, unfused_attention=lt.unfused, dropout=lt.dropout)
    if mo.position_embedding_type.value not in ("rope", "yarn"):  # YaRN rotates Q and K as RoPE does
        rope = 0
    elif mo.multi_latent_attention:  # the decoupled rotary channels: d_r per query head, one shared key
        rope = (lt.a + 1) * mo.qk_pos_emb_head_dim
    else:
        rope = (lt.a + lt.g) * lt.dh
    parts = compute.elementwise_bytes(
        lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, attention_dropout=lt.attn_dropout, rope_channels=rope, **kinds
    )
    sbh = lt.b * lt.s * lt.h / lt.c
    local = sbh / np.where(lt.sp, lt.t, 1)  # the rank's share of the layer input (SP shards it over t)
    if mo.multi_latent_attention:
        gemms = flops.mla_gemms(lt.b, lt.s, lt.h, lt.a, mla_letters(mo), lt.t, lt.c, sequence_parallel=lt.sp)
        r_q, r_kv = mo.q_lora_rank or 0, mo.kv_lora_rank
        # the two latent norms read and write their r channels on the rank's tokens
        latent_norms = 4.0 * (r_q + r_kv) * sbh / lt.h / np.where(lt.sp, lt.t, 1)
        ins = ["q_up" if r_q else "q_proj", "kv_up"]
        gather = mla_gather_width(mo)
        d_qk, d_v = mo.qk_head_dim + mo.qk_pos_emb_head_dim, mo.v_head_dim
    else:
        gemms = flops.layer_gemms(lt.b, lt.s, lt.h, lt.a, lt.g, lt.dh, lt.f, lt.t, lt.c, gated=lt.gated)
        gemms = {k: v for k, v in gemms.items() if k not in ("fc1", "fc2")}
        # the per-head query and key norms (--qk-layernorm): two norm passes over (a + g)·d_h channels
        latent_norms = compute.qk_norm_bytes(lt.b, lt.s, lt.a, lt.g, lt.dh, lt.t, lt.c) if mo.qk_layernorm else 0.0
        ins, gather, d_qk, d_v = ["qkv"], None, lt.dh, lt.dh
    gtime = gemm_times(gemms, ctx, fp8=lt.fp8)
    core = attention_core_s(lt, ctx, gtime, parts["attention_softmax"] / hbm, d_qk, d_v)
    if window and mo.window is not None and not lt.unfused:
        core = _window_core(lt, ctx, core, d_qk, d_v)
    core_fwd, core_bwd = core["fwd"], core["bwd"]
    linear = sum(v for k, v in gtime.items() if k not in flops.ATTENTION_CORE)
    elementwise = parts["norm_residual"] / 2 + parts["rope"] + latent_norms  # the unfused softmax: in the core
    casts = fp8_cast_bytes(lt, ctx, gemms, fused_in=local, out_grad=local) if lt.fp8 else (0.0, 0.0)
    if unfused_rope(mo):  # the op-by-op RoPE's bytes beyond the fused kernel's ``rope`` part
        n = parts["rope"] / compute.FUSED_ROPE_BYTES[0]
        extra = compute.unfused_rope_extra_bytes(n, _rope_slowdown(ctx), mo.rotary_percent)
        casts = (casts[0] + extra[0], casts[1] + extra[1])
    tp = tp_pair_s(lt, ctx, gemms, gtime, ins, ["projection"], gather)
    modules = ctx.options.recompute_modules
    sel = core_fwd * (RecomputeModule.CORE_ATTN in modules)
    if mo.multi_latent_attention and RecomputeModule.MLA_UP_PROJ in modules:  # Q, K, V from the latents again
        sel = sel + sum(gtime[k] for k in ("q_up", "kv_up") if k in gtime)
    overhead = _half_overhead(ctx, CudaGraphModule.ATTN)
    block = _timed(lt, ctx, linear, core_fwd, core_bwd, elementwise, tp, overhead, sel, casts)
    block["cp_fwd"], block["cp_bwd"] = _cp_ring_exposed(lt, ctx, core)
    return block


def _rope_slowdown(ctx: Context) -> float:
    """``compute.eager_rope_slowdown`` of the plan's GPU: its measured eager elementwise bandwidth, if any."""
    gpu = ctx.hardware.gpu
    eager = None if gpu.eager_elementwise_tbytes_per_s is None else gpu.eager_elementwise_tbytes_per_s * 1e12
    return compute.eager_rope_slowdown(gpu.hbm_bytes_per_s, ctx.hardware.calibration.memory_efficiency, eager)


def _eager_ratio(ctx: Context) -> float:
    """``compute.eager_bytes_ratio`` of the plan's GPU: its measured eager-kernel fraction of HBM, if any."""
    return compute.eager_bytes_ratio(ctx.hardware.calibration.memory_efficiency, ctx.hardware.gpu.eager_hbm_frac)


def unfused_rope(mo) -> bool:
    """Whether the model's rotary embedding runs op by op (``compute.unfused_rope_extra_bytes``): YaRN
    positions outside multi-latent attention (whose decoupled rotary channels take their own path)."""
    return mo.position_embedding_type.value == "yarn" and not mo.multi_latent_attention


def _mlp_elementwise(lt: Letters) -> dict[str, np.ndarray]:
    """``compute.elementwise_bytes`` of a layer whose MLP half is being costed (no attention softmax)."""
    kinds = dict(sequence_parallel=lt.sp, gated=lt.gated, unfused_attention=False, dropout=lt.dropout)
    return compute.elementwise_bytes(lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, **kinds)


def dense_mlp_block(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """One layer's dense MLP half: fc1 and fc2, the activation, the pre-MLP norm and residual, FP8
    casts and its TP collectives."""
    parts = _mlp_elementwise(lt)
    gemms = flops.mlp_gemms(lt.b * lt.s / lt.c, lt.h, lt.f, lt.t, gated=lt.gated)
    gtime = gemm_times(gemms, ctx, fp8=lt.fp8)
    linear = sum(gtime.values())
    elementwise = parts["norm_residual"] / 2 + parts["mlp_activation"]
    local = lt.b * lt.s * lt.h / lt.c / np.where(lt.sp, lt.t, 1)
    casts = fp8_cast_bytes(lt, ctx, gemms, fused_in=local, out_grad=local) if lt.fp8 else (0.0, 0.0)
    # an activation run op by op moves more than one fused kernel (compute.ACTIVATION_BYTES)
    per_fwd, per_bwd = compute.activation_extra_bytes(
        compute.activation_kind(ctx.model), fused=ctx.options.activation_fusion
    )
    per_fwd, per_bwd = _eager_ratio(ctx) * per_fwd, _eager_ratio(ctx) * per_bwd  # op by op: eager kernels
    acts = lt.b * lt.s * lt.f / (lt.c * lt.t)
    casts = (casts[0] + per_fwd * acts, casts[1] + per_bwd * acts)
    tp = tp_pair_s(lt, ctx, gemms, gtime, ["fc1"], ["fc2"])
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    again = RecomputeModule.MLP in ctx.options.recompute_modules  # --recompute-modules mlp: its forward again
    sel = again * (linear + (parts["mlp_activation"] + per_fwd * acts) / hbm)
    overhead = _half_overhead(ctx, CudaGraphModule.MLP)
    return _timed(lt, ctx, linear, 0.0, 0.0, elementwise, tp, overhead, sel, casts)


def _routed_experts(lt: Letters, ctx: Context) -> dict:
    """The routed experts of one MoE layer on the busiest GPU: A (token, expert) pairs, the grouped GEMMs
    (M blocks padded, ``moe.grouped_gemm_padding``), the activation with the unfused path's clamp and
    bias bytes, the permutations' bytes (the alltoall dispatcher's sort by local expert too:
    ``moe.sort_chunks_bytes``), the FP8 casts; ``experts_fwd``/``experts_bwd`` what runs between
    dispatch and combine (the A2A overlap pairs it with the other micro-batch)."""
    mo, opts, hw = ctx.model, ctx.options, ctx.hardware
    A = moe.expert_token_assignments(
        lt.b, lt.s, lt.t, lt.c, lt.k, imbalance=opts.moe_load_imbalance, capacity_factor=opts.moe_capacity_factor
    ) + moe.plan_router_padding_rows(ctx.options, lt.E)
    egemms = moe.expert_gemms(A, lt.h, lt.f_e, lt.E, lt.ep, lt.etp, gated=lt.gated)
    pad = moe.grouped_gemm_padding(egemms["expert_fc1"].M)
    experts = sum(gemm_times(egemms, ctx, fp8=lt.fp8).values()) * pad
    unfused = not opts.use_transformer_engine_op_fuser  # the op fuser's epilogues apply them inside the GEMMs
    clamp, bias = moe.expert_extra_bytes(
        A,
        lt.h,
        lt.f_e,
        clamp=unfused and mo.activation_func_clamp_value is not None,
        biased=unfused and mo.add_bias_linear,
    )
    eager = _eager_ratio(ctx)  # eager ops: at the fraction of HBM PyTorch's own kernels reach
    clamp, bias = eager * clamp, eager * bias
    act = 2.0 * memory.mlp_activation_tensors(lt.gated) * A * lt.f_e * unfused + clamp
    casts, per = (0.0, 0.0), cast_bytes(ctx)[0]
    if lt.fp8:  # the routed copies' fc1 and fc2 inputs and output gradients; the experts' weights
        expert_weights = lt.E / lt.ep * (2 + lt.gated) * lt.h * lt.f_e / lt.etp
        routed = dict(fused_in=0.0, out_grad=A * lt.h, per_in=A * (lt.h + lt.f_e / lt.etp))
        fwd, bwd = fp8_cast_bytes(lt, ctx, {}, **routed, per_grad=A * (1 + lt.gated) * lt.f_e / lt.etp)
        casts = (fwd + per * expert_weights / lt.m, bwd)
        pad = _fp8_padding_bytes(lt, ctx, A) * unfused  # TE's Fp8Padding/Fp8Unpadding copies, both passes
        casts = (casts[0] + pad, casts[1] + pad)
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    experts_fwd = experts + (act + bias + casts[0]) / hbm
    experts_bwd = (
        compute.BACKWARD_GEMM_FACTOR * experts + (compute.BACKWARD_ELEMENTWISE_FACTOR * (act + bias) + casts[1]) / hbm
    )
    permute = PERMUTE_BYTES * A * lt.h + moe.sort_chunks_bytes(A, lt.h, lt.E / lt.ep, lt.dispatcher)
    return dict(
        A=A, experts=experts, act=act, bias=bias, permute=permute, casts=casts, unfused=unfused,
        experts_fwd=experts_fwd, experts_bwd=experts_bwd,
    )  # fmt: skip


def _unfused_permute_bytes(lt: Letters, ctx: Context, A: np.ndarray) -> np.ndarray:
    """``moe.unfused_permute_extra_bytes`` of a plan without --moe-permute-fusion (0 with it), at the GPU's law."""
    if ctx.options.moe_permute_fusion:
        return 0.0 * A
    ratio = ctx.hardware.calibration.memory_efficiency / moe.UNFUSED_SCATTER_HBM_FRAC
    return moe.unfused_permute_extra_bytes(A, lt.h, lt.k, ratio)


def _fp8_padding_bytes(lt: Letters, ctx: Context, A: np.ndarray) -> np.ndarray:
    """``moe.fp8_padding_bytes`` of a plan with FP8: dropless routing's counts are the router's (unaligned),
    drop-and-pad's the fixed ``moe.drop_and_pad_rows``; none when the router pads them
    (--moe-router-padding-for-quantization: moe_utils.skip_routed_expert_padding)."""
    if ctx.options.moe_router_padding_for_quantization:
        return 0.0 * A
    cf = ctx.options.moe_capacity_factor
    T = lt.b * lt.s / (lt.c * lt.t)
    rows = None if cf is None else moe.drop_and_pad_rows(T, lt.k, lt.E, lt.etp, lt.ep, cf)
    return moe.fp8_padding_bytes(A, lt.h, lt.dispatcher, recipe=ctx.options.fp8_recipe.value, counts_per_expert=rows)


def _shared_experts(lt: Letters, ctx: Context, casts: tuple) -> tuple:
    """(GEMM time, elementwise bytes, TP collectives, casts) of the shared experts: a TP-split MLP of width
    f_s, their input cast to FP8 on its own (no TE LayerNorm before it); zeros without shared experts."""
    if not lt.f_s:
        return 0.0, 0.0, (0.0, 0.0), casts
    sbh = lt.b * lt.s * lt.h / lt.c
    local = sbh / np.where(lt.sp, lt.t, 1)
    sgemms = flops.mlp_gemms(lt.b * lt.s / lt.c, lt.h, lt.f_s, lt.t, gated=lt.gated, prefix="shared_")
    stime = gemm_times(sgemms, ctx, fp8=lt.fp8)
    shared = sum(stime.values())
    shared_elementwise = 2.0 * memory.mlp_activation_tensors(lt.gated) * sbh * lt.f_s / (lt.h * lt.t)
    shared_tp = tp_pair_s(lt, ctx, sgemms, stime, ["shared_fc1"], ["shared_fc2"])
    if lt.fp8:
        s_fwd, s_bwd = fp8_cast_bytes(lt, ctx, sgemms, fused_in=0.0, out_grad=local)
        casts = (casts[0] + s_fwd + cast_bytes(ctx)[0] * local, casts[1] + s_bwd)
    return shared, shared_elementwise, shared_tp, casts


def _dispatch_s(lt: Letters, ctx: Context, A: np.ndarray) -> np.ndarray:
    """The token dispatcher's forward dispatch + combine of one MoE layer (``moe.dispatcher_time_s``), the
    flex dispatcher's rail copies deduplicated per NVLink domain (``moe.distinct_domains``)."""
    mo, hw = ctx.model, ctx.hardware
    ep_link, etp_link = group_link(hw, lt.ep, lt.etp), group_link(hw, lt.etp, 1)
    flex_link = group_link(hw, lt.ep * lt.etp, 1)
    domains = moe.distinct_domains(
        lt.E, lt.k, flex_link.nodes, groups=mo.moe_router_num_groups, group_topk=mo.moe_router_group_topk
    )
    return moe.dispatcher_time_s(
        A,
        lt.tokens_per_gpu(),
        lt.h,
        lt.ep,
        lt.etp,
        ep_link,
        etp_link,
        activation_bytes=lt.act_bytes,
        kind=lt.dispatcher,
        flex_link=flex_link,
        remote_domains=domains * (flex_link.nodes - 1) / flex_link.nodes,
    )


def _hybridep_metadata(lt: Letters, ctx: Context, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, SM share) of HybridEP's metadata preprocessing ahead of one MoE layer's forward dispatch
    (``moe.hybridep_metadata_time_s``: the routing maps' all-gather over the flex group of ep·etp ranks, each map
    T × etp·E, and the scan at the preset's HBM bandwidth on --moe-hybridep-num-sms-preprocessing blocks,
    ``moe.scan_bandwidth_bytes_per_s``; ``moe.metadata_sm_share``, at Hopper's connection limit
    at least φ as the dispatch's); zeros for every other dispatcher and backend."""
    opts, hw = ctx.options, ctx.hardware
    zero = 0.0 * np.asarray(A, dtype=float)
    if opts.moe_flex_dispatcher_backend.value != "hybridep" or not np.any(
        lt.dispatcher == moe.DISPATCHER_KINDS["flex"]
    ):
        return zero, zero
    n = lt.ep * lt.etp
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    t_ag, t_scan = moe.hybridep_metadata_time_s(
        hw,
        n,
        lt.tokens_per_gpu(),
        lt.etp * lt.E,
        A,
        group_link(hw, n, 1),
        hbm_bytes_per_s=hbm,
        scan_sms=opts.moe_hybridep_num_sms_preprocessing,
    )
    flex = lt.dispatcher == moe.DISPATCHER_KINDS["flex"]
    share = moe.metadata_sm_share(
        t_ag,
        t_scan,
        nccl_sms=hw.network.nccl_sms,
        scan_sms=opts.moe_hybridep_num_sms_preprocessing,
        sm_count=hw.gpu.sm_count,
    )
    limited = comm.connection_limited(hw.gpu.compute_capability, lt.t, lt.c, False, lt.a2a_overlap)
    share = moe.connection_limited_share(share, limited, hw.calibration.persistent_gemm_comm_share)
    return np.where(flex, t_ag + t_scan, 0.0) + zero, np.where(flex, share, 0.0) + zero


def moe_mlp_block(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """One layer's mixture-of-experts half: the routed experts (``_routed_experts``), the pre-MLP norm
    and residual, the shared experts (``_shared_experts``), the per-expert host time, and the token
    dispatcher, exposed as far as the shared experts (--moe-shared-expert-overlap) do not hide it (the
    A2A overlap's pairing is applied in ``layer_parts``)."""
    opts, hw = ctx.options, ctx.hardware
    r = _routed_experts(lt, ctx)
    A, experts, act, bias = r["A"], r["experts"], r["act"], r["bias"]
    elementwise = act + bias + r["permute"] + _mlp_elementwise(lt)["norm_residual"] / 2
    shared, shared_elementwise, shared_tp, casts = _shared_experts(lt, ctx, r["casts"])
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    unfused_permute = _unfused_permute_bytes(lt, ctx, A)  # each pass, without --moe-permute-fusion
    casts = (casts[0] + unfused_permute, casts[1] + unfused_permute)
    modules = opts.recompute_modules
    captured = 1.0 if not r["unfused"] else _graphed(opts, CudaGraphModule.MOE)  # one grouped kernel for all
    host_fwd, host_bwd = moe.expert_host_s(lt.E / lt.ep, ctx, captured=captured)
    eager_host = host_fwd + host_bwd  # what the host issues per pair (the combined schedule's pacing, layer_parts)
    graphed = _graphed(opts, CudaGraphModule.MOE) if r["unfused"] else 0.0  # per-expert kernels in a graph
    gap_fwd, gap_bwd = moe.expert_graph_gap_s(lt.E / lt.ep, ctx, graphed=graphed)
    host_fwd, host_bwd = host_fwd + gap_fwd, host_bwd + gap_bwd
    if RecomputeModule.MOE in modules:  # the MoE block's forward again (its dispatch too: ``layer_terms``)
        sel = experts + shared + host_fwd + (act + bias + r["permute"] + unfused_permute + shared_elementwise) / hbm
    else:  # moe_act: the experts' activation function again; shared_experts: their forward again
        sel = (RecomputeModule.MOE_ACT in modules) * act / hbm
        sel = sel + (RecomputeModule.SHARED_EXPERTS in modules) * (shared + shared_elementwise / hbm)
    overhead = _half_overhead(ctx, CudaGraphModule.MOE)
    shared_tp = (shared_tp[0] + 0.0 * A, shared_tp[1] + 0.0 * A)
    block = _timed(
        lt, ctx, experts + shared, 0.0, 0.0, elementwise + shared_elementwise, shared_tp, overhead, sel, casts
    )
    block["fwd"], block["bwd"] = block["fwd"] + host_fwd, block["bwd"] + host_bwd
    dispatch = _dispatch_s(lt, ctx, A)
    shared_fwd = shared + shared_elementwise / hbm
    if opts.moe_shared_expert_overlap:  # the shared experts run while the tokens travel (alltoall/flex)
        f = _comm_share(lt, ctx, dispatch, lt.act_bytes * A * lt.h, block["mem"] / (block["fwd"] + block["bwd"]))
        hide = np.where(lt.dispatcher > 0, shared_fwd, 0.0)
        dispatch_fwd = np.maximum(dispatch, hide + f * dispatch) - hide
        dispatch_bwd = np.maximum(dispatch, compute.BACKWARD_GEMM_FACTOR * hide + f * dispatch) - (
            compute.BACKWARD_GEMM_FACTOR * hide
        )
    else:
        dispatch_fwd, dispatch_bwd = dispatch, dispatch
    block["moe_fwd"], block["moe_bwd"] = dispatch_fwd + 0 * A, dispatch_bwd + 0 * A
    # HybridEP's metadata ahead of the forward dispatch, never behind the shared experts (launched after the
    # blocking dispatch returns, token_dispatcher.py MoEFlexTokenDispatcher.token_dispatch): added in layer_parts
    block["moe_meta"], block["moe_meta_share"] = _hybridep_metadata(lt, ctx, A)
    block["expert_linear"], block["shared_linear"] = experts, shared + 0.0 * A
    block["experts_fwd"], block["experts_bwd"] = r["experts_fwd"] + 0.0 * A, r["experts_bwd"] + 0.0 * A
    block["a2a_bytes"] = lt.act_bytes * A * lt.h + 0.0 * A  # what one all-to-all moves per GPU
    block["expert_host"] = eager_host + 0.0 * A
    return block


def _comm_share(lt: Letters, ctx: Context, dispatch: np.ndarray, a2a_bytes: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """The share of the GPU a hidden dispatch takes from the compute beside it, (1 − μ)·f + μ·g: the
    compute-bound part (GEMMs, attention) loses the SMs its kernels hold, f (``moe.comm_sm_share``; at
    Hopper's connection limit, TP or CP > 1, at least φ: ``moe.connection_limited_share``),
    the memory-bound share μ the HBM bandwidth its traffic takes, g (``moe.comm_hbm_share``: each
    all-to-all, a quarter of a layer's forward dispatch + combine, reads and writes what it moves) -
    a kernel bound by HBM still saturates it on the SMs left. Check: Lee et al. 2025 (arXiv:2507.03114)
    measure compute 18.9 % slower on average, 40 % at most, beside concurrent collectives (A100, H100,
    MI250, MI210)."""
    opts, hw = ctx.options, ctx.hardware
    sms = moe.comm_sm_share(
        lt.dispatcher, opts.moe_flex_dispatcher_backend.value, hw.gpu.sm_count, opts.moe_flex_dispatcher_num_sms
    )
    limited = comm.connection_limited(hw.gpu.compute_capability, lt.t, lt.c, False, lt.a2a_overlap)
    sms = moe.connection_limited_share(sms, limited, hw.calibration.persistent_gemm_comm_share)
    hbm = moe.comm_hbm_share(a2a_bytes, 0.25 * dispatch, hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    return np.minimum((1.0 - mu) * sms + mu * hbm, 1.0)


def sum_blocks(*blocks: dict, keys=None) -> dict[str, np.ndarray]:
    """The blocks' terms added, each of ``keys`` (default: every term of the first block)."""
    return {k: sum(b[k] for b in blocks) for k in (blocks[0] if keys is None else keys)}


def layer_parts(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """The blocks every stage is made of, once per grid and computed once per distinct shape
    (``Letters.once``): ``attention`` (full), ``window`` (sliding window), ``dense`` and ``moe`` MLP
    halves, with A2A overlap applied to the MoE layer (its dispatch hidden behind the other
    micro-batch's whole layer)."""
    cached = getattr(lt, "_layer_parts", None)
    if cached is None:
        cached = lt._layer_parts = lt.once(lambda shapes: _layer_blocks(shapes, ctx), "layer_parts", LAYER_KEY)
    return cached


def _layer_blocks(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """``layer_parts`` of the plans of ``lt``."""
    mo = ctx.model
    out = {"attention": attention_block(lt, ctx), "dense": dense_mlp_block(lt, ctx)}
    out["window"] = attention_block(lt, ctx, window=True) if mo.window is not None else out["attention"]
    if mo.is_moe:
        block = moe_mlp_block(lt, ctx)
        attn = out["attention"]
        mu = (attn["mem"] + block["mem"]) / (attn["fwd"] + attn["bwd"] + block["fwd"] + block["bwd"])
        graphed, rho = _combined_host_graphed(ctx.options), ctx.hardware.node.host_op_time_ratio
        host = moe.combined_host_s(moe.COMBINED_HOST_US, graphed, block["expert_host"], rho)
        fwd, bwd = moe.overlapped_exposure_s(
            block["moe_fwd"],
            block["moe_bwd"],
            attn["fwd"] + block["fwd"] - block["experts_fwd"],
            block["experts_fwd"],
            attn["bwd"] + block["bwd"] - block["experts_bwd"],
            block["experts_bwd"],
            overlap=lt.a2a_overlap,
            sm_share=_comm_share(lt, ctx, block["moe_fwd"], block["a2a_bytes"], mu),
            delay_wgrad=ctx.options.delay_wgrad_compute,
            unpaired=moe.unpaired_share(lt.p, lt.m),
            meta_fwd=block["moe_meta"],
            meta_share=block["moe_meta_share"],
            host_s=host,
        )
        block["moe_fwd"], block["moe_bwd"] = fwd, bwd
        # without the overlap: 0 unless levelled both ways; charged by ``layer_terms`` under selective recomputation
        block["host_excess"] = _levelled_excess(lt, ctx, attn, block, host)
        out["moe"] = block
    return out


def _levelled_excess(lt: Letters, ctx: Context, attn: dict, block: dict, host: np.ndarray) -> np.ndarray:
    """``moe.levelled_layer_excess_s`` of a MoE layer without the A2A overlap: its GPU time G (the full-attention and
    MoE halves forward and backward, their selective recomputation, exposed TP, CP and dispatch: ``layer_terms`` of the
    pair at --recompute-granularity selective) against the host's work H (``combined_host_s``), where the recipe
    levels the host with the GPU in both directions (``moe.host_levelled_both_ways``). The blocks are computed once per
    layer shape, whatever the plan's recompute choice: ``layer_terms`` charges it only under selective recomputation,
    with the exposed dispatch, half forward and half backward (the host's work is both directions'). Full
    recomputation re-runs the synchronising forward in the backward too; its layer is not priced so (its G holds the
    whole forward again, no row runs it)."""
    opts, mo = ctx.options, ctx.model
    levelled = moe.host_levelled_both_ways(
        quick_geglu=mo.quick_geglu,
        moe_act_recomputed=RecomputeModule.MOE_ACT in opts.recompute_modules,
        unfused=not opts.use_transformer_engine_op_fuser,
        dropless=opts.moe_capacity_factor is None,
    )
    if not levelled:
        return 0.0 * host
    keys = ("fwd", "bwd", "sel", "tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd")
    gpu = sum(attn[k] + block[k] for k in keys) + block["moe_fwd"] + block["moe_bwd"]
    return moe.levelled_layer_excess_s(gpu, host, ~np.asarray(lt.a2a_overlap, dtype=bool))


# layer_terms' inputs
LAYER_TERM_INPUTS = ("fwd", "bwd", "sel", "tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd", "moe_fwd", "moe_bwd", "host_excess")
DENSE_TERM_INPUTS = LAYER_TERM_INPUTS[:-3]  # a model without experts: its MoE terms (0 s) left out


def layer_sums(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """Each kind of layer's blocks summed (``sum_blocks``), only what ``layer_terms`` reads (``LAYER_TERM_INPUTS``),
    once per grid and computed once per distinct shape (``Letters.once``): ``dense`` (attention + dense MLP), with
    experts ``moe`` (attention + MoE MLP), with sliding windows ``window`` and ``attention`` (each alone). Summed
    per shape and read back per plan, the numbers of ``layer_parts`` summed plan by plan."""
    cached = getattr(lt, "_layer_sums", None)
    if cached is None:
        cached = lt._layer_sums = lt.once(lambda shapes: _layer_sums(shapes, ctx), "layer_sums", LAYER_KEY)
    return cached


def bf16_layer_sums(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """``layer_sums`` of the layers --first-last-layers-bf16 runs outside the FP8 context (Megatron-Core
    get_fp8_context gives them a nullcontext: fp8_utils.py @ d98e8a64): the same blocks with 16-bit GEMMs at the
    BF16 peak and η(M,N,K), no FP8 casts, 16-bit userbuffers and attention, once per distinct shape."""
    cached = getattr(lt, "_bf16_layer_sums", None)
    if cached is None:
        cached = lt._bf16_layer_sums = lt.once(
            lambda shapes: _layer_sums(shapes.in_bf16(), bf16_context(ctx)), "bf16_layer_sums", LAYER_KEY
        )
    return cached


def bf16_context(ctx: Context) -> Context:
    """The context of a BF16 end layer: the options without FP8 (made once per context)."""
    out = ctx.__dict__.get("_bf16_context")
    if out is None:
        update = {"fp8": None, "fp4": None, "fp4_param_gather": False}
        out = dataclasses.replace(ctx, options=ctx.options.model_copy(update=update))
        object.__setattr__(ctx, "_bf16_context", out)
    return out


def _layer_sums(lt: Letters, ctx: Context) -> dict[str, dict[str, np.ndarray]]:
    """``layer_sums`` of the plans of ``lt``."""
    mo, parts = ctx.model, _layer_blocks(lt, ctx)
    keys = LAYER_TERM_INPUTS if mo.is_moe else DENSE_TERM_INPUTS
    out = {"dense": sum_blocks(parts["attention"], parts["dense"], keys=keys)}
    if mo.is_moe:
        out["moe"] = sum_blocks(parts["attention"], parts["moe"], keys=keys)
    if mo.window is not None:
        for name in ("window", "attention"):
            out[name] = {k: parts[name][k] for k in keys}
    return out


def layer_terms(lt: Letters, ctx: Context, blk: dict) -> dict[str, np.ndarray]:
    """A layer's per-micro-batch terms from its blocks: recomputation (full: the forward again with its
    collectives and dispatch; selective: what --recompute-modules names, the MoE block with its
    dispatch), exposed TP, CP and MoE communication (with the host's excess where it paces the layer,
    ``_levelled_excess``, under selective recomputation). Each block's TP exposure is its own pair of
    linears' (``_tp_pair``: the GEMMs a collective can overlap are its neighbours, not the layer's). Without
    experts (no ``moe_fwd`` in ``blk``: ``DENSE_TERM_INPUTS``) the MoE terms are the number 0."""
    opts = ctx.options
    again = np.where(lt.rc == 2, 2.0, 1.0)  # full recompute runs the forward's communication once more
    moe = "moe_fwd" in blk
    moe_again = np.where((lt.rc == 1) & (RecomputeModule.MOE in opts.recompute_modules), 2.0, again) if moe else 0
    paced = np.where(lt.rc == 1, blk["host_excess"], 0.0) if moe else 0.0  # the host's pace (``_levelled_excess``)
    return {
        "fwd": blk["fwd"],
        "bwd": blk["bwd"],
        "recompute": np.where(lt.rc == 2, blk["fwd"], np.where(lt.rc == 1, blk["sel"], 0.0)),
        "tp": blk["tp_fwd"] * again + blk["tp_bwd"],
        "cp": blk["cp_fwd"] * again + blk["cp_bwd"],
        "moe": blk["moe_fwd"] * moe_again + blk["moe_bwd"] + paced if moe else 0.0,
        "tp_fwd": blk["tp_fwd"],
        "cp_fwd": blk["cp_fwd"],
        "moe_fwd": blk["moe_fwd"] + 0.5 * paced if moe else 0.0,
    }


def layer_times(lt: Letters, ctx: Context, *, moe_layer: bool = False) -> dict[str, np.ndarray]:
    """Per-layer, per-micro-batch times (seconds) of a full-attention layer with a dense (or MoE)
    MLP: compute ``fwd``/``bwd``/``recompute``; exposed TP collectives ``tp``, context-parallel ring
    ``cp`` and MoE token dispatch ``moe`` (forward, backward and recompute), with their forward
    parts ``*_fwd``."""
    return layer_terms(lt, ctx, layer_sums(lt, ctx)["moe" if moe_layer else "dense"])
