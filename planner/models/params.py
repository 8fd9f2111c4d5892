"""Parameter counts, per layer and per pipeline stage, on one GPU, and of the whole model.

Closed forms of Narayanan et al. 2021 Eq. (2) generalised to grouped-query and multi-latent
attention (DeepSeek-V2 §2.1, arXiv:2405.04434), gated MLPs, RMSNorm, bias-free linears, routed and
shared experts and multi-token prediction (DeepSeek-V3 §2.2, arXiv:2412.19437); every function
broadcasts over numpy arrays of t, ep and etp.

Two conventions share these formulas. The real count (default) is every parameter the model holds.
``megatron=True`` counts as Megatron-LM's ``report_theoretical_memory`` does at commit d98e8a64
(megatron/training/theoretical_memory_usage.py:12-183): no biases except the router's, a gated MLP
only with ``--swiglu`` (GPT-OSS's ``--quick-geglu`` counts as ungated), no QK-norm or attention-sink
weights, an MTP layer as one whole decoder layer of the last layer's kind without its projection
and norms, and MTP experts all counted as active (docs/cost-model.md §2 lists the differences).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from planner.models.spec import ModelSpec, Normalization, SoftmaxType

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def padded_vocab(V: int, divisible_by: int, t: ArrayLike) -> np.ndarray:
    """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by·t``
    (megatron/training/tokenizer: _vocab_size_with_padding): ⌈V/(div·t)⌉·div·t, in floats (V and the
    multiple exact integers far below 2**53, so the ceiling of their rounded quotient is the exact one: a
    quotient that is not an integer lies at least 1/multiple from one, far beyond its rounding)."""
    multiple = divisible_by * np.asarray(t, dtype=float)
    return np.ceil(V / multiple) * multiple


def gqa_attention_params(h: int, a: int, g: int, d: int, t: ArrayLike, *, bias: bool) -> np.ndarray:
    """Self-attention of one layer on one of t ranks: QKV h·(a+2g)·d and projection a·d·h split
    over t; biases (a+2g)·d split and h replicated (Narayanan et al. 2021 Eq. 2: 4h² + 4h for GPT)."""
    split = h * (a + 2 * g) * d + a * d * h + ((a + 2 * g) * d if bias else 0)
    return split / np.asarray(t) + h if bias else split / np.asarray(t)


def mlp_params(h: int, f: int, t: ArrayLike, *, gated: bool, bias: bool) -> np.ndarray:
    """One MLP on one of t tensor-parallel ranks: fc1 h·f·(2 if gated) and fc2 f·h split over t;
    biases fc1 f·(2 if gated) split, fc2 h replicated."""
    gate = 2 if gated else 1
    split = (h * f * gate + f * h + (f * gate if bias else 0)) / np.asarray(t)
    return split + h if bias else split


def layer_params(
    h: int, a: int, g: int, d: int, f: int, t: ArrayLike, *, gated: bool, bias: bool, norm_params_per_norm: int
) -> np.ndarray:
    """Parameters of one transformer layer held by one of t tensor-parallel ranks: attention
    (``gqa_attention_params``), MLP (``mlp_params``) and two norms of ``norm_params_per_norm`` each,
    replicated. With t = 1, a = g, d = h/a, f = 4h and LayerNorm this is 12h² + 13h (Narayanan et
    al. 2021, Eq. 2)."""
    attention = gqa_attention_params(h, a, g, d, t, bias=bias)
    return attention + mlp_params(h, f, t, gated=gated, bias=bias) + 2 * norm_params_per_norm


def norm_size(model: ModelSpec) -> int:
    """ν: parameters per normalised channel, 2 for LayerNorm (weight and bias), 1 for RMSNorm."""
    return 2 if model.normalization is Normalization.LAYERNORM else 1


def norm_params(model: ModelSpec) -> int:
    """Parameters of one norm over h: ν·h."""
    return norm_size(model) * model.hidden_size


@dataclass(frozen=True)
class Counting:
    """Which of Megatron-LM's counting conventions a parameter count follows, one switch each, so that the gap
    between megaplan's count and the one Megatron prints is the sum of one term per switch
    (``megatron_count_gaps``). Lines of megatron/training/theoretical_memory_usage.py at commit d98e8a64."""

    swiglu_only: bool = False  # line 21: gated_linear_multiplier = 3/2 only with --swiglu (--quick-geglu: 2 matrices)
    no_biases: bool = False  # lines 82-93, 103-121: no linear biases (the router's, lines 128-132, is counted)
    no_qk_norms: bool = False  # lines 82-93: no --qk-layernorm weights
    no_sinks: bool = False  # lines 82-93: no --softmax-type learnable logits
    no_learned_positions: bool = False  # lines 95-100: word embeddings only, no learned position table
    no_mtp_extras: bool = False  # lines 170-173: an MTP depth is one decoder layer, without its 2h·h projection, norms
    mtp_all_active: bool = False  # lines 179-183: the whole MTP block counted active, all its experts


REAL = Counting()
MEGATRON = Counting(*(True for _ in fields(Counting)))


def counting(megatron: bool | Counting) -> Counting:
    """``megatron``: True for all of Megatron-LM's conventions, False for the real count, or a ``Counting``."""
    if isinstance(megatron, Counting):
        return megatron
    return MEGATRON if megatron else REAL


def _kinds(model: ModelSpec, megatron: bool | Counting) -> tuple[bool, bool]:
    """(gated, bias) as counted: Megatron-LM's estimator sees a gated MLP only through --swiglu and no biases."""
    c = counting(megatron)
    return (model.swiglu if c.swiglu_only else model.gated, False if c.no_biases else model.add_bias_linear)


def mla_attention_params(model: ModelSpec, t: ArrayLike, *, megatron: bool | Counting = False) -> np.ndarray:
    """Multi-latent attention on one of t ranks (DeepSeek-V2 §2.1; Megatron-LM
    theoretical_memory_usage.py:62-80). With n heads, latent ranks r_q and r_kv, head dims d_qk
    (non-rotary), d_r (rotary) and d_v: split over t the query up-projection r_q·n·(d_qk + d_r)
    (h·n·(d_qk + d_r) without a query latent), the key/value up-projection r_kv·n·(d_qk + d_v) and
    the output projection n·d_v·h; replicated (Transformer Engine builds the down-projections
    'duplicated', multi_latent_attention.py:526-600) the down-projections h·r_q and h·(r_kv + d_r)
    and the two latent norms ν·(r_q + r_kv)."""
    m, h, n = model, model.hidden_size, model.num_attention_heads
    nu = norm_size(m)
    d_q = m.qk_head_dim + m.qk_pos_emb_head_dim
    r_q = m.q_lora_rank
    split = (r_q or h) * n * d_q + m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) + n * m.v_head_dim * h
    replicated = (h * r_q + nu * r_q if r_q else 0) + h * (m.kv_lora_rank + m.qk_pos_emb_head_dim)
    replicated += nu * m.kv_lora_rank
    _, bias = _kinds(m, megatron)
    if bias:  # biases of the split projections, and the output projection's replicated one
        split += n * d_q + n * (m.qk_head_dim + m.v_head_dim)
        replicated += h
    return split / np.asarray(t) + replicated


def attention_params(model: ModelSpec, t: ArrayLike = 1, *, megatron: bool | Counting = False) -> np.ndarray:
    """One layer's attention on one of t ranks, with its QK-norm and attention-sink weights
    (d per query and key head norm; one learned logit per head with --softmax-type learnable)."""
    if model.multi_latent_attention:
        return mla_attention_params(model, t, megatron=megatron)
    m, c = model, counting(megatron)
    _, bias = _kinds(m, c)
    out = gqa_attention_params(m.hidden_size, m.num_attention_heads, m.query_groups, m.head_dim, t, bias=bias)
    if not c.no_qk_norms and m.qk_layernorm:
        out = out + 2 * norm_size(m) * m.head_dim
    if not c.no_sinks and m.softmax_type is SoftmaxType.LEARNABLE:
        out = out + m.num_attention_heads / np.asarray(t)
    return out


def dense_layer_params(model: ModelSpec, t: ArrayLike = 1, *, megatron: bool | Counting = False) -> np.ndarray:
    """A layer with a dense MLP on one of t ranks: attention, MLP of width f, two norms."""
    gated, bias = _kinds(model, megatron)
    mlp = mlp_params(model.hidden_size, model.ffn, t, gated=gated, bias=bias)
    return attention_params(model, t, megatron=megatron) + mlp + 2 * norm_params(model)


model_layer_params = dense_layer_params  # the adapter that unpacks a spec into ``layer_params``' letters


def dense_layer_param_tensors(model: ModelSpec) -> int:
    """Parameter tensors of a dense layer as Megatron-Core's Transformer Engine spec registers them, each a
    boundary a DDP bucket can close at (param_and_grad_buffer.py: a bucket closes once past bucket_size, at
    the end of a parameter): linear_qkv and linear_proj weights, linear_fc1 and linear_fc2 weights, the two
    norms fused into linear_qkv and linear_fc1 (layer_norm_weight, and layer_norm_bias under LayerNorm),
    the four linear biases with --add-bias-linear, and q_layernorm and k_layernorm with --qk-layernorm.
    GPT with LayerNorm and biases: 4 + 4 + 4 = 12; Llama (RMSNorm, no bias): 4 + 2 = 6."""
    nu = norm_size(model)
    qk = 2 * nu if model.qk_layernorm else 0
    return 4 + 2 * nu + (4 if model.add_bias_linear else 0) + qk


LINEAR_WEIGHT_TENSORS = 4  # linear_qkv, linear_proj, linear_fc1 and linear_fc2 weights of a layer


def bucket_group_tensors(model: ModelSpec, layers: ArrayLike, *, low_precision_params: bool) -> np.ndarray:
    """Parameter tensors of a model chunk of ``layers`` layers whose ends can close one of Megatron-Core's DDP bucket
    groups (one reduce-scatter and one all-gather each: param_and_grad_buffer.py partition_buckets). 16-bit parameters
    (case 2: a group per bucket): every tensor of its layers (``dense_layer_param_tensors``) and the word table,
    L·n_t + 1. FP8 or NVFP4 parameters (--fp8-param-gather, --fp4-param-gather: a uint8 buffer beside the 16-bit
    one, case 3, core_r0.9.0 onwards, core_v0.19.0:1739-1760): a group per bucket of the low-precision buffer, the
    linear weights, and every bucket of the 16-bit buffer (norms, biases, the word table) merged into its last group,
    L·4. Llama 3.1 8B, 32 layers: 193 and 128."""
    L = np.asarray(layers, dtype=float)
    if low_precision_params:
        return L * LINEAR_WEIGHT_TENSORS
    return L * dense_layer_param_tensors(model) + 1.0


def moe_layer_params(
    model: ModelSpec,
    t: ArrayLike,
    ep: ArrayLike,
    etp: ArrayLike,
    *,
    megatron: bool | Counting = False,
    active: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of one mixture-of-experts layer on one GPU.

    Dense: attention and two norms as in a dense layer, the router h·E (+E with biases) replicated,
    and the shared experts, an MLP of width f_s split over t. Expert: E/ep local experts, each an
    MLP of width f_e split over etp (Megatron theoretical_memory_usage.py:215-245: routed experts
    divided by etp·ep, not t). ``active`` counts the k experts a token passes through instead of E.
    """
    h, E = model.hidden_size, model.num_experts or 0
    gated, bias = _kinds(model, megatron)
    router = h * E + (E if model.add_bias_linear else 0)
    shared = mlp_params(h, model.shared_ffn, t, gated=gated, bias=bias) if model.shared_ffn else 0.0
    dense = attention_params(model, t, megatron=megatron) + 2 * norm_params(model) + router + shared
    experts = model.moe_router_topk if active else E
    expert = experts / np.asarray(ep) * mlp_params(h, model.expert_ffn, etp, gated=gated, bias=bias)
    return dense, expert


def mtp_extra_params(model: ModelSpec, t: ArrayLike = 1, *, megatron: bool | Counting = False) -> np.ndarray:
    """What one multi-token-prediction depth holds besides its decoder layer: the norms of the
    embedding and of the hidden state, the projection of their concatenation 2h·h (split over t)
    and its final norm (DeepSeek-V3 §2.2; Megatron-LM multi_token_prediction.py). Megatron-LM's
    estimator leaves them out."""
    if counting(megatron).no_mtp_extras or not model.mtp_layers:
        return np.asarray(0.0)
    h = model.hidden_size
    return 2 * h * h / np.asarray(t) + 3 * norm_params(model)


def embedding_params(model: ModelSpec, t: ArrayLike, s: int) -> dict[str, np.ndarray]:
    """Word embedding V_pad·h/t (vocab-parallel), learned position table s_max·h (replicated: one number for
    every t)."""
    V = padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, t)
    word = V * model.hidden_size / np.asarray(t)
    learned = model.position_embedding_type.value == "learned_absolute"
    position = model.max_position_embeddings * model.hidden_size if learned else 0
    return {"word": word, "position": np.float64(position)}


@dataclass(frozen=True)
class ParamCounts:
    """A model's parameters: ``total`` and ``active`` (per token: k of the E experts), each with
    its transformer block, multi-token-prediction block and embeddings."""

    total: float
    active: float
    block: float
    active_block: float
    mtp: float
    active_mtp: float
    embeddings: float


def param_counts(
    model: ModelSpec, *, padded_for_t: int | None = None, megatron: bool | Counting = False
) -> ParamCounts:
    """Every parameter of the model (one copy of tied embeddings), and those a token passes through.

    Narayanan et al. 2021 Eq. (2) for a GPT: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) with tied
    embeddings and a learned position table of s rows; plus the final norm (BLOOM's +2h), which
    Eq. (2) leaves out. For mixtures of experts: dense layers whole; MoE layers with E experts
    (active: k); MTP depths one layer each of the last layer's kind plus ``mtp_extra_params``.
    ``padded_for_t`` pads V as Megatron does for that t.
    """
    c = counting(megatron)
    V = model.vocab_size
    if padded_for_t is not None:
        V = int(padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, padded_for_t))
    h = model.hidden_size
    learned = model.position_embedding_type.value == "learned_absolute" and not c.no_learned_positions
    embeddings = V * h * (1 if model.tied_embeddings else 2) + (model.max_position_embeddings * h if learned else 0)
    dense = float(dense_layer_params(model, megatron=megatron))
    moe_dense, moe_expert = (float(x) for x in moe_layer_params(model, 1, 1, 1, megatron=megatron))
    _, moe_active = (float(x) for x in moe_layer_params(model, 1, 1, 1, megatron=megatron, active=True))
    n_moe = model.num_moe_layers
    n_dense = model.num_layers - n_moe
    final = norm_params(model)
    block = n_dense * dense + n_moe * (moe_dense + moe_expert) + final
    active_block = n_dense * dense + n_moe * (moe_dense + moe_active) + final
    mtp_layer = (moe_dense + moe_expert) if model.mtp_is_moe else dense
    mtp_active = (moe_dense + (moe_expert if c.mtp_all_active else moe_active)) if model.mtp_is_moe else dense
    extra = float(mtp_extra_params(model, megatron=megatron))
    mtp, active_mtp = model.mtp_layers * (mtp_layer + extra), model.mtp_layers * (mtp_active + extra)
    return ParamCounts(
        total=block + mtp + embeddings,
        active=active_block + active_mtp + embeddings,
        block=block,
        active_block=active_block,
        mtp=mtp,
        active_mtp=active_mtp,
        embeddings=embeddings,
    )


def total_params(model: ModelSpec, *, padded_for_t: int | None = None) -> float:
    """Every parameter of the model (``param_counts(...).total``)."""
    return param_counts(model, padded_for_t=padded_for_t).total


def active_params(model: ModelSpec) -> float:
    """Parameters a token passes through: top-k of the experts (the whole model if dense)."""
    return param_counts(model).active


# What each Megatron-LM convention does to the count, and where (theoretical_memory_usage.py at d98e8a64)
GAP_TEXT = {
    "padding": (
        "counts the vocabulary padded to a multiple of 128·t (megaplan counts the tokenizer's V)",
        "theoretical_memory_usage.py:95, embedding_size = hidden_size × padded_vocab_size",
    ),
    "swiglu_only": (
        "counts a gated MLP as gated only with --swiglu: --quick-geglu MLPs count two matrices, not three",
        "theoretical_memory_usage.py:21, gated_linear_multiplier = 3 / 2 if args.swiglu else 1",
    ),
    "no_biases": (
        "counts no linear biases (the router's only)",
        "theoretical_memory_usage.py:82-93, 103-121 (the router's bias: 128-132)",
    ),
    "no_qk_norms": (
        "counts no per-head query and key norms (--qk-layernorm)",
        "theoretical_memory_usage.py:82-93 (self_attn_term)",
    ),
    "no_sinks": (
        "counts no attention sinks (one learned logit per head)",
        "theoretical_memory_usage.py:82-93 (self_attn_term)",
    ),
    "no_learned_positions": (
        "counts no learned position table (s_max·h)",
        "theoretical_memory_usage.py:95-100 (word embeddings only)",
    ),
    "no_mtp_extras": (
        "counts each MTP depth as one decoder layer, without its 2h·h projection and three norms",
        "theoretical_memory_usage.py:170-173 (num_parameters_in_mtp_block)",
    ),
    "mtp_all_active": (
        "counts the whole MTP block as active, all its routed experts included",
        "theoretical_memory_usage.py:179-183 (num_active_parameters adds num_parameters_in_mtp_block)",
    ),
}


@dataclass(frozen=True)
class CountGap:
    """One reason the count Megatron-LM prints differs from megaplan's: what Megatron does, its source line, and the
    parameters it moves (megaplan's count minus Megatron's, of the total and of the active count)."""

    what: str
    source: str
    total: float
    active: float


def megatron_count_gaps(model: ModelSpec, t: int) -> list[CountGap]:
    """Why Megatron-LM's ``report_theoretical_memory`` count at tensor-parallel size t differs from megaplan's
    (``param_counts(model)``): the count is taken from megaplan's to Megatron's one convention at a time (the
    padded vocabulary, then each ``Counting`` switch), each step that moves it a gap. The steps telescope:
    Σ gaps = megaplan's count − Megatron's, exactly, total and active."""
    previous = param_counts(model)
    steps = [("padding", REAL)]
    step = REAL
    for f in fields(Counting):
        step = replace(step, **{f.name: True})
        steps.append((f.name, step))
    gaps = []
    for key, conv in steps:
        now = param_counts(model, padded_for_t=t, megatron=conv)
        total, active = previous.total - now.total, previous.active - now.active
        if total or active:
            gaps.append(CountGap(*GAP_TEXT[key], total, active))
        previous = now
    return gaps
