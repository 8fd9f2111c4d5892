"""Compute time on one GPU: GEMMs on a shape-dependent roofline (BF16, or FP8 with its casts),
memory-bound ops at HBM speed, and the attention core either unfused (batched GEMMs + softmax and
dropout passes) or one flash kernel whose efficiency rises with the sequence length as published
kernel benchmarks show (the law and its per-GPU parameters: hardware ``attention`` section).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.costs.flops import Gemm
from planner.costs.memory import mlp_activation_tensors
from planner.hardware.spec import AttentionKernelSpec

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

BACKWARD_GEMM_FACTOR = 2.0  # dgrad + wgrad, each as many FLOPs as the forward (Narayanan 2021, App.)
BACKWARD_ELEMENTWISE_FACTOR = (
    2.0  # backward of an elementwise op reads the saved input and the output grad and writes the input grad
)
HEAD_DIM_REFERENCE = 128  # the head width the kernel tables measure; narrower heads run at a penalty

# HBM bytes one FP8 quantisation moves per 16-bit element, by recipe, for the copies the three
# GEMMs need (Transformer Engine docs: fp8_delayed_scaling.rst, fp8_current_scaling.rst 'Transpose
# handling' and 'Performance analysis', mxfp8.rst 'Handling transposes', fp8_blockwise_scaling.rst).
# Hopper needs a physically transposed FP8 copy for the column-wise GEMM operand; Blackwell's one
# per-tensor FP8 copy serves both, but MXFP8 scales 1×32 blocks along rows and columns separately.
FP8_CAST_BYTES = {
    # recipe: (Hopper, Blackwell)
    "delayed": (2 + 1 + 1, 2 + 1),  # read 16 bits; write FP8 (and FP8ᵀ); the amax comes from the history
    "tensorwise": (2 + 2 + 1 + 1, 2 + 2 + 1),  # current scaling reads the tensor twice: amax, then cast
    "mxfp8": (2 + 2 * (1 + 1 / 32), 2 + 2 * (1 + 1 / 32)),  # two block-scaled copies, E8M0 scale per 32
    "blockwise": (2 + 2 * (1 + 4 / 128), 2 + 2 * (1 + 4 / 128)),  # 1×128 tiles, fp32 scales, both layouts
    # NVFP4 (--fp4-recipe nvfp4, Blackwell only; TE quantizer.cpp NVFP4Quantizer::quantize_impl @d0067d0): one amax
    # pass (nvte_hadamard_transform_amax: the row-wise amax and the column-wise post-RHT amax in one read), then one
    # cast reading it again and writing the row-wise and the column-wise (Hadamard-transformed, for wgrad) E2M1
    # copies, 4 bits an element with an E4M3 scale per 16; the per-tensor FP32 scale is one word
    "nvfp4": (2 + 2 + 2 * (0.5 + 1 / 16), 2 + 2 + 2 * (0.5 + 1 / 16)),
}
UNFUSED_NORM_CASTS = frozenset({"nvfp4"})  # TE's fused norm + cast does not take NVFP4 with RHT (normalization.cpp)
FP8_FUSED_READ_BYTES = 2  # a cast fused into TE's LayerNormLinear does not read its input again

# (forward, backward) HBM bytes per element of the f-wide MLP activation output, 16-bit tensors.
# Fused (one kernel: Megatron's bias_gelu/bias_swiglu, its jit_fuser-compiled squared_relu) reads the
# input(s) and writes the output, the backward twice that (§4.2's convention). Op by op, each PyTorch
# op reads and writes its own tensors (aten kernels; backward formulas of tools/autograd/derivatives.yaml).
ACTIVATION_BYTES = {
    ("gelu", True): (2 + 2, 2 * (2 + 2)),
    ("gated", True): (4 + 2, 2 * (4 + 2)),
    ("squared_relu", True): (2 + 2, 2 * (2 + 2)),
    ("gelu", False): (2 + 2, 2 * (2 + 2)),  # F.gelu is one kernel either way
    # relu (r2 w2), pow (r2 w2); backward pow_backward = grad·(2·x.pow(1)): copy (r2 w2), scale (r2 w2),
    # product (r2 r2 w2), then relu's threshold_backward (r2 r2 w2)
    ("squared_relu", False): (4 + 4, 4 + 4 + 6 + 6),
    # silu(x1) (r2 w2), its product with x2 (r2 r2 w2); backward: two products (r2 r2 w2 each),
    # silu_backward (r2 r2 w2), the chunk's gradient concatenated (r2 r2 w4)
    ("gated", False): (4 + 6, 6 + 6 + 6 + 8),
}


def activation_kind(model) -> str:
    """The ``ACTIVATION_BYTES`` kind of a model's MLP activation: gated (SwiGLU, GPT-OSS's quick GeGLU), squared ReLU
    (Nemotron-4) or GeLU."""
    return "gated" if model.gated else "squared_relu" if model.squared_relu else "gelu"


def activation_extra_bytes(kind: str, *, fused: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes per activation element beyond one fused kernel's: 0 when fused;
    op by op, squared ReLU (NeMo 2's ``squared_relu``, not scripted: nemo/collections/llm/fn/activation.py
    @v2.2.0) moves 4 and 12 more, an unfused GLU (``--no-bias-swiglu-fusion``) 4 and 14 (ACTIVATION_BYTES)."""
    f_fwd, f_bwd = ACTIVATION_BYTES[(kind, True)]
    e_fwd, e_bwd = ACTIVATION_BYTES[(kind, fused)]
    return e_fwd - f_fwd, e_bwd - f_bwd


def gemm_efficiency(M: ArrayLike, N: ArrayLike, K: ArrayLike, *, eta_max: float, half_dim: float) -> np.ndarray:
    """Fraction of peak a GEMM of shape (M, N, K) reaches.

    η = η_max · Π_{x ∈ (M, N, K)} x / (x + x½): large GEMMs approach η_max; a dimension near the
    tile size (x½, calibrated) wastes tile and wave quantisation, so small per-GPU shapes (large
    t, small b, short heads) run slower. η_max is anchored to published large-GEMM throughput and
    fitted inside its band (hardware preset ``calibration``; megaplan calibrate).
    """
    M, N, K = (np.asarray(x, dtype=float) for x in (M, N, K))
    return eta_max * (M / (M + half_dim)) * (N / (N + half_dim)) * (K / (K + half_dim))


def gemm_time_s(gemm: Gemm, *, peak_flops_per_s: float, eta_max: float, half_dim: float) -> np.ndarray:
    """t = F / (peak · η(M, N, K))."""
    return gemm.flops / (peak_flops_per_s * gemm_efficiency(gemm.M, gemm.N, gemm.K, eta_max=eta_max, half_dim=half_dim))


def fp8_cast_bytes_per_element(recipe: str, *, one_copy_serves_both: bool, fused: bool = False) -> float:
    """HBM bytes to quantise one 16-bit element into the FP8 copies its GEMMs use (FP8_CAST_BYTES);
    ``one_copy_serves_both``: Blackwell (compute capability ≥ 10) needs no transposed FP8 copy for
    per-tensor scaling; ``fused``: the cast rides on TE's fused LayerNorm, which already read it (not NVFP4's: with
    the random Hadamard transform TE normalises in 16 bits and runs the quantiser after it, normalization.cpp
    FUSED_NORM_AMAX_NVFP4 is taken only without RHT)."""
    hopper, blackwell = FP8_CAST_BYTES[recipe]
    saved = FP8_FUSED_READ_BYTES if fused and recipe not in UNFUSED_NORM_CASTS else 0.0
    return (blackwell if one_copy_serves_both else hopper) - saved


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
    rope_channels: int = 0,
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
    same) the one on attention probabilities. ``rope``: rotary position embedding of the queries
    and keys, ``rope_channels`` = (a + g)·d_h of them split over t, read and written in 16 bits
    (Transformer Engine's fused RoPE: 4·sb·(a + g)·d_h/t, the whole head whatever --rotary-percent: the kernel
    copies the channels it does not rotate, fused_rope.cu "copy the rest"). Tokens are divided by c under context
    parallelism.
    """
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    sbh = s * b * h / c
    attention_dropout = dropout if attention_dropout is None else attention_dropout
    softmax = (9.0 if attention_dropout else 4.0) * a * s * (s / c) * b / t if unfused_attention else 0.0 * sbh
    return {
        "norm_residual": (22.0 if dropout else 20.0) * sbh / np.where(sequence_parallel, t, 1),
        "mlp_activation": 2.0 * mlp_activation_tensors(gated) * sbh * (f / h) / t,
        "attention_softmax": softmax,
        "rope": 4.0 * (s * b / c) * rope_channels / t,
    }


def qk_norm_bytes(b: ArrayLike, s: int, a: int, g: int, d_h: int, t: ArrayLike, c: ArrayLike = 1) -> np.ndarray:
    """HBM bytes of one layer's per-head query and key norms (``--qk-layernorm``) in the forward, per GPU.

    Megatron-Core's SelfAttention normalises each of the a query heads and g key heads over its d_h
    channels after the QKV projection (``get_query_key_value_tensors``: ``self.q_layernorm(query)``,
    ``self.k_layernorm(key)``, megatron/core/transformer/attention.py core_r0.14.0 l.1028-1032; TENorm
    from gpt_layer_specs.py ``backend.layer_norm(for_qk=True)``), two norm kernels apart from the layer's
    input norm. Each reads its 16-bit input and writes its output, as the layer's other norms
    (Korthikanti et al. 2022 §4.1: 4 bytes per element), heads split over t, tokens over c:

        B_qk = 4·(s·b/c)·(a + g)·d_h/t

    Qwen3-30B-A3B (a = 32, g = 4, d_h = 128) at b = 1, s = 4,096, t = 1: 75,497,472 B, 2.25× the layer's
    input norm (h = 2,048). Multi-latent attention normalises its latents instead (``blocks``' latent norms).
    """
    b, t, c = np.asarray(b, dtype=float), np.asarray(t), np.asarray(c)
    return 4.0 * (s * b / c) * (a + g) * d_h / t


def flash_attention_flops(
    bh: ArrayLike,
    s_q: ArrayLike,
    s_kv: ArrayLike,
    d_qk: ArrayLike,
    d_v: ArrayLike,
    *,
    causal: ArrayLike,
    window: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) FLOPs of one flash-attention call over bh = batch × query heads.

    F_fwd = 2·bh·N·(d_qk + d_v), F_bwd = 2·bh·N·(3·d_qk + 2·d_v), N = s_q·s_kv query-key pairs, s²/2
    under a causal mask: the two forward GEMMs (QKᵀ, PV) and the backward's five (Dao 2023 §4.1;
    Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py flops()). With d_qk = d_v = d
    the forward is 4·bh·s²·d (halved when causal) and the backward 2.5× that. GQA does not change it.
    A causal sliding window of W keys (``window``, self-attention) computes the band
    N = s·W − W(W−1)/2 (NVIDIA/cudnn-frontend benchmark_single_sdpa.py flops(), sliding_window_size).
    """
    pairs = np.asarray(s_q, dtype=float) * np.asarray(s_kv, dtype=float) * np.where(causal, 0.5, 1.0)
    if window is not None:
        s_q = np.asarray(s_q, dtype=float)
        pairs = np.where(s_q > window, s_q * window - window * (window - 1) / 2, pairs)
    base = 2.0 * np.asarray(bh, dtype=float) * pairs
    d_qk, d_v = np.asarray(d_qk, dtype=float), np.asarray(d_v, dtype=float)
    return base * (d_qk + d_v), base * (3 * d_qk + 2 * d_v)


def flash_attention_efficiency(
    s_kv: ArrayLike,
    d_qk: ArrayLike,
    d_v: ArrayLike,
    *,
    causal: ArrayLike,
    window: int | None = None,
    eta_max: float,
    row_overhead: float,
    diagonal_overhead: float,
    head_dim_exponent: float,
    mla_factor: float = 1.0,
) -> np.ndarray:
    """Fraction of the 16-bit dense peak one pass of a flash-attention kernel reaches.

    η = η_max · min(1, d̄/128)^α · m · s_kv/(s_kv + s½), d̄ = (d_qk + d_v)/2, m the MLA factor when
    d_qk ≠ d_v, s½ = s_nc without a mask and 2·s_nc + s_diag with a causal one. A kernel does a fixed
    amount of work per query row (load Q, rescale, write O and the log-sum-exp; in the backward the
    dO·O pass and dQ), s_nc key positions' worth, so η rises with the keys a row walks; a causal row
    walks half of them on average and pays the masked diagonal tiles, s_diag. The parameters are
    fitted per GPU to published kernel tables (planner.fidelity.kernels), where η rises with s as
    this law does. Under a causal sliding window of W keys (``window`` < s_kv) a row walks W keys,
    paying its fixed work and the masked diagonal tile once: s_kv → W, s½ = s_nc + s_diag (within
    25 % of cuDNN's GPT-OSS window tables on GB200, GB300 and H200, ``tests/test_attention_kernels.py``).
    """
    s_kv = np.asarray(s_kv, dtype=float)
    d_qk, d_v = np.asarray(d_qk, dtype=float), np.asarray(d_v, dtype=float)
    width = np.minimum(1.0, 0.5 * (d_qk + d_v) / HEAD_DIM_REFERENCE) ** head_dim_exponent
    mla = np.where(d_qk != d_v, mla_factor, 1.0)
    s_half = np.where(causal, 2 * row_overhead + diagonal_overhead, row_overhead)
    if window is not None:
        windowed = s_kv > window
        s_half = np.where(windowed, row_overhead + diagonal_overhead, s_half)
        s_kv = np.where(windowed, float(window), s_kv)
    return eta_max * width * mla * s_kv / (s_kv + s_half)


def flash_attention_time_s(
    bh: ArrayLike,
    s_q: ArrayLike,
    s_kv: ArrayLike,
    d_qk: float,
    d_v: float,
    *,
    causal: bool,
    kernel: AttentionKernelSpec,
    peak_flops_per_s: float,
    scale: float = 1.0,
    window: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one flash-attention call: F/(P_peak · η · scale) for each pass,
    η from the GPU's kernel law (``flash_attention_efficiency``), scale the calibrated multiplier;
    ``window``: a causal sliding window of that many keys."""
    flops = flash_attention_flops(bh, s_q, s_kv, d_qk, d_v, causal=causal, window=window)

    def one(p: str, f: np.ndarray) -> np.ndarray:
        eta = flash_attention_efficiency(
            s_kv,
            d_qk,
            d_v,
            causal=causal,
            eta_max=getattr(kernel, f"{p}_efficiency"),
            row_overhead=getattr(kernel, f"{p}_row_overhead"),
            diagonal_overhead=getattr(kernel, f"{p}_diagonal_overhead"),
            head_dim_exponent=getattr(kernel, f"{p}_head_dim_exponent"),
            mla_factor=getattr(kernel, f"{p}_mla_factor"),
            window=window,
        )
        return f / (peak_flops_per_s * scale * eta)

    return one("fwd", flops[0]), one("bwd", flops[1])


def time_ratio_at_seq(s: ArrayLike, table: dict[int, float]) -> np.ndarray:
    """A kernel time ratio measured at a few sequence lengths, at length ``s``:

    r(s) = r_i + (r_{i+1} − r_i)·(log₂ s − log₂ s_i)/(log₂ s_{i+1} − log₂ s_i)  for s_i ≤ s ≤ s_{i+1}

    linear in log₂ s between the measured lengths (cuDNN's tables double s from one row to the next), the end
    value beyond either end."""
    seqs = sorted(table)
    x = np.log2(np.asarray(s, dtype=float))
    return np.interp(x, np.log2(np.asarray(seqs, dtype=float)), np.asarray([table[k] for k in seqs], dtype=float))


def fp8_attention_time_s(
    fwd_s: ArrayLike, bwd_s: ArrayLike, square_bwd_s: ArrayLike, *, fwd_ratio: float, bwd_ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of an FP8 flash-attention call from the 16-bit kernel law's.

    t_fwd,8 = r_f · t_fwd,16;  t_bwd,8 = r_b · t_bwd,16(whole causal square)

    r_f, r_b: the FP8 kernel's time over the 16-bit kernel's at the same causal shape (the GPU preset's
    ``attention.mxfp8_*_time_ratio``, or for per-tensor FP8 its ``fp8_*_time_ratio_by_seq`` at the call's length,
    ``time_ratio_at_seq``: read from cuDNN's own tables). The FP8 backward does not skip the
    tiles a sliding window masks: cuDNN's GPT-OSS tables (window 128, d_h 64, GB200) time its MXFP8
    backward at 2.080, 7.427, 27.94 and 108.4 ms for s = 4k, 8k, 16k and 32k - ×3.6-3.9 per doubling,
    the causal square's s², where the 16-bit window backward grows as s (0.465 ... 3.692 ms). So
    ``square_bwd_s`` is the 16-bit backward over the whole causal square (the window's ``bwd_s`` itself
    when there is no window). Source: NVIDIA/cudnn-frontend @3929da2ef4c1
    benchmark/sdpa_benchmark_training/results/{llama3.1,gpt_oss}/gb200 (cuDNN 9.22)."""
    return fwd_ratio * np.asarray(fwd_s, dtype=float), bwd_ratio * np.asarray(square_bwd_s, dtype=float)


# Megatron-Core's unfused RoPE (rope_utils.py _apply_rotary_pos_emb_bshd and _rotate_half @ core_r0.16.0,
# eager PyTorch), HBM bytes per 16-bit element of the queries and keys, as (the ops on the rotated channels, the
# ops on the whole head). Forward: t·cos (r2 w2), −x2 (r1 w1), cat(−x2, x1) (r2 w2), ·sin (r2 w2), the sum
# (r4 w2) on the rotated channels: 20; cat with the pass-through part (r2 w2) over the whole head: 4. Backward
# (autograd): ·sin (r2 w2), neg (r1 w1), the chunk's gradient assembled (r2 w2), ·cos (r2 w2), the two paths'
# gradients summed (r4 w2): 20; the slice's zero-filled gradient and its copy (w2 r2 w2): 6. 24 and 26 when
# every channel rotates (--rotary-percent 1).
UNFUSED_ROPE_BYTES = ((20.0, 4.0), (20.0, 6.0))
FUSED_ROPE_BYTES = (4.0, BACKWARD_ELEMENTWISE_FACTOR * 4.0)  # elementwise_bytes' rope term, and its backward


def unfused_rope_extra_bytes(
    elements: ArrayLike, slowdown: float = 1.0, rotary_fraction: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes the op-by-op RoPE moves beyond the fused kernel's, for ``elements``
    16-bit query and key elements on the GPU (s·b/c · (a + g)·d_h/t), ``rotary_fraction`` p of each head's
    channels rotated (--rotary-percent), as bytes at the calibrated HBM rate B_m = B_HBM·η_mem (the block times
    every byte at it):

        extra_fwd = (r·(20·p + 4) − 4)·N,   extra_bwd = (r·(20·p + 6) − 2·4)·N,   r = max(1, B_m / B_eager)

    (UNFUSED_ROPE_BYTES against FUSED_ROPE_BYTES: the rotation's ops touch the p·d_h rotated channels, the cat
    and the slice's gradient the whole head; Transformer Engine's fused kernel reads and writes the whole head
    whatever p, copying the pass-through channels: fused_rope.cu fused_rope_block_forward, "copy the rest").
    ``slowdown`` r: the op-by-op kernels' eager elementwise bandwidth B_eager against B_m
    (``eager_rope_slowdown``); 1 where no eager rate is measured. Eager PyTorch runs a broadcast or strided
    operand (t·cos with cos [s, 1, 1, d], the rotate-half's chunks) in its non-vectorised elementwise kernel, a
    few bytes in flight per thread, so the bandwidth it reaches is bounded by the bytes in flight over the memory
    latency, not by the HBM peak: B200 runs the eager rotate-half of q and k at 1.55 TB/s against the 5.7 TB/s of
    the same ops fused (pytorch/pytorch PR 176223).

    YaRN positions run it: Megatron-Core's apply_rotary_pos_emb takes the unfused path whenever the YaRN
    concentration factor is not 1 (rope_utils.py @ core_r0.16.0: 'mscale ... is not supported by TE's fused
    RoPE'; GPT-OSS: 0.1·ln 32 + 1 = 1.347, yarn_rotary_pos_embedding.py _yarn_get_mscale), and
    Megatron-Bridge turns apply_rope_fusion off for any position embedding but 'rope'
    (src/megatron/bridge/utils/fusions.py validate_rope_fusion_compatibility @ v0.4.0:83-92)."""
    n, r, p = np.asarray(elements, dtype=float), max(1.0, slowdown), rotary_fraction
    (rot_fwd, whole_fwd), (rot_bwd, whole_bwd) = UNFUSED_ROPE_BYTES
    return (
        (r * (rot_fwd * p + whole_fwd) - FUSED_ROPE_BYTES[0]) * n,
        (r * (rot_bwd * p + whole_bwd) - FUSED_ROPE_BYTES[1]) * n,
    )


def eager_rope_slowdown(hbm_bytes_per_s: float, memory_efficiency: float, eager_bytes_per_s: float | None) -> float:
    """r = B_HBM·η_mem / B_eager (≥ 1): how much longer the op-by-op RoPE's bytes take at the GPU's measured eager
    elementwise bandwidth than at the calibrated HBM law; 1 without a measurement (GPUSpec
    ``eager_elementwise_tbytes_per_s``)."""
    if eager_bytes_per_s is None:
        return 1.0
    return max(1.0, hbm_bytes_per_s * memory_efficiency / eager_bytes_per_s)


def eager_bytes_ratio(memory_efficiency: float, eager_hbm_frac: float | None) -> float:
    """r = η_mem / η_eager (≥ 1): how much longer the bytes of PyTorch's eager, op-by-op kernels take at the fraction
    η_eager of HBM they are measured to reach on large contiguous operands than at the calibrated HBM law W_HBM·η_mem;
    1 without a measurement (GPUSpec ``eager_hbm_frac``). The bytes counted at W_HBM·η_mem are multiplied by r, as
    ``linears.cast_bytes`` does for the FP8 casts. Applies to the ops the model runs one by one: the unfused experts'
    clamp and bias (``moe.expert_extra_bytes``) and an unfused activation (``activation_extra_bytes``).

    B200 (dgx-b200-superpod): η_eager 0.744, η_mem 0.89: r = 0.89/0.744 = 1.196."""
    if eager_hbm_frac is None:
        return 1.0
    return max(1.0, memory_efficiency / eager_hbm_frac)
