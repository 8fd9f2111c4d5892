"""The model spec of today's MoE models: Megatron-LM's layer-pattern expressions read without eval,
which layers are MoE or windowed, and the spec's own rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from planner.models.patterns import PatternError, moe_layers, parse_pattern, pattern_text, window_layers
from planner.models.spec import ModelSpec
from planner.presets import load_model


@pytest.mark.parametrize(
    "text, expected",
    [
        ("([0]*3+[1]*58)", [0] * 3 + [1] * 58),  # DeepSeek-V3: three dense layers, then MoE
        ("([1]*3+[0]*1)*3", [1, 1, 1, 0] * 3),  # moe_freq_type's docstring example
        ("[0]+[1]*23", [0] + [1] * 23),
        ("[1,0]*2", [1, 0, 1, 0]),
        ("2*[1,0]", [1, 0, 1, 0]),
    ],
)
def test_patterns_evaluate_as_python_would(text, expected):
    assert parse_pattern(text) == expected


@pytest.mark.parametrize("text", ["__import__('os')", "[0]*", "([0]*3", "[2]*3", "[0]*3+"])
def test_anything_else_is_refused(text):
    with pytest.raises(PatternError):
        parse_pattern(text)


@given(st.lists(st.integers(0, 1), min_size=1, max_size=80))
def test_pattern_text_reads_back(pattern):
    assert parse_pattern(pattern_text(pattern)) == pattern


def test_which_layers_are_moe_and_windowed():
    assert moe_layers(2, 5) == (True, False, True, False, True)  # layers 0, N, 2N ... (training.py:1024-1030)
    # --window-attn-skip-freq 2: 1-based layer l is windowed iff l mod 2 != 0, i.e. 0-based even layers
    assert window_layers(2, 4) == (True, False, True, False)
    assert window_layers(None, 2) == (True, True)
    deepseek = load_model("deepseek-v3")
    assert deepseek.moe_pattern[:4] == (False, False, False, True) and deepseek.num_moe_layers == 58
    assert deepseek.mtp_is_moe and deepseek.head_dim == 192 and deepseek.value_dim == 128
    oss = load_model("gpt-oss-120b")
    assert sum(oss.window_pattern) == 18 and oss.window == 128 and oss.gated


def _spec(**kw):
    base = dict(
        name="t",
        source="test",
        num_layers=4,
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=4096,
        vocab_size=1000,
    )
    return ModelSpec(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(num_experts=8, moe_layer_freq="([0]*3+[1]*2)"), "moe_layer_freq lists 5 layers but num_layers is 4"),
        (dict(multi_latent_attention=True, num_query_groups=2), "excludes grouped-query attention"),
        (dict(swiglu=True, quick_geglu=True), "choose one"),
        (dict(num_experts=8, moe_router_num_groups=3, moe_router_group_topk=1), "divisible by moe_router_num_groups"),
        (dict(num_experts=8, moe_router_num_groups=4), "go together"),
        (dict(moe_shared_expert_intermediate_size=64), "need num_experts"),
        (dict(mtp_num_layers=1), "needs position_embedding_type rope or none"),
        (dict(window_size=[127]), "two integers"),
        (dict(num_experts=8, moe_layer_freq="(os)"), "moe_layer_freq"),
    ],
)
def test_the_specs_own_rules(kw, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _spec(**kw)
