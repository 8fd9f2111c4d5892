"""The FLOPs of one iteration of a plan, all GPUs: the model's (the MFU basis), the hardware's (with
what recomputation re-runs: the HFU basis) and the figure Megatron-LM logs (``planner.costs.flops``)."""

from __future__ import annotations

import functools

import numpy as np

from planner.costs import flops
from planner.costs.letters import Letters
from planner.plan import Context, RecomputeModule
from planner.space.grid import distinct


def flop_terms(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """Model, hardware (with recomputation) and Megatron-logged FLOPs per iteration, all GPUs.

    ``model``: every GEMM with attention unmasked (the papers' MFU basis: Narayanan et al. 2021 Eq. 3,
    Korthikanti et al. 2022 Eq. 7), sliding windows at their band and gated MLPs as they are;
    ``causal``: the same with each causal attention core counted by the query-key pairs it keeps (½ of
    the square; a window's s·W − W(W−1)/2), the convention Megatron-LM, Megatron-Bridge and most
    papers report MFU in (Chowdhery et al. 2022 App. B count the full square, and so does ``model``);
    ``megatron``: as Megatron-LM's num_floating_point_operations logs it (causal attention halved,
    --quick-geglu counted ungated, sliding windows as full)."""
    mo = ctx.model
    V = lt.V[:, 0]
    shape, logged_shape = flops.Shape.of(mo), flops.Shape.of(mo, megatron=True)
    vocab = distinct(V)
    model = np.array([_model_flops(lt.B, lt.s, int(v), shape, None) for v in vocab])
    causal = np.array([_model_flops(lt.B, lt.s, int(v), shape, None, causal=True) for v in vocab])
    logged = np.array([_model_flops(lt.B, lt.s, int(v), logged_shape, 0.5) for v in vocab])
    idx = np.searchsorted(vocab, V)
    rec = _recomputed_flops(lt, ctx, shape)
    return {"model": model[idx], "causal": causal[idx], "hardware": model[idx] + rec, "megatron": logged[idx]}


@functools.lru_cache(maxsize=256)
def _model_flops(
    B: int, s: int, V: int, shape: flops.Shape, attention_frac: float | None, *, causal: bool = False
) -> float:
    return flops.model_flops(B, s, V, shape, attention_frac=attention_frac, causal=causal)


def _recomputed_flops(lt: Letters, ctx: Context, shape: flops.Shape) -> np.ndarray:
    """FLOPs recomputation re-does (flops.recompute_flops): block recomputation re-runs its share of the
    layers (of an even split's stage); selective recomputation the modules it names: the attention
    core, the dense layers' MLPs (mlp), the MoE layers' experts (moe), MLA's up-projections
    (mla_up_proj), the shared experts (shared_experts)."""
    rc = lt.rc[:, 0]
    full = flops.recompute_flops(lt.B, lt.s, shape, recompute=np.full_like(rc, 2))
    core = flops.recompute_flops(lt.B, lt.s, shape, recompute=np.ones_like(rc))
    n = lt.L / lt.p  # (plans, 1)
    share = np.where(lt.rblock, lt.recomputed_layers(n) / np.maximum(n, 1), 1.0)[:, 0]
    modules = ctx.options.recompute_modules
    part = flops.layer_forward(lt.B, lt.s, shape)
    moe_layers = shape.moe_layers + (shape.mtp if shape.mtp_moe else 0)
    mlp = part["mlp"] * (shape.L + shape.mtp - moe_layers)
    experts = part["moe"] * moe_layers
    selective = (
        core * (RecomputeModule.CORE_ATTN in modules)
        + mlp * (RecomputeModule.MLP in modules)
        + experts * (RecomputeModule.MOE in modules)
        + part["up_proj"] * (shape.L + shape.mtp) * (RecomputeModule.MLA_UP_PROJ in modules)
        + part["shared"]
        * moe_layers
        * (RecomputeModule.SHARED_EXPERTS in modules and RecomputeModule.MOE not in modules)
    )
    return np.where(rc == 2, share * full, np.where(rc == 1, selective, 0.0))
