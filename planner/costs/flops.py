"""FLOPs, counted GEMM by GEMM (a (M×K)·(K×N) product costs 2·M·K·N).

Narayanan et al. 2021, Appendix: forward per layer is QKV 6Bsh², attention scores 2Bs²h,
attention over values 2Bs²h, projection 2Bsh², MLP 16Bsh²; backward is twice the forward; the
logit layer is 2BshV forward. The same per-GEMM count gives grouped-query attention, gated MLPs
and context parallelism without another formula.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
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


def layer_forward_flops(gemms: dict[str, Gemm]) -> np.ndarray:
    """Sum of a layer's forward GEMM FLOPs."""
    return sum(gm.flops for gm in gemms.values())


def logits_gemm(b: ArrayLike, s: int, h: int, V: ArrayLike, t: ArrayLike, c: ArrayLike = 1) -> Gemm:
    """The output layer on the last stage: (b·s/c)×h×(V/t), 2·b·s·h·V/(t·c) FLOPs forward."""
    T = np.asarray(b) * s / np.asarray(c)
    M, N, K = np.broadcast_arrays(T, np.asarray(V) / np.asarray(t), np.asarray(h))
    return Gemm(flops=2.0 * M * N * K, M=M * 1.0, N=N * 1.0, K=K * 1.0)


def mla_gemms(
    b: ArrayLike,
    s: int,
    h: int,
    n: int,
    mla: tuple[int | None, int, int, int, int],
    t: ArrayLike,
    c: ArrayLike = 1,
    *,
    sequence_parallel: ArrayLike = False,
) -> dict[str, Gemm]:
    """Forward GEMMs of one multi-latent attention block for one micro-batch on one GPU of a t×c group.

    ``mla`` = (r_q, r_kv, d_qk, d_r, d_v) (DeepSeek-V2 §2.1). The down-projections h → r_q and
    h → r_kv + d_r are replicated over t (Transformer Engine 'duplicated' linears) and run on the
    tokens the rank holds: T/t with sequence parallelism, all T without. The up-projections
    r_q → n(d_qk + d_r) and r_kv → n(d_qk + d_v), the output projection n·d_v → h and the attention
    core (scores over d_qk + d_r, context over d_v) split the n heads over t. Without a query latent
    (r_q None) the query is one projection h → n(d_qk + d_r) split over t.
    """
    r_q, r_kv, d_qk, d_r, d_v = mla
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    T = b * s / c
    local = T / np.where(sequence_parallel, t, 1)
    heads = n / t
    q = s / c

    def gemm(M, N, K, batch=1.0):
        M, N, K = np.broadcast_arrays(M, N, K)
        return Gemm(flops=2.0 * batch * M * N * K, M=M * 1.0, N=N * 1.0, K=K * 1.0)

    out = {
        "kv_down": gemm(local, r_kv + d_r, h),
        "kv_up": gemm(T, heads * (d_qk + d_v), r_kv),
        "attention_scores": gemm(q, s, d_qk + d_r, batch=heads * b),
        "attention_context": gemm(q, d_v, s, batch=heads * b),
        "projection": gemm(T, h, heads * d_v),
    }
    if r_q:
        out["q_down"] = gemm(local, r_q, h)
        out["q_up"] = gemm(T, heads * (d_qk + d_r), r_q)
    else:
        out["q_proj"] = gemm(T, heads * (d_qk + d_r), h)
    return out


def mlp_gemms(T: ArrayLike, h: int, f: int, t: ArrayLike, *, gated: bool, prefix: str = "") -> dict[str, Gemm]:
    """An MLP of width f over T tokens, split over t: fc1 T×(f·(2 if gated)/t)×h, fc2 T×h×(f/t)."""
    gate = 2 if gated else 1
    M, N1, K1 = np.broadcast_arrays(np.asarray(T, dtype=float), f * gate / np.asarray(t), float(h))
    _, N2, K2 = np.broadcast_arrays(M, float(h), f / np.asarray(t))
    return {
        f"{prefix}fc1": Gemm(flops=2.0 * M * N1 * K1, M=M, N=N1, K=K1),
        f"{prefix}fc2": Gemm(flops=2.0 * M * N2 * K2, M=M, N=N2, K=K2),
    }


@dataclass(frozen=True)
class Shape:
    """The letters a model's FLOPs depend on: L layers of width h; a heads in g query groups of d
    channels; an MLP of width f (gated: SwiGLU's three matrices); ``moe_layers`` of the L send each
    token to ``topk`` experts of width f_e instead, plus shared experts of width f_s; ``mla`` =
    (r_q, r_kv, d_qk, d_r, d_v) for multi-latent attention; ``window_layers`` of the L attend to
    ``window`` keys only; ``mtp`` multi-token-prediction depths, each one more layer of the last
    layer's kind (MoE if ``mtp_moe``), a 2h → h projection and its own logits. ``norm_macs``: count the
    norms Megatron-LM's num_floating_point_operations counts as one multiply-add per channel (MLA's two latent
    norms, r_q + r_kv, in every layer; an MTP depth's three norms of h)."""

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
    f_s: int = 0
    mla: tuple[int | None, int, int, int, int] | None = None
    window: int | None = None
    window_layers: int = 0
    mtp: int = 0
    mtp_moe: bool = False
    norm_macs: bool = False

    @classmethod
    def of(cls, model, *, megatron: bool = False) -> Shape:
        """A model spec's shape. ``megatron``: as Megatron-LM's num_floating_point_operations sees it
        (megatron/training/training.py:1009-1310 at d98e8a64): gated only with --swiglu (line 1070), sliding
        windows costed as full attention (lines 1164-1170, 1309), norms counted as multiply-adds (lines 1102-1106,
        1115-1120, 1288-1297)."""
        m = model
        mla = (m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim)
        moe = (m.num_moe_layers, m.moe_router_topk, m.expert_ffn, m.shared_ffn) if m.is_moe else (0, 0, 0, 0)
        window = (None, 0) if megatron or m.window is None else (m.window, sum(m.window_pattern))
        dims = (m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups, m.head_dim, m.ffn)
        gated = m.swiglu if megatron else m.gated
        mla = mla if m.multi_latent_attention else None
        return cls(*dims, gated, *moe, mla, *window, m.mtp_layers, m.mtp_is_moe, megatron)


def core_fraction(s: int, window: int | None, *, causal: bool) -> float:
    """Share of the s×s query-key pairs a layer computes. Unmasked (``causal`` False, the papers'
    model-FLOP convention): all of them, or the s·W band of a sliding window of W keys. Causal:
    Σ_i min(i, W) = s·W − W(W−1)/2 pairs of a window, and ½ of the square for full attention
    (Megatron-LM's convention; FlashAttention skips the blocks above the diagonal)."""
    if window is None or window >= s:
        return 0.5 if causal else 1.0
    if causal:
        return (s * window - window * (window - 1) / 2) / s**2
    return window / s


@functools.lru_cache(maxsize=1024)
def layer_forward(B: int, s: int, shape: Shape) -> dict[str, float]:
    """Forward FLOPs of one layer for B sequences of s tokens by part: ``attention`` (its linear
    GEMMs), ``core`` (the s×s score and context GEMMs, unmasked), ``mlp`` (dense), ``moe`` (k routed
    experts and the shared experts). A layer's forward is attention + core·(fraction) + mlp or moe.
    Of them, ``up_proj`` (MLA's up-projections) and ``shared`` (the shared experts): what the recompute
    modules mla_up_proj and shared_experts run again."""
    if shape.mla:
        gm = mla_gemms(B, s, shape.h, shape.a, shape.mla, 1)
        attention = sum(float(v.flops) for k, v in gm.items() if k not in ATTENTION_CORE)
        core = sum(float(gm[k].flops) for k in ATTENTION_CORE)
    else:
        gm = layer_gemms(B, s, shape.h, shape.a, shape.g, shape.d, shape.f, 1, gated=shape.gated)
        attention = float(gm["qkv"].flops + gm["projection"].flops)
        core = sum(float(gm[k].flops) for k in ATTENTION_CORE)
    T = B * s
    gate = 2 if shape.gated else 1
    mlp = 2.0 * T * shape.h * shape.f * (gate + 1)
    moe = 2.0 * T * shape.h * (shape.f_e * shape.topk + shape.f_s) * (gate + 1)
    up_proj = sum(float(gm[k].flops) for k in ("q_up", "kv_up") if k in gm) if shape.mla else 0.0
    shared = 2.0 * T * shape.h * shape.f_s * (gate + 1)
    return {"attention": attention, "core": core, "mlp": mlp, "moe": moe, "up_proj": up_proj, "shared": shared}


@functools.lru_cache(maxsize=1024)
def _layers_forward(B: int, s: int, shape: Shape, *, attention_frac: float | None, causal: bool) -> float:
    """Σ over the L layers and the MTP depths of the forward FLOPs. ``attention_frac`` fixes the
    core's share for every layer (Megatron's ½); else ``core_fraction`` per layer kind."""
    part = layer_forward(B, s, shape)
    full = core_fraction(s, None, causal=causal) if attention_frac is None else attention_frac
    windowed = core_fraction(s, shape.window, causal=causal) if attention_frac is None else attention_frac
    layers = shape.L + shape.mtp
    moe = shape.moe_layers + (shape.mtp if shape.mtp_moe else 0)
    cores = (layers - shape.window_layers) * full + shape.window_layers * windowed
    return layers * part["attention"] + cores * part["core"] + (layers - moe) * part["mlp"] + moe * part["moe"]


def model_flops(
    B: int, s: int, V: int, shape: Shape, *, attention_frac: float | None = None, causal: bool = False
) -> float:
    """Model FLOPs of one iteration: one forward and one backward (twice the forward) of every GEMM.

    For GPT shapes equals 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)) (Korthikanti et al. 2022, Eq. 7);
    with ``attention_frac = 0.5`` equals Megatron-LM's logged 72·B·s·L·h²·(1 + s/(12h) + V/(12hL))
    (megatron/training/training.py, num_floating_point_operations at commit d98e8a64). ``moe_layers``
    of the L layers run their tokens through ``topk`` experts of width ``f_e`` and the shared experts
    instead of the dense MLP (Megatron's formula: e·(f_e·k + f_s) per token in place of e·f; the
    router's h·E GEMM is not counted, as there). Each MTP depth adds a layer, the 2h → h projection
    and one more logit GEMM (training.py:1286-1296). Without ``attention_frac`` each layer's core
    costs ``core_fraction`` of the square: all of it unmasked, a sliding window's band, or with
    ``causal`` the pairs a causal kernel computes.
    """
    layers = _layers_forward(B, s, shape, attention_frac=attention_frac, causal=causal)
    T = B * s
    mtp_projection = shape.mtp * 2.0 * T * 2 * shape.h * shape.h
    logits = (1 + shape.mtp) * float(logits_gemm(B, s, shape.h, V, 1).flops)
    return float(3.0 * (layers + mtp_projection + logits + norm_macs_flops(T, shape)))


def norm_macs_flops(T: int, shape: Shape) -> float:
    """Forward FLOPs Megatron-LM's num_floating_point_operations gives norms (``Shape.norm_macs``), 2 per
    multiply-add: 2·T·((L + mtp)·(r_q + r_kv) + mtp·3h) (training.py:1102-1106 and 1115-1120, the "+ 1" of the
    q and kv LoRA terms; 1288-1297, "MTP eh norm + final norm"); 0 otherwise."""
    if not shape.norm_macs:
        return 0.0
    latent = (shape.mla[0] or 0) + shape.mla[1] if shape.mla else 0
    return 2.0 * T * ((shape.L + shape.mtp) * latent + shape.mtp * 3 * shape.h)


def recompute_flops(B: int, s: int, shape: Shape, *, recompute: ArrayLike) -> np.ndarray:
    """FLOPs re-done by activation recomputation in one iteration, counted honestly.

    Full (code 2): one more forward of every layer (not the logits), so model + recompute equals
    96·B·s·L·h²·(1 + s/(6h) + V/(16hL)) (Narayanan et al. 2021, Eq. 3). Selective (code 1): one
    more forward of the attention core, 4·B·s²·h per layer (Korthikanti et al. 2022, §5), which
    gives 72·B·L·s·h²·(1 + 2s/(9h) + V/(12hL)), not Eq. 8's s/(3h), which counts the recomputed
    attention core three times (docs/cost-model.md §3).
    """
    full = _layers_forward(B, s, shape, attention_frac=None, causal=False)
    part = layer_forward(B, s, shape)
    windowed = core_fraction(s, shape.window, causal=False)
    layers = shape.L + shape.mtp
    core = part["core"] * ((layers - shape.window_layers) + shape.window_layers * windowed)
    recompute = np.asarray(recompute)
    return np.where(recompute == 2, full, np.where(recompute == 1, core, 0.0))


def korthikanti_eq8_flops(B: int, s: int, L: int, h: int, V: int) -> float:
    """Hardware FLOPs with selective recomputation as Korthikanti et al. 2022 Eq. (8) prints it:
    72·B·L·s·h²·(1 + s/(3h) + V/(12hL)). It counts the recomputed attention core three times
    over; used only to reproduce that paper's HFU column."""
    return 72.0 * B * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L))


# What each convention of Megatron-LM's num_floating_point_operations does (megatron/training/training.py @ d98e8a64)
FLOP_GAP_TEXT = {
    "causal": (
        "counts causal attention: half of each s×s score and context product",
        "training.py:1163-1170 (MLA: 1126-1137), query_projection_size / 2",
    ),
    "windows": (
        "counts sliding-window layers as full causal attention: it has no window term",
        "training.py:1251, 1309 (seqlen_squared_sum_in_batch × the core term, every attention layer)",
    ),
    "gated": (
        "counts a gated MLP as gated only with --swiglu: --quick-geglu MLPs as two GEMMs, not three",
        "training.py:1070: ffn_expansion_factor = 3 if args.swiglu else 2",
    ),
    "norms": (
        "counts MLA's latent norms and the MTP norms as multiply-adds",
        "training.py:1102-1106, 1115-1120 (the + 1 of the LoRA terms), 1288-1297",
    ),
}


@dataclass(frozen=True)
class FlopGap:
    """One reason the FLOPs Megatron-LM logs differ from megaplan's model FLOPs (the MFU basis): what Megatron
    does, its source line, and the FLOPs of one iteration it moves (megaplan's minus Megatron's)."""

    what: str
    source: str
    flops: float


def megatron_flop_gaps(B: int, s: int, V: int, model) -> list[FlopGap]:
    """Why Megatron-LM's logged FLOPs (``model_flops(..., Shape.of(model, megatron=True), attention_frac=0.5)``)
    differ from megaplan's model FLOPs (``model_flops(..., Shape.of(model))``, attention unmasked): the count is
    taken from one to the other a convention at a time (causal halving, windows as full, the --swiglu-only gate,
    norms as multiply-adds), each step that moves it a gap. The steps telescope: Σ gaps = model − logged, exactly."""
    real, logged = Shape.of(model), Shape.of(model, megatron=True)
    steps = [
        ("causal", real, None, True),
        ("windows", real, 0.5, False),
        ("gated", replace(real, gated=logged.gated), 0.5, False),
        ("norms", logged, 0.5, False),
    ]
    previous = model_flops(B, s, V, real)
    gaps = []
    for key, shape, frac, causal in steps:
        now = model_flops(B, s, V, shape, attention_frac=frac, causal=causal)
        if now != previous:
            gaps.append(FlopGap(*FLOP_GAP_TEXT[key], previous - now))
        previous = now
    return gaps
