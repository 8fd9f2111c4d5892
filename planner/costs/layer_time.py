"""Time of one transformer layer for one micro-batch on one GPU, and of a pipeline stage.

Compute: GEMMs on the shape-dependent roofline (planner.costs.compute), in FP8 for the linear
layers when enabled; memory-bound ops over HBM; the attention core unfused or flash. Exposed
communication: tensor-parallel collectives (less what overlap hides), context-parallel ring
exchange of keys and values (less what attention compute hides), the MoE token dispatcher.
"""

from __future__ import annotations

import numpy as np

from planner.costs import Formula, compute, flops, memory, moe
from planner.costs import communication as comm
from planner.costs.letters import Letters
from planner.costs.stage_memory import layer_activations
from planner.hardware.collectives import group_link, p2p_time_s
from planner.plan import (
    AttentionKernel,
    Context,
    CudaGraphImpl,
    CudaGraphModule,
    ParallelPlan,
    PlanOptions,
    Recompute,
    RecomputeModule,
)

CROSS_ENTROPY_FWD_BYTES = (
    2 + 4 + 4 + 8 + 8 + 4
)  # per logit: fp32 cast (r2 w4), max (r4), subtract (r4 w4), exp (r4 w4), sum (r4)
CROSS_ENTROPY_BWD_BYTES = 8 + 6  # softmax − one-hot (r4 w4), cast to 16 bits (r4 w2)
EMBEDDING_FWD_BYTES_PER_SBH = 2 + 2 + 2 + 2 + 1  # gather rows (r2 w2), add positions (r2 w2), dropout mask (w1)
FP8_CAST_BYTES = 2 + 1  # quantising a 16-bit linear input to FP8: read 2, write 1
PERMUTE_BYTES = 2 * (2 + 2)  # MoE permute and unpermute of routed tokens: read, write


def _gemm_times(gemms: dict, ctx: Context, *, fp8: bool) -> dict[str, np.ndarray]:
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
    values to the next rank (dK, dV too in the backward) while attending to the chunk in hand, so a
    step costs max(transfer, attention/c) (Liu et al. 2023, Ring Attention; Megatron-Core CP)."""
    domain = ctx.hardware.nvlink_domain_gpus
    stride = np.where(lt.t * lt.c <= domain, lt.t, domain)  # neighbours on NVLink while the ring fits a domain
    link = group_link(ctx.hardware, 2, stride)
    chunk = lt.act_bytes * lt.b * (lt.s / lt.c) * 2 * lt.g * lt.dh / lt.t
    step = p2p_time_s(chunk, link)
    steps = lt.c - 1
    fwd = steps * np.maximum(step - core_fwd / lt.c, 0.0)
    bwd = steps * np.maximum(2 * step - core_bwd / lt.c, 0.0)
    return fwd, bwd


def activation_message(lt: Letters) -> np.ndarray:
    """ε·b·s·h/c: the activation tensor the TP collectives and the pipeline's sends move."""
    return comm.activation_message_bytes(lt.b, lt.s, lt.h, lt.c, activation_bytes=lt.act_bytes)


def tp_collectives_s(lt: Letters, ctx: Context) -> np.ndarray:
    """One layer's forward TP collectives for one micro-batch on the tp group's link."""
    return comm.tp_layer_comm_time_s(
        activation_message(lt), lt.t, group_link(ctx.hardware, lt.t, 1), sequence_parallel=lt.sp
    )


def layer_times(lt: Letters, ctx: Context, *, moe_layer: bool = False) -> dict[str, np.ndarray]:
    """Per-layer, per-micro-batch times (seconds): compute ``fwd``/``bwd``/``recompute``; exposed
    TP collectives ``tp``, context-parallel ring ``cp`` and MoE token dispatch ``moe`` (forward,
    backward and recompute), with their forward parts ``*_fwd``."""
    cal, gpu, opts = ctx.hardware.calibration, ctx.hardware.gpu, ctx.options
    hbm = gpu.hbm_bytes_per_s * cal.memory_efficiency
    gemms = flops.layer_gemms(lt.b, lt.s, lt.h, lt.a, lt.g, lt.dh, lt.f, lt.t, lt.c, gated=lt.gated)
    gtime = _gemm_times(gemms, ctx, fp8=lt.fp8)
    kinds = dict(sequence_parallel=lt.sp, gated=lt.gated, unfused_attention=lt.unfused, dropout=lt.dropout)
    parts = compute.elementwise_bytes(
        lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, attention_dropout=lt.attn_dropout, **kinds
    )
    core_fwd, core_bwd = _attention_core(lt, ctx, gemms, gtime, parts["attention_softmax"] / hbm)
    attn_linear = gtime["qkv"] + gtime["projection"]
    sbh = lt.b * lt.s * lt.h / lt.c
    if moe_layer:
        A = moe.expert_token_assignments(
            lt.b, lt.s, lt.t, lt.c, lt.k, imbalance=opts.moe_load_imbalance, capacity_factor=opts.moe_capacity_factor
        )
        T = lt.tokens_per_gpu()
        egemms = moe.expert_gemms(A, lt.h, lt.f_e, lt.E, lt.ep, lt.etp, gated=lt.gated)
        mlp_linear = sum(_gemm_times(egemms, ctx, fp8=lt.fp8).values())
        mlp_elementwise = 2.0 * memory.mlp_activation_tensors(lt.gated) * A * lt.f_e + PERMUTE_BYTES * A * lt.h
        ep_link, etp_link = group_link(ctx.hardware, lt.ep, lt.etp), group_link(ctx.hardware, lt.etp, 1)
        dispatch = moe.dispatcher_time_s(
            A,
            T,
            lt.h,
            lt.ep,
            lt.etp,
            ep_link,
            etp_link,
            activation_bytes=lt.act_bytes,
            kind=opts.moe_token_dispatcher.value,
        )
    else:
        mlp_linear = gtime["fc1"] + gtime["fc2"]
        mlp_elementwise = parts["mlp_activation"]
        dispatch = 0.0
    elementwise = parts["norm_residual"] + mlp_elementwise
    linear = attn_linear + mlp_linear
    if lt.fp8:  # quantise the four linear inputs (QKV, projection, fc1, fc2) to FP8
        elementwise = elementwise + FP8_CAST_BYTES * sbh * (2 + lt.a * lt.dh / (lt.h * lt.t) + lt.f / (lt.h * lt.t))
    # host and launch time of one layer's kernels, less what CUDA graphs replay without the host
    overhead = cal.layer_overhead_us * 1e-6 * (1.0 - graphed_frac(opts, moe_layer=moe_layer))
    fwd = linear + core_fwd + elementwise / hbm + overhead
    bwd = (
        compute.BACKWARD_GEMM_FACTOR * linear
        + core_bwd
        + compute.BACKWARD_ELEMENTWISE_FACTOR * elementwise / hbm
        + compute.BACKWARD_GEMM_FACTOR * overhead
    )
    modules = opts.recompute_modules
    selective = core_fwd * (RecomputeModule.CORE_ATTN in modules)
    if RecomputeModule.MOE in modules if moe_layer else RecomputeModule.MLP in modules:
        selective = selective + mlp_linear + mlp_elementwise / hbm  # the MLP (or MoE block) forward again
    elif moe_layer and RecomputeModule.MOE_ACT in modules:
        selective = selective + 2.0 * memory.mlp_activation_tensors(lt.gated) * A * lt.f_e / hbm
    recompute = np.where(lt.rc == 2, fwd, np.where(lt.rc == 1, selective, 0.0))

    tp_raw = tp_collectives_s(lt, ctx)
    # --tp-comm-overlap pipelines the forward collectives with the GEMMs they feed (Transformer Engine
    # userbuffers); the backward's overlap the weight-gradient GEMMs (as many FLOPs as the forward's)
    hidden = np.maximum(tp_raw - linear, 0.0)
    tp_fwd = np.where(lt.sp, hidden, tp_raw) if opts.tp_comm_overlap else tp_raw
    tp_bwd = hidden if opts.async_tp_comm or opts.tp_comm_overlap else tp_raw
    cp_fwd, cp_bwd = _cp_ring_exposed(lt, ctx, core_fwd, core_bwd)
    again = np.where(lt.rc == 2, 2.0, 1.0)  # full recompute runs the forward's communication once more
    moe_again = np.where((lt.rc == 1) & (RecomputeModule.MOE in modules), 2.0, again)  # so does recomputing moe
    return {
        "fwd": fwd,
        "bwd": bwd,
        "recompute": recompute,
        "linear": linear,
        "tp": tp_fwd * again + tp_bwd,
        "cp": cp_fwd * again + cp_bwd,
        "moe": dispatch * (moe_again + 1),
        "tp_fwd": tp_fwd,
        "cp_fwd": cp_fwd,
        "moe_fwd": dispatch + 0 * tp_fwd,
    }


def head_times(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """The embedding (first stage) and the logits with cross-entropy (last stage)."""
    cal, gpu = ctx.hardware.calibration, ctx.hardware.gpu
    hbm = gpu.hbm_bytes_per_s * cal.memory_efficiency
    logits = compute.gemm_time_s(
        flops.logits_gemm(lt.b, lt.s, lt.h, lt.V, lt.t, lt.c),
        peak_flops_per_s=gpu.peak_flops_per_s(ctx.precision),
        eta_max=cal.gemm_efficiency,
        half_dim=cal.gemm_half_dim,
    )
    logit_elems = lt.b * lt.s / lt.c * lt.V / lt.t
    sbh = lt.b * lt.s * lt.h / lt.c
    return {
        "head_fwd": logits + CROSS_ENTROPY_FWD_BYTES * logit_elems / hbm,
        "head_bwd": compute.BACKWARD_GEMM_FACTOR * logits + CROSS_ENTROPY_BWD_BYTES * logit_elems / hbm,
        "embedding_fwd": EMBEDDING_FWD_BYTES_PER_SBH * sbh / hbm,
        "embedding_bwd": compute.BACKWARD_ELEMENTWISE_FACTOR * EMBEDDING_FWD_BYTES_PER_SBH * sbh / hbm,
    }


def stage_step(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """One micro-batch through stage i: compute forward, backward, recomputation; exposed TP, CP and
    MoE-dispatch communication, their forward share ``comm_fwd``; and the layers' ``linear`` time."""
    n, first, last = lt.stage_info(i)
    dense = layer_times(lt, ctx)
    per = (
        dense
        if not lt.moe_frac
        else {
            k: (1 - lt.moe_frac) * dense[k] + lt.moe_frac * v for k, v in layer_times(lt, ctx, moe_layer=True).items()
        }
    )
    head = head_times(lt, ctx)
    tp_edge = tp_collectives_s(lt, ctx) / 2
    fwd_comm = n * (per["tp_fwd"] + per["cp_fwd"] + per["moe_fwd"]) + first * tp_edge
    # full recomputation with --recompute-method block re-runs (and re-communicates) only its layers
    kept = np.where(lt.rc == 2, n - lt.recomputed_layers(n), 0.0)
    return {
        "fwd": n * per["fwd"] + first * head["embedding_fwd"] + last * head["head_fwd"],
        "bwd": n * per["bwd"] + first * head["embedding_bwd"] + last * head["head_bwd"],
        "recompute": np.where(lt.rc == 2, lt.recomputed_layers(n), n) * per["recompute"],
        "offload": offload_exposed_s(lt, ctx, n, per),
        # one collective each for the embedding (first stage) and the output layer (last stage)
        "tp": n * per["tp"] - kept * per["tp_fwd"] + (first.astype(float) + last) * tp_edge,
        "cp": n * per["cp"] - kept * per["cp_fwd"],
        "moe": n * per["moe"] - kept * per["moe_fwd"],
        "comm_fwd": fwd_comm,  # the forward's share of tp + cp + moe
        "linear": n * per["linear"],
    }


def offload_exposed_s(lt: Letters, ctx: Context, n: np.ndarray, per: dict[str, np.ndarray]) -> np.ndarray:
    """--cpu-offloading-num-layers N: each offloaded layer's activations go to host memory after its
    forward and come back before its backward, each copy overlapping the next layer's compute, so what
    a copy takes beyond that layer's forward (backward) is exposed:
    N·[max(0, A/W_host − t_fwd) + max(0, A/W_host − t_bwd)] per micro-batch, with A the layer's
    activations and W_host the GPU-host link (Transformer Engine's CPU offload context, used by
    Megatron-LM transformer_block.py:304-318)."""
    layers = np.minimum(ctx.options.cpu_offloading_num_layers, n)
    if not ctx.options.cpu_offloading_num_layers:
        return np.zeros(np.shape(layers))
    copy = layer_activations(lt, ctx)["whole"] / ctx.hardware.memory.host_link_bytes_per_s
    exposed = np.maximum(copy - per["fwd"], 0.0) + np.maximum(copy - per["bwd"], 0.0)
    return np.where(lt.rc == 0, layers * exposed, 0.0)


def graphed_frac(opts: PlanOptions, *, moe_layer: bool = False) -> float:
    """Share of a layer's kernels CUDA graphs launch without the host: all of it with whole-layer or
    full-iteration graphs, half per captured block (attention; MLP or MoE) otherwise (an assumption:
    the host time splits evenly between the two blocks)."""
    impl = opts.cuda_graph_impl
    if impl is CudaGraphImpl.NONE:
        return 0.0
    if impl is CudaGraphImpl.FULL_ITERATION or not opts.cuda_graph_modules:
        return 1.0
    mlp = CudaGraphModule.MOE if moe_layer else CudaGraphModule.MLP
    return 0.5 * (CudaGraphModule.ATTN in opts.cuda_graph_modules) + 0.5 * (mlp in opts.cuda_graph_modules)


def layer_time_formulas(ctx: Context, plan: ParallelPlan) -> dict[str, Formula]:
    """Formula and source of the compute and model-parallel communication terms for one plan."""
    opts, mo = ctx.options, ctx.model
    linear = "FP8 linear GEMMs F/(P_fp8·η_fp8(M,N,K)) + FP8 casts" if opts.fp8 else "Σ_GEMM F/(P_peak·η(M,N,K))"
    if opts.attention_kernel is AttentionKernel.UNFUSED:
        core, core_bwd = "score and context GEMMs + softmax/dropout bytes/W_HBM", "2 × attention core"
    else:
        core, core_bwd = (
            "flash attention 2·2bs²ad/(t·c)·½ (causal) / (P_peak·η_flash)",
            f"{compute.FLASH_BACKWARD_FACTOR:g} × flash forward",
        )
    experts = "; MoE layers: expert GEMMs over the A routed tokens" if mo.is_moe else ""
    forward = Formula(
        f"m × layers × [{linear} + {core} + elementwise bytes/(W_HBM·η_mem) + τ], slowest stage; "
        f"+ embedding (first) or logits and cross-entropy (last){experts}",
        "GEMM FLOPs: Narayanan et al. 2021 Appendix; roofline with calibrated η; FlashAttention-2 (Dao 2023)",
    )
    backward = Formula(
        f"m × layers × [2 × GEMMs + {core_bwd} + 2 × elementwise + 2τ]",
        "Narayanan et al. 2021 Appendix: backward = 2 × forward GEMM FLOPs",
    )
    recompute = recompute_formula(ctx, plan)
    sp = plan.sequence_parallel and plan.tp > 1
    collectives = "2 all-gathers + 2 reduce-scatters" if sp else "2 all-reduces"
    hidden = (
        "; --tp-comm-overlap hides what the GEMMs cover"
        if opts.tp_comm_overlap
        else "; backward overlapped with the weight-gradient GEMMs"
        if opts.async_tp_comm
        else ""
    )
    again = " (+ recompute)" if plan.recompute is Recompute.FULL else ""
    tp = Formula(
        f"m × layers × {collectives} of b·s·h/c per pass, forward and backward{again}, on the tp group's link{hidden}"
        if plan.tp > 1
        else "0 (tp = 1)",
        "Narayanan et al. 2021 §4.1; Korthikanti et al. 2022 §4.2.2; ring cost Thakur et al. 2005",
    )
    cp = Formula(
        "m × layers × (c − 1) ring steps of K,V chunks b·(s/c)·2g·d_h/t, each beyond its attention compute"
        if plan.cp > 1
        else "0 (cp = 1)",
        "Ring Attention (Liu et al. 2023); Megatron-Core context parallelism",
    )
    dispatcher = (
        "all-to-all of the A routed tokens over ep (+ all-gather over etp)"
        if opts.moe_token_dispatcher.value == "alltoall"
        else "all-gather and reduce-scatter over etp·ep"
    )
    moe_comm = Formula(
        f"m × MoE layers × dispatch + combine: {dispatcher}, forward and backward" if mo.is_moe else "0 (dense model)",
        "Megatron-Core moe/token_dispatcher.py",
    )
    return {
        "forward": forward,
        "backward": backward,
        "recompute": recompute,
        "offload": Formula(
            f"m × {ctx.options.cpu_offloading_num_layers} layers × "
            "[max(0, A/W_host − t_fwd) + max(0, A/W_host − t_bwd)], A a layer's activations, "
            f"W_host {ctx.hardware.memory.host_link_gbytes_per_s:g} GB/s"
            if ctx.options.cpu_offloading_num_layers
            else "0 (no CPU offloading)",
            "Transformer Engine CPU offload context (Megatron-LM transformer_block.py:304-318); "
            f"hardware preset {ctx.hardware.name}: memory.host_link_gbytes_per_s",
        ),
        "tp_comm": tp,
        "cp_comm": cp,
        "moe_comm": moe_comm,
    }


def recompute_formula(ctx: Context, plan: ParallelPlan) -> Formula:
    """Formula and source of the recomputation term."""
    if plan.recompute is Recompute.NONE:
        return Formula("0 (no recomputation)", "—")
    if plan.recompute is Recompute.SELECTIVE:
        names = {
            RecomputeModule.CORE_ATTN: "the attention core",
            RecomputeModule.MLP: "the MLP (dense layers)",
            RecomputeModule.MOE: "the MoE block and its token dispatch (MoE layers)",
            RecomputeModule.MOE_ACT: "the experts' activation function (MoE layers)",
            RecomputeModule.LAYERNORM: "nothing for the norms (fused into the linear layers)",
        }
        what = ", ".join(names[m] for m in ctx.options.recompute_modules) or "nothing"
        return Formula(
            f"m × layers × one more forward of {what}",
            "Korthikanti et al. 2022 §5; Megatron-LM transformer_config.py:1940-1962 (--recompute-modules)",
        )
    if plan.recompute_method.value == "block":
        k = plan.recomputed_layers
        return Formula(
            f"m × min({k}, layers/v)·v recomputed layers × one more layer forward (and its TP collectives): "
            f"{k} of every model chunk's layers (--recompute-method block)",
            "Megatron-LM megatron/core/recompute.py (block: the first N layers of each chunk); "
            "Narayanan et al. 2021 §3.5",
        )
    return Formula(
        "m × layers × one more layer forward (and its TP collectives)",
        "Narayanan et al. 2021 §3.5; Korthikanti et al. 2022 §5",
    )
