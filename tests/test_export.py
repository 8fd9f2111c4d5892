"""megaplan export: the flags use only Megatron-LM's own argument names, value types and choices
(checked against Megatron-LM's argument table, dumped from arguments.py at the commit that
planner.megatron.flags records and shipped unedited), and read back through the importer to the same
plan and estimate."""

import json
import shlex
from functools import lru_cache

import pytest

from planner.api import explain, make_request
from planner.errors import InfeasibleError
from planner.megatron import export
from planner.megatron.flags import argument_table_bytes, validate_flag_set
from planner.megatron.importer import import_megatron
from planner.plan_file import request_from_plan
from planner.presets import preset_names
from planner.search import search


@lru_cache(maxsize=1)
def megatron_flags() -> dict[str, dict]:
    table = json.loads(argument_table_bytes())["arguments"]
    return {flag: arg for arg in table for flag in arg["flags"]}


def megatron_problems(argv: list[str]) -> list[str]:
    """Flags Megatron-LM's parser would refuse: unknown names, missing or extra values, wrong types, bad choices."""
    flags, problems, i = megatron_flags(), [], 0
    convert = {"int": int, "float": float, "str": str, None: str}
    while i < len(argv):
        flag = argv[i]
        arg = flags.get(flag)
        if arg is None:
            problems.append(f"unknown flag {flag}")
            i += 1
            continue
        values = []
        while i + 1 + len(values) < len(argv) and not argv[i + 1 + len(values)].startswith("--"):
            values.append(argv[i + 1 + len(values)])
        if arg["takes_value"] != bool(values):
            problems.append(f"{flag}: takes_value={arg['takes_value']} but value given={bool(values)}")
        if len(values) > 1 and arg["nargs"] not in ("+", "*"):
            problems.append(f"{flag}: {len(values)} values, takes one")
        for value in values:
            try:
                convert.get(arg["type"], str)(value)
            except ValueError:
                problems.append(f"{flag} {value}: not a {arg['type']}")
            if arg["choices"] and value not in arg["choices"]:
                problems.append(f"{flag} {value}: not one of {arg['choices']}")
        i += 1 + len(values)
    return problems


GPUS = {"gpt-22b": 8, "gpt-530b": 2240}  # the published batches (4; 2520 = 2³·3²·5·7) fit few data-parallel sizes
# today's MoE models on fewer GPUs: their grids (ep, etp, dispatcher, layouts) are large
MOE_GPUS = {"deepseek-v3": 256, "qwen3-235b-a22b": 128, "qwen3-30b-a3b": 32, "gpt-oss-120b": 32, "gpt-oss-20b": 16}


def _hardware(model: str) -> tuple[str, int]:
    if model in MOE_GPUS:
        return "dgx-h100-superpod", MOE_GPUS[model]
    if model.startswith("gpt"):
        return "dgx-a100-superpod", GPUS.get(model, 1024)
    return "dgx-h100-superpod", 512


@pytest.mark.parametrize("model", preset_names("models"))
def test_top10_plans_of_every_preset_export_valid_flags_and_round_trip(model):
    hardware, gpus = _hardware(model)
    req = make_request(model=model, hardware=hardware, gpus=gpus)
    try:
        plans = search(req.ctx, gpus, top=10).plans
    except InfeasibleError:
        pytest.skip(f"{model} has no plan on {gpus} GPUs")
    assert plans
    for pj in plans:
        plan_req = request_from_plan(pj)
        argv = export.megatron_argv(plan_req)
        assert megatron_problems(argv) == [], argv
        back = import_megatron(shlex.join(argv), gpus=gpus, hardware=hardware).request
        assert back.plan == plan_req.plan
        assert back.ctx.options == plan_req.ctx.options
        again = explain(back)["estimate"]
        assert again["iteration_s"] == pytest.approx(pj["estimate"]["iteration_s"], rel=1e-12)
        assert again["peak_memory_gib"] == pytest.approx(pj["estimate"]["peak_memory_gib"], rel=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        dict(
            model="gpt3-175b",
            gpus=1024,
            tp=8,
            pp=16,
            vpp=2,
            recompute="full",
            precision="fp16",
            distributed_optimizer=True,
        ),
        dict(
            model="gpt3-175b",
            gpus=64,
            tp=8,
            pp=8,
            vpp=3,
            recompute="selective",
            sequence_parallel=True,
            options={"attention_kernel": "unfused", "overlap_p2p_comm": False},
        ),
        dict(
            model="llama3.1-405b",
            hardware="dgx-h100-superpod",
            gpus=16384,
            tp=8,
            pp=16,
            stage_split="embedding+loss",
            sequence_parallel=True,
            distributed_optimizer=True,
            options={"overlap_grad_reduce": True, "overlap_param_gather": True},
        ),
        dict(
            model="mixtral-8x7b",
            hardware="dgx-h100-superpod",
            gpus=256,
            tp=2,
            ep=8,
            etp=1,
            sequence_parallel=True,
            distributed_optimizer=True,
            moe_token_dispatcher="alltoall",
            options={"moe_capacity_factor": 1.25},
        ),
        dict(
            model="llama3-70b",
            hardware="dgx-h100-superpod",
            gpus=512,
            tp=4,
            cp=2,
            sequence_parallel=True,
            fsdp=True,
            distributed_optimizer=True,
            options={"fp8": "hybrid", "fp8_param_gather": True, "tp_comm_overlap": True},
        ),
        dict(model="gpt-76b", gpus=1024, tp=8, pp=4, first_stage_layers=14, last_stage_layers=14, recompute="full"),
        # the options that change memory and time (issue: memory verdicts)
        dict(
            model="llama3-70b",
            hardware="dgx-h100-superpod",
            gpus=64,
            tp=8,
            pp=4,
            vpp=2,
            sequence_parallel=True,
            distributed_optimizer=True,
            recompute="full",
            recompute_method="block",
            recompute_num_layers=3,
            options={"grad_reduce_in_bf16": True, "expandable_segments": True},
        ),
        dict(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="full", recompute_num_layers=2),
        dict(
            model="llama3-8b",
            hardware="dgx-h100-superpod",
            gpus=8,
            recompute="selective",
            distributed_optimizer=True,
            options={
                "recompute_modules": ["mlp", "core_attn"],
                "use_precision_aware_optimizer": True,
                "main_params_dtype": "fp16",
                "exp_avg_dtype": "bf16",
                "exp_avg_sq_dtype": "fp8",
                "cuda_graph_impl": "transformer_engine",
                "cuda_graph_modules": ["attn", "mlp"],
            },
        ),
        dict(
            model="llama3-8b",
            hardware="dgx-h100-superpod",
            gpus=8,
            distributed_optimizer=True,
            options={
                "cpu_offloading_num_layers": 8,
                "use_precision_aware_optimizer": True,
                "main_grads_dtype": "bf16",
                "cuda_graph_impl": "full_iteration",
            },
        ),
        dict(
            model="llama2-7b",
            hardware="dgx-h100-superpod",
            gpus=64,
            pp=2,
            fsdp=True,
            distributed_optimizer=True,
            options={"fp8": "hybrid", "fp8_param_gather": True},
        ),
        dict(  # the A2A overlap with delayed expert wgrad and HybridEP's SMs, as Megatron-Bridge runs them
            model="qwen3-30b-a3b",
            hardware="dgx-h100-superpod",
            gpus=16,
            ep=16,
            distributed_optimizer=True,
            moe_token_dispatcher="flex",
            overlap_moe_expert_parallel_comm=True,
            options={
                "moe_flex_dispatcher_backend": "hybridep",
                "moe_flex_dispatcher_num_sms": 32,
                "delay_wgrad_compute": True,
            },
        ),
    ],
)
def test_every_feature_exports_real_flags_and_round_trips(kw):
    req = make_request(**kw)
    argv = export.megatron_argv(req)
    assert megatron_problems(argv) == []
    assert validate_flag_set(argv) == []
    # the allocator setting is the environment's, not a flag: the Slurm script exports it
    env = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" if req.ctx.options.expandable_segments else ""
    if env:
        assert env.strip() in export.slurm_script(req)
    back = import_megatron(env + export.flags_text(req), gpus=req.gpus, hardware=req.ctx.hardware.name).request
    assert back.plan == req.plan and back.ctx.options == req.ctx.options
    assert explain(back)["estimate"]["iteration_s"] == pytest.approx(explain(req)["estimate"]["iteration_s"], rel=1e-12)


def test_flags_spell_recomputation_as_megatron_does():
    full = export.megatron_argv(make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="full"))
    assert full[full.index("--attention-backend") + 1] == "auto"  # Megatron's default: TE picks flash or cuDNN fused
    assert " ".join(full).count("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1") == 1
    sel = export.megatron_argv(make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective"))
    assert "--recompute-granularity selective" in " ".join(sel) and "--recompute-method" not in sel


def test_slurm_script_has_nodes_launcher_environment_and_placeholders():
    script = export.slurm_script(make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16))
    assert "#SBATCH --nodes=128" in script and "#SBATCH --gpus-per-node=8" in script
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script  # TP > 1 before Blackwell
    assert "torchrun" in script and "pretrain_gpt.py" in script
    assert "DATA_PATH:?set DATA_PATH" in script and "CHECKPOINT_DIR:?" in script and "PLACEHOLDER_ACCOUNT" in script
    fsdp = export.slurm_script(
        make_request(
            model="llama3-8b",
            hardware="dgx-h100-superpod",
            gpus=64,
            tp=2,
            sequence_parallel=True,
            fsdp=True,
            distributed_optimizer=True,
        )
    )
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in fsdp and "CUDA_DEVICE_MAX_CONNECTIONS=1" not in fsdp  # FSDP refuses 1
    assert "HuggingFaceTokenizer" in fsdp and "TOKENIZER_MODEL:?" in fsdp  # Llama's 128,256-token vocabulary
    assert "GPT2BPETokenizer" in script
    blackwell = export.slurm_script(make_request(model="llama3-8b", hardware="dgx-b200-superpod", gpus=64, tp=2))
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in blackwell
    assert "fp8_dot_product_attention" not in blackwell
    fp8_attn = make_request(
        model="llama3-8b",
        hardware="dgx-b200-superpod",
        gpus=64,
        tp=2,
        options=dict(fp8="e4m3", fp8_recipe="mxfp8", fp8_dot_product_attention=True),
    )
    # no Megatron-LM flag for it: the header says so, and the read-back command restores it
    script = export.slurm_script(fp8_attn)
    assert (
        "# - --fp8-dot-product-attention: attention in FP8 (Megatron-Core fp8_dot_product_attention: set it" in script
    )
    assert "--hardware dgx-b200-superpod --fp8-dot-product-attention" in script


def test_slurm_script_reads_back_as_the_same_plan():
    req = make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective", sequence_parallel=True)
    back = import_megatron(export.slurm_script(req)).request
    assert back.gpus == 1024 and back.plan == req.plan


def test_rules_megatron_checks_that_megaplan_also_checks():
    """Found by feeding exports through Megatron-LM's own parser: --fp8-param-gather without the distributed
    optimizer is refused (arguments.py), while explicit first/last stage sizes do combine with interleaving
    when every stage's layers divide by vpp (transformer_config.py)."""
    from planner.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match="fp8-param-gather needs"):
        explain(
            make_request(
                model="llama3-70b",
                hardware="dgx-h100-superpod",
                gpus=64,
                tp=8,
                pp=8,
                sequence_parallel=True,
                options={"fp8": "hybrid", "fp8_param_gather": True},
            )
        )
    pj = explain(
        make_request(
            model="gpt-76b", gpus=1024, tp=8, pp=4, vpp=2, first_stage_layers=14, last_stage_layers=14, recompute="full"
        )
    )
    assert pj["parallel"]["stage_layers"] == [14, 16, 16, 14]
    with pytest.raises(InfeasibleError, match="first/middle/last stage layers must each divide into vpp 4"):
        explain(
            make_request(model="gpt-76b", gpus=1024, tp=8, pp=4, vpp=4, first_stage_layers=14, last_stage_layers=14)
        )


def test_rope_models_longer_than_their_positions_export_a_legal_max_position_embeddings():
    """Megatron asserts max_position_embeddings >= seq_length for every position-embedding type; a RoPE
    model run beyond its preset's positions exports the run's length."""
    req = make_request(model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, seq_len=16384)
    argv = export.megatron_argv(req)
    assert argv[argv.index("--max-position-embeddings") + 1] == "16384"
    assert argv[argv.index("--seq-length") + 1] == "16384"
    short = export.megatron_argv(make_request(model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, seq_len=4096))
    assert short[short.index("--max-position-embeddings") + 1] == "8192"


def test_exported_recomputation_names_method_and_layers():
    block = make_request(
        model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="full", recompute_method="block", recompute_num_layers=5
    )
    text = " ".join(export.megatron_argv(block))
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 5" in text
    mlp = make_request(
        model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective", options={"recompute_modules": ["mlp"]}
    )
    assert "--recompute-granularity selective --recompute-modules mlp" in " ".join(export.megatron_argv(mlp))


def test_selective_recomputation_of_no_module_exports_no_recomputation():
    """Megatron-LM's --recompute-modules takes at least one value (parse_args: "argument --recompute-modules:
    expected at least one argument", megatron_check at d98e8a64); selective of no module recomputes nothing,
    so the flags say no recomputation and read back to a plan with the same estimate."""
    req = make_request(
        model="llama3-8b",
        hardware="dgx-h100-superpod",
        gpus=8,
        tp=2,
        recompute="selective",
        options={"recompute_modules": []},
    )
    assert req.ctx.options.recompute_modules == ()
    argv = export.megatron_argv(req)
    assert "--recompute-modules" not in argv and "--recompute-granularity" not in argv
    assert megatron_problems(argv) == []
    back = import_megatron(shlex.join(["pretrain_gpt.py", *argv]), gpus=8, hardware="dgx-h100-superpod")
    assert back.request.plan.recompute.value == "none"
    assert explain(back.request)["estimate"]["iteration_s"] == explain(req)["estimate"]["iteration_s"]
