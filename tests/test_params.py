"""Parameter counts against published figures (Narayanan et al. 2021 Eq. 2 and Table 1; Llama 3)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.models.params import (
    embedding_params,
    layer_params,
    model_layer_params,
    norm_params,
    padded_vocab,
    total_params,
)
from planner.models.spec import ModelSpec
from planner.presets import load_model

from conftest import gpt_model


def narayanan_eq2(l: int, h: int, V: int, s: int) -> float:
    # Narayanan et al. 2021 (SC21) Eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h))
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


def test_gpt3_175b_is_174_6_billion():
    # Narayanan et al. 2021 §5.1 / Table 1: GPT-3 175B has 174.6 billion parameters with
    # l = 96, h = 12288, V = 51200 (50257 padded by Megatron at t = 8), s = 2048.
    eq2 = narayanan_eq2(96, 12288, 51200, 2048)
    assert eq2 / 1e9 == pytest.approx(174.6, abs=0.05)
    P = total_params(load_model("gpt3-175b"), padded_for_t=8)
    # + the final LayerNorm's 2h (BLOOM README), which Eq. 2 leaves out
    assert P == pytest.approx(eq2 + 2 * 12288, rel=1e-12)
    assert round(P / 1e9, 1) == 174.6


# Narayanan et al. 2021, Table 1: (preset, billions as printed, l, h); V = 51200, s = 2048 throughout.
TABLE_1 = [
    ("gpt-1.7b", 1.7, 24, 2304),
    ("gpt-3.6b", 3.6, 30, 3072),
    ("gpt-7.5b", 7.5, 36, 4096),
    ("gpt-18b", 18.4, 40, 6144),
    ("gpt-39b", 39.1, 48, 8192),
    ("gpt-76b", 76.1, 60, 10240),
    ("gpt-145b", 145.6, 80, 12288),
    ("gpt-310b", 310.1, 96, 16384),
    ("gpt-530b", 529.6, 105, 20480),
    ("gpt-1t", 1008.0, 128, 25600),
]


@pytest.mark.parametrize("name, billions, l, h", TABLE_1)
def test_narayanan_table_1_parameter_counts(name, billions, l, h):
    model = load_model(name)
    assert (model.num_layers, model.hidden_size) == (l, h)
    P = total_params(model, padded_for_t=8)
    # Table 1 prints one decimal of Eq. 2 (l=128, h=25600 gives 1008.0)
    assert round(P / 1e9, 1) == billions
    # the final norm (2h) is the only difference from Eq. 2: far below 0.1 %
    assert P == pytest.approx(narayanan_eq2(l, h, 51200, 2048), rel=1e-3)


def test_vocab_padding_matches_megatron():
    # Megatron _vocab_size_with_padding: ceil(V / (128·t))·128·t. GPT-2 BPE 50257:
    # t=1 -> 393·128 = 50304; t=8 -> 50·1024 = 51200 (the papers' V).
    assert int(padded_vocab(50257, 128, 1)) == 50304
    assert int(padded_vocab(50257, 128, 8)) == 51200
    assert list(padded_vocab(50257, 128, np.array([2, 4]))) == [50432, 50688]  # 197·256, 99·512
    model = load_model("gpt3-175b")
    assert model.vocab_size == 50257 and model.make_vocab_size_divisible_by == 128
    assert int(padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, 1)) == 50304


def test_layer_params_gpt_shape_unsharded_is_12h2_plus_13h():
    # Narayanan et al. 2021 Eq. (2): one layer holds 12h² + 13h parameters (weights 12h², biases
    # QKV 3h + projection h + fc1 4h + fc2 h = 9h, two LayerNorms 4h)
    h = 12288
    assert float(model_layer_params(gpt_model(96, h, 96))) == 12 * h**2 + 13 * h


def test_layer_params_on_one_of_eight_tp_ranks():
    # Megatron-LM layout: QKV and fc1 (column-parallel) split weights and biases over t; projection
    # and fc2 (row-parallel) split weights and keep their h biases replicated; LayerNorms replicated.
    # Per rank: (12h² + 3h + 4h)/t + (h + h) + 2·2h = (12h² + 7h)/t + 6h
    h, t = 12288, 8
    expected = (12 * h**2 + 7 * h) / t + 6 * h
    assert float(model_layer_params(gpt_model(96, h, 96), t)) == pytest.approx(expected, rel=1e-15)


def test_layer_params_broadcast_over_t():
    h = 4096
    got = model_layer_params(gpt_model(32, h, 32), np.array([1, 2, 4, 8]))
    want = [(12 * h**2 + 7 * h) / t + 6 * h for t in (1, 2, 4, 8)]
    np.testing.assert_allclose(got, want, rtol=1e-15)


def test_layer_params_gqa_swiglu_bias_free():
    # Llama-style layer (grouped-query attention, SwiGLU, RMSNorm, no biases), written out:
    # Q h·a·d, K and V 2·h·g·d, output a·d·h, gate+up 2·h·f, down f·h, two RMSNorm weights 2h.
    h, a, g, d, f = 4096, 32, 8, 128, 14336
    expected = h * a * d + 2 * h * g * d + a * d * h + 3 * h * f + 2 * h
    got = layer_params(h, a, g, d, f, 1, gated=True, bias=False, norm_params_per_norm=h)
    assert float(got) == expected


# Hugging Face safetensors metadata of meta-llama/Llama-3.1-8B, -70B and -405B (exact counts):
LLAMA_3 = [
    # (L, h, a, g, f, total parameters)
    (32, 4096, 32, 8, 14336, 8_030_261_248),
    (80, 8192, 64, 8, 28672, 70_553_706_496),
    (126, 16384, 128, 8, 53248, 405_853_388_800),
]


@pytest.mark.parametrize("L, h, a, g, f, published", LLAMA_3)
def test_llama_3_parameter_counts(L, h, a, g, f, published):
    model = ModelSpec(
        name="llama",
        source="Llama 3 (Dubey et al. 2024), Table 3",
        num_layers=L,
        hidden_size=h,
        num_attention_heads=a,
        num_query_groups=g,
        ffn_hidden_size=f,
        max_position_embeddings=8192,
        vocab_size=128256,
        swiglu=True,
        normalization="RMSNorm",
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
        add_bias_linear=False,
    )
    assert total_params(model) == published


def test_norm_params():
    # LayerNorm has a weight and a bias over h; RMSNorm only a weight
    assert norm_params(gpt_model(2, 1024, 16)) == 2 * 1024
    assert norm_params(gpt_model(2, 1024, 16, normalization="RMSNorm")) == 1024


def test_embedding_params_split_word_table_replicate_positions():
    # Megatron's VocabParallelEmbedding splits V_pad·h over t; the learned position table
    # (max_position_embeddings × h) is replicated on every TP rank.
    model = load_model("gpt3-175b")
    emb = embedding_params(model, 8, 2048)
    assert float(emb["word"]) == 51200 * 12288 / 8
    assert float(emb["position"]) == 2048 * 12288
    rope = gpt_model(4, 1024, 16, position_embedding_type="rope")
    assert float(embedding_params(rope, 1, 2048)["position"]) == 0.0


def test_untied_embeddings_count_the_output_matrix_twice():
    # untied input and output embeddings: 2·V·h instead of V·h
    tied, untied = gpt_model(4, 1024, 16), gpt_model(4, 1024, 16, untie_embeddings_and_output_weights=True)
    assert total_params(untied) - total_params(tied) == 51200 * 1024
