"""Activations one decoder layer keeps per micro-batch, for a dense and an MoE layer, under each kind
of recomputation (bytes, per GPU). ``planner.costs.stage_memory`` multiplies them by a stage's layers
of each kind and its micro-batches in flight."""

from __future__ import annotations

import numpy as np

from planner.costs import memory, moe
from planner.costs.letters import ACT_KEY, Letters
from planner.costs.mla import mla_activation_parts, mla_up_proj_outputs
from planner.plan import Context, RecomputeModule

KINDS = ("whole", "selective", "input")  # no recomputation, --recompute-modules, full recomputation


def per_layer_bytes(lt: Letters, ctx: Context, split, replicated, rc, *, attention: bool = True) -> np.ndarray:
    """``memory.activation_bytes_per_layer`` for (split, replicated) coefficients of sbh; ``attention`` False for a
    part with no attention core (the shared experts' MLP), which keeps no unfused scores whatever the kernel."""
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
            unfused_attention=lt.unfused if attention else False,
            split_coeff=split,
            replicated_coeff=replicated,
            distribute_saved=ctx.options.distribute_saved_activations,
        )
    )


def selective_coefficients(parts: dict, modules: tuple, dropout: bool) -> tuple[float, float, int]:
    """(split, replicated, recompute code for the attention scores) of a dense layer under selective
    recomputation of ``modules``: core_attn drops the unfused attention's scores (Korthikanti et al. 2022
    §4.2); mlp keeps only the MLP's input, already counted with the attention block, and its dropout
    mask (transformer_layer.py:536-539); layernorm changes nothing: Transformer Engine fuses the norms
    into the next linear layer, so the layer has no norm module to recompute (transformer_layer.py:475-479)."""
    (attn_split, attn_repl), (mlp_split, mlp_repl) = parts["attention"], parts["mlp"]
    mlp = RecomputeModule.MLP in modules
    split = attn_split + (0.0 if mlp else mlp_split)
    replicated = attn_repl + ((1.0 if dropout else 0.0) if mlp else mlp_repl)
    return split, replicated, 1 if RecomputeModule.CORE_ATTN in modules else 0


def activation_parts(lt: Letters, ctx: Context) -> dict[str, tuple[float, float]]:
    """Korthikanti et al. 2022 §4.1's (split, replicated) coefficients of the attention block (MLA's
    with multi-latent attention, ``mla.mla_activation_parts``) and of the dense MLP."""
    mo = ctx.model
    parts = memory.layer_activation_parts(
        lt.h,
        lt.a,
        lt.g,
        lt.dh,
        lt.f,
        gated=lt.gated,
        dropout=lt.dropout,
        fp8=lt.fp8,
        flash_attention=not lt.unfused,
        fp8_scale_bytes=lt.fp8_scale,
    )
    if mo.multi_latent_attention:
        parts["attention"] = mla_activation_parts(mo, dropout=lt.dropout, fp8=lt.fp8, flash_attention=not lt.unfused)
    return parts


def _moe_kept(lt: Letters, ctx: Context) -> tuple:
    """Bytes an MoE layer keeps beyond its attention block: the routed copies and experts' internals, and the
    shared experts' MLP tensors, without and with the plan's --recompute-modules (moe, moe_act,
    shared_experts; ``layer_kinds``)."""
    modules = ctx.options.recompute_modules
    A = moe.expert_token_assignments(
        lt.b,
        lt.s,
        lt.t,
        lt.c,
        lt.k,
        imbalance=ctx.options.moe_load_imbalance,
        capacity_factor=ctx.options.moe_capacity_factor,
    ) + moe.plan_router_padding_rows(ctx.options, lt.E)
    routed = moe.moe_mlp_activation_bytes(
        A, lt.tokens_per_gpu(), lt.h, lt.f_e, lt.etp, gated=lt.gated, fp8_inputs=lt.fp8
    )
    shared = 0.0 * routed
    if lt.f_s:  # the shared experts keep what a dense MLP of width f_s keeps, split over t
        shared_split, _ = memory.layer_activation_parts(
            lt.h, lt.a, lt.g, lt.dh, lt.f_s, gated=lt.gated, dropout=False, fp8=lt.fp8, fp8_scale_bytes=lt.fp8_scale
        )["mlp"]
        shared = per_layer_bytes(lt, ctx, shared_split, 0.0, 0, attention=False)
    recomputed_block = RecomputeModule.MOE in modules
    act_out = A * lt.f_e * (1.0 if lt.fp8 else 2.0) if RecomputeModule.MOE_ACT in modules else 0.0
    routed_s = 0.0 * routed if recomputed_block else routed - act_out
    shared_s = 0.0 * shared if recomputed_block or RecomputeModule.SHARED_EXPERTS in modules else shared
    return routed, shared, routed_s, shared_s


def layer_kinds(lt: Letters, ctx: Context) -> dict:
    """Bytes one layer keeps per micro-batch: for a ``dense`` and a ``moe`` layer, each a dict of
    ``whole`` (no recomputation), ``selective`` (with --recompute-modules) and ``input`` (full
    recomputation keeps only the layer's input); and the same kinds of the parts explain shows:
    ``attention`` (the attention block with the norms' inputs), ``routed`` (the routed copies and the
    experts' internals) and ``shared`` (the shared experts) of an MoE layer. Reads the letters of
    ``ACT_KEY`` alone (``layer_activations`` computes it once per distinct value of them).

    MoE layers keep the routed copies and the experts' internals (``moe.moe_mlp_activation_bytes``)
    and the shared experts' MLP tensors instead of the dense MLP's; --recompute-modules moe recomputes
    the whole MoE block (routed and shared experts) from its input, moe_act discards the experts'
    activation output, fc2's input (an output-discarding checkpoint, transformer_config.py:560-583),
    shared_experts the shared experts' tensors (moe_layer.py:515-529), mla_up_proj MLA's Q, K and V."""
    mo, modules = ctx.model, ctx.options.recompute_modules
    parts = activation_parts(lt, ctx)
    (attn_split, attn_repl), (mlp_split, mlp_repl) = parts["attention"], parts["mlp"]
    split_s, repl_s, rc_s = selective_coefficients(parts, modules, lt.dropout)
    up = mla_up_proj_outputs(mo) if mo.multi_latent_attention and RecomputeModule.MLA_UP_PROJ in modules else 0.0
    split_s -= up  # mla_up_proj: Q, K and V are recomputed from the latents before the core's backward
    dense = {
        "whole": per_layer_bytes(lt, ctx, attn_split + mlp_split, attn_repl + mlp_repl, 0),
        "selective": per_layer_bytes(lt, ctx, split_s, repl_s, rc_s),
        "input": per_layer_bytes(lt, ctx, attn_split + mlp_split, attn_repl + mlp_repl, 2),
    }
    attention = {
        "whole": per_layer_bytes(lt, ctx, attn_split, attn_repl, 0),
        "selective": per_layer_bytes(lt, ctx, attn_split - up, attn_repl, rc_s),
        "input": dense["input"],
    }
    nothing = dict.fromkeys(KINDS, 0.0 * attention["whole"])
    out = {"dense": dense, "moe": dense, "attention": attention, "routed": nothing, "shared": nothing}
    if not mo.is_moe:
        return out
    routed, shared, routed_s, shared_s = _moe_kept(lt, ctx)
    out["moe"] = {
        "whole": attention["whole"] + routed + shared,
        "selective": attention["selective"] + routed_s + shared_s,
        "input": dense["input"],
    }
    out["routed"] = {"whole": routed, "selective": routed_s, "input": 0.0 * routed}
    out["shared"] = {"whole": shared, "selective": shared_s, "input": 0.0 * shared}
    return out


def layer_activations(lt: Letters, ctx: Context) -> dict:
    """``layer_kinds``' ``dense`` and ``moe`` layers for every plan, computed once per distinct value of
    ``ACT_KEY`` (``Letters.once``)."""
    return lt.once(lambda v: _some_kinds(v, ctx, ("dense", "moe")), "layer_activations", ACT_KEY)


def kept_parts(lt: Letters, ctx: Context) -> dict:
    """What a layer's ``attention`` block, ``routed`` experts and ``shared`` experts keep per micro-batch
    under each plan's recomputation (``layer_kinds``, ``kept_per_layer``): the parts explain shows."""
    kinds = lt.once(lambda v: _some_kinds(v, ctx, PARTS), "layer_activation_parts", ACT_KEY)
    return {part: kept_per_layer(lt, kinds[part]) for part in PARTS}


PARTS = ("attention", "routed", "shared")


def _some_kinds(lt: Letters, ctx: Context, names: tuple[str, ...]) -> dict:
    kinds = layer_kinds(lt, ctx)
    return {name: kinds[name] for name in names}


def kept_per_layer(lt: Letters, kinds: dict) -> np.ndarray:
    """What a layer keeps under the plan's recomputation (0 none, 1 selective, 2 full), from its
    ``whole``, ``selective`` and ``input``."""
    return np.where(lt.rc == 0, kinds["whole"], np.where(lt.rc == 1, kinds["selective"], kinds["input"]))
