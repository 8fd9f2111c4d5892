"""Parameter counts, per layer and per pipeline stage, on one tensor-parallel rank.

Closed forms of Narayanan et al. 2021 Eq. (2) generalised to grouped-query attention, gated MLPs,
RMSNorm and bias-free linears; every function broadcasts over numpy arrays of t.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.models.spec import ModelSpec, Normalization


def padded_vocab(V: int, divisible_by: int, t: ArrayLike) -> np.ndarray:
    """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by·t``
    (megatron/training/tokenizer: _vocab_size_with_padding)."""
    multiple = divisible_by * np.asarray(t)
    return -(-V // multiple) * multiple


def layer_params(
    h: int, a: int, g: int, d: int, f: int, t: ArrayLike, *, gated: bool, bias: bool, norm_params_per_norm: int
) -> np.ndarray:
    """Parameters of one transformer layer held by one of t tensor-parallel ranks.

    Weights: QKV h·(a+2g)·d, projection a·d·h, MLP h·f·(2 if gated) + f·h, all split over t.
    Biases: QKV (a+2g)·d and fc1 f·(2 if gated) split over t; projection and fc2 h each replicated.
    Two norms of ``norm_params_per_norm`` each, replicated. With t = 1, a = g, d = h/a, f = 4h and
    LayerNorm this is 12h² + 13h (Narayanan et al. 2021, Eq. 2).
    """
    gate = 2 if gated else 1
    split_weights = h * (a + 2 * g) * d + a * d * h + h * f * gate + f * h
    split_biases = ((a + 2 * g) * d + f * gate) if bias else 0
    replicated = (2 * h if bias else 0) + 2 * norm_params_per_norm
    return (split_weights + split_biases) / np.asarray(t) + replicated


def mlp_params(h: int, f: int, t: ArrayLike, *, gated: bool, bias: bool) -> np.ndarray:
    """One MLP on one of t tensor-parallel ranks: fc1 h·f·(2 if gated) and fc2 f·h split over t;
    biases fc1 f·(2 if gated) split, fc2 h replicated."""
    gate = 2 if gated else 1
    return (h * f * gate + f * h + (f * gate if bias else 0)) / np.asarray(t) + (h if bias else 0)


def moe_layer_params(model: ModelSpec, t: ArrayLike, ep: ArrayLike, etp: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of one mixture-of-experts layer on one GPU.

    Dense: the layer without its MLP (attention and norms, split over t as in ``layer_params``)
    plus the router h·E, replicated. Expert: E/ep local experts, each an MLP of width f_e split
    over etp (Megatron theoretical_memory_usage: routed experts divided by etp·ep, not t).
    """
    h, E = model.hidden_size, model.num_experts or 0
    dense_mlp = mlp_params(h, model.ffn, t, gated=model.swiglu, bias=model.add_bias_linear)
    dense = model_layer_params(model, t) - dense_mlp + h * E
    expert = E / np.asarray(ep) * mlp_params(h, model.expert_ffn, etp, gated=model.swiglu, bias=model.add_bias_linear)
    return dense, expert


def norm_params(model: ModelSpec) -> int:
    """Parameters of one norm over h: weight and bias for LayerNorm, weight only for RMSNorm."""
    return (2 if model.normalization is Normalization.LAYERNORM else 1) * model.hidden_size


def model_layer_params(model: ModelSpec, t: ArrayLike = 1) -> np.ndarray:
    """``layer_params`` for a model spec (the adapter that unpacks the spec into letters)."""
    m = model
    kinds = dict(gated=m.swiglu, bias=m.add_bias_linear, norm_params_per_norm=norm_params(m))
    return layer_params(m.hidden_size, m.num_attention_heads, m.query_groups, m.head_dim, m.ffn, t, **kinds)


def embedding_params(model: ModelSpec, t: ArrayLike, s: int) -> dict[str, np.ndarray]:
    """Word embedding V_pad·h/t (vocab-parallel), learned position table s_max·h (replicated)."""
    V = padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, t)
    word = V * model.hidden_size / np.asarray(t)
    learned = model.position_embedding_type.value == "learned_absolute"
    position = model.max_position_embeddings * model.hidden_size if learned else 0
    return {"word": word, "position": np.broadcast_to(float(position), np.shape(word))}


def total_params(model: ModelSpec, *, padded_for_t: int | None = None) -> float:
    """Every parameter of the model (one copy of tied embeddings).

    Narayanan et al. 2021 Eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) for GPT shapes
    with tied embeddings and a learned position table of s rows; plus the final norm (BLOOM's
    +2h), which Eq. (2) leaves out. ``padded_for_t`` pads V as Megatron does for that t.
    """
    V = (
        model.vocab_size
        if padded_for_t is None
        else int(padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, padded_for_t))
    )
    h = model.hidden_size
    pos = model.max_position_embeddings * h if model.position_embedding_type.value == "learned_absolute" else 0
    embeddings = V * h * (1 if model.tied_embeddings else 2) + pos
    dense_layers = model.num_layers - model.num_moe_layers
    dense, expert = moe_layer_params(model, 1, 1, 1)
    moe = model.num_moe_layers * float(dense + expert)
    return float(dense_layers * model_layer_params(model) + moe + embeddings + norm_params(model))


def active_params(model: ModelSpec) -> float:
    """Parameters a token passes through: top-k of the experts (the whole model if dense)."""
    if not model.is_moe:
        return total_params(model)
    _, expert = moe_layer_params(model, 1, 1, 1)
    unused = model.num_moe_layers * float(expert) * (1 - model.moe_router_topk / model.num_experts)
    return total_params(model) - unused
