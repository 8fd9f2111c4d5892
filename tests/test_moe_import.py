"""Launch scripts of today's MoE models, written in the patterns of Megatron-LM's own examples
(tests/data/*_style.sh), read into the model spec and plan the flags describe."""

from pathlib import Path

import pytest

from planner.api import explain
from planner.megatron.importer import import_megatron
from planner.presets import load_model

DATA = Path(__file__).parent / "data"
COST_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "num_experts",
    "moe_router_topk",
    "expert_ffn",
    "shared_ffn",
    "moe_pattern",
    "mtp_layers",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "gated",
    "window_pattern",
    "window",
    "add_bias_linear",
    "vocab_size",
)


def _same_model(imported, preset):
    for field in COST_FIELDS:
        assert getattr(imported, field) == getattr(preset, field), field


def test_deepseek_v3_script_reads_into_the_preset_model_and_its_layout():
    text = (DATA / "deepseek_v3_style.sh").read_text()
    imp = import_megatron(text, hardware="dgx-h100-superpod")
    req = imp.request
    _same_model(req.ctx.model, load_model("deepseek-v3"))
    assert req.gpus == 1024 and (req.plan.pp, req.plan.ep, req.plan.etp) == (16, 64, 1)
    assert req.plan.pipeline_layout == "Et*4|(t*4|)*14tmL" and req.plan.vpp == 1
    assert req.plan.moe_token_dispatcher.value == "flex"
    assert req.ctx.options.moe_flex_dispatcher_backend.value == "deepep"
    pj = explain(req)
    assert pj["parallel"]["stage_layers"] == [4] * 15 + [1]
    assert pj["model_params"]["total"] == 682_636_472_320  # 671.0B + the MTP depth (11.6B)


def test_deepseek_v3_script_with_its_fsdp_block():
    text = (DATA / "deepseek_v3_style.sh").read_text()
    imp = import_megatron(text, hardware="dgx-h100-superpod", env={"USE_MEGATRON_FSDP": "1", "PP": "1"})
    assert imp.request.plan.fsdp and imp.request.plan.pp == 1


def test_gpt_oss_script_reads_its_biases_gate_windows_and_sinks():
    imp = import_megatron((DATA / "gpt_oss_style.sh").read_text(), hardware="dgx-h100-superpod")
    model = imp.request.ctx.model
    _same_model(model, load_model("gpt-oss-20b"))
    assert model.softmax_type.value == "learnable" and model.window_size == (127, 0)
    assert model.window_pattern[:4] == (True, False, True, False)  # 1-based layer l windowed iff l mod 2 != 0
    assert imp.request.plan.etp == 1 and imp.request.plan.moe_token_dispatcher.value == "alltoall"
    assert explain(imp.request)["legal"]


def test_mixtral_script_reads_with_its_tokenizer_from_the_preset():
    text = (DATA / "mixtral_style.sh").read_text()
    imp = import_megatron(text, model="mixtral-8x7b", hardware="dgx-h100-superpod")
    req = imp.request
    assert req.gpus == 32 and (req.plan.pp, req.plan.ep) == (4, 8)
    assert req.plan.moe_token_dispatcher.value == "alltoall"
    assert req.ctx.options.overlap_param_gather
    assert explain(req)["legal"]


def test_mla_and_expert_recompute_modules_are_read_and_save_memory():
    full = "--recompute-granularity full\n    --recompute-method uniform\n    --recompute-num-layers 1"
    script = (DATA / "deepseek_v3_style.sh").read_text()

    def imported(modules: str):
        text = script.replace(full, f"--recompute-granularity selective\n    --recompute-modules {modules}")
        return import_megatron(text, hardware="dgx-h100-superpod")

    both = imported("mla_up_proj moe_act shared_experts")
    assert [m.value for m in both.request.ctx.options.recompute_modules] == ["mla_up_proj", "moe_act", "shared_experts"]
    assert not any("recompute" in w for w in both.warnings)
    core = explain(imported("core_attn").request)
    saved = explain(both.request)
    assert saved["estimate"]["memory"]["activations"] < core["estimate"]["memory"]["activations"]
    again = explain(imported("mla_up_proj moe_act shared_experts core_attn").request)
    assert 0 < saved["estimate"]["time"]["recompute"] < again["estimate"]["time"]["recompute"]  # no MLA core again


def test_deepep_switch_needs_the_flex_dispatcher():
    text = (
        (DATA / "deepseek_v3_style.sh")
        .read_text()
        .replace("--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type alltoall\n    --moe-enable-deepep")
    )
    with pytest.raises(Exception, match="DeepEP backend is only supported with flex token dispatcher"):
        import_megatron(text, hardware="dgx-h100-superpod")


def test_flex_dispatcher_sms_are_read_from_either_knob():
    """--moe-flex-dispatcher-num-sms, or the deprecated per-backend --moe-deepep-num-sms it replaces
    (transformer_config.py routes either into moe_flex_dispatcher_num_sms), sets the SMs the dispatcher
    holds; absent, the backend's default."""
    text = (DATA / "deepseek_v3_style.sh").read_text()
    base = import_megatron(text, hardware="dgx-h100-superpod").request.ctx.options
    assert base.moe_flex_dispatcher_num_sms is None
    for flag in ("--moe-flex-dispatcher-num-sms 24", "--moe-deepep-num-sms 24"):
        patched = text.replace(
            "--moe-flex-dispatcher-backend deepep", f"--moe-flex-dispatcher-backend deepep\n    {flag}"
        )
        assert (
            import_megatron(patched, hardware="dgx-h100-superpod").request.ctx.options.moe_flex_dispatcher_num_sms == 24
        )
