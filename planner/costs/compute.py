"""Compute time on one GPU: GEMMs on a shape-dependent roofline, memory-bound ops at HBM speed,
the attention core either unfused (batched GEMMs + softmax/dropout passes) or one flash kernel.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.costs.flops import ATTENTION_CORE, Gemm
from planner.costs.memory import mlp_activation_tensors

BACKWARD_GEMM_FACTOR = 2.0  # dgrad + wgrad, each as many FLOPs as the forward (Narayanan 2021, App.)
BACKWARD_ELEMENTWISE_FACTOR = (
    2.0  # backward of an elementwise op reads the saved input and the output grad and writes the input grad
)
FLASH_BACKWARD_FACTOR = 2.5  # FlashAttention-2 backward runs 5 GEMMs per block to the forward's 2 (Dao 2023, §3.2)
FLASH_CAUSAL_FRAC = 0.5  # a causal flash kernel skips the blocks above the diagonal


def gemm_efficiency(M: ArrayLike, N: ArrayLike, K: ArrayLike, *, eta_max: float, half_dim: float) -> np.ndarray:
    """Fraction of peak a GEMM of shape (M, N, K) reaches.

    η = η_max · Π_{x ∈ (M, N, K)} x / (x + x½): large GEMMs approach η_max; a dimension near the
    tile size (x½, calibrated) wastes tile and wave quantisation, so small per-GPU shapes (large
    t, small b, short heads) run slower. η_max and x½ are fitted to published runs
    (hardware preset ``calibration``; megaplan calibrate).
    """
    M, N, K = (np.asarray(x, dtype=float) for x in (M, N, K))
    return eta_max * (M / (M + half_dim)) * (N / (N + half_dim)) * (K / (K + half_dim))


def gemm_time_s(gemm: Gemm, *, peak_flops_per_s: float, eta_max: float, half_dim: float) -> np.ndarray:
    """t = F / (peak · η(M, N, K))."""
    return gemm.flops / (peak_flops_per_s * gemm_efficiency(gemm.M, gemm.N, gemm.K, eta_max=eta_max, half_dim=half_dim))


def elementwise_bytes(
    b: ArrayLike,
    s: int,
    h: int,
    a: int,
    f: int,
    t: ArrayLike,
    c: ArrayLike = 1,
    *,
    sequence_parallel: np.ndarray,
    gated: bool,
    unfused_attention: bool,
    dropout: bool,
    attention_dropout: bool | None = None,
) -> dict[str, np.ndarray]:
    """HBM bytes read and written by one layer's memory-bound ops in the forward pass, per GPU, by part.

    Each op reads its 16-bit input(s) and writes its output, as Korthikanti et al. 2022 §4.1 lists
    the tensors. ``norm_residual``: two layer norms (read 2sbh, write 2sbh: 4sbh each) and two
    bias-dropout-residual adds (read 2sbh + 2sbh, write 2sbh, mask sbh: 7sbh each; 6sbh without
    dropout) - 22sbh, replicated over t unless SP shards it. ``mlp_activation``: the activation over
    f channels, 2 bytes × its tensors (``memory.mlp_activation_tensors``: GeLU 4·sbf/t, SwiGLU
    6·sbf/t). ``attention_softmax``, unfused attention only: the scale-mask-softmax (read
    2as²b/t, write 2as²b/t) and attention dropout (read 2, write 2, mask 1): 9·as²b/t, 4·as²b/t
    without attention dropout. ``dropout`` is the hidden dropout, ``attention_dropout`` (default: the
    same) the one on attention probabilities. Tokens are divided by c under context parallelism.
    """
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    sbh = s * b * h / c
    attention_dropout = dropout if attention_dropout is None else attention_dropout
    softmax = (9.0 if attention_dropout else 4.0) * a * s * (s / c) * b / t if unfused_attention else 0.0 * sbh
    return {
        "norm_residual": (22.0 if dropout else 20.0) * sbh / np.where(sequence_parallel, t, 1),
        "mlp_activation": 2.0 * mlp_activation_tensors(gated) * sbh * (f / h) / t,
        "attention_softmax": softmax,
    }


def flash_attention_time_s(
    gemms: dict[str, Gemm], *, peak_flops_per_s: float, efficiency: float, causal: bool = True
) -> np.ndarray:
    """Forward time of a flash-attention kernel: the scores and context FLOPs, halved for a
    causal mask (blocks above the diagonal are skipped), at the kernel's own efficiency."""
    flops = sum(gemms[name].flops for name in ATTENTION_CORE)
    return flops * (FLASH_CAUSAL_FRAC if causal else 1.0) / (peak_flops_per_s * efficiency)
