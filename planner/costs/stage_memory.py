"""Memory on the GPUs of each pipeline stage, term by term (bytes)."""

from __future__ import annotations

import numpy as np

from planner.costs import Formula, memory, moe
from planner.costs.letters import Letters
from planner.costs.pipeline import in_flight_microbatches
from planner.models.params import embedding_params, model_layer_params, moe_layer_params, norm_params
from planner.plan import AttentionKernel, Context, ParallelPlan, Recompute

MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "reserve")
FP8_WEIGHT_BYTES = 1 + 1  # Transformer Engine keeps an FP8 copy of each linear weight and its transpose
FSDP_UNSHARDED_LAYERS = 2  # Megatron FSDP gathers the next layer while computing this one
FSDP_GRAD_BYTES = (
    2  # Megatron FSDP's main grads default to the model's 16-bit dtype (--megatron-fsdp-main-grads-dtype auto)
)


def stage_params(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Parameters on one GPU of stage i: ``dense`` (sharded over d·c) and ``expert`` (over the
    expert data-parallel group); ``layers`` those of its transformer layers (FP8 keeps copies of
    them; norms and biases included, a rounding error) and ``one_layer`` one layer's."""
    mo = ctx.model
    n, first, last = lt.stage_info(i)
    emb = embedding_params(mo, lt.t, lt.s)
    output = lt.V * lt.h / lt.t * np.where(mo.tied_embeddings, lt.p > 1, True)  # tied copy only when p > 1
    dense_layer = model_layer_params(mo, lt.t)
    moe_dense, moe_expert = moe_layer_params(mo, lt.t, lt.ep, lt.etp) if mo.is_moe else (0.0, 0.0)
    per_layer_dense = (1 - lt.moe_frac) * dense_layer + lt.moe_frac * moe_dense
    dense = n * per_layer_dense + first * (emb["word"] + emb["position"]) + last * (norm_params(mo) + output)
    expert = n * lt.moe_frac * moe_expert
    return {
        "dense": dense,
        "expert": np.broadcast_to(expert, np.shape(dense)),
        "layers": n * (per_layer_dense + lt.moe_frac * moe_expert),
        "one_layer": per_layer_dense + lt.moe_frac * moe_expert,
    }


def _states(lt: Letters, ctx: Context, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    dense = memory.param_state_bytes(
        params["dense"], lt.d * lt.c, precision=ctx.precision, distributed_optimizer=lt.dopt | lt.fsdp
    )
    expert = memory.param_state_bytes(
        params["expert"], lt.edp, precision=ctx.precision, distributed_optimizer=lt.dopt | lt.fsdp
    )
    states = {k: dense[k] + expert[k] for k in dense}
    # Megatron FSDP shards the weights and gradients too (dense over d·c, experts over the expert
    # data-parallel group), keeping a couple of layers whole while they run
    w_bytes, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    sharded = params["dense"] / (lt.d * lt.c) + params["expert"] / lt.edp
    working = FSDP_UNSHARDED_LAYERS * params["one_layer"]
    states["weights"] = np.where(lt.fsdp, w_bytes * (sharded + working), states["weights"])
    states["gradients"] = np.where(lt.fsdp, FSDP_GRAD_BYTES * (sharded + working), states["gradients"])
    opts = ctx.options
    if opts.fp8 is not None:  # FP8 copies and transposes, or instead of the 16-bit weight with --fp8-param-gather
        extra = FP8_WEIGHT_BYTES - (w_bytes if opts.fp8_param_gather else 0)
        layers_here = np.where(
            lt.fsdp, params["layers"] * sharded / np.maximum(params["dense"] + params["expert"], 1), params["layers"]
        )
        states["weights"] = states["weights"] + extra * layers_here
    return states


def _activations(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray:
    n, first, last = lt.stage_info(i)
    parts = memory.layer_activation_parts(lt.h, lt.a, lt.g, lt.dh, lt.f, gated=lt.gated, dropout=lt.dropout, fp8=lt.fp8)
    (attn_split, attn_replicated), (mlp_split, mlp_replicated) = parts["attention"], parts["mlp"]

    def per_layer(split_c, replicated_c, rc):
        return (
            lt.act_bytes
            / 2
            * memory.activation_bytes_per_layer(
                lt.s,
                lt.b,
                lt.h,
                lt.a,
                lt.t,
                lt.c,
                sequence_parallel=lt.sp,
                recompute=rc,
                unfused_attention=lt.unfused,
                split_coeff=split_c,
                replicated_coeff=replicated_c,
                distribute_saved=ctx.options.distribute_saved_activations,
            )
        )

    split, replicated = attn_split + mlp_split, attn_replicated + mlp_replicated
    kept = per_layer(split, replicated, lt.rc)
    whole = per_layer(split, replicated, np.zeros_like(lt.rc))  # what a layer being recomputed holds
    if lt.moe_frac:
        A = moe.expert_token_assignments(
            lt.b,
            lt.s,
            lt.t,
            lt.c,
            lt.k,
            imbalance=ctx.options.moe_load_imbalance,
            capacity_factor=ctx.options.moe_capacity_factor,
        )
        moe_mlp = moe.moe_mlp_activation_bytes(
            A, lt.tokens_per_gpu(), lt.h, lt.f_e, lt.etp, gated=lt.gated, fp8_inputs=lt.fp8
        )
        moe_kept = np.where(
            lt.rc == 2, kept, per_layer(attn_split, attn_replicated, lt.rc) + moe_mlp
        )  # full: the input
        moe_whole = per_layer(attn_split, attn_replicated, np.zeros_like(lt.rc)) + moe_mlp
        whole = (1 - lt.moe_frac) * whole + lt.moe_frac * moe_whole
        kept = (1 - lt.moe_frac) * kept + lt.moe_frac * moe_kept
    in_flight = in_flight_microbatches(lt.p, lt.m, lt.vpp, i)
    return (
        in_flight * n * kept
        # the layer being recomputed holds all of its activations; its input is already counted as kept
        + np.where(lt.rc == 2, whole - kept, 0.0)
        + first
        * np.minimum(lt.p, lt.m)
        * memory.embedding_activation_bytes(lt.s, lt.b, lt.h, lt.t, lt.c, sequence_parallel=lt.sp, dropout=lt.dropout)
        + last * memory.output_layer_activation_bytes(lt.s, lt.b, lt.h, lt.V, lt.t, lt.c, sequence_parallel=lt.sp)
    )


def stage_memory_bytes(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Memory on the GPUs of pipeline stage i, term by term (bytes)."""
    params = stage_params(lt, ctx, i)
    activations = _activations(lt, ctx, i)
    reserve = np.broadcast_to(ctx.hardware.calibration.reserve_bytes, np.shape(activations))
    out = {
        **_states(lt, ctx, params),
        "activations": activations,
        "reserve": reserve,
        "params": params["dense"] + params["expert"],
        "dense_params": params["dense"],
        "expert_params": params["expert"],
    }
    out["total"] = sum(out[k] for k in MEMORY_TERMS)
    return out


K22 = "Korthikanti et al. 2022, Table 2, §4.2.3, §4.3"
DIST_OPT = "Megatron-LM docs/user-guide/features/dist_optimizer.md; parameters: Narayanan et al. 2021 Eq. 2 generalised"


def memory_formulas(ctx: Context, plan: ParallelPlan) -> dict[str, Formula]:
    """The formula and source of each memory term for one plan, as ``stage_memory_bytes`` computes it."""
    w, g, o = memory.BYTES_PER_PARAM[ctx.precision]
    expert = " (experts over the expert data-parallel group)" if ctx.model.is_moe else ""
    if plan.fsdp:
        held = f"(P_stage/(d·c) + {FSDP_UNSHARDED_LAYERS} whole layers being gathered){expert}"
        weights = Formula(f"{w} bytes × {held}", "Megatron FSDP (ZeRO-3, Rajbhandari et al. 2020); " + DIST_OPT)
        gradients = Formula(
            f"{FSDP_GRAD_BYTES} bytes × {held}", "Megatron FSDP: main grads in the model dtype by default"
        )
    else:
        weights = Formula(f"P_stage × {w} bytes ({ctx.precision} weights)", DIST_OPT)
        main = "fp32 main grads" if g == 4 and ctx.precision == "bf16" else f"{ctx.precision} grads"
        gradients = Formula(f"P_stage × {g} bytes ({main})", DIST_OPT)
    if ctx.options.fp8 is not None:
        extra = (
            f"FP8 weight and transpose ({FP8_WEIGHT_BYTES} bytes) instead of the 16-bit copy"
            if ctx.options.fp8_param_gather
            else f"+ {FP8_WEIGHT_BYTES} bytes (FP8 copy and transpose)"
        )
        weights = Formula(f"{weights.text}; linear-layer weights: {extra}", weights.source + "; Transformer Engine FP8")
    states = (
        "fp32 master weight, Adam m and v" if ctx.precision != "fp16" else "fp32 master weight and grad, Adam m and v"
    )
    sharded = (
        " ÷ d·c (Megatron FSDP)"
        if plan.fsdp
        else " ÷ d·c (distributed optimizer)"
        if plan.distributed_optimizer
        else ""
    )
    optimizer = Formula(f"P_stage × {o} bytes ({states}){sharded}{expert if sharded else ''}", DIST_OPT)
    return {
        "weights": weights,
        "gradients": gradients,
        "optimizer": optimizer,
        "activations": activation_formula(ctx, plan),
        "reserve": Formula(
            "CUDA context, NCCL/cuBLAS workspaces, fragmentation", "hardware preset calibration.reserve_gib"
        ),
    }


def activation_formula(ctx: Context, plan: ParallelPlan) -> Formula:
    """Activations of the most loaded stage: in-flight micro-batches × layers × the per-layer bytes."""
    mo = ctx.model
    parts = memory.layer_activation_parts(
        mo.hidden_size,
        mo.num_attention_heads,
        mo.query_groups,
        mo.head_dim,
        mo.ffn,
        gated=mo.swiglu,
        dropout=mo.hidden_dropout > 0,
        fp8=ctx.options.fp8 is not None,
    )
    split = parts["attention"][0] + parts["mlp"][0]
    replicated = parts["attention"][1] + parts["mlp"][1]
    sp = plan.sequence_parallel and plan.tp > 1
    cp = "/c" if plan.cp > 1 else ""
    in_flight = "min(p − i, m)" if plan.vpp == 1 else "min(m·v, 2(p − i − 1) + (v − 1)p + 1)/v"
    if plan.recompute is Recompute.FULL:
        shard = "/t" if sp or ctx.options.distribute_saved_activations else ""
        per_layer = f"2sbh{cp}{shard} (the layer input) + one layer's whole activations while it is recomputed"
    else:
        scores = (
            " + 5as/(ht)"
            if ctx.options.attention_kernel is AttentionKernel.UNFUSED and plan.recompute is Recompute.NONE
            else ""
        )
        per_layer = f"sbh{cp}·({replicated:.3g}{'/t' if sp else ''} + {split:.3g}/t{scores})"
    moe = "; MoE layers keep the routed tokens A·h and the experts' internals instead of the MLP's" if mo.is_moe else ""
    return Formula(
        f"{in_flight} micro-batches × layers × {per_layer}; + embedding (first stage) and fp32 logits "
        f"4sbV/t (last stage){moe}",
        K22 + ("; Megatron-Core MoE" if mo.is_moe else ""),
    )
