"""Memory on the GPUs of each pipeline stage, term by term (bytes)."""

from __future__ import annotations

import numpy as np

from planner.costs import memory, moe
from planner.costs.letters import Letters
from planner.models.params import (
    embedding_params,
    model_layer_params,
    moe_layer_params,
    norm_params,
)
from planner.plan import Context

MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "reserve")
FP8_WEIGHT_BYTES = 1 + 1  # Transformer Engine keeps an FP8 copy of each linear weight and its transpose
FSDP_UNSHARDED_LAYERS = 2  # Megatron FSDP gathers the next layer while computing this one
FSDP_GRAD_BYTES = 2  # Megatron FSDP's main grads default to the model's 16-bit dtype (--megatron-fsdp-main-grads-dtype auto)


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
    return {"dense": dense, "expert": np.broadcast_to(expert, np.shape(dense)), "layers": n * (per_layer_dense + lt.moe_frac * moe_expert),
            "one_layer": per_layer_dense + lt.moe_frac * moe_expert}


def _states(lt: Letters, ctx: Context, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    dense = memory.param_state_bytes(params["dense"], lt.d * lt.c, precision=ctx.precision,
                                     distributed_optimizer=lt.dopt | lt.fsdp)
    expert = memory.param_state_bytes(params["expert"], lt.edp, precision=ctx.precision,
                                      distributed_optimizer=lt.dopt | lt.fsdp)
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
        layers_here = np.where(lt.fsdp, params["layers"] * sharded / np.maximum(params["dense"] + params["expert"], 1),
                               params["layers"])
        states["weights"] = states["weights"] + extra * layers_here
    return states


def _activations(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray:
    n, first, last = lt.stage_info(i)
    split, replicated = memory.layer_activation_coeffs(lt.h, lt.a, lt.g, lt.dh, lt.f, gated=lt.gated, dropout=lt.dropout)
    if lt.fp8:  # linear-layer inputs saved in FP8 (Transformer Engine): half of those tensors' bytes
        split, replicated = split - (lt.a * lt.dh + lt.f) / lt.h, replicated - 2.0

    def per_layer(split_c, replicated_c, rc):
        return lt.act_bytes / 2 * memory.activation_bytes_per_layer(
            lt.s, lt.b, lt.h, lt.a, lt.t, lt.c, sequence_parallel=lt.sp, recompute=rc, unfused_attention=lt.unfused,
            split_coeff=split_c, replicated_coeff=replicated_c, distribute_saved=ctx.options.distribute_saved_activations)

    dense = per_layer(split, replicated, lt.rc)
    whole = per_layer(split, replicated, np.zeros_like(lt.rc))
    if lt.moe_frac:
        mlp_split = (6.0 if lt.gated else 4.0) * lt.f / lt.h - (lt.f / lt.h if lt.fp8 else 0.0)
        mlp_replicated = (1.0 if lt.fp8 else 2.0) + (1.0 if lt.dropout else 0.0)
        A = moe.expert_token_assignments(lt.b, lt.s, lt.t, lt.c, lt.k, imbalance=ctx.options.moe_load_imbalance,
                                         capacity_factor=ctx.options.moe_capacity_factor)
        moe_mlp = moe.moe_mlp_activation_bytes(A, lt.tokens_per_gpu(), lt.h, lt.f_e, lt.etp, gated=lt.gated, fp8_inputs=lt.fp8)
        attention = per_layer(split - mlp_split, replicated - mlp_replicated, lt.rc)
        moe_layer = np.where(lt.rc == 2, dense, attention + moe_mlp)  # full recompute keeps only the input
        whole_moe = per_layer(split - mlp_split, replicated - mlp_replicated, np.zeros_like(lt.rc)) + moe_mlp
        whole = (1 - lt.moe_frac) * whole + lt.moe_frac * whole_moe
        dense = (1 - lt.moe_frac) * dense + lt.moe_frac * moe_layer
    in_flight = memory.in_flight_microbatches(lt.p, lt.m, lt.vpp, i)
    return (in_flight * n * dense
            # the layer being recomputed holds all of its activations; its input is already counted as kept
            + np.where(lt.rc == 2, whole - dense, 0.0)
            + first * np.minimum(lt.p, lt.m) * memory.embedding_activation_bytes(
                lt.s, lt.b, lt.h, lt.t, lt.c, sequence_parallel=lt.sp, dropout=lt.dropout)
            + last * memory.output_layer_activation_bytes(lt.s, lt.b, lt.h, lt.V, lt.t, lt.c, sequence_parallel=lt.sp))


def stage_memory_bytes(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Memory on the GPUs of pipeline stage i, term by term (bytes)."""
    params = stage_params(lt, ctx, i)
    activations = _activations(lt, ctx, i)
    reserve = np.broadcast_to(ctx.hardware.calibration.reserve_bytes, np.shape(activations))
    out = {**_states(lt, ctx, params), "activations": activations, "reserve": reserve,
           "params": params["dense"] + params["expert"], "dense_params": params["dense"], "expert_params": params["expert"]}
    out["total"] = sum(out[k] for k in MEMORY_TERMS)
    return out
