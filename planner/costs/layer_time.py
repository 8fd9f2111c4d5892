"""Time of one transformer layer for one micro-batch on one GPU, and of a pipeline stage.

Compute: GEMMs on the shape-dependent roofline (planner.costs.compute), in FP8 for the linear
layers when enabled, with the FP8 casts of the recipe; memory-bound ops over HBM; the attention
core unfused or the GPU's flash kernel. Exposed communication: tensor-parallel collectives (less
what overlap hides, plus what overlap costs the GEMMs), context-parallel ring exchange of keys and
values (less what attention compute hides), the MoE token dispatcher.
"""

from __future__ import annotations

import functools

import numpy as np

from planner.costs import Formula, compute, flops, memory
from planner.costs.blocks import (
    bf16_layer_sums,
    fp8_attention_ratios,
    graphed_frac,
    layer_parts,
    layer_sums,
    layer_terms,
    layer_times,
    unfused_rope,
)
from planner.costs.layer_memory import layer_activations
from planner.costs.letters import Letters
from planner.costs.linears import activation_message, fp8_cast_bytes, gemm_times, tp_collectives_s, tp_formula
from planner.costs.memory_parts import layers_text
from planner.costs.mla import mla_formula
from planner.costs.moe import dispatcher_formula, expert_formula
from planner.plan import AttentionKernel, Context, CudaGraphModule, ParallelPlan, Recompute, RecomputeModule

# HBM bytes per logit of Megatron's VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py,
# core_r0.8.0 and d98e8a64): forward - fp32 cast (r2 w4), max (r4), subtract in place (r4 w4), exp in place
# (r4 w4), sum (r4), the softmax kept for the backward by an in-place division exp_logits.div_(Σ) (r4 w4);
# backward - the one-hot subtraction touches one logit per token (grad_2d[arange, target] -= ...), then
# grad_input.mul_(grad_output) (r4 w4) and the cast back to 16 bits (r4 w2).
CROSS_ENTROPY_FWD_BYTES = 2 + 4 + 4 + 8 + 8 + 4 + 8
CROSS_ENTROPY_BWD_BYTES = 8 + 6
EMBEDDING_FWD_BYTES_PER_SBH = 2 + 2 + 2 + 2 + 1  # gather rows (r2 w2), add positions (r2 w2), dropout mask (w1)


def embedding_grad_bytes(V, h: int, t, *, grad_bytes: int, act_bytes: int):
    """HBM bytes the word embedding's weight gradient moves per micro-batch on the first stage: the
    backward of F.embedding allocates a dense zeroed gradient of the whole V/t × h table (PyTorch
    embedding_dense_backward: grad_weight = zeros), which Megatron's DDP hook adds into the gradient
    buffer (distributed_data_parallel.py:578, param.main_grad.add_(param.grad)):
    (ε + ε + 2·b_g)·V·h/t - zero-fill (w ε), read the gradient (ε), read and write main_grad (b_g each)."""
    return (2 * act_bytes + 2 * grad_bytes) * V * h / t


__all__ = [
    "activation_message",
    "compute_formulas",
    "graphed_frac",
    "head_times",
    "layer_time_formulas",
    "layer_times",
    "stage_step",
    "tp_collectives_s",
]


def head_times(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """The embedding (first stage) and the logits with cross-entropy (last stage)."""
    cal, gpu = ctx.hardware.calibration, ctx.hardware.gpu
    hbm = gpu.hbm_bytes_per_s * cal.memory_efficiency
    logits, casts = logits_gemm_s(lt, ctx)
    logit_elems = lt.b * lt.s / lt.c * lt.V / lt.t
    sbh = lt.b * lt.s * lt.h / lt.c
    grads = memory.gradient_bytes_per_param(ctx.precision, grads_in_16_bits=ctx.options.grad_buffer_in_16_bits)
    table = embedding_grad_bytes(lt.V, lt.h, lt.t, grad_bytes=grads, act_bytes=lt.act_bytes)
    fwd_bytes, bwd_bytes = CROSS_ENTROPY_FWD_BYTES * logit_elems, CROSS_ENTROPY_BWD_BYTES * logit_elems
    if ctx.options.fp8_output_proj:  # the MXFP8 output layer's casts
        fwd_bytes, bwd_bytes = fwd_bytes + casts[0], bwd_bytes + casts[1]
    return {
        "head_fwd": logits + fwd_bytes / hbm,
        "head_bwd": compute.BACKWARD_GEMM_FACTOR * logits + bwd_bytes / hbm,
        "embedding_fwd": EMBEDDING_FWD_BYTES_PER_SBH * sbh / hbm,
        "embedding_bwd": (compute.BACKWARD_ELEMENTWISE_FACTOR * EMBEDDING_FWD_BYTES_PER_SBH * sbh + table) / hbm,
    }


def logits_gemm_s(lt: Letters, ctx: Context) -> tuple[np.ndarray, tuple]:
    """The output layer's forward GEMM (seconds) and its FP8 casts' (forward, backward) HBM bytes: a 16-bit GEMM on
    the roofline, none; with --fp8-output-proj Megatron-Core's TELMHeadColumnParallelLinear runs it under the MXFP8
    recipe (gpt_model.py:272-276, extensions/transformer_engine.py:1780-1902 @ d98e8a64), at η_fp8 × the MXFP8
    ratio, its input cast on its own (M·K), the weight once per iteration (N·K / m) and the logits' gradient in
    the backward (M·N), as ``linears.fp8_cast_bytes`` counts a linear layer's."""
    gemm = flops.logits_gemm(lt.b, lt.s, lt.h, lt.V, lt.t, lt.c)
    if not ctx.options.fp8_output_proj:
        cal = ctx.hardware.calibration
        peak = ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
        return compute.gemm_time_s(
            gemm, peak_flops_per_s=peak, eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim
        ), (0.0, 0.0)
    casts = fp8_cast_bytes(
        lt, ctx, {"logits": gemm}, fused_in=0.0, out_grad=0.0, per_in=gemm.M * gemm.K, per_grad=gemm.M * gemm.N
    )
    return gemm_times({"logits": gemm}, ctx, fp8=True)["logits"], casts


def mtp_extra_s(lt: Letters, ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) of what one MTP depth adds to its layer: the 2h → h projection of the
    normalised embedding and hidden state (DeepSeek-V3 §2.2), split over t."""
    gemm = flops.mlp_gemms(lt.b * lt.s / lt.c, 2 * lt.h, lt.h, lt.t, gated=False)["fc1"]
    fwd = gemm_times({"eh_proj": gemm}, ctx, fp8=lt.fp8)["eh_proj"]
    return fwd, compute.BACKWARD_GEMM_FACTOR * fwd


def stage_step(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """One micro-batch through stage i: compute forward, backward, recomputation; exposed TP, CP and
    MoE-dispatch communication, their forward share ``comm_fwd``; and the layers' ``linear`` time.

    A stage's time is the sum over what it holds (``Letters.stage``): every decoder layer's attention
    (sliding-window layers at their window), the dense or MoE MLP of each, each MTP depth (a layer
    of the last layer's kind, its projection, its own logits and loss, and the embedding of its
    shifted input), the embedding (first stage) and the logits and loss (last stage)."""
    return stage_terms(lt, ctx, lt.stage(i))


def stage_terms(lt: Letters, ctx: Context, st: dict, *, offload: bool = True) -> dict[str, np.ndarray]:
    """``stage_step`` of what ``st`` holds: one rank (``Letters.stage``), or every rank of the plan together
    (``Letters.whole_model``; each term but ``offload`` is a sum over the layers, the embedding and the loss
    held, so this is the sum of every rank's). Without ``offload``, that term (not such a sum) is left out."""
    sums = layer_sums(lt, ctx)
    mo = ctx.model
    dense = layer_terms(lt, ctx, sums["dense"])
    moe_layer = layer_terms(lt, ctx, sums["moe"]) if mo.is_moe else dense
    head = head_times(lt, ctx)
    tp_edge = tp_collectives_s(lt, ctx) / 2
    # each kind of layer the stage holds: how many, and one layer's terms (sliding-window layers: what their
    # attention changes); a kind the model has none of (no MoE, window or MTP layers) adds 0 s and is left out
    kinds = [(st["dense"], dense)] + ([(st["moe"], moe_layer)] if mo.is_moe else [])
    if mo.window is not None:
        window, attention = layer_terms(lt, ctx, sums["window"]), layer_terms(lt, ctx, sums["attention"])
        kinds.append((st["window"], {k: window[k] - attention[k] for k in window}))
    if mo.mtp_layers:
        kinds.append((st["mtp"], moe_layer if mo.is_moe and mo.mtp_is_moe else dense))
    if lt.bf16_ends:
        kinds += bf16_kinds(lt, ctx, st, (dense, moe_layer))
    totals: dict[str, np.ndarray] = {}

    def total(key: str) -> np.ndarray:
        if key not in totals:
            totals[key] = functools.reduce(np.add, (n * terms[key] for n, terms in kinds))
        return totals[key]

    first, last = st["first"], st["last"]
    # full recomputation with --recompute-method block re-runs (and re-communicates) only its layers
    n = st["layers"]
    share = np.where(lt.rc == 2, lt.recomputed_layers(n) / np.maximum(n, 1), 1.0)
    kept = np.where(lt.rc == 2, 1.0 - share, 0.0)
    heads = last + st["mtp"] if mo.mtp_layers else last  # the logits and loss: the last stage's and each MTP depth's
    step = {
        "fwd": total("fwd") + first * head["embedding_fwd"] + heads * head["head_fwd"],
        "bwd": total("bwd") + first * head["embedding_bwd"] + heads * head["head_bwd"],
        "recompute": share * total("recompute"),
        # one collective each for the embedding (first stage) and the output layer (last stage)
        "tp": total("tp") - kept * total("tp_fwd") + (first.astype(float) + last) * tp_edge,
        "cp": total("cp") - kept * total("cp_fwd"),
        "moe": total("moe") - kept * total("moe_fwd") if mo.is_moe else 0.0,  # without experts: 0 s (a number)
        "comm_fwd": total("tp_fwd") + total("cp_fwd") + (total("moe_fwd") if mo.is_moe else 0.0) + first * tp_edge,
    }
    if mo.mtp_layers:  # each MTP depth: its projection and the embedding of its shifted input
        mtp_fwd, mtp_bwd = mtp_extra_s(lt, ctx)
        step["fwd"] = step["fwd"] + st["mtp"] * (mtp_fwd + head["embedding_fwd"])
        step["bwd"] = step["bwd"] + st["mtp"] * (mtp_bwd + head["embedding_bwd"])
    if offload:
        step["offload"] = offload_exposed_s(lt, ctx, n, (dense, moe_layer), st["moe"])
    return step


def bf16_kinds(lt: Letters, ctx: Context, st: dict, fp8_layers: tuple[dict, dict]) -> list[tuple]:
    """What the BF16 end layers a stage holds (``st``'s ``bf16``, of them ``bf16_moe`` and ``bf16_window``) add to
    it: each kind's count times its layer's terms in BF16 (``blocks.bf16_layer_sums``) less the same layer's in
    FP8 (``fp8_layers``: the dense and MoE layers' ``layer_terms``), as ``stage_terms`` adds each kind of layer."""
    mo, sums = ctx.model, bf16_layer_sums(lt, ctx)
    dense, moe_layer = fp8_layers
    dense16 = layer_terms(lt, ctx, sums["dense"])

    def extra(bf16: dict, fp8: dict) -> dict:
        return {k: bf16[k] - fp8[k] for k in fp8}

    kinds = [(st["bf16"] - st["bf16_moe"] if mo.is_moe else st["bf16"], extra(dense16, dense))]
    if mo.is_moe:
        kinds.append((st["bf16_moe"], extra(layer_terms(lt, ctx, sums["moe"]), moe_layer)))
    if mo.window is not None:  # what a window changes of a BF16 layer's attention, less what it changes in FP8
        fp8_sums = layer_sums(lt, ctx)
        w16, a16 = (layer_terms(lt, ctx, sums[k]) for k in ("window", "attention"))
        w8, a8 = (layer_terms(lt, ctx, fp8_sums[k]) for k in ("window", "attention"))
        kinds.append((st["bf16_window"], {k: w16[k] - a16[k] - w8[k] + a8[k] for k in w8}))
    return kinds


def offload_exposed_s(lt: Letters, ctx: Context, n: np.ndarray, kinds: tuple[dict, dict], moe_layers: np.ndarray):
    """--cpu-offloading-num-layers N: each offloaded layer's activations go to host memory after its
    forward and come back before its backward, each copy overlapping the next layer's compute, so what
    a copy takes beyond that layer's forward (backward) is exposed:
    N·[max(0, A/W_host − t_fwd) + max(0, A/W_host − t_bwd)] per micro-batch, with A the layer's
    activations and t_fwd, t_bwd its times (the stage's mean layer of the dense and MoE ``kinds``: one layer's
    ``layer_terms`` of each) and W_host the GPU-host link (Transformer Engine's CPU offload context, used by
    Megatron-LM transformer_block.py:304-318)."""
    if not ctx.options.cpu_offloading_num_layers:
        return 0.0  # no layer offloaded: 0 s on every stage (a number)
    layers = np.minimum(ctx.options.cpu_offloading_num_layers, n)
    moe_share = moe_layers / np.maximum(n, 1)  # of the stage's n layers, MoE
    dense, moe_layer = kinds
    per = {k: (1 - moe_share) * dense[k] + moe_share * moe_layer[k] for k in ("fwd", "bwd")}
    acts = layer_activations(lt, ctx)
    whole = (1 - moe_share) * acts["dense"]["whole"] + moe_share * acts["moe"]["whole"]
    copy = whole / ctx.hardware.memory.host_link_bytes_per_s
    exposed = np.maximum(copy - per["fwd"], 0.0) + np.maximum(copy - per["bwd"], 0.0)
    return np.where(lt.rc == 0, layers * exposed, 0.0)


def _attention_core_text(ctx: Context) -> tuple[str, str]:
    """The attention core's forward and backward in a formula's text: unfused GEMMs and softmax bytes, or the
    fused kernel's law (in MXFP8 where the recipe runs attention in it)."""
    if ctx.options.attention_kernel is AttentionKernel.UNFUSED:
        return "score and context GEMMs + softmax/dropout bytes/W_HBM", "2 × attention core"
    core = (
        f"{ctx.hardware.attention.kernel}: 4·b·(a/t)·s²·d_h/(2c) / (P_peak·η_fwd(s)), η rising with s as the kernel "
        "tables do"
    )
    core_bwd = "its backward, 2.5× the FLOPs at η_bwd(s)"
    ratios = fp8_attention_ratios(ctx)
    if ratios is not None:  # compute.fp8_attention_time_s
        kind = "MXFP8" if ctx.options.fp8_recipe.value == "mxfp8" else "per-tensor FP8"
        at = "" if kind == "MXFP8" else f" (at s {ctx.training.seq_len:,}, by cuDNN's table)"
        core += f", in {kind} × {float(ratios[0]):.4g}{at}"
        core_bwd += f", in {kind} × {float(ratios[1]):.4g}{at} over the whole causal square (windows not skipped)"
    return core, core_bwd


def _unfused_rope_text(ctx: Context) -> str:
    """The op-by-op RoPE's bytes and, where the GPU preset measures one, the eager bandwidth they run at."""
    eager = ctx.hardware.gpu.eager_elementwise_tbytes_per_s
    rate = f" at the GPU's eager elementwise {eager} TB/s (pytorch/pytorch PR 176223)" if eager else ""
    p = ctx.model.rotary_percent
    if p == 1.0:
        per = "24 B forward, 26 B backward per rotated element"
    else:
        per = f"(20·{p:g} + 4) B forward, (20·{p:g} + 6) B backward per query/key element ({p:g} of each head rotated)"
    return f"; YaRN RoPE op by op (Megatron-Core's unfused path): {per}" + rate


def _op_by_op_activation_text(ctx: Context) -> str:
    """A dense MLP activation run op by op (blocks.dense_mlp_block): its bytes beyond the fused kernel's and, where the
    GPU preset measures one, the share of HBM PyTorch's eager kernels reach (compute.eager_bytes_ratio)."""
    e_fwd, e_bwd = compute.activation_extra_bytes(
        compute.activation_kind(ctx.model), fused=ctx.options.activation_fusion
    )
    if not (e_fwd or e_bwd):
        return ""
    hw = ctx.hardware
    r = compute.eager_bytes_ratio(hw.calibration.memory_efficiency, hw.gpu.eager_hbm_frac)
    eager = (
        f", × η_mem/η_eager = {r:.4g} (PyTorch's eager kernels at {hw.gpu.eager_hbm_frac:g} of HBM)" if r > 1 else ""
    )
    return f"; the MLP activation op by op: +{e_fwd:g} B forward, +{e_bwd:g} B backward per b·s·f/t element{eager}"


def layer_time_formulas(ctx: Context, plan: ParallelPlan, fixed: dict | None = None) -> dict[str, Formula]:
    """Formula and source of the compute and model-parallel communication terms for one plan; ``fixed``: the
    context's ``compute_formulas`` (computed here when not given)."""
    fixed = compute_formulas(ctx) if fixed is None else fixed
    kappa = ctx.hardware.calibration.cp_graphed_step_us
    graphed = (
        f"; under CUDA graphs + c·κ a pass, κ = {kappa:g} µs a ring step (GB200's fit on the graphed CP runs)"
        if plan.cp > 1 and kappa and ctx.options.graphs_launch(CudaGraphModule.ATTN)
        else ""
    )
    cp = Formula(
        "m × layers × (c − 1) ring steps of K,V chunks b·(s/c)·2g·d_h/t, each beyond one step of attention" + graphed
        if plan.cp > 1
        else "0 (cp = 1)",
        "Ring Attention (Liu et al. 2023); Transformer Engine AttnFuncWithCPAndKVP2P"
        + ("; κ: docs/cost-model.md §6.7.1" if graphed else ""),
    )
    return {
        "forward": fixed["forward"],
        "backward": fixed["backward"],
        "recompute": recompute_formula(ctx, plan),
        "offload": fixed["offload"],
        "tp_comm": tp_formula(ctx, plan),
        "cp_comm": cp,
        "moe_comm": dispatcher_formula(ctx, plan) if ctx.model.is_moe else Formula("0 (dense model)", "—"),
    }


def compute_formulas(ctx: Context) -> dict[str, Formula]:
    """The forward, backward and offload terms' formulas, which read the context alone (the same for its plans)."""
    opts, mo = ctx.options, ctx.model
    if opts.fp4 is not None:
        linear = (
            "NVFP4 linear GEMMs (fprop, dgrad, wgrad) F/(P_nvfp4·η_fp8·r_nvfp4(M,N,K)) + NVFP4 casts (amax, "
            "row-wise and Hadamard-transformed column-wise E2M1 copies)"
        )
    elif opts.fp8:
        linear = f"FP8 linear GEMMs F/(P_fp8·η_fp8(M,N,K)) + {opts.fp8_recipe.value} FP8 casts"
    else:
        linear = "Σ_GEMM F/(P_peak·η(M,N,K))"
    core, core_bwd = _attention_core_text(ctx)
    experts = "; MoE layers: routed experts' grouped GEMMs and shared experts (below)" if mo.is_moe else ""
    mla = "; multi-latent attention (below)" if mo.multi_latent_attention else ""
    window = (
        f"; sliding-window layers attend to W = {mo.window} keys: (s·W − W(W−1)/2)/s² of the square"
        if mo.window
        else ""
    )
    mtp = (
        f"; {mo.mtp_layers} MTP layer(s) on their stage: a layer, the 2h→h projection, logits and loss"
        if mo.mtp_layers
        else ""
    )
    if any(opts.bf16_end_layers):  # blocks.bf16_layer_sums
        mtp += f"; --first-last-layers-bf16: {bf16_ends_text(ctx)} with Σ_GEMM F/(P_peak·η(M,N,K)), no FP8 casts"
    if mo.qk_layernorm and not mo.multi_latent_attention:  # compute.qk_norm_bytes
        window += "; per-head Q and K norms (--qk-layernorm): 4·sb·(a + g)·d_h/t bytes, Megatron-Core attention.py"
    if unfused_rope(mo):  # compute.unfused_rope_extra_bytes
        window += _unfused_rope_text(ctx)
    window += _op_by_op_activation_text(ctx)
    graphs = " (no τ: CUDA graphs)" if opts.cuda_graph_impl.value != "none" else ""
    forward = Formula(
        f"m × Σ_stage layers × [{linear} + {core} + elementwise bytes/(W_HBM·η_mem) + τ{graphs}], slowest stage; "
        f"+ embedding (first) or logits and cross-entropy (last){experts}{mla}{window}{mtp}",
        "GEMM FLOPs: Narayanan et al. 2021 Appendix; attention law fitted to kernel benchmarks "
        "(presets/reference/attention_kernels.csv: Dao 2023, NVIDIA cudnn-frontend results)"
        + ("; DeepSeek-V3 §2.2 (MTP)" if mo.mtp_layers else ""),
    )
    backward = Formula(
        f"m × layers × [2 × GEMMs + {core_bwd} + 2 × elementwise + 2τ]",
        "Narayanan et al. 2021 Appendix: backward = 2 × forward GEMM FLOPs; Dao 2023 §4.1 (5 backward GEMMs)",
    )
    return {"forward": forward, "backward": backward, "offload": offload_formula(ctx)}


def offload_formula(ctx: Context) -> Formula:
    """Formula and source of the CPU-offload term."""
    return Formula(
        f"m × {ctx.options.cpu_offloading_num_layers} layers × "
        "[max(0, A/W_host − t_fwd) + max(0, A/W_host − t_bwd)], A a layer's activations, "
        f"W_host {ctx.hardware.memory.host_link_gbytes_per_s:g} GB/s"
        if ctx.options.cpu_offloading_num_layers
        else "0 (no CPU offloading)",
        "Transformer Engine CPU offload context (Megatron-LM transformer_block.py:304-318); "
        f"hardware preset {ctx.hardware.name}: memory.host_link_gbytes_per_s",
    )


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
            RecomputeModule.MLA_UP_PROJ: "MLA's up-projections (Q, K, V from the latents)",
            RecomputeModule.SHARED_EXPERTS: "the shared experts (MoE layers)",
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


def time_parts(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Parts of one micro-batch's compute on stage i, seconds: its attention blocks (MLA or GQA;
    sliding-window layers at their window) forward and backward, its routed experts' and shared
    experts' GEMMs forward and backward, and its dense MLPs."""
    mo = ctx.model
    st = lt.stage(i)
    parts = layer_parts(lt, ctx)
    attn, window, dense = parts["attention"], parts["window"], parts["dense"]
    layers = st["layers"] + st["mtp"]
    moe_layers = st["moe"] + (st["mtp"] if mo.is_moe and mo.mtp_is_moe else 0.0)
    dense_layers = layers - moe_layers
    both = 1 + compute.BACKWARD_GEMM_FACTOR
    out = {
        "fwd+bwd: attention": layers * (attn["fwd"] + attn["bwd"])
        + st["window"] * (window["fwd"] + window["bwd"] - attn["fwd"] - attn["bwd"]),
        "fwd+bwd: dense MLPs": dense_layers * (dense["fwd"] + dense["bwd"]),
    }
    if mo.is_moe:
        out["fwd+bwd: routed-expert GEMMs"] = moe_layers * both * parts["moe"]["expert_linear"]
        out["fwd+bwd: shared-expert GEMMs"] = moe_layers * both * parts["moe"]["shared_linear"]
    if lt.bf16_ends:  # what the stage's BF16 end layers take beyond the same layers in FP8
        fp8_layers = (layer_times(lt, ctx), layer_times(lt, ctx, moe_layer=True) if mo.is_moe else None)
        out[BF16_PART] = sum(n * (k["fwd"] + k["bwd"]) for n, k in bf16_kinds(lt, ctx, st, fp8_layers))
    return out


BF16_PART = "fwd+bwd: BF16 end layers beyond FP8"


def bf16_ends_text(ctx: Context) -> str:
    """Which layers --first-last-layers-bf16 keeps in BF16, and where they sit."""
    start, end = ctx.options.bf16_end_layers
    return (
        f"the first {start} and last {end} of the {ctx.model.num_layers} decoder layers (global layer numbers: the "
        "first stage's first model chunk and the last stage's last chunk hold them, or the ranks a split gives them)"
    )


def time_part_formulas(ctx: Context) -> dict[str, Formula]:
    """Formula and source of each part ``time_parts`` computes (per iteration: m × the slowest stage's)."""
    mo = ctx.model
    attention = (
        mla_formula(mo)
        if mo.multi_latent_attention
        else Formula(
            "QKV and projection GEMMs + flash attention core", "Narayanan et al. 2021 Appendix; FlashAttention-2"
        )
    )
    ratio = ctx.options.attention_time_ratio
    release = (
        f", the flash kernels at {ratio:.3g}× the law's time (an older release's: from its kernel tables or its "
        "published runs)"
        if ratio != 1
        else ""
    )
    out = {
        "fwd+bwd: attention": Formula(
            f"m × {layers_text(mo)} × forward + backward of: {attention.text}{release}", attention.source
        ),
        "fwd+bwd: dense MLPs": Formula(
            "m × dense layers × fc1 + fc2 forward and backward", "Narayanan et al. 2021 Appendix"
        ),
    }
    if mo.is_moe:
        experts = expert_formula(ctx)
        out["fwd+bwd: routed-expert GEMMs"] = Formula(
            f"m × MoE layers × 3 × grouped GEMMs: {experts.text}", experts.source
        )
        if mo.shared_ffn:
            out["fwd+bwd: shared-expert GEMMs"] = Formula(
                f"m × MoE layers × 3 × shared experts' fc1 + fc2 (f_s = {mo.shared_ffn}) split over t",
                "DeepSeek-V3 §2.1.2 (shared experts); Megatron-Core moe/shared_experts.py",
            )
    if any(ctx.options.bf16_end_layers):
        out[BF16_PART] = Formula(
            f"m × the slowest stage's BF16 layers × [forward + backward with 16-bit GEMMs F/(P_peak·η(M,N,K)), no FP8 "
            f"casts − the same layer in FP8]: {bf16_ends_text(ctx)}",
            "Megatron-Core fp8_utils.py is_first_last_bf16_layer, get_fp8_context (a nullcontext for those layers), "
            "transformer_block.py:354, 689 @ d98e8a64",
        )
    return out
