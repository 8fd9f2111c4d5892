"""Inputs that make a plan nonsensical, said as warnings (the plan is still estimated).

Megatron-LM runs them, so they are not errors; but a user who typed them by mistake should hear
about it: a sequence too short for the cost model's fits, a global batch too small to keep the
GPUs busy, and a plan whose MFU is low because the batch leaves the pipeline mostly idle.
"""

from __future__ import annotations

import math

from planner.plan import Context

MIN_SEQ_LEN = 128  # shorter sequences are below every GEMM and attention shape the efficiencies are fitted on
BUBBLE_WARN_FRAC = 0.25  # a pipeline idle a quarter of the iteration or more: MFU is low because of the batch


def input_warnings(ctx: Context, gpus: int) -> list[str]:
    """Warnings about the training inputs on ``gpus`` GPUs, before any plan is chosen."""
    out = []
    s, B = ctx.training.seq_len, ctx.training.global_batch
    if s < MIN_SEQ_LEN:
        out.append(
            f"sequence length {s} is under {MIN_SEQ_LEN} tokens: far below any Megatron-LM pretraining run, "
            "and below the GEMM and attention shapes the efficiencies are fitted on (--seq-len)"
        )
    gpn = ctx.hardware.gpus_per_node
    widest_dp = max(gpus // gpn, 1)  # data-parallel size with a whole node per TP group and no PP
    if B < widest_dp:
        out.append(
            f"global batch {B} is smaller than data-parallel size × micro-batch even with TP over a whole node "
            f"and no PP ({widest_dp} × 1 on {gpus:,} GPUs): every plan must split the model over at least "
            f"{math.ceil(gpus / B):,} GPUs, so expect a low MFU (--global-batch)"
        )
    return out + (
        [mlp_recompute_note(ctx.model.name)] if "mlp" in ctx.options.recompute_modules and no_dense(ctx) else []
    )


def no_dense(ctx: Context) -> bool:
    """A mixture-of-experts model with no dense MLP layer (Qwen3-30B-A3B, Mixtral, GPT-OSS)."""
    return ctx.model.is_moe and all(ctx.model.moe_pattern)


def mlp_recompute_note(model: str) -> str:
    """Why --recompute-modules mlp (search's rc-mlp) changes nothing on a model without a dense MLP layer."""
    return (
        f"--recompute-modules mlp recomputes nothing on {model}: every layer is MoE, and Megatron-LM recomputes the "
        "mlp module in dense layers only (transformer_layer.py: not self.is_moe_layer); rc-mlp is the plan "
        "without it (moe_act or moe recompute the experts)"
    )


def plan_warnings(pj: dict) -> list[str]:
    """Warnings about one estimated plan (its plan JSON)."""
    est, par = pj["estimate"], pj["parallel"]
    if est["bubble_frac"] < BUBBLE_WARN_FRAC or par["pp"] == 1:
        return []
    return [
        f"MFU {100 * est['mfu']:.1f}% is low because of the batch: global batch {pj['training']['global_batch']} "
        f"gives m = {est['num_microbatches']:g} micro-batches per pipeline of {par['pp']} stages, so the pipeline "
        f"bubble is {100 * est['bubble_frac']:.0f}% of the iteration; the pipeline needs m ≫ p "
        "(Narayanan et al. 2021 §2.2): a larger --global-batch or fewer stages"
    ]


def refused_modules_note(ctx: Context, pins) -> str | None:
    """Why search builds no selective row: --recompute-modules given (``Pins.recompute_modules``) that Megatron-LM
    refuses on this model or with these options (``space.rules.MODULE_REFUSALS``); None when it builds them, or
    when --recompute selective is pinned too (then no plan is legal, and the error says why)."""
    from planner.space.rules import refused_modules

    if pins.recompute_modules is None or pins.recompute is not None:
        return None
    reasons = refused_modules(ctx.options, ctx.model)
    if not reasons:
        return None
    return f"search builds no selective recomputation on {ctx.model.name}: {'; '.join(reasons)}"
