"""Launch scripts read as bash would run them (issue 21): ``bash FILE ARGS`` and ``source FILE ARGS`` give
FILE its positional parameters, ``X=1 cmd`` holds for that command only, an unset array expands to nothing,
torchrun's --nproc-per-node defaults to 1, and Megatron-DeepSpeed's --num-experts 1 is a dense model.
Every script here is written for these tests; each reproduces a pattern of a public family (named)."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.megatron.importer import import_megatron

NET = "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024"
VOCAB = "--vocab-size 32000"


def imported(tmp_path, files: dict[str, str], main: str, **kw):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return import_megatron((tmp_path / main).read_text(), base_dir=str(tmp_path), **kw)


# Megatron-LM examples/moe-modelzoo/best_practice: `ENV=.. bash ./sbatch_benchmarking.sh --extra-flags ...`
RUNNER = f"""#!/bin/bash
torchrun --nproc-per-node 8 --nnodes ${{NNODES}} pretrain_gpt.py {NET} {VOCAB} \\
    --tensor-model-parallel-size ${{TP}} --pipeline-model-parallel-size ${{PP:-1}} \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 "$@"
"""
BEST_PRACTICE = """#!/bin/bash
export NNODES=2
# EP + DP solution
PP=2 TP=4 bash ./runner.sh --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
"""


def test_bash_file_args_runs_file_with_its_positional_parameters_and_the_commands_environment(tmp_path):
    imp = imported(tmp_path, {"runner.sh": RUNNER, "best.sh": BEST_PRACTICE}, "best.sh")
    plan = imp.request.plan
    assert (imp.request.gpus, plan.tp, plan.pp, plan.dp, plan.recompute.value) == (16, 4, 2, 2, "full")


def test_bash_file_args_names_the_file_not_its_last_argument_when_it_cannot_be_read(tmp_path):
    (tmp_path / "best.sh").write_text(BEST_PRACTICE)
    with pytest.raises(PlannerError) as err:
        import_megatron(BEST_PRACTICE, base_dir=str(tmp_path))
    assert "reads ./runner.sh, which megaplan could not read" in str(err.value)


def test_a_commands_assignments_are_undone_after_it(tmp_path):
    main = """#!/bin/bash
TP=2
TP=8 bash ./other.sh
torchrun --nproc-per-node 8 pretrain_gpt.py {net} --tensor-model-parallel-size $TP
""".format(net=f"{NET} {VOCAB}")
    imp = imported(tmp_path, {"other.sh": "echo nothing to launch here\n", "main.sh": main}, "main.sh")
    assert imp.request.plan.tp == 2  # TP=8 held for other.sh only


@pytest.mark.parametrize("how", ["source ./settings.sh large", ". ./settings.sh large"])
def test_source_with_arguments_sets_the_files_positional_parameters(tmp_path, how):
    settings = 'if [ "$1" = large ]; then LAYERS=16; else LAYERS=4; fi\n'
    main = f"""#!/bin/bash
{how}
torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers $LAYERS --hidden-size 512 --num-attention-heads 8 \\
    --seq-length 1024 --max-position-embeddings 1024 {VOCAB} "$@"
"""
    imp = imported(tmp_path, {"settings.sh": settings, "main.sh": main}, "main.sh")
    assert imp.request.ctx.model.num_layers == 16
    assert any("expanding to nothing" in n and "$@" in n for n in imp.notes)  # the script's own $@ is unset


# Megatron-LM examples/llama/train_llama3_8b_h200_bf16.sh: ${DTYPE_ARGS[@]} of an array never defined
def test_an_undefined_array_expands_to_nothing_as_in_bash(tmp_path):
    main = f"""#!/bin/bash
MODEL_ARGS=({NET} {VOCAB})
torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py \\
    ${{MODEL_ARGS[@]}} \\
    ${{DTYPE_ARGS[@]}} \\
    --micro-batch-size 1 --global-batch-size 32
"""
    imp = imported(tmp_path, {"main.sh": main}, "main.sh")
    assert imp.request.gpus == 8 and imp.request.ctx.model.num_layers == 8
    assert any("expanding to nothing" in n and "${DTYPE_ARGS[@]}" in n for n in imp.notes)


@pytest.mark.parametrize(
    ("launcher", "gpus"),
    [("torchrun", 1), ("torchrun --nnodes 4", 4), ("python -m torch.distributed.launch --nnodes=2", 2)],
)
def test_torchrun_without_nproc_per_node_runs_one_process_per_node(tmp_path, launcher, gpus):
    main = f"{launcher} pretrain_gpt.py {NET} {VOCAB} --micro-batch-size 1\n"
    imp = imported(tmp_path, {"main.sh": main}, "main.sh")
    assert imp.request.gpus == gpus
    assert any("without --nproc-per-node: 1 process per node" in n for n in imp.notes)


def test_a_here_document_inside_an_if_block_is_read(tmp_path):
    main = f"""#!/bin/bash
if [[ ${{DRY_RUN:-0}} -eq 1 ]]; then
    cat <<EOF
the job would run here
EOF
else
    torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB} --micro-batch-size 1
fi
"""
    assert imported(tmp_path, {"main.sh": main}, "main.sh").request.gpus == 8


# Microsoft Megatron-DeepSpeed examples_deepspeed/MoE/ds_pretrain_gpt_*: DeepSpeed MoE flags
DS_MOE = """#!/bin/bash
EP_SIZE={experts}
megatron_options=" --tensor-model-parallel-size 1 --moe-expert-parallel-size ${{EP_SIZE}} \\
    --num-experts ${{EP_SIZE}} --moe-loss-coeff 0.01 --moe-train-capacity-factor 1.0 --moe-min-capacity 4 \\
    --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 \\
    --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 256 --fp16 {extra}"
deepspeed_options=" --deepspeed --deepspeed_config ds_config.json --zero-stage 0"
deepspeed pretrain_gpt.py ${{megatron_options}} ${{deepspeed_options}} --vocab-size 50304
"""


def test_megatron_deepspeeds_num_experts_1_is_a_dense_model(tmp_path):
    imp = imported(tmp_path, {"ds.sh": DS_MOE.format(experts=1, extra="")}, "ds.sh", gpus=64)
    assert imp.request.ctx.model.num_experts is None and imp.request.plan.ep == 1
    assert any("--num-experts 1: Megatron-DeepSpeed's single expert is a dense MLP" in n for n in imp.notes)


def test_megatron_deepspeeds_experts_route_top1_on_every_other_layer(tmp_path):
    imp = imported(tmp_path, {"ds.sh": DS_MOE.format(experts=16, extra="")}, "ds.sh", gpus=64)
    model = imp.request.ctx.model
    # get_num_experts_per_layer: experts where layer_num % expert_interval == 0, layer numbers from 1
    assert (model.num_experts, model.moe_router_topk) == (16, 1)
    assert model.moe_pattern == tuple((i + 1) % 2 == 0 for i in range(24))
    top2 = imported(
        tmp_path, {"ds.sh": DS_MOE.format(experts=16, extra="--topk 2 --expert-interval 1")}, "ds.sh", gpus=8
    )
    assert (top2.request.ctx.model.moe_router_topk, top2.request.ctx.model.num_moe_layers) == (2, 24)


def test_megatron_lm_with_fewer_experts_than_its_top_k_is_one_line_not_a_traceback():
    argv = f"{NET} {VOCAB} --num-experts 1"
    with pytest.raises(PlannerError, match=r"moe_router_topk \(2\) must be <= num_experts \(1\)"):
        import_megatron(argv, gpus=1)


@pytest.mark.parametrize(
    ("entry", "what"),
    [
        ("pretrain_bert.py", "BERT"),
        ("pretrain_t5.py", "T5: an encoder-decoder"),
        ("../../pretrain_hybrid.py", "a Mamba hybrid"),
        ("pretrain_mamba.py", "a Mamba hybrid"),
        ("examples/multimodal/train.py", "a multimodal model"),
        ("pretrain_vlm.py", "a multimodal model"),
        ("my_train.py", None),
    ],
)
def test_every_entry_point_but_pretrain_gpt_is_named_in_a_warning(tmp_path, entry, what):
    imp = imported(tmp_path, {"main.sh": f"torchrun --nproc-per-node 8 {entry} {NET} {VOCAB}\n"}, "main.sh")
    said = [w for w in imp.warnings if "not pretrain_gpt.py" in w]
    assert len(said) == 1 and f"the script runs {entry}" in said[0]
    assert what is None or what in said[0]
    gpt = imported(tmp_path, {"gpt.sh": f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB}\n"}, "gpt.sh")
    assert not [w for w in gpt.warnings if "not pretrain_gpt.py" in w]


def test_an_entry_points_own_flags_are_read_and_ignored_with_a_warning_not_refused(tmp_path):
    # examples/multimodal/train.py adds --freeze-LM, --use-te ...; pretrain_gpt.py would refuse them
    main = f"torchrun --nproc_per_node 8 examples/multimodal/train.py {NET} {VOCAB} --freeze-LM --freeze-ViT\n"
    imp = imported(tmp_path, {"main.sh": main}, "main.sh")
    assert any("read and ignored 2 flags pretrain_gpt.py does not have" in w for w in imp.warnings)
    with pytest.raises(PlannerError, match="unknown Megatron-LM flag"):
        import_megatron(main.replace("examples/multimodal/train.py", "pretrain_gpt.py"))


def test_a_hybrid_patterns_layers_are_counted_as_megatron_counts_them(tmp_path):
    pattern = "M-M*-|M-M*-/M-"  # 10 main layers ('|' left out), one MTP block after '/'
    main = f"""torchrun --nproc-per-node 8 pretrain_hybrid.py --hybrid-layer-pattern "{pattern}" \\
    --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 {VOCAB}
"""
    imp = imported(tmp_path, {"main.sh": main}, "main.sh")
    assert imp.request.ctx.model.num_layers == 10
    assert any("hybrid (Mamba) layer patterns" in w for w in imp.warnings)


def test_an_unknown_tokenizer_type_can_be_overridden_and_the_message_says_how(tmp_path):
    main = f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} --tokenizer-type MyForkTokenizer\n"
    (tmp_path / "main.sh").write_text(main)
    with pytest.raises(PlannerError) as err:
        import_megatron(main)
    assert "MyForkTokenizer is not a tokenizer today's Megatron-LM builds" in str(err.value)
    assert "--megatron-args '--vocab-size N'" in str(err.value)
    assert import_megatron(main, extra="--vocab-size 129280").request.ctx.model.vocab_size == 129280
    named = import_megatron(main.replace("MyFork", "DeepSeekV3"))  # the type names a known tokenizer
    assert named.request.ctx.model.vocab_size == 129280
    assert any(
        "--tokenizer-type DeepSeekV3Tokenizer: the DeepSeek-V3 tokenizer (preset deepseek-v3)" in n for n in named.notes
    )


@pytest.mark.parametrize(
    "name, says",
    [
        # Qwen3-235B-A22B has a preset of its own: the note names it, not the Qwen3 model whose row found the
        # tokenizer (trial 3 read "Qwen/Qwen3-235B-A22B: the tokenizer of Qwen/Qwen3-30B-A3B")
        ("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B: the Qwen3 tokenizer (preset qwen3-235b-a22b)"),
        ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B: the Qwen3 tokenizer (preset qwen3-30b-a3b)"),
        ("/models/qwen3-8b/", "/models/qwen3-8b/: the Qwen3 tokenizer (preset qwen3-30b-a3b)"),  # no preset
        ("unsloth/DeepSeek-V3", "unsloth/DeepSeek-V3: the DeepSeek-V3 tokenizer (preset deepseek-v3)"),
    ],
)
def test_a_named_tokenizer_is_said_by_its_family_and_the_preset_whose_vocabulary_it_takes(name, says):
    main = f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} --tokenizer-type HuggingFaceTokenizer "
    imp = import_megatron(main + f"--tokenizer-model {name}\n")
    assert imp.request.ctx.model.vocab_size == (151936 if "wen" in name else 129280)
    assert any(f"vocabulary {imp.request.ctx.model.vocab_size} from --tokenizer-model {says}" in n for n in imp.notes)
    assert not any("Qwen3-30B-A3B" in n for n in imp.notes if "235B" in name)


def test_explain_of_a_script_shows_the_architecture_it_read_in_three_lines(tmp_path):
    from click.testing import CliRunner

    from planner.cli import cli

    moe = (
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 --ffn-hidden-size 1536 "
        "--num-attention-heads 8 --group-query-attention --num-query-groups 2 --seq-length 1024 "
        "--max-position-embeddings 1024 --swiglu --position-embedding-type rope --disable-bias-linear "
        "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-layer-freq ([0]+[1]*3) "
        f"{VOCAB} --micro-batch-size 1 --global-batch-size 8 --bf16\n"
    )
    script = tmp_path / "moe.sh"
    script.write_text(moe.replace("([0]+[1]*3)", "'([0]+[1]*3)'"))
    result = CliRunner().invoke(cli, ["explain", "--megatron-args-file", str(script), "--brief"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == "model 4 layers (3 MoE) · hidden 512 · FFN 1536 · vocab 32,000"
    assert lines[2] == "      8 heads, 2 query groups · rope positions"
    assert lines[3].startswith("      8 experts, top-2, FFN 256 · ") and lines[3].endswith(" active")
    assert lines[4].startswith("plan  ") and all(len(line) <= 80 for line in lines)
    flags = CliRunner().invoke(cli, ["explain", "--model", "gpt-1.7b", "--gpus", "8", "--tp", "1", "--brief"])
    assert "model " not in flags.stdout  # a preset's architecture is its name


def test_an_unset_computed_value_split_into_words_is_named_whole(tmp_path):
    # Megatron-DeepSpeed bert_with_pile/ds_pretrain_bert.sh: num_gpus from $(ds_ssh nvidia-smi ...), never run
    main = f"""#!/bin/bash
global_batch_size=1024
num_gpus=$(($(ds_ssh nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)-2))
dp_size=$(( ${{num_gpus}} / 1 ))
batch_size=$(( ${{global_batch_size}} / ${{dp_size}} ))
megatron_options=" {NET} {VOCAB} --micro-batch-size ${{batch_size}} --global-batch-size ${{global_batch_size}}"
deepspeed ${{dir}}/../../pretrain_gpt.py ${{megatron_options}}
"""
    with pytest.raises(PlannerError) as err:
        imported(tmp_path, {"main.sh": main}, "main.sh", gpus=64)
    assert "--micro-batch-size is $(( ${global_batch_size} / ${dp_size} )), which the script leaves unset" in str(
        err.value
    )
    pinned = imported(tmp_path, {"main.sh": main}, "main.sh", gpus=64, env={"num_gpus": "64"})
    assert (pinned.request.plan.micro_batch, pinned.request.plan.dp) == (16, 64)


@pytest.mark.parametrize("entry", ["pretrain_gpt.py", "pretrain_gpt2.py", "`pwd`/pretrain_gpt.py"])
def test_gpt_entry_points_of_every_release_are_not_warned_about(tmp_path, entry):
    imp = imported(tmp_path, {"main.sh": f"torchrun --nproc-per-node 8 {entry} {NET} {VOCAB}\n"}, "main.sh")
    assert not [w for w in imp.warnings if "not pretrain_gpt.py" in w]


def test_an_entry_point_under_an_unrun_command_is_named_by_its_file(tmp_path):
    main = f"torchrun --nproc-per-node 8 `pwd`/finetune_t0_non_causal_decoder.py {NET} {VOCAB}\n"
    said = [w for w in imported(tmp_path, {"main.sh": main}, "main.sh").warnings if "not pretrain_gpt.py" in w]
    assert said[0].startswith("the script runs finetune_t0_non_causal_decoder.py, not pretrain_gpt.py")


CHILD = f"""#!/bin/bash
TP=${{TP:-8}}
torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB} --tensor-model-parallel-size $TP
"""


@pytest.mark.parametrize(
    ("parent", "tp"),
    [
        ("TP=2\nbash ./child.sh\n", 8),  # not exported: the child does not see it
        ("export TP=2\nbash ./child.sh\n", 2),
        ("TP=2\nexport TP\nsbatch --nodes 1 ./child.sh\n", 2),
        ("set -a\nTP=2\nset +a\nbash ./child.sh\n", 2),
        ("TP=4 bash ./child.sh\n", 4),  # the command's own environment
    ],
)
def test_a_script_run_by_bash_or_sbatch_sees_only_exported_variables(tmp_path, parent, tp):
    imp = imported(tmp_path, {"child.sh": CHILD, "main.sh": "#!/bin/bash\n" + parent}, "main.sh")
    assert imp.request.plan.tp == tp


def test_a_child_scripts_assignments_never_come_back(tmp_path):
    setup = "LAYERS=16\nexport HIDDEN=1024\n"
    main = f"""#!/bin/bash
LAYERS=4
HIDDEN=512
bash ./setup.sh
torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads 8 \\
    --seq-length 1024 --max-position-embeddings 1024 {VOCAB}
"""
    model = imported(tmp_path, {"setup.sh": setup, "main.sh": main}, "main.sh").request.ctx.model
    assert (model.num_layers, model.hidden_size) == (4, 512)


def test_an_unset_positional_argument_is_named_as_the_scripts_argument(tmp_path):
    # Megatron-LM detxoify_lm/finetune_gpt_distributed-1.3b.sh: --global-batch-size $4
    main = f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB} --global-batch-size $4\n"
    with pytest.raises(PlannerError, match=r"pass the script's argument \$4 with --env 4=VALUE"):
        imported(tmp_path, {"main.sh": main}, "main.sh")
    assert imported(tmp_path, {"main.sh": main}, "main.sh", env={"4": "64"}).request.ctx.training.global_batch == 64


def test_import_megatron_names_where_a_world_size_came_from(tmp_path):
    main = f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB} --tensor-model-parallel-size 3\n"
    with pytest.raises(PlannerError, match=r"^the script.s 8 GPUs \(nproc 8\) are not divisible"):
        imported(tmp_path, {"main.sh": main}, "main.sh")
    with pytest.raises(PlannerError, match=r"^--gpus 16 is not divisible"):
        imported(tmp_path, {"main.sh": main}, "main.sh", gpus=16)


def test_a_t5_scripts_encoder_sequence_is_its_sequence_length_as_megatron_reads_it(tmp_path):
    # Megatron-LM arguments.py: without --seq-length, seq_length = --encoder-seq-length (the T5 examples give only
    # that); the trial's Megatron-DeepSpeed examples/pretrain_t5_distributed.sh ended in "--seq-len is required"
    net = NET.replace("--seq-length 1024 ", "")
    t5 = "--encoder-seq-length 512 --decoder-seq-length 128"
    main = f"torchrun --nproc-per-node 8 pretrain_t5.py {net} {VOCAB} {t5}\n"
    req = imported(tmp_path, {"main.sh": main}, "main.sh").request
    assert req.ctx.training.seq_len == 512


def test_every_unset_value_the_estimate_needs_is_named_at_once(tmp_path):
    # the trial: a moe-modelzoo YAML needs ~10 --env values, and each run named only the first
    batch = "--micro-batch-size $MBS --global-batch-size $GBS"
    main = f"torchrun --nproc-per-node 8 pretrain_gpt.py {NET} {VOCAB} {batch}\n"
    with pytest.raises(PlannerError) as err:
        imported(tmp_path, {"main.sh": main}, "main.sh")
    assert str(err.value) == (
        "--micro-batch-size is $MBS, --global-batch-size is $GBS: values the script leaves unset (or computes with a "
        "command megaplan does not run); pass them with --env MBS=VALUE --env GBS=VALUE"
    )
    req = imported(tmp_path, {"main.sh": main}, "main.sh", env={"MBS": "2", "GBS": "64"}).request
    assert (req.plan.micro_batch, req.ctx.training.global_batch) == (2, 64)
