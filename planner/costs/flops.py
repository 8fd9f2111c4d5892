"""FLOPs, counted GEMM by GEMM (a (M×K)·(K×N) product costs 2·M·K·N).

Narayanan et al. 2021, Appendix: forward per layer is QKV 6Bsh², attention scores 2Bs²h,
attention over values 2Bs²h, projection 2Bsh², MLP 16Bsh²; backward is twice the forward; the
logit layer is 2BshV forward. The same per-GEMM count gives grouped-query attention, gated MLPs
and context parallelism without another formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Gemm:
    """One GEMM per GPU: FLOPs and its (M, N, K) shape; ``batch`` independent copies."""

    flops: np.ndarray
    M: np.ndarray
    N: np.ndarray
    K: np.ndarray


def layer_gemms(
    b: ArrayLike, s: int, h: int, a: int, g: int, d: int, f: int, t: ArrayLike, c: ArrayLike = 1, *, gated: bool
) -> dict[str, Gemm]:
    """Forward GEMMs of one transformer layer for one micro-batch on one GPU of a t×c group.

    Tokens per GPU T = b·s/c; QKV T×h×(a+2g)d/t, scores (a/t)·b batched (s/c)×d×s, context
    (a/t)·b batched (s/c)×s×d, projection T×(ad/t)×h, fc1 T×h×(f·(2 if gated))/t, fc2 T×(f/t)×h.
    Sum for GPT shapes (g = a, d = h/a, f = 4h, t = c = 1): 24bsh² + 4bs²h (Narayanan 2021, App.).
    """
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    T = b * s / c
    gate = 2 if gated else 1
    heads = a / t
    q = s / c

    def gemm(M, N, K, batch=1.0):
        M, N, K = np.broadcast_arrays(M, N, K)
        return Gemm(flops=2.0 * batch * M * N * K, M=M * 1.0, N=N * 1.0, K=K * 1.0)

    return {
        "qkv": gemm(T, (a + 2 * g) * d / t, h),
        "attention_scores": gemm(q, s, d, batch=heads * b),
        "attention_context": gemm(q, d, s, batch=heads * b),
        "projection": gemm(T, h, a * d / t),
        "fc1": gemm(T, f * gate / t, h),
        "fc2": gemm(T, h, f / t),
    }


ATTENTION_CORE = ("attention_scores", "attention_context")


def logits_gemm(b: ArrayLike, s: int, h: int, V: ArrayLike, t: ArrayLike, c: ArrayLike = 1) -> Gemm:
    """The output layer on the last stage: (b·s/c)×h×(V/t), 2·b·s·h·V/(t·c) FLOPs forward."""
    T = np.asarray(b) * s / np.asarray(c)
    M, N, K = np.broadcast_arrays(T, np.asarray(V) / np.asarray(t), np.asarray(h))
    return Gemm(flops=2.0 * M * N * K, M=M * 1.0, N=N * 1.0, K=K * 1.0)


def layer_forward_flops(gemms: dict[str, Gemm], *, attention_frac: float = 1.0) -> np.ndarray:
    """Sum of a layer's forward GEMM FLOPs; ``attention_frac`` scales the attention core (½ for
    Megatron-LM's causal-mask convention: megatron/training/training.py, num_floating_point_operations)."""
    return sum(gm.flops * (attention_frac if name in ATTENTION_CORE else 1.0) for name, gm in gemms.items())


def _moe_swap(gemms: dict[str, Gemm], B: int, s: int, h: int, f_e: int, topk: int, *, gated: bool) -> dict[str, Gemm]:
    """A layer's GEMMs with its MLP replaced by top-k experts of width f_e (per token)."""
    moe = {k: v for k, v in gemms.items() if k not in ("fc1", "fc2")}
    T = float(B * s * topk)
    gate = 2 if gated else 1
    moe["expert_fc1"] = Gemm(
        flops=np.asarray(2.0 * T * h * f_e * gate),
        M=np.asarray(T),
        N=np.asarray(f_e * gate * 1.0),
        K=np.asarray(h * 1.0),
    )
    moe["expert_fc2"] = Gemm(
        flops=np.asarray(2.0 * T * f_e * h), M=np.asarray(T), N=np.asarray(h * 1.0), K=np.asarray(f_e * 1.0)
    )
    return moe


@dataclass(frozen=True)
class Shape:
    """The letters a model's FLOPs depend on: L layers of width h; a heads in g query groups of d
    channels; an MLP of width f (gated: SwiGLU's three matrices); ``moe_layers`` of the L send each
    token to ``topk`` experts of width f_e instead."""

    L: int
    h: int
    a: int
    g: int
    d: int
    f: int
    gated: bool
    moe_layers: int = 0
    topk: int = 0
    f_e: int = 0


def _forward_per_layer(B: int, s: int, shape: Shape, *, attention_frac: float = 1.0) -> tuple[float, float, float]:
    """(dense layer, MoE layer, attention core) forward FLOPs for B sequences of s tokens."""
    gemms = layer_gemms(B, s, shape.h, shape.a, shape.g, shape.d, shape.f, 1, gated=shape.gated)
    dense = layer_forward_flops(gemms, attention_frac=attention_frac)
    experts = _moe_swap(gemms, B, s, shape.h, shape.f_e, shape.topk, gated=shape.gated) if shape.moe_layers else None
    moe = layer_forward_flops(experts, attention_frac=attention_frac) if experts else 0.0
    core = sum(gemms[name].flops for name in ATTENTION_CORE)
    return float(dense), float(moe), float(core)


def model_flops(B: int, s: int, V: int, shape: Shape, *, attention_frac: float = 1.0) -> float:
    """Model FLOPs of one iteration: one forward and one backward (twice the forward) of every GEMM.

    For GPT shapes equals 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)) (Korthikanti et al. 2022, Eq. 7);
    with ``attention_frac = 0.5`` equals Megatron-LM's logged 72·B·s·L·h²·(1 + s/(12h) + V/(12hL))
    (megatron/training/training.py, num_floating_point_operations at commit d98e8a64). ``moe_layers`` of
    the L layers run their tokens through ``topk`` experts of width ``f_e`` instead of the dense MLP (Megatron's
    formula: e·f_e·k per token in place of e·f; the router's h·E GEMM is not counted, as there).
    """
    dense, moe, _ = _forward_per_layer(B, s, shape, attention_frac=attention_frac)
    L, m = shape.L, shape.moe_layers
    return float(3.0 * ((L - m) * dense + m * moe + logits_gemm(B, s, shape.h, V, 1).flops))


def recompute_flops(B: int, s: int, shape: Shape, *, recompute: ArrayLike) -> np.ndarray:
    """FLOPs re-done by activation recomputation in one iteration, counted honestly.

    Full (code 2): one more forward of every layer (not the logits), so model + recompute equals
    96·B·s·L·h²·(1 + s/(6h) + V/(16hL)) (Narayanan et al. 2021, Eq. 3). Selective (code 1): one
    more forward of the attention core, 4·B·s²·h per layer (Korthikanti et al. 2022, §5), which
    gives 72·B·L·s·h²·(1 + 2s/(9h) + V/(12hL)), not Eq. 8's s/(3h), which counts the recomputed
    attention core three times (docs/cost-model.md §3).
    """
    dense, moe, core = _forward_per_layer(B, s, shape)
    full = (shape.L - shape.moe_layers) * dense + shape.moe_layers * moe
    core = shape.L * core
    recompute = np.asarray(recompute)
    return np.where(recompute == 2, full, np.where(recompute == 1, core, 0.0))


def korthikanti_eq8_flops(B: int, s: int, L: int, h: int, V: int) -> float:
    """Hardware FLOPs with selective recomputation as Korthikanti et al. 2022 Eq. (8) prints it:
    72·B·L·s·h²·(1 + s/(3h) + V/(12hL)). It counts the recomputed attention core three times
    over; used only to reproduce that paper's HFU column."""
    return 72.0 * B * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L))
