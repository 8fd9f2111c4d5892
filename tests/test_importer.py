"""Reading existing Megatron-LM command lines into plans: what changes cost is honoured,
the rest accepted and ignored, old flags read through the alias table, nothing executed."""

from pathlib import Path

import pytest

from planner.api import explain
from planner.errors import InfeasibleError, PlannerError
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


# ----------------------------------------------------------------------------- memory and recompute options

SMALL = "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 --seq-length 2048 --bf16 "


def test_recompute_method_layers_and_modules_are_read():
    block = import_megatron(
        SMALL + "--recompute-granularity full --recompute-method block --recompute-num-layers 3", gpus=8
    ).request.plan
    assert (block.recompute.value, block.recompute_method.value, block.recompute_num_layers) == ("full", "block", 3)
    uniform = import_megatron(
        SMALL + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1", gpus=8
    )
    assert uniform.request.plan.recompute_num_layers is None  # Megatron's classic full recomputation
    mods = import_megatron(SMALL + "--recompute-granularity selective --recompute-modules mlp layernorm", gpus=8)
    assert [m.value for m in mods.request.ctx.options.recompute_modules] == ["mlp", "layernorm"]


def test_full_recompute_without_method_is_refused_as_megatron_does():
    with pytest.raises(PlannerError, match="--recompute-method uniform|block"):
        import_megatron(SMALL + "--recompute-granularity full", gpus=8)
    with pytest.raises(PlannerError, match="gdn_norm_out: needs model features"):
        import_megatron(SMALL + "--recompute-granularity selective --recompute-modules gdn_norm_out", gpus=8)
    mla = import_megatron(SMALL + "--recompute-granularity selective --recompute-modules mla_up_proj", gpus=8)
    with pytest.raises(InfeasibleError, match="mla_up_proj recomputation needs multi-latent attention"):
        explain(mla.request)


def test_cuda_graph_flags_old_and_new():
    new = import_megatron(SMALL + "--cuda-graph-impl transformer_engine --cuda-graph-modules attn mlp", gpus=8)
    assert new.request.ctx.options.cuda_graph_impl.value == "transformer_engine"
    assert [m.value for m in new.request.ctx.options.cuda_graph_modules] == ["attn", "mlp"]
    old = import_megatron(SMALL + "--enable-cuda-graph --cuda-graph-scope attn", gpus=8)
    assert old.request.ctx.options.cuda_graph_impl.value == "local"
    assert [m.value for m in old.request.ctx.options.cuda_graph_modules] == ["attn"]
    assert any("--enable-cuda-graph" in w for w in old.warnings)


def test_offloading_optimizer_dtypes_and_allocator():
    script = (
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        "torchrun --nproc_per_node 8 pretrain_gpt.py " + SMALL + "--use-distributed-optimizer "
        "--cpu-offloading-num-layers 4 --use-precision-aware-optimizer --exp-avg-dtype bf16 --main-grads-dtype bf16"
    )
    opts = import_megatron(script).request.ctx.options
    assert opts.cpu_offloading_num_layers == 4 and opts.expandable_segments
    assert opts.use_precision_aware_optimizer and opts.exp_avg_dtype == "bf16" and opts.main_grads_dtype == "bf16"
    ignored = import_megatron(SMALL + "--exp-avg-dtype bf16", gpus=8)
    assert ignored.request.ctx.options.exp_avg_dtype == "fp32"
    assert any("only with --use-precision-aware-optimizer" in w for w in ignored.warnings)


def test_options_read_but_not_modelled_are_reported():
    out = import_megatron(
        SMALL + "--fp8-recipe tensorwise --optimizer-cpu-offload --use-precision-aware-optimizer"
        " --use-distributed-optimizer",
        gpus=8,
    )
    text = " ".join(out.warnings)
    assert "not modelled, the estimate leaves out: " in text
    assert "--fp8-recipe" not in text  # the recipe is costed: FP8 casts and amax (docs/cost-model.md §4.1)
    assert out.request.ctx.options.fp8_recipe == "tensorwise"
    assert "the optimizer's CPU offload (--optimizer-cpu-offload True)" in text


def test_megatron_fsdp_with_pipeline_parallelism_and_sharding_strategies():
    req = import_megatron(SMALL + "--use-megatron-fsdp --pipeline-model-parallel-size 2", gpus=8).request
    assert req.plan.fsdp and req.plan.pp == 2
    zero2 = import_megatron(SMALL + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", gpus=8)
    assert zero2.request.plan.fsdp_sharding.value == "optim_grads"
    with pytest.raises(PlannerError, match="--data-parallel-sharding-strategy no_shard is not modelled"):
        import_megatron(SMALL + "--use-megatron-fsdp --data-parallel-sharding-strategy no_shard", gpus=8)
