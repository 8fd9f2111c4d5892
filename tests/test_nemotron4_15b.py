"""The Nemotron-4 15B preset: the paper's architecture, NVIDIA's configs for what the paper leaves out, its parameter
count against the published one (its validation rows price it: tests/test_row_models.py).

Sources: Parmar et al. 2024, Nemotron-4 15B Technical Report (arXiv:2402.16819) Table 1 (32 layers, hidden 6144, 48
heads, 8 KV heads, sequence 4096, vocabulary 256,000) and Architecture Details (3.2B embedding + 12.5B non-embedding
parameters; RoPE, squared ReLU, no bias, dropout 0, untied embeddings, GQA); NeMo v2.4.0 Nemotron4Config15B
(ffn_hidden_size 24576, rotary_percent 0.5, layernorm_zero_centered_gamma) and recipes/nemotron4_15b.py; Megatron-LM's
own report_theoretical_memory @ d98e8a64 run on the exported flags (megatron_check): 12.48 / 3.15 / 15.63 B."""

from __future__ import annotations

from planner import api
from planner.bridge.formats import nemo2_fields
from planner.megatron.export import model_flags
from planner.models.params import param_counts
from planner.presets import load_model

H, A, G, D, F, L, V = 6144, 48, 8, 128, 24576, 32, 256000


def test_the_preset_has_the_papers_table_1_and_nemos_config():
    m = load_model("nemotron-4-15b")
    # Table 1: layers, hidden dimension, attention heads, KV heads, sequence length, vocabulary
    shape = (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups, m.max_position_embeddings)
    assert shape + (m.vocab_size,) == (32, 6144, 48, 8, 4096, 256000)
    # NeMo Nemotron4Config15B / Bridge Nemotron4ModelProvider15B: ffn 24576 (4h), kv_channels None (h/a = 128)
    assert (m.ffn, m.head_dim) == (24576, 128)
    # Architecture Details: squared ReLU (not gated), RoPE, no biases, untied, dropout 0; NemotronConfig: half of each
    # head rotated, LayerNorm with a zero-centred γ, ε 1e-5 (dgxc nemotron4-15b-synth.yaml layernorm_epsilon 1e-05)
    assert m.squared_relu and not m.gated and m.position_embedding_type.value == "rope"
    assert (m.add_bias_linear, m.untie_embeddings_and_output_weights, m.hidden_dropout, m.attention_dropout) == (
        False,
        True,
        0.0,
        0.0,
    )
    assert (m.rotary_percent, m.apply_layernorm_1p, m.norm_epsilon, m.normalization.value) == (
        0.5,
        True,
        1e-5,
        "LayerNorm",
    )


def test_parameter_count_matches_the_published_3_2b_plus_12_5b():
    c = param_counts(load_model("nemotron-4-15b"))
    # untied input and output embeddings: 2·V·h = 2·256000·6144
    assert c.embeddings == 2 * 256000 * 6144 == 3_145_728_000  # published "3.2 billion" (3.15 rounded up)
    # a layer: QKV h·(a + 2g)·d = 6144·64·128 = 50,331,648; projection a·d·h = 37,748,736; fc1 + fc2 2·h·f =
    # 301,989,888; two LayerNorms 2·2h = 24,576: 390,094,848; 32 layers + the final LayerNorm 2h = 12,288
    layer = H * (A + 2 * G) * D + A * D * H + 2 * H * F + 2 * 2 * H
    assert layer == 390_094_848
    assert c.block == L * layer + 2 * H == 12_483_047_424  # published "12.5 billion" non-embedding
    assert c.total == c.active == 15_628_775_424  # 15.63 B


def test_megatrons_own_count_is_megaplans():
    # Megatron-LM report_theoretical_memory on the exported flags (tp 1, 8 GPUs, megatron_check @ d98e8a64) printed
    # "Number of parameters in transformer block in billions:  12.48", "... embedding layers in billions: 3.15",
    # "Total number of parameters in billions: 15.63": no bias, no learned positions, V = 256000 needs no padding
    c = param_counts(load_model("nemotron-4-15b"), padded_for_t=8, megatron=True)
    assert (round(c.block / 1e9, 2), round(c.embeddings / 1e9, 2), round(c.total / 1e9, 2)) == (12.48, 3.15, 15.63)
    assert c.total == param_counts(load_model("nemotron-4-15b")).total


def test_exported_flags_train_nemotron4():
    flags = [str(f) for f in model_flags(api.make_request(model="nemotron-4-15b"))]
    for flag in ("--squared-relu", "--apply-layernorm-1p", "--untie-embeddings-and-output-weights"):
        assert flag in flags
    assert flags[flags.index("--rotary-percent") + 1] == "0.5"
    assert flags[flags.index("--num-query-groups") + 1] == "8" and "--disable-bias-linear" in flags
    assert "--swiglu" not in flags


def test_the_nemo2_recipe_reads_as_the_preset():
    # NeMo v2.4.0 recipes/nemotron4_15b.py pretrain_recipe: tensor_parallelism 4, pipeline 1, sequence parallel,
    # global_batch_size 32, micro_batch_size 2, seq_length 4096
    fields, preset, (_, factory) = nemo2_fields("nemo llm pretrain --factory nemotron4_15b")
    assert (preset, factory) == ("nemotron-4-15b", "nemotron4_15b")
    assert (fields["model.tensor_model_parallel_size"], fields["model.pipeline_model_parallel_size"]) == (4, 1)
    assert (fields["train.global_batch_size"], fields["train.micro_batch_size"]) == (32, 2)
