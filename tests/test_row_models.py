"""One definition of each model in the validation rows: every row whose model a preset defines prices that preset, with
only the differences its own configuration or table sets (``RowModel.overrides``, each with its source), and no row
builds a copy of a preset's architecture by hand.

The differences, read at the runs' commits: NVIDIA's MLPerf Training gpt3 NeMo configs set hidden_dropout 0.0,
attention_dropout 0.0 and normalization 'layernorm1p' (conf/custom.yaml, training_results_v4.0 @ 6fe95437 and v4.1 @
b87b9e39); NeMo 2's GPTConfig175B sets dropout 0.0 and layernorm_zero_centered_gamma (v2.2.0-v2.4.0 base.py); the DGX
Cloud GPT-3 runs' NeMo 1 hydra config sets hidden_dropout 0.1 and attention_dropout 0.1 (dgxc-benchmarking
nemo_megatron/cfg/gpt3_175b_hydra.yaml @ v25.04 741c8860), the preset's own; MLPerf's Llama 3.1 405B replaces the
tokenizer with Mixtral 8x22B's (the submissions' README.md: 32,768); MLPerf's Llama 3.1 8B is NeMo's Llama31Config8B
(Llama 3 8B with rope scaling factor 8); the Megatron-LM README's 177B and 314B rows are GPT-3 175B and Narayanan et
al.'s 310.1B with the README's vocabulary 131,072, sequence 4,096 and untied embeddings."""

from __future__ import annotations

from dataclasses import replace

from planner.fidelity.runs import MODERN_MODELS, load_runs, modern_definition, modern_rows
from planner.models.spec import ModelSpec
from planner.presets import load_model, preset_names


def _model(run) -> ModelSpec:
    m = run.request["model"]
    return load_model(m) if isinstance(m, str) else m


def _shape(m: ModelSpec) -> tuple:
    """What makes two models the same architecture (the fields a run's configuration does not change)."""
    return (
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.query_groups,
        m.head_dim,
        m.ffn,
        m.swiglu,
        m.squared_relu,
        m.quick_geglu,
        m.num_experts,
        m.multi_latent_attention,
    )


PRESET_SHAPES: dict[tuple, set[str]] = {}  # Llama 2 70B and Llama 3 70B share one (their vocabularies differ)
for _name in preset_names("models"):
    PRESET_SHAPES.setdefault(_shape(load_model(_name)), set()).add(_name)


def hand_built_copies(runs) -> list[str]:
    """The runs whose model has a preset's architecture but is not built from a definition."""
    return [r.id for r in runs if r.model_def is None and _shape(_model(r)) in PRESET_SHAPES]


def test_every_row_with_a_definition_prices_the_preset_with_only_its_listed_overrides():
    runs = load_runs()
    defined = [r for r in runs if r.model_def is not None]
    for run in defined:
        d = run.model_def
        preset = load_model(d.preset)
        assert _model(run) == d.spec(), run.id
        for name, value, source in d.overrides:
            assert name in ModelSpec.model_fields and name != "name", (run.id, name)
            assert getattr(preset, name) != value, (run.id, name)  # an override that changes nothing is not one
            assert len(source) > 20, (run.id, name)
        changed = {k for k in ModelSpec.model_fields if getattr(_model(run), k) != getattr(preset, k)}
        assert changed == ({n for n, _, _ in d.overrides} | {"name"} if d.overrides else set()), run.id
    # every row but the README sizes no preset defines (7 sizes, TFLOP/s and MFU each)
    column_built = sorted({r.id.split(":")[0] for r in runs if r.model_def is None})
    assert column_built == sorted(f"MLM-README-H100-{s}" for s in ("1.7B", "7.1B", "16B", "32B", "70B", "119B", "462B"))
    assert len(defined) == len(runs) - 7


def test_no_row_builds_a_copy_of_a_preset_by_hand():
    runs = load_runs()
    assert hand_built_copies(runs) == []
    # the check catches one: the MLPerf gpt3 row with GPT-3 built field by field, as it was before
    mlperf = next(r for r in runs if r.id == "MLPERF-v4.0-eos_n64_ngc24.04_nemo-gpt3")
    copy = ModelSpec(
        name="GPT3-175B",
        source="columns",
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        max_position_embeddings=2048,
        vocab_size=50257,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    forged = replace(mlperf, request=dict(mlperf.request, model=copy), model_def=None)
    assert hand_built_copies([forged]) == [mlperf.id]
    # a row keeps its preset's architecture (but the one-layer Table 4 row, which says so)
    assert PRESET_SHAPES[_shape(load_model("llama3-70b"))] == {"llama2-70b", "llama3-70b"}
    for run in runs:
        if run.model_def is not None and "num_layers" not in {n for n, _, _ in run.model_def.overrides}:
            assert run.model_def.preset in PRESET_SHAPES[_shape(_model(run))], run.id


COLUMNS = {  # modern_runs.csv column: the model field it must equal
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "ffn",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "query_groups",
    "vocab_size": "vocab_size",
}


def test_the_modern_rows_columns_agree_with_the_model_they_price():
    """Every architecture column a source printed agrees with the model the row prices (its preset and overrides);
    the row's sequence is the run's, within the model's."""
    rows = modern_rows()
    ids = {r.id: r for r in load_runs()}
    for row in rows:
        m = modern_definition(row).spec()
        assert ids[row["run_id"]].request["model"] == m
        for column, field in COLUMNS.items():
            assert int(row[column]) == getattr(m, field), (row["run_id"], column)
        mlp = "squared_relu" if m.squared_relu else "swiglu" if m.swiglu else "gelu"
        assert (row["mlp"], row["normalization"], row["position_embedding"]) == (
            mlp,
            m.normalization.value,
            m.position_embedding_type.value,
        ), row["run_id"]
        assert (row["untied_embeddings"] == "yes", row["bias"] == "yes") == (
            m.untie_embeddings_and_output_weights,
            m.add_bias_linear,
        ), row["run_id"]
        assert int(row["seq_length"]) <= m.max_position_embeddings
    assert {modern_definition(r) for r in rows} == set(MODERN_MODELS.values())  # no definition unused


def _dropouts_1p(model_name: str, family: str) -> set:
    runs = {r.id: r for r in load_runs()}
    rows = [r for r in modern_rows() if r["model_name"] == model_name and r["source_family"] == family]
    assert rows
    return {
        (m.hidden_dropout, m.attention_dropout, m.apply_layernorm_1p)
        for m in (runs[r["run_id"]].request["model"] for r in rows)
    }


def test_gpt3_runs_train_the_dropout_their_configs_set():
    # DGX Cloud (NeMo 1 hydra config gpt3_175b_hydra.yaml @ v25.04): hidden_dropout 0.1, attention_dropout 0.1
    assert _dropouts_1p("GPT3-175B", "DGX Cloud benchmarking recipes") == {(0.1, 0.1, False)}
    # NeMo 2 GPTConfig175B: 0.0, 0.0, layernorm_zero_centered_gamma True
    assert _dropouts_1p("GPT3-175B", "NeMo performance summary (docs)") == {(0.0, 0.0, True)}
    # MLPerf conf/custom.yaml: hidden_dropout 0.0, attention_dropout 0.0, normalization 'layernorm1p'
    assert _dropouts_1p("GPT3-175B (MLPerf gpt3)", "MLPerf Training") == {(0.0, 0.0, True)}
    # the preset: Megatron-LM's default 0.1 (Narayanan 2021, Korthikanti 2022, the DGX Cloud runs)
    assert (load_model("gpt3-175b").hidden_dropout, load_model("gpt3-175b").attention_dropout) == (0.1, 0.1)


def test_mlperf_llama_and_readme_rows_are_their_presets_with_the_sources_differences():
    runs = {r.id: r for r in load_runs()}
    m405 = runs["MLPERF-v5.0-eos-dfw_n64_ngc25.01_nemo-llama31_405b"].request["model"]
    assert m405 == load_model("llama3.1-405b").model_copy(
        update={"vocab_size": 32768, "name": "llama3.1-405b (MLPerf llama31_405b: Mixtral 8x22B's vocabulary)"}
    )
    assert load_model("mixtral-8x22b").vocab_size == 32768
    m8 = runs["MLPERF-v5.1-hpg.dgxb200x8.n8-llama31_8b"].request["model"]
    assert (m8.rope_scaling_factor, m8.rotary_base, m8.max_position_embeddings) == (8.0, 500000, 8192)
    for size, preset in (("177B", "gpt3-175b"), ("314B", "gpt-310b")):
        run = runs[f"MLM-README-H100-{size}"]
        m, d = run.request["model"], run.model_def
        assert d.preset == preset and [n for n, _, _ in d.overrides] == [
            "vocab_size",
            "max_position_embeddings",
            "untie_embeddings_and_output_weights",
        ]
        assert (m.vocab_size, m.max_position_embeddings, m.untie_embeddings_and_output_weights) == (131072, 4096, True)
        assert (m.hidden_dropout, m.attention_dropout) == (0.1, 0.1)  # r0.8.0 arguments.py defaults
