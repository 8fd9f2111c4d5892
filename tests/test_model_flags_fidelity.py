"""The model presets export the flags that train the model they name, and read them back.

Each published value is quoted with its source: config.json (rms_norm_eps, rope_scaling), the Nemotron-4 NeMo /
Megatron-Bridge provider (rotary_percent 0.5, layernorm_zero_centered_gamma), Megatron-LM's own example scripts
@ d98e8a64 for the flag spellings. Before these fields the exported flags trained Nemotron-4 with RoPE over the
whole head and a plain LayerNorm γ, Qwen3 and DeepSeek-V3 at ε 1e-5, GPT-OSS's YaRN at scale 1 (Megatron-LM's
--rotary-scaling-factor default) and DeepSeek-V3's MLA YaRN at scale 1 with mscale_all_dim 0."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from planner import api
from planner.costs import compute
from planner.costs.blocks import attention_block
from planner.costs.letters import Letters
from planner.megatron.export import model_flags
from planner.megatron.importer import import_megatron
from planner.models.spec import ModelSpec
from planner.presets import load_model, preset_names
from planner.space.grid import PlanGrid

SMALL = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 --seq-length 512"
SMALL += " --micro-batch-size 1 --global-batch-size 8"


def _flags(model: str) -> list[str]:
    return [str(f) for f in model_flags(api.make_request(model=model))]


def _after(flags: list[str], flag: str) -> str | None:
    return flags[flags.index(flag) + 1] if flag in flags else None


def test_nemotron4_rotates_half_of_each_head_with_a_zero_centred_layernorm():
    # Megatron-Bridge src/megatron/bridge/models/nemotron/nemotron_provider.py @ v0.2.1, NemotronModelProvider
    # (Nemotron4ModelProvider340B inherits it): rotary_percent 0.5, layernorm_zero_centered_gamma True (NeMo's
    # rotary_percentage 0.5, normalization layernorm1p); Megatron-LM: --rotary-percent, --apply-layernorm-1p
    m = load_model("nemotron-4-340b")
    assert (m.rotary_percent, m.apply_layernorm_1p, m.norm_epsilon) == (0.5, True, 1e-5)
    flags = _flags("nemotron-4-340b")
    assert _after(flags, "--rotary-percent") == "0.5" and "--apply-layernorm-1p" in flags
    assert "--norm-epsilon" not in flags  # 1e-5 is Megatron-LM's default
    assert "--rotary-percent" not in _flags("llama3-70b")  # every channel rotates: the default 1.0


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"])
def test_rms_norm_epsilon_1e6_models_export_it(model):
    # Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B and deepseek-ai/DeepSeek-V3 config.json: rms_norm_eps 1e-06
    # (Megatron-LM examples/rl/model_configs/qwen3_30b_a3b_moe.sh and sbatch_mfsdp_deepseek_v3.sh: --norm-epsilon 1e-6)
    assert load_model(model).norm_epsilon == 1e-6
    assert float(_after(_flags(model), "--norm-epsilon")) == 1e-6


@pytest.mark.parametrize("model", ["llama2-7b", "llama3-8b", "mixtral-8x7b", "gpt-oss-20b", "gpt3-175b"])
def test_epsilon_1e5_models_leave_megatrons_default(model):
    # rms_norm_eps 1e-05 in the Llama 2/3, Mixtral and GPT-OSS config.json; GPT-3's LayerNorm ε 1e-5
    assert load_model(model).norm_epsilon == 1e-5 and "--norm-epsilon" not in _flags(model)


@pytest.mark.parametrize("model", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_exports_its_yarn_scaling(model):
    # openai/gpt-oss config.json rope_scaling {rope_type yarn, factor 32.0, original_max_position_embeddings 4096,
    # beta_fast 32, beta_slow 1, truncate false}; Megatron-Bridge gpt_oss_provider.py @ v0.2.1 sets
    # yarn_rotary_scaling_factor 32, yarn_original_max_position_embeddings 4096, yarn_correction_range_round_to_int
    # False. Megatron-LM reads the factor from --rotary-scaling-factor (argument_utils._apply_yarn_config_from_args;
    # default 1.0: no scaling); beta 32/1 are its defaults
    flags = _flags(model)
    assert _after(flags, "--rotary-scaling-factor") == "32.0"
    assert _after(flags, "--yarn-original-max-position-embeddings") == "4096"
    assert "--no-yarn-correction-range-round-to-int" in flags
    assert "--mscale" not in flags and "--mscale-all-dim" not in flags  # 1 and 0: concentration 0.1·ln 32 + 1


def test_deepseek_v3_exports_its_mla_yarn():
    # deepseek-ai/DeepSeek-V3 config.json rope_scaling {type yarn, factor 40, mscale 1.0, mscale_all_dim 1.0,
    # original_max_position_embeddings 4096}; Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh
    # @ d98e8a64: --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 (MLA's RoPE is YaRN by default)
    flags = _flags("deepseek-v3")
    assert _after(flags, "--rotary-scaling-factor") == "40.0" and _after(flags, "--mscale-all-dim") == "1.0"


@pytest.mark.parametrize("model", preset_names("models"))
def test_every_presets_model_flags_read_back_to_the_same_flags(model):
    """export -> explain --megatron-args -> export: the model a script describes is the preset's, field by field."""
    flags = _flags(model)
    back = import_megatron(shlex.join([*flags, "--micro-batch-size", "1", "--global-batch-size", "64"]), gpus=1)
    m, mine = back.request.ctx.model, load_model(model)
    for key in (
        "rotary_percent",
        "norm_epsilon",
        "apply_layernorm_1p",
        "rotary_scaling_factor",
        "mscale",
        "mscale_all_dim",
        "yarn_original_max_position_embeddings",
        "yarn_correction_range_round_to_int",
        "rope_scaling_factor",
        "rotary_base",
    ):
        assert getattr(m, key) == getattr(mine, key), key
    again = [str(f) for f in model_flags(back.request)]
    assert again == flags


def test_a_launch_script_reads_back_the_new_fields():
    script = f"torchrun pretrain_gpt.py {SMALL} --position-embedding-type rope --rotary-percent 0.25 \\\n"
    script += "  --norm-epsilon 1e-6 --apply-layernorm-1p\n"
    m = import_megatron(script, gpus=8).request.ctx.model
    assert (m.rotary_percent, m.norm_epsilon, m.apply_layernorm_1p) == (0.25, 1e-6, True)
    yarn = f"{SMALL} --position-embedding-type yarn --rotary-scaling-factor 32 --no-yarn-correction-range-round-to-int"
    m = import_megatron(yarn + " --mscale 0.707 --mscale-all-dim 0.707", gpus=8).request.ctx.model
    assert (m.rotary_scaling_factor, m.yarn_correction_range_round_to_int, m.mscale, m.mscale_all_dim) == (
        32.0,
        False,
        0.707,
        0.707,
    )
    plain = import_megatron(SMALL, gpus=8).request.ctx.model  # none given: Megatron-LM's defaults
    assert (plain.rotary_percent, plain.norm_epsilon, plain.apply_layernorm_1p) == (1.0, 1e-5, False)
    assert plain.rotary_scaling_factor is None and plain.yarn_correction_range_round_to_int


def test_rotary_percent_needs_a_rotary_embedding():
    base = dict(name="x", source="t", num_layers=2, hidden_size=256, num_attention_heads=4)
    base |= dict(max_position_embeddings=512, vocab_size=1000)
    with pytest.raises(ValidationError, match="rotary_percent below 1 needs position_embedding_type rope or yarn"):
        ModelSpec.model_validate({**base, "rotary_percent": 0.5})  # learned positions: Megatron-LM ignores it
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        ModelSpec.model_validate({**base, "position_embedding_type": "rope", "rotary_percent": 1.5})
    assert ModelSpec.model_validate({**base, "position_embedding_type": "rope", "rotary_percent": 0.5}).rotary_percent


def test_unfused_rope_bytes_of_half_rotated_heads_by_hand():
    # p = 0.5: forward 20·0.5 + 4 = 14 B, backward 20·0.5 + 6 = 16 B an element; less the fused kernel's 4 and 8:
    # 1,000 elements add 10,000 and 8,000 bytes (p = 1: 20,000 and 18,000, tests/test_yarn_rope.py)
    fwd, bwd = compute.unfused_rope_extra_bytes(1000, 1.0, 0.5)
    assert float(fwd) == 10_000.0 and float(bwd) == 8_000.0
    # at an eager slowdown r = 2: (2·14 − 4)·1000 and (2·16 − 8)·1000
    fwd, bwd = compute.unfused_rope_extra_bytes(1000, 2.0, 0.5)
    assert float(fwd) == 24_000.0 and float(bwd) == 24_000.0


def _attention_mem(model: ModelSpec) -> float:
    req = api.make_request(model="nemotron-4-340b", gpus=64, tp=8, pp=8, hardware="dgx-h100-superpod")
    ctx = req.ctx.__class__(model, req.ctx.hardware, req.ctx.training, req.ctx.options)
    return float(attention_block(Letters(PlanGrid.from_plans([req.plan]), ctx), ctx)["mem"].ravel()[0])


def test_fused_rope_moves_the_whole_head_whatever_the_rotated_fraction():
    # Transformer Engine's fused kernel writes every channel (fused_rope.cu fused_rope_block_forward: "copy the
    # rest"), so Nemotron-4's half-rotated heads cost what whole ones do; YaRN's op-by-op path scales with p
    m = load_model("nemotron-4-340b")
    assert _attention_mem(m) == _attention_mem(m.model_copy(update={"rotary_percent": 1.0}))
    yarn = m.model_copy(update={"position_embedding_type": load_model("gpt-oss-20b").position_embedding_type})
    half, whole = _attention_mem(yarn), _attention_mem(yarn.model_copy(update={"rotary_percent": 1.0}))
    assert half < whole


def _bridge_round_trip(model: ModelSpec, recipe: str, tag: str, **plan):
    from planner.bridge.export import bridge_export, dotlist_text
    from planner.bridge.importer import header_options, read_bridge_text, request_from_bridge

    req = api.make_request(model=model, hardware="dgx-h100-superpod", **plan)
    exp = bridge_export(req, tag, recipe)
    text = dotlist_text(exp)
    head = header_options(text)
    back = request_from_bridge(
        read_bridge_text(text), tag=tag, recipe=recipe, gpus=req.gpus, hardware=head["hardware"], env=head["env"]
    )
    return exp.fields, back.request.ctx.model


def test_bridge_carries_llama31_rope_scaling_at_v060_and_says_v021_cannot():
    # Megatron-Bridge models/gpt_provider.py @ v0.6.0: GPTModelProvider.rope_scaling, rope_scaling_factor (passed to
    # MCoreGPTModel); @ v0.2.1 the scaling lives only in Llama31ModelProvider.provide() (scale_factor 8.0)
    from planner.errors import PlannerError

    m = load_model("llama3.1-405b")
    plan = dict(gpus=1008, tp=8, pp=18, global_batch=2016)
    fields, back = _bridge_round_trip(m, "llama3_70b_pretrain_32gpu_h100_bf16_config", "v0.6.0", **plan)
    assert (fields["model.rope_scaling"], fields["model.rope_scaling_factor"]) == (True, 8.0)
    assert (back.rope_scaling_factor, back.num_layers, back.rotary_base) == (8.0, 126, 500000)
    with pytest.raises(PlannerError, match=r"--rope-scaling-factor, --use-rope-scaling, which a Bridge v0\.2\.1 "):
        _bridge_round_trip(m, "llama3_70b_pretrain_config", "v0.2.1", **plan)


@pytest.mark.parametrize(
    ("tag", "recipe"), [("v0.2.1", "llama3_8b_pretrain_config"), ("v0.6.0", "llama3_8b_pretrain_2gpu_h100_bf16_config")]
)
def test_bridge_carries_rotary_percent_and_the_norm_at_both_tags(tag, recipe):
    # GPTModelProvider.rotary_percent (both tags), TransformerConfig.layernorm_epsilon and
    # layernorm_zero_centered_gamma: a Llama 3 8B with Nemotron-4's half-rotated heads and 1p LayerNorm
    m = load_model("llama3-8b").model_copy(
        update={"name": "x", "rotary_percent": 0.5, "norm_epsilon": 1e-6, "apply_layernorm_1p": True}
    )
    fields, back = _bridge_round_trip(m, recipe, tag, gpus=8, tp=2)
    assert fields["model.rotary_percent"] == 0.5 and fields["model.layernorm_epsilon"] == 1e-6
    assert fields["model.layernorm_zero_centered_gamma"] is True
    assert (back.rotary_percent, back.norm_epsilon, back.apply_layernorm_1p) == (0.5, 1e-6, True)


def test_bridge_model_fields_are_fields_of_bridge_at_their_tag():
    """Every provider field MODEL_TAG_ROWS writes is a field of Bridge's model section at that tag (the lists
    dumped from Bridge's own classes)."""
    from planner.bridge.recipes import section_fields
    from planner.bridge.table import MODEL_TAG_ROWS

    for tag in ("v0.2.1", "v0.6.0"):
        names = section_fields(tag)["model"]
        for row in MODEL_TAG_ROWS:
            if row.paths.get(tag):
                assert row.paths[tag].removeprefix("model.") in names, (tag, row.flag)
            else:
                assert row.why, row.flag  # a tag without the field says why


def test_gpt3_exports_say_the_sparse_attention_no_flag_carries():
    # Brown et al. 2020 §2.1: "alternating dense and locally banded sparse attention patterns", band width not
    # given; Megatron-LM trains GPT-3 175B dense (Narayanan et al. 2021), and so do megaplan's flags: every export
    # says so (the flags' notes, the Slurm script's header, the Bridge export's notes)
    from planner.bridge.export import bridge_export
    from planner.megatron import export
    from tests.conftest import run_cli

    req = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16)
    (said,) = export.model_notes(req)
    assert said.startswith("the published gpt3-175b: GPT-3's alternating dense and locally banded sparse attention")
    assert f"# NOTE: not in any Megatron-LM flag: {said[:60]}" in export.slurm_script(req)
    assert "--window-size" not in export.megatron_argv(req)
    recipe = "gpt3_175b_pretrain_32gpu_h100_bf16_config"
    assert f"not in any Bridge field either: {said}" in bridge_export(req, "v0.6.0", recipe).notes
    out = run_cli(["export", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"])
    assert f"megaplan: note: not in any Megatron-LM flag: {said}" in out.stderr.replace("\n", " ")
    for fmt in ("mlm-yaml", "nemo2"):
        out = run_cli(["export", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16", "--format", fmt])
        assert "locally banded sparse attention" in out.stderr, fmt
    assert export.model_notes(api.make_request(model="gpt-39b", gpus=64, tp=8)) == []


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.01, 1.0), r=st.floats(1.0, 8.0))
def test_unfused_rope_bytes_grow_with_the_rotated_fraction_and_are_24_26_at_whole_heads(p, r):
    # the rotation's ops scale with p, the cat and the slice's gradient stay whole: (r(20p + 4) − 4, r(20p + 6) − 8)
    fwd, bwd = (float(x) for x in compute.unfused_rope_extra_bytes(1.0, r, p))
    assert fwd == pytest.approx(r * (20 * p + 4) - 4) and bwd == pytest.approx(r * (20 * p + 6) - 8)
    whole = [float(x) for x in compute.unfused_rope_extra_bytes(1.0, r, 1.0)]
    assert whole == pytest.approx([24 * r - 4, 26 * r - 8]) and fwd <= whole[0] and bwd <= whole[1]
