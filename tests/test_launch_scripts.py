"""Launch scripts as people have them (docs/megatron-flags.md): the scripts in tests/data/launch are our
own, each reproducing the patterns of a family of public scripts (Megatron-LM's examples since 2020,
the SC21 paper scripts, Megatron-DeepSpeed's and BigScience's jobs), and each must give the plan it
describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.megatron.deepspeed import map_fork_flags
from planner.megatron.importer import import_megatron

DATA = Path(__file__).parent / "data" / "launch"
NET = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --micro-batch-size 1 "


def imported(name: str, **kw):
    path = DATA / name
    return import_megatron(path.read_text(), base_dir=str(path.parent), **kw)


def shape(imp) -> tuple:
    p, tr = imp.request.plan, imp.request.ctx.training
    return (imp.request.gpus, p.tp, p.pp, p.dp, p.cp, p.micro_batch, tr.global_batch, p.recompute.value)


def test_a_2020_template_with_placeholders_and_old_flags():
    imp = imported("template_2020.sh")
    assert shape(imp) == (8, 2, 1, 4, 1, 4, 16, "full")  # --batch-size 4 per GPU, 4 replicas: B = 16
    assert imp.request.ctx.training.precision.value == "fp16" and imp.request.ctx.model.vocab_size == 50257
    notes = " ".join(imp.notes)
    assert "--save <where checkpoints go>" in notes and "micro-batch × dp = 16" in notes
    assert any("--batch-size is an old Megatron-LM flag" in w for w in imp.warnings)


def test_options_in_a_string_run_by_srun_sh_c_with_forwarded_arguments():
    imp = imported("srun_sh_c.sh")
    assert shape(imp) == (128, 8, 4, 4, 1, 1, 512, "full")  # 16 nodes × 8 tasks from the #SBATCH line
    assert any("expanding to nothing" in n and "$@" in n for n in imp.notes)


def test_a_size_script_that_sources_its_settings_and_submits_a_job_file():
    imp = imported("chain/run_sizes.sh")
    assert shape(imp) == (16, 2, 2, 4, 1, 2, 256, "none")  # sbatch --nodes=2 × job.sh's --ntasks-per-node=8
    assert imp.request.ctx.model.num_layers == 16 and imp.request.ctx.training.precision.value == "bf16"
    large = imported("chain/run_sizes.sh", env={"SIZE": "large"})
    assert shape(large)[:3] == (128, 8, 4) and large.request.ctx.model.hidden_size == 8192


def test_a_sourced_file_that_cannot_be_read_is_named_with_env():
    text = (DATA / "chain" / "run_sizes.sh").read_text()
    with pytest.raises(PlannerError, match=r"settings\.sh.*submit\.sh.*--env NAME=VALUE"):
        import_megatron(text)  # a command line given as text has no folder to read its files from


def test_megatron_deepspeed_zero_from_the_json_the_script_writes():
    imp = imported("deepspeed_zero.sh")
    assert shape(imp) == (8, 2, 1, 4, 1, 2, 64, "full")  # deepspeed --num_gpus 8 alone: one node
    model = imp.request.ctx.model
    assert imp.request.plan.distributed_optimizer and not imp.request.plan.fsdp  # ZeRO-1
    assert (model.num_query_groups, model.vocab_size, model.normalization.value) == (4, 32000, "RMSNorm")
    assert any("--log-batch-size-to-tensorboard" in n and "do not change the estimate" in n for n in imp.notes)
    stage3 = imported("deepspeed_zero.sh", env={"ZERO": "3"})
    assert stage3.request.plan.fsdp and stage3.request.plan.distributed_optimizer


def test_the_deepspeed_config_wins_over_a_disagreeing_flag_and_its_batch_fills_in():
    config = '{"train_batch_size": 96, "zero_optimization": {"stage": 2}}'
    fork = {"--deepspeed_config": ["ds.json"], "--zero-stage": ["1"]}
    out = map_fork_flags(fork, {}, {"ds.json": config})
    assert out.plan["distributed_optimizer"] and out.training == {"global_batch": 96}
    assert any("ZeRO stage 2, --zero-stage says 1" in w for w in out.warnings)
    clash = map_fork_flags(fork, {"global_batch_size": 48}, {"ds.json": config})
    assert any("train_batch_size 96 differs from --global-batch-size 48" in w for w in clash.warnings)


def test_a_bigscience_job_with_alibi_a_padded_vocabulary_and_the_deepspeed_partition():
    imp = imported("bloom_style.slurm")
    assert shape(imp) == (96, 2, 6, 8, 1, 1, 512, "full")  # SLURM_NNODES from #SBATCH --nodes=12, × 8
    plan, model = imp.request.plan, imp.request.ctx.model
    assert plan.stage_split.value == "embedding+loss" and model.vocab_size == 250880
    assert model.position_embedding_type.value == "none" and not plan.distributed_optimizer  # ZeRO-0
    warnings = " ".join(imp.warnings)
    assert "ALiBi" in warnings and "--embed-layernorm" in warnings and "setup-env.sh" in warnings


def test_arrays_a_batch_schedule_and_shell_the_reader_must_not_trip_on():
    imp = imported("arrays_and_loops.sh")
    assert shape(imp) == (32, 4, 2, 4, 1, 1, 128, "none")  # the schedule's last step is the global batch
    assert imp.request.plan.sequence_parallel and imp.request.ctx.model.vocab_size == 128256
    assert any("${OVERLAP}" in n for n in imp.notes)
    assert shape(imported("arrays_and_loops.sh", env={"NODES": "8"}))[0] == 64


def test_an_unquoted_array_that_splits_a_quoted_value_says_so():
    text = 'B=(--global-batch-size 64 --step-batch-size-schedule "0:8 1M:64")\ntorchrun --nproc_per_node 8 '
    text += "pretrain_gpt.py " + NET
    with pytest.raises(PlannerError, match=r"after --step-batch-size-schedule.*\"\$\{ARGS\[@\]\}\""):
        import_megatron(text + "${B[@]}")
    with pytest.raises(PlannerError, match="--step-batch-size-schedule and --global-batch-size are both given"):
        import_megatron(text + '"${B[@]}"')


def test_a_job_script_in_a_here_document_fed_to_sbatch():
    imp = imported("sbatch_heredoc.sh")
    assert shape(imp) == (32, 1, 1, 32, 1, 4, 256, "none") and imp.request.plan.distributed_optimizer


@pytest.mark.parametrize(
    ("flags", "vocab"),
    [
        ("", 50257),  # no tokenizer flags: pretrain_gpt.py's GPT-2 BPE
        ("--tokenizer-type Llama2Tokenizer --tokenizer-model /models/tok.model", 32000),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model mistralai/Mixtral-8x7B-v0.1", 32000),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-405B", 128256),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model nvidia/Nemotron-4-340B-Base", 256000),
    ],
)
def test_tokenizers_as_pretrain_gpt_resolves_them(flags, vocab):
    assert import_megatron(NET + "--global-batch-size 8 " + flags, gpus=8).request.ctx.model.vocab_size == vocab


def test_an_unknown_tokenizer_says_how_to_give_its_size():
    line = NET + "--tokenizer-type HuggingFaceTokenizer --tokenizer-model my-org/private-tokenizer"
    with pytest.raises(PlannerError, match=r"my-org/private-tokenizer.*--model PRESET.*--vocab-size N"):
        import_megatron(line, gpus=8)
    assert import_megatron(line, gpus=8, extra="--vocab-size 64000").request.ctx.model.vocab_size == 64000


def test_every_unknown_flag_of_a_script_is_reported_at_once():
    text = "torchrun --nproc_per_node 8 pretrain_gpt.py " + NET + "--vocab-size 1000 --bogus-a 1 --bogus-b --zz 3"
    with pytest.raises(PlannerError, match="3 unknown Megatron-LM flags: --bogus-a, --bogus-b, --zz"):
        import_megatron(text)


def test_architecture_the_planner_does_not_model_is_a_note_not_an_error():
    imp = import_megatron(NET + "--vocab-size 1000 --moe-latent-size 128 --moe-shared-expert-gate", gpus=8)
    warning = next(w for w in imp.warnings if w.startswith("not modelled"))
    assert "latent MoE" in warning and "shared expert's gate" in warning


def test_underscore_spellings_are_read_as_dashes():
    imp = import_megatron(NET.replace("-", "_").replace("__", "--") + "--vocab_size 1000", gpus=8)
    assert imp.request.ctx.model.num_layers == 4 and any("underscore-spelled" in w for w in imp.warnings)


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ("deepspeed --hostfile hosts.txt pretrain_gpt.py", "hosts in its hostfile; pass --gpus N"),
        (
            "NGPU=$(nvidia-smi -L | wc -l)\ntorchrun --nproc_per_node $NGPU --nnodes $NODES pretrain_gpt.py",
            "--env NODES",
        ),
    ],
)
def test_a_world_size_the_script_does_not_give_says_what_would(launch, message):
    with pytest.raises(PlannerError, match=message):
        import_megatron(launch + " " + NET + "--vocab-size 1000")
