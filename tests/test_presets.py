"""Every shipped preset loads and round-trips; bad names, paths and YAML give one-line PresetErrors."""

from __future__ import annotations

import pytest
import yaml

from planner.errors import PlannerError, PresetError
from planner.hardware.spec import HardwareSpec
from planner.models.params import total_params
from planner.models.spec import ModelSpec
from planner.presets import load_hardware, load_model, preset_names, safe_load

from conftest import PRESETS

MODEL_FILES = sorted((PRESETS / "models").glob("*.yaml"))
HARDWARE_FILES = sorted((PRESETS / "hardware").glob("*.yaml"))


def test_presets_are_found():
    # the shipped presets: the Table 1 models, GPT-3 175B and the DGX A100 SuperPOD
    assert {"gpt3-175b", "gpt-1t", "gpt-22b", "gpt-530b"} <= {f.stem for f in MODEL_FILES}
    assert "dgx-a100-superpod" in {f.stem for f in HARDWARE_FILES}
    assert preset_names("models") == sorted(f.stem for f in MODEL_FILES)
    assert preset_names("hardware") == sorted(f.stem for f in HARDWARE_FILES)


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_preset_loads_by_name_and_path(path):
    spec = load_model(path.stem)
    assert isinstance(spec, ModelSpec)
    assert spec.name == path.stem  # a preset's name is its file stem
    assert load_model(str(path)) == spec  # a path works wherever a name does
    assert spec.source  # every preset says where its shape comes from


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_preset_round_trips(path):
    spec = load_model(path.stem)
    assert ModelSpec.model_validate(spec.model_dump()) == spec
    assert ModelSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert ModelSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.stem)
def test_hardware_preset_loads_by_name_and_path(path):
    spec = load_hardware(path.stem)
    assert isinstance(spec, HardwareSpec)
    assert spec.name == path.stem
    assert load_hardware(str(path)) == spec
    assert spec.gpu.hbm_gib > 0 and spec.gpu.peak_bf16_tflops > 0


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.stem)
def test_hardware_preset_round_trips_unset_fields_excluded(path):
    spec = load_hardware(path.stem)
    assert HardwareSpec.model_validate(spec.model_dump(exclude_unset=True)) == spec


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.stem)
def test_hardware_preset_round_trips(path):
    spec = load_hardware(path.stem)
    assert HardwareSpec.model_validate(spec.model_dump()) == spec
    assert HardwareSpec.model_validate_json(spec.model_dump_json()) == spec


def _one_line(err: Exception) -> str:
    msg = str(err)
    assert "\n" not in msg.strip(), msg
    return msg


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(PresetError) as info:
        load_model("gpt-4")
    msg = _one_line(info.value)
    assert "'gpt-4'" in msg and "gpt3-175b" in msg
    with pytest.raises(PresetError) as info:
        load_hardware("dgx-z100")
    assert "dgx-a100-superpod" in _one_line(info.value)


def test_preset_error_is_a_planner_error():
    # the CLI turns PlannerError into exit code 2 in one place (STYLE.md §9)
    assert issubclass(PresetError, PlannerError)


def test_missing_yaml_file(tmp_path):
    with pytest.raises(PresetError, match="not found") as info:
        load_model(str(tmp_path / "nope.yaml"))
    _one_line(info.value)


def test_malformed_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nnum_layers: [1, 2\nhidden_size: 4\n")
    with pytest.raises(PresetError, match=r"malformed YAML \(line \d+, column \d+\)") as info:
        load_model(str(path))
    _one_line(info.value)


@pytest.mark.parametrize("path", sorted(PRESETS.rglob("*.yaml")), ids=lambda p: p.name)
def test_fast_yaml_reads_every_shipped_file_as_pyyaml_does(path):
    # libyaml's parser (where PyYAML has it) must give the very objects the pure-Python parser gives:
    # same keys, values and types (1e9-like strings stay strings, ints stay ints)
    text = path.read_text()
    assert repr(safe_load(text)) == repr(yaml.safe_load(text))


def test_malformed_yaml_is_told_as_the_pure_python_parser_tells_it(tmp_path):
    # libyaml says "did not find expected ',' or ']'" at the next line; the message users read is PyYAML's
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nnum_layers: [1, 2\nhidden_size: 4\n")
    with pytest.raises(PresetError) as info:
        load_model(str(path))
    assert "malformed YAML (line 3, column 12): expected ',' or ']', but got ':'" in str(info.value)


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(PresetError, match=r"expected a YAML mapping of fields \(name: value lines\), got a list"):
        load_model(str(path))


def test_invalid_model_yaml_names_the_field_and_values(tmp_path):
    path = tmp_path / "odd.yaml"
    path.write_text(
        "name: odd\nsource: test\nnum_layers: 4\nhidden_size: 1000\nnum_attention_heads: 7\n"
        "max_position_embeddings: 2048\nvocab_size: 1000\n"
    )
    with pytest.raises(PresetError, match=r"hidden_size \(1000\).*num_attention_heads \(7\)") as info:
        load_model(str(path))
    msg = _one_line(info.value)
    assert str(path) in msg


def test_yaml_scientific_notation_string_is_refused(tmp_path):
    # PyYAML reads 1e9 as a string; the strict spec must refuse it rather than coerce (STYLE.md §5)
    path = tmp_path / "sci.yaml"
    path.write_text(
        "name: sci\nsource: test\nnum_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\n"
        "max_position_embeddings: 2048\nvocab_size: 5e4\n"
    )
    with pytest.raises(PresetError, match="vocab_size"):
        load_model(str(path))


def test_user_yaml_model_file_works(tmp_path):
    # a user's own model file, by path, with the fields of a preset
    data = {
        "name": "my-13b",
        "source": "my notes",
        "num_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
        "swiglu": True,
        "ffn_hidden_size": 13824,
        "normalization": "RMSNorm",
        "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": True,
        "add_bias_linear": False,
        "training": {"global_batch": 1024, "seq_len": 4096},
    }
    path = tmp_path / "my-13b.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_model(str(path))
    assert (spec.name, spec.num_layers, spec.ffn, spec.training.seq_len) == ("my-13b", 40, 13824, 4096)
    # Llama-2-13B shape: 40·(4·5120² + 3·5120·13824 + 2·5120) + 2·32000·5120 + 5120 = 13,015,864,320;
    # Hugging Face's meta-llama/Llama-2-13b-hf lists 13,015,866,880, which adds 40 layers × 64
    # rotary inv_freq buffers (2,560 values that are not trained parameters)
    assert total_params(spec) == 13_015_866_880 - 40 * 64


def test_user_yaml_hardware_file_works(tmp_path):
    data = load_hardware("dgx-a100-superpod").model_dump(mode="json", exclude_unset=True)
    data["name"] = "my-cluster"
    data["gpu"]["hbm_gib"] = 40.0
    data["memory"]["allocatable_gib"] = 39.49  # a plan fills this one; hbm_gib alone is refused
    path = tmp_path / "my-cluster.yml"
    path.write_text(yaml.safe_dump(data))
    spec = load_hardware(str(path))
    assert (spec.name, spec.gpu.hbm_gib) == ("my-cluster", 40.0)


def test_user_file_is_reread_after_it_changes(tmp_path):
    path = tmp_path / "m.yaml"
    base = (
        "name: m\nsource: t\nnum_layers: {L}\nhidden_size: 1024\nnum_attention_heads: 16\n"
        "max_position_embeddings: 2048\nvocab_size: 1000\n"
    )
    path.write_text(base.format(L=4))
    assert load_model(str(path)).num_layers == 4
    path.write_text(base.format(L=8))
    assert load_model(str(path)).num_layers == 8


@pytest.mark.parametrize(
    "name, theta",
    [
        ("llama3-8b", 500_000),  # meta-llama/Meta-Llama-3-8B config.json "rope_theta": 500000.0
        ("llama3-70b", 500_000),
        ("llama3.1-405b", 500_000),  # meta-llama/Llama-3.1-405B config.json
        ("mixtral-8x7b", 1_000_000),  # mistralai/Mixtral-8x7B-v0.1 config.json "rope_theta": 1000000.0
        ("mixtral-8x22b", 1_000_000),
        ("grok1-314b", 1_000_000),  # NeMo MixtralConfig rotary_base 1e6, which pretrain_grok1_314b.py keeps
        ("qwen3-30b-a3b", 1_000_000),
        ("llama2-7b", None),  # Megatron-LM's default --rotary-base 10000 is Llama 2's
    ],
)
def test_rope_models_export_their_rotary_base(name, theta):
    # the Llama 3 and Mixtral presets had no rotary_base: the flags megaplan exports trained them at
    # Megatron-LM's default θ = 10,000 (arguments.py --rotary-base), not their published rope_theta
    from planner import api
    from planner.megatron.export import model_flags

    flags = [str(f) for f in model_flags(api.make_request(model=name))]
    written = flags[flags.index("--rotary-base") + 1] if "--rotary-base" in flags else None
    assert written == (None if theta is None else str(theta))


def test_llama31_exports_and_reads_back_its_rope_scaling():
    # meta-llama/Llama-3.1-405B config.json: rope_scaling {rope_type llama3, factor 8.0}; Megatron-LM applies it
    # with --use-rope-scaling (rope_utils.apply_rope_scaling), the factor from --rope-scaling-factor (default 8)
    from planner import api
    from planner.megatron.export import model_flags
    from planner.megatron.importer import import_megatron

    flags = [str(f) for f in model_flags(api.make_request(model="llama3.1-405b"))]
    at = flags.index("--use-rope-scaling")
    assert flags[at + 1 : at + 3] == ["--rope-scaling-factor", "8.0"]
    assert "--use-rope-scaling" not in [str(f) for f in model_flags(api.make_request(model="llama3-70b"))]
    base = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 --seq-length 512"
    base += " --micro-batch-size 1 --global-batch-size 8 --position-embedding-type rope"
    read = import_megatron(f"{base} --use-rope-scaling --rope-scaling-factor 4", gpus=8)
    assert read.request.ctx.model.rope_scaling_factor == 4.0
    assert import_megatron(f"{base} --use-rope-scaling", gpus=8).request.ctx.model.rope_scaling_factor == 8.0
    # the factor alone does nothing in Megatron-LM (the scaling needs --use-rope-scaling)
    assert import_megatron(f"{base} --rope-scaling-factor 4", gpus=8).request.ctx.model.rope_scaling_factor is None


def test_grok1_parameters_by_hand():
    # NVIDIA/NeMo scripts/performance/llm/pretrain_grok1_314b.py @ 6f2c6fda: MixtralConfig8x7B with L 64, h 6144,
    # a 48, g 8 (d 128), expert ffn 32768, 8 experts top-2, untied, no biases; Llama 3 70B's tokenizer V 128256
    from planner.models.params import param_counts

    L, h, a, g, d, f, E, k, V = 64, 6144, 48, 8, 128, 32768, 8, 2, 128256
    attention = h * (a + 2 * g) * d + a * d * h  # QKV and output projection: 50,331,648 + 37,748,736
    expert = 3 * h * f  # SwiGLU: gate, up, down
    norms_router = 2 * h + h * E
    total = L * (attention + E * expert + norms_router) + 2 * V * h + h
    active = L * (attention + k * expert + norms_router) + 2 * V * h + h
    assert (total, active) == (316_454_737_920, 84_526_503_936)
    counts = param_counts(load_model("grok1-314b"))
    assert (counts.total, counts.active) == (total, active)
