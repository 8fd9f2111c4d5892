"""Reading existing Megatron-LM command lines into plans: what changes cost is honoured,
the rest accepted and ignored, old flags read through the alias table, nothing executed."""

from pathlib import Path

import pytest

from planner.api import explain
from planner.errors import PlannerError
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import predict
from planner.megatron.importer import import_megatron

DATA = Path(__file__).parent / "data"
BASE = (
    "--num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 --max-position-embeddings 2048 "
    "--vocab-size 50257 --micro-batch-size 4 --global-batch-size 512 "
)


def test_sc21_table1_script_reproduces_the_validated_76b_run():
    """The sc21-style script with MODEL_SIZE=76B is Narayanan 2021 Table 1's 76.1B run: TP 8, PP 4,
    micro-batch 2, 5 layers per virtual stage (VPP 3), 128 nodes, fp16, full recompute, DDP local."""
    imported = import_megatron((DATA / "sc21_style.sh").read_text(), env={"MODEL_SIZE": "76B"})
    req = imported.request
    p = req.plan
    assert (req.gpus, p.tp, p.pp, p.dp, p.vpp, p.micro_batch) == (1024, 8, 4, 32, 3, 2)
    assert p.recompute.value == "full" and req.ctx.training.precision.value == "fp16"
    assert not req.ctx.options.overlap_grad_reduce  # DDP impl local
    assert any("--activations-checkpoint-method" in w for w in imported.warnings)  # read through the alias table
    # the same plan the validation builds from the reference table, up to the 2021-only options
    run = next(r for r in load_runs() if r.id == "N21-T1-76.1B")
    assert req.ctx.model.num_layers == 60 and req.ctx.training.global_batch == run.request["global_batch"]


def test_ddp_impl_torch_means_overlapped_gradient_reduction():
    imported = import_megatron((DATA / "sc21_style.sh").read_text(), env={"MODEL_SIZE": "1.7B"})
    assert imported.request.ctx.options.overlap_grad_reduce
    assert imported.request.gpus == 32 and imported.request.plan.micro_batch == 16


def test_flags_that_choose_modelled_behaviour_are_honoured():
    fp16 = import_megatron(BASE + "--fp16 --attention-backend unfused --overlap-grad-reduce", gpus=32).request
    assert fp16.ctx.training.precision.value == "fp16"
    assert fp16.ctx.options.attention_kernel.value == "unfused" and fp16.ctx.options.overlap_grad_reduce
    local = import_megatron(BASE + "--bf16 --transformer-impl local", gpus=32).request
    assert local.ctx.options.attention_kernel.value == "unfused"
    te = import_megatron(BASE + "--bf16", gpus=32).request
    assert te.ctx.options.attention_kernel.value == "flash"  # Transformer Engine, attention backend auto


def test_sequence_parallel_with_tp_1_is_a_no_op_as_in_megatron():
    req = import_megatron(BASE + "--bf16 --sequence-parallel", gpus=32).request
    assert req.plan.tp == 1 and not req.plan.sequence_parallel


def test_flags_that_do_not_change_cost_are_ignored():
    plain = import_megatron(BASE + "--bf16", gpus=32).request
    noisy = import_megatron(
        BASE + "--bf16 --lr 3e-4 --min-lr 3e-5 --log-interval 10 --save /ckpt --data-path /d "
        "--eval-iters 10 --seed 1234 --clip-grad 1.0",
        gpus=32,
    ).request
    assert explain(noisy)["estimate"]["iteration_s"] == explain(plain)["estimate"]["iteration_s"]


def test_unknown_flag_is_an_error_with_a_suggestion():
    with pytest.raises(
        PlannerError,
        match=r"unknown Megatron-LM flag: --pipeline-parallel-size \(did you mean "
        r"--pipeline-model-parallel-size\?\)",
    ):
        import_megatron(BASE + "--pipeline-parallel-size 2", gpus=32)


def test_unset_variables_are_ignored_unless_they_set_the_plan(tmp_path):
    script = (
        "#!/bin/bash\nCKPT=$1\ntorchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py "
        + BASE
        + "--bf16 --tensor-model-parallel-size ${TP} --save $CKPT --train-iters $ITERS\n"
    )
    with pytest.raises(PlannerError, match=r"--tensor-model-parallel-size is \$\{TP\}.*--env TP=VALUE"):
        import_megatron(script)
    imported = import_megatron(script, env={"TP": "2"})
    assert imported.request.gpus == 32 and imported.request.plan.tp == 2
    assert any("--train-iters" in n for n in imported.notes)


def test_world_size_is_needed_when_the_line_has_no_launcher():
    with pytest.raises(PlannerError, match="world size is unknown"):
        import_megatron(BASE + "--bf16")


def test_the_validated_gpt3_run_as_a_command_line_matches_validation():
    """Narayanan 2021 §5.1 written as a 2021 command line gives the validation's prediction exactly."""
    line = (
        "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 "
        "--vocab-size 50257 --micro-batch-size 1 --global-batch-size 1536 --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 16 --fp16 --checkpoint-activations --DDP-impl local "
        "--scatter-gather-tensors-in-pipeline --no-async-tensor-model-parallel-allreduce --attention-backend unfused"
    )
    req = import_megatron(line, gpus=1024).request
    run = next(r for r in load_runs() if r.id == "N21-S51-GPT3-175B-1024")
    pj = explain(req)
    eq3 = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288))
    assert eq3 / pj["estimate"]["iteration_s"] / 1024 / 1e12 == pytest.approx(predict(run), rel=1e-9)


def test_the_documented_alias_table_is_the_one_the_importer_uses():
    from planner.megatron.aliases import alias_table_markdown

    doc = (Path(__file__).parents[1] / "docs" / "megatron-flags.md").read_text()
    assert alias_table_markdown() in doc
