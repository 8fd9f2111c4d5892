"""Transformer Engine's attention-backend switches in a launch script (NVTE_FLASH_ATTN, NVTE_FUSED_ATTN: "0" turns a
backend off, dot_product_attention/utils.py get_attention_backend) are read where the launch runs them and priced:
cuDNN's fused attention off on Hopper is flash-attn at FlashAttention-2's measured time over the law, both off is TE's
unfused attention (importer.attention_env_options)."""

import pytest

from planner import api
from planner.fidelity.kernels import release_time_ratio
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware

SCRIPT = """#!/bin/bash
{env}
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \\
  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\
  --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm --position-embedding-type rope \\
  --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 8192 --max-position-embeddings 8192 \\
  --vocab-size 128256 --tensor-model-parallel-size 1 --context-parallel-size 2 --micro-batch-size 1 \\
  --global-batch-size 1024 --bf16 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
  --train-iters 1000 --lr 3e-4
"""
H100 = "dgx-h100-superpod"


def _read(env: str, hardware: str = H100):
    imp = import_megatron(SCRIPT.format(env=env), hardware=hardware)
    return imp, api.explain(imp.request)


def test_cudnn_off_on_hopper_is_flash_attn_2_at_its_measured_ratio():
    base, plain = _read("export CUDA_DEVICE_MAX_CONNECTIONS=1")
    imp, est = _read("export NVTE_FUSED_ATTN=0")
    ratio = release_time_ratio("H100-SXM5-80GB", "FlashAttention-2", load_hardware(H100).attention.model_dump())
    assert ratio == pytest.approx(1.70, abs=0.01)  # the FA3 paper's FA2 rows, 8-16k keys (kernels.release_time_ratio)
    assert imp.request.ctx.options.attention_time_ratio == pytest.approx(ratio)
    assert base.request.ctx.options.attention_time_ratio == 1.0
    assert any("NVTE_FUSED_ATTN=0" in n and "FlashAttention-2" in n for n in imp.notes)
    # the attention core is about a seventh of Llama 3 8B's step at 8,192 keys: 12.79 s -> 14.15 s
    slower = est["estimate"]["iteration_s"] / plain["estimate"]["iteration_s"]
    assert 1.08 < slower < 1.13
    # the same variable on the launch line itself (the command's own environment)
    inline = import_megatron(SCRIPT.format(env="").replace("torchrun", "NVTE_FUSED_ATTN=0 torchrun"), hardware=H100)
    assert inline.request.ctx.options.attention_time_ratio == pytest.approx(ratio)


def test_both_off_is_te_unfused_attention_and_unexported_is_not_read():
    imp, _ = _read("export NVTE_FLASH_ATTN=0\nexport NVTE_FUSED_ATTN=0")
    assert imp.request.ctx.options.attention_kernel.value == "unfused"
    assert any("unfused" in n for n in imp.notes)
    # a shell variable the launch does not see (not exported) changes nothing
    local, _ = _read("NVTE_FUSED_ATTN=0")
    assert local.request.ctx.options.attention_time_ratio == 1.0
    assert not any("NVTE_FUSED_ATTN" in n for n in local.notes)
    # cuDNN kept (1) or flash-attn off alone: TE's default on Hopper, cuDNN, the law
    for env in ("export NVTE_FUSED_ATTN=1", "export NVTE_FLASH_ATTN=0"):
        kept, _ = _read(env)
        assert kept.request.ctx.options.attention_time_ratio == 1.0
        assert kept.request.ctx.options.attention_kernel.value == "flash"


def test_other_generations_say_why_the_law_stands():
    a100, _ = _read("export NVTE_FUSED_ATTN=0", "dgx-a100-superpod")
    assert a100.request.ctx.options.attention_time_ratio == 1.0
    assert any("Ampere" in n and "flash-attn anyway" in n for n in a100.notes)
    gb200, _ = _read("export NVTE_FUSED_ATTN=0", "gb200-nvl72")
    assert gb200.request.ctx.options.attention_time_ratio == 1.0
    assert any("no kernel table measures" in n for n in gb200.notes)


def test_the_backend_flag_sets_the_same_switches_and_a_contradicting_variable_is_warned():
    """--attention-backend sets Transformer Engine's switches itself (Megatron-Core
    LanguageModule._set_attention_backend @ d98e8a64: flash -> NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0) and asserts
    that the environment agrees, since Megatron-Core 0.11: --attention-backend flash is priced as the exported
    variable is, and a variable the backend contradicts (the default auto expects 1) is a warning."""
    ratio = release_time_ratio("H100-SXM5-80GB", "FlashAttention-2", load_hardware(H100).attention.model_dump())
    flag = import_megatron(SCRIPT.format(env="").rstrip() + " --attention-backend flash\n", hardware=H100)
    assert flag.request.ctx.options.attention_time_ratio == pytest.approx(ratio)
    assert any(n.startswith("--attention-backend flash: Transformer Engine runs flash-attn") for n in flag.notes)
    assert not any("refuses" in w for w in flag.warnings)
    # the old --use-flash-attn reads as --attention-backend flash (planner.megatron.aliases): the flash-attn it wants
    old = import_megatron(SCRIPT.format(env="").rstrip() + " --use-flash-attn\n", hardware=H100)
    assert old.request.ctx.options.attention_time_ratio == pytest.approx(ratio)
    # exported with the default backend: Megatron-LM stops there today, and megaplan says so
    imp, _ = _read("export NVTE_FUSED_ATTN=0")
    assert any("NVTE_FUSED_ATTN=0, which Megatron-LM's --attention-backend auto refuses" in w for w in imp.warnings)
    # the same variable beside --attention-backend flash agrees: no warning
    both = import_megatron(
        SCRIPT.format(env="export NVTE_FUSED_ATTN=0").rstrip() + " --attention-backend flash\n", hardware=H100
    )
    assert not any("refuses" in w for w in both.warnings)
    # --attention-backend fused with flash-attn left on: a contradiction (fused expects NVTE_FLASH_ATTN=0), cuDNN kept
    fused = import_megatron(
        SCRIPT.format(env="export NVTE_FLASH_ATTN=1").rstrip() + " --attention-backend fused\n", hardware=H100
    )
    assert any("NVTE_FLASH_ATTN=1, which Megatron-LM's --attention-backend fused refuses" in w for w in fused.warnings)
    assert fused.request.ctx.options.attention_time_ratio == 1.0


def test_the_flash_backend_survives_export_and_reading_back():
    """A plan read with cuDNN's attention off keeps it (PlanOptions.te_flash_attn): the exported flags say
    --attention-backend flash, today's way to ask for it, and reading them back prices the same attention."""
    from planner.megatron.export import megatron_argv

    imp, est = _read("export NVTE_FUSED_ATTN=0")
    assert imp.request.ctx.options.te_flash_attn
    flags = megatron_argv(imp.request)
    assert flags[flags.index("--attention-backend") + 1] == "flash"
    back = import_megatron(" ".join(flags), gpus=64, hardware=H100)
    assert back.request.ctx.options.te_flash_attn
    assert back.request.ctx.options.attention_time_ratio == imp.request.ctx.options.attention_time_ratio
    assert api.explain(back.request)["estimate"]["iteration_s"] == pytest.approx(est["estimate"]["iteration_s"])
    # a plan without it exports Megatron's auto, as before
    plain, _ = _read("")
    flags = megatron_argv(plain.request)
    assert flags[flags.index("--attention-backend") + 1] == "auto" and not plain.request.ctx.options.te_flash_attn


def test_a_bridge_config_s_flash_backend_is_read_as_megatron_s():
    """Megatron-Bridge's model.attention_backend (AttnBackend) reads as --attention-backend: flash keeps the flash-attn
    backend (it was read as auto before), unfused and local the unfused attention."""
    import json

    from conftest import run_cli

    base = ["explain", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config", "--gpus", "8"]
    base += ["--hardware", H100, "--json"]
    flash = json.loads(run_cli([*base, "--bridge-override", "model.attention_backend=flash"]).stdout)
    plain = json.loads(run_cli(base).stdout)
    assert flash["options"]["te_flash_attn"] and not plain["options"]["te_flash_attn"]
    assert flash["options"]["attention_time_ratio"] == pytest.approx(1.70, abs=0.01)
    assert flash["estimate"]["iteration_s"] > 1.05 * plain["estimate"]["iteration_s"]
