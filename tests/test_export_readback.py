"""megaplan export read back by explain: the flags Megatron-LM's validate_args requires beside the plan's own,
the environment a launch needs, a Slurm job that starts exactly the plan's ranks, and the settings no
Megatron-LM flag carries said (with the options that restore them when the flags are read back).

Found by round-tripping 40 plans (export --format flags/slurm/json, then explain --megatron-args,
--megatron-args-file, --plan) and checking each exported flag against arguments.py @ d98e8a64."""

import json
import shlex

import pytest

from planner.api import explain, make_request
from planner.megatron import export
from planner.megatron.importer import import_megatron
from tests.conftest import run_cli
from tests.test_export import megatron_problems

H100 = dict(hardware="dgx-h100-superpod")


def test_full_iteration_cuda_graph_exports_the_nan_check_off_that_megatron_requires():
    """validate_args: `assert not args.check_for_nan_in_loss_and_grad, "--no-check-for-nan-in-loss-and-grad
    should be set with --cuda-graph-impl=full_iteration for training."` (the check is on by default)."""
    req = make_request(
        model="llama3-8b", gpus=8, **H100, distributed_optimizer=True, options={"cuda_graph_impl": "full_iteration"}
    )
    argv = export.megatron_argv(req)
    i = argv.index("--cuda-graph-impl")
    assert argv[i : i + 3] == ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]
    assert megatron_problems(argv) == []
    back = import_megatron(shlex.join(argv), gpus=8, hardware="dgx-h100-superpod")
    assert back.request.ctx.options == req.ctx.options and not any("nan" in w for w in back.warnings)
    # a script of one's own without it: the reader says Megatron-LM refuses it
    bare = [a for a in argv if a != "--no-check-for-nan-in-loss-and-grad"]
    warned = import_megatron(shlex.join(bare), gpus=8, hardware="dgx-h100-superpod").warnings
    assert [w for w in warned if "nan" in w] == [
        "--cuda-graph-impl full_iteration without --no-check-for-nan-in-loss-and-grad: Megatron-LM's validate_args "
        "refuses it for training; add --no-check-for-nan-in-loss-and-grad"
    ]
    te = export.megatron_argv(make_request(model="llama3-8b", gpus=8, **H100, options={"cuda_graph_impl": "local"}))
    assert "--no-check-for-nan-in-loss-and-grad" not in te  # per-layer graphs keep the check


def test_te_cuda_graphs_with_expandable_segments_launch_with_nccl_graph_register_off():
    """validate_args asserts NCCL_GRAPH_REGISTER=0 when --cuda-graph-impl transformer_engine runs with
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ("to avoid illegal memory access")."""
    opts = {"cuda_graph_impl": "transformer_engine", "expandable_segments": True}
    script = export.slurm_script(make_request(model="llama3-8b", gpus=8, **H100, options=opts))
    env = [line.split("  #")[0] for line in script.splitlines() if line.startswith("export ")]
    assert env == ["export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "export NCCL_GRAPH_REGISTER=0"]
    for other in ({"cuda_graph_impl": "transformer_engine"}, {"cuda_graph_impl": "local", "expandable_segments": True}):
        assert "NCCL_GRAPH_REGISTER" not in export.slurm_script(
            make_request(model="llama3-8b", gpus=8, **H100, options=other)
        )
    flags = run_cli(["export", "--model", "llama3-8b", "--gpus", "8", "--hardware", "dgx-h100-superpod",
                     "--cuda-graph-impl", "transformer_engine", "--expandable-segments", "--force"])  # fmt: skip
    assert "launch with NCCL_GRAPH_REGISTER=0 in the environment" in flags.stderr


@pytest.mark.parametrize(
    ("gpus", "per_node", "shape"),
    [(1024, 8, (128, 8)), (4, 8, (1, 4)), (12, 8, (2, 6)), (6, 4, (2, 3)), (72, 4, (18, 4)), (13, 8, (13, 1))],
)
def test_slurm_launch_starts_exactly_the_plans_ranks(gpus, per_node, shape):
    """torchrun starts --nproc-per-node on each of --nnodes: 12 GPUs of 8-GPU nodes as 2 × 8 started 16 ranks
    (data-parallel 4 instead of 3, a global batch 510 Megatron-LM refuses); 2 nodes of 6 start 12."""
    assert export.launch_shape(gpus, per_node) == shape


def test_slurm_script_of_a_partial_node_plan_reads_back_to_its_gpus():
    req = make_request(model="llama3-8b", gpus=12, **H100, tp=2, pp=2, global_batch=510)
    script = export.slurm_script(req)
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=6" in script
    assert "--nproc-per-node 6 --nnodes 2" in script
    back = import_megatron(script, hardware="dgx-h100-superpod").request
    assert (back.gpus, back.plan.dp) == (12, 3) and back.plan == req.plan


def test_multi_value_flags_stay_on_one_line():
    req = make_request(
        model="llama3-8b",
        gpus=8,
        **H100,
        recompute="selective",
        options={"recompute_modules": ["core_attn", "mlp", "layernorm"]},
    )
    assert "--recompute-modules core_attn mlp layernorm \\\n" in export.flags_text(req)


def test_p2p_overlap_off_without_interleaving_survives_the_flags():
    """--no-overlap-p2p-comm at vpp 1 was written only with interleaving, so the flags read back with it on."""
    req = make_request(model="gpt3-175b", gpus=64, tp=8, pp=8, options={"overlap_p2p_comm": False})
    argv = export.megatron_argv(req)
    assert "--no-overlap-p2p-communication" in argv and megatron_problems(argv) == []
    back = import_megatron(shlex.join(argv), gpus=64, hardware="dgx-a100-superpod").request
    assert back.ctx.options.overlap_p2p_comm is False and back.ctx.options == req.ctx.options


GPT3_2021 = [
    "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16", "--recompute", "full",
    "--attention-kernel", "unfused", "--precision", "fp16", "--pp-scatter-gather", "--no-async-tp-comm",
    "--no-overlap-grad-reduce",
]  # fmt: skip
GPT3_2021_OPTIONS = {"attention_kernel": "unfused", "pp_scatter_gather": True, "async_tp_comm": False}


def test_settings_no_megatron_flag_carries_are_said_with_the_options_that_restore_them():
    """Narayanan et al.'s 2021 GPT-3 run: the pipeline scatter/gather and the TP all-reduce without overlap have no
    flag in today's Megatron-LM. The export said nothing and the flags read back 0.84 % faster (31.07 s against
    31.33 s per iteration); now it names both, and explain with the options it gives rebuilds the estimate."""
    out = run_cli(["export", *GPT3_2021])
    assert out.exit_code == 0, out.output
    assert "--scatter-gather" not in out.stdout and "async-tensor" not in out.stdout  # today's parser refuses them
    notes = [line for line in out.stderr.splitlines() if "not in the flags" in line or "read them back" in line]
    assert notes == [
        "megaplan: note: not in the flags: --pp-scatter-gather: the 2021 pipeline scatter/gather, which today's "
        "Megatron-LM has no flag for",
        "megaplan: note: not in the flags: --no-async-tp-comm: the 2021 TP all-reduce without overlap; today's "
        "Megatron-LM always overlaps",
        "megaplan: note: read them back with: megaplan explain --megatron-args '...' --gpus 1024 --model gpt3-175b "
        "--hardware dgx-a100-superpod --pp-scatter-gather --no-async-tp-comm",
    ]
    req = make_request(
        model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="full", precision="fp16", options=GPT3_2021_OPTIONS
    )
    plan = explain(req)["estimate"]["iteration_s"]
    back = ["explain", "--megatron-args", out.stdout, "--gpus", "1024", "--hardware", "dgx-a100-superpod", "--json"]
    bare = run_cli(back)
    restored = run_cli([*back, "--model", "gpt3-175b", "--pp-scatter-gather", "--no-async-tp-comm"])
    assert json.loads(restored.stdout)["estimate"]["iteration_s"] == plan
    assert json.loads(bare.stdout)["estimate"]["iteration_s"] == pytest.approx(plan / 1.00848, rel=1e-3)


def test_slurm_header_says_how_to_read_the_script_back_to_the_same_estimate(tmp_path):
    """The script has the architecture but not the model's name, the hardware, nor the router's assumed load
    imbalance (an estimate input, no Megatron-LM setting): its header gives them, and explain with that line
    rebuilds the plan's estimate (read back with only --hardware it gave 3.52 s for a 4.20 s plan)."""
    args = ["--model", "mixtral-8x7b", "--hardware", "dgx-h100-superpod", "--gpus", "64", "--tp", "2", "--pp", "4",
            "--ep", "8", "--moe-token-dispatcher", "alltoall", "--sequence-parallel", "--distributed-optimizer",
            "--global-batch", "256", "--moe-load-imbalance", "1.4"]  # fmt: skip
    script = tmp_path / "job.sh"
    assert run_cli(["export", *args, "--format", "slurm", "-o", str(script)]).exit_code == 0
    text = script.read_text()
    assert (
        "# NOTE: the estimate counts settings no flag below can carry:\n# - --moe-load-imbalance 1.4: the busiest "
        "expert's load over the mean: the estimate's assumption\n#   about the router, no setting\n" in text
    )
    line = next(x for x in text.splitlines() if x.startswith("#   megaplan explain"))
    assert line == (
        "#   megaplan explain --megatron-args-file THIS_SCRIPT --model mixtral-8x7b --hardware dgx-h100-superpod "
        "--moe-load-imbalance 1.4"
    )
    back = run_cli(["explain", "--megatron-args-file", str(script), *shlex.split(line)[5:], "--json"])
    plan = run_cli(["explain", *args, "--json"])
    a, b = json.loads(plan.stdout), json.loads(back.stdout)
    assert b["parallel"] == a["parallel"] and b["options"] == a["options"]
    # the run's length is read from the script's --train-iters: 300B tokens / (256 × 4096) rounded up to whole
    # iterations, 286,103 × 1,048,576 = 300,000,739,328 tokens (err16: it was the 300B default without a word)
    assert "TRAIN_ITERS=${TRAIN_ITERS:-286103}" in text and b["estimate"]["train_tokens"] == 286_103 * 256 * 4096
    run = ("train_tokens", "train_days", "gpu_hours", "energy_mwh", "cost")
    assert {k: v for k, v in b["estimate"].items() if k not in run} == {
        k: v for k, v in a["estimate"].items() if k not in run
    }
    assert b["estimate"]["train_days"] == pytest.approx(a["estimate"]["train_days"] * 286_103 * 256 * 4096 / 300e9)


SEVENTY_B = ["--model", "llama3-70b", "--hardware", "dgx-h100-superpod", "--gpus", "512", "--tp", "8",
             "--sequence-parallel", "--distributed-optimizer"]  # fmt: skip


def test_first_and_last_stage_sizes_that_fill_every_stage_are_megatrons_split():
    """transformer_config.py:2326-2340: "either have middle pp stages and layers or none of them". pp 2 with 38 and
    42 of 80 layers runs in Megatron-LM but was refused ("0 left over"); it is the split --decoder-first 38 alone
    gives, so the same estimate. pp 4 with 40 and 40 leaves two stages empty: Megatron-LM refuses it, megaplan
    priced it as a NaN and said "--tokens 3e+11: nan GPU-hours is beyond a float"."""
    both = run_cli(["explain", *SEVENTY_B, "--pp", "2", "--decoder-first-pipeline-num-layers", "38",
                    "--decoder-last-pipeline-num-layers", "42", "--json"])  # fmt: skip
    first = run_cli(["explain", *SEVENTY_B, "--pp", "2", "--decoder-first-pipeline-num-layers", "38", "--json"])
    a, b = json.loads(both.stdout), json.loads(first.stdout)
    assert a["parallel"]["stage_layers"] == b["parallel"]["stage_layers"] == [38, 42]
    assert a["estimate"] == b["estimate"]
    argv = export.megatron_argv(make_request(model="llama3-70b", gpus=512, tp=8, pp=2, first_stage_layers=38,
                                             last_stage_layers=42, **H100))  # fmt: skip
    assert " ".join(argv).count("--decoder-first-pipeline-num-layers 38 --decoder-last-pipeline-num-layers 42") == 1
    empty = run_cli(["explain", *SEVENTY_B, "--pp", "4", "--decoder-first-pipeline-num-layers", "40",
                     "--decoder-last-pipeline-num-layers", "40"])  # fmt: skip
    assert empty.exit_code == 2 and empty.stderr.strip().endswith(
        "80 layers do not split over pp 4 with 40 on the first stage and 40 on the last stage: none left for the "
        "other 2 stage(s)"
    )


def test_a_relative_userbuffer_config_exports_as_a_path_the_job_finds(tmp_path, monkeypatch):
    """--tp-comm-overlap-cfg ub.yaml was exported as `ub.yaml`: the Slurm job (its own working directory) and a
    reader of the flags elsewhere missed it, and explain then priced Transformer Engine's defaults."""
    (tmp_path / "ub.yaml").write_text("proj_fprop: {method: pipeline, num_sm: 24, num_splits: 4}\n")
    monkeypatch.chdir(tmp_path)
    opts = {"tp_comm_overlap": True, "tp_comm_overlap_cfg": "ub.yaml"}
    req = make_request(model="llama3-8b", gpus=64, tp=4, sequence_parallel=True, **H100, options=opts)
    argv = export.megatron_argv(req)
    assert argv[argv.index("--tp-comm-overlap-cfg") + 1] == str(tmp_path.resolve() / "ub.yaml")
    monkeypatch.chdir("/")
    back = import_megatron(export.flags_text(req), gpus=64, hardware="dgx-h100-superpod")
    assert back.warnings == () and back.request.ctx.options == req.ctx.options


def test_the_slurm_job_trains_the_tokens_its_days_count(tmp_path):
    """TRAIN_ITERS was a fixed 100000 whatever --tokens the plan's days, GPU-hours and cost counted: now
    ceil(1.4e12 / (512 × 8192)) = ceil(333,786.4) = 333,787 iterations, and the read-back line carries the tokens
    and the price (read back without them: 300e9 tokens, no cost)."""
    args = ["--model", "llama3-8b", "--hardware", "dgx-h100-superpod", "--gpus", "64", "--tp", "2", "--pp", "2",
            "--sequence-parallel", "--distributed-optimizer", "--tokens", "1.4T",
            "--gpu-hour-price", "2.5"]  # fmt: skip
    script = tmp_path / "job.sh"
    assert run_cli(["export", *args, "--format", "slurm", "-o", str(script)]).exit_code == 0
    text = script.read_text()
    assert "TRAIN_ITERS=${TRAIN_ITERS:-333787}  # 1.4T tokens (--tokens) / (512 × 8192) per iteration" in text
    line = next(x for x in text.splitlines() if x.startswith("#   megaplan explain"))
    assert line.endswith("--hardware dgx-h100-superpod --tokens 1.4e+12 --gpu-hour-price 2.5")
    back = json.loads(
        run_cli(["explain", "--megatron-args-file", str(script), *shlex.split(line)[5:], "--json"]).stdout
    )
    plan = json.loads(run_cli(["explain", *args, "--json"]).stdout)
    est = plan["estimate"]
    assert back["estimate"] == est
    # the cost the days count: 64 GPUs × (1.4e12 tokens / tokens/s) / 3600 s a GPU-hour × 2.5 a GPU-hour
    assert est["cost"] == pytest.approx(64 * 1.4e12 / est["tokens_per_s"] / 3600 * 2.5, rel=1e-9)


def test_main_grads_dtype_needs_the_precision_aware_optimizer_as_megatron_asserts():
    """OptimizerConfig.__post_init__ (optimizer_config.py @ d98e8a64, since Dec 2024) without
    --use-precision-aware-optimizer: "main_grads_dtype can only be fp32 when not using precision-aware optimizer".
    megaplan exempted --main-grads-dtype and exported `--main-grads-dtype bf16` alone, a line Megatron-LM refuses."""
    from planner.errors import PlannerError

    base = dict(model="llama3-8b", gpus=8, distributed_optimizer=True, **H100)
    with pytest.raises((PlannerError, ValueError), match="--main-grads-dtype: only with --use-precision-aware"):
        make_request(**base, options={"main_grads_dtype": "bf16"})
    ok = make_request(**base, options={"use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"})
    argv = " ".join(export.megatron_argv(ok))
    assert "--use-precision-aware-optimizer --main-grads-dtype bf16" in argv
    script = export.flags_text(make_request(**base)) + " --main-grads-dtype bf16"
    read = import_megatron(script, gpus=8, hardware="dgx-h100-superpod")
    assert read.request.ctx.options.main_grads_dtype == "fp32"
    assert (
        "--main-grads-dtype ignored (priced as fp32): only with --use-precision-aware-optimizer; Megatron-LM's "
        "OptimizerConfig asserts fp32 without it, so Megatron-LM refuses this line"
    ) in read.warnings


QWEN_FSDP = ["--model", "qwen3-30b-a3b", "--hardware", "dgx-h100-superpod", "--gpus", "64",
             "--moe-token-dispatcher", "alltoall", "--fsdp", "--cuda-graph-impl", "transformer_engine"]  # fmt: skip


def test_per_layer_cuda_graphs_are_refused_with_fsdp_and_the_all_to_all_overlap():
    """mcore_fsdp_adapter.py:182 @ d98e8a64 asserts cuda_graph_impl in ("none", "full_iteration") when Megatron FSDP
    runs the expert all-to-all overlap. search --fsdp --cuda-graph-impl transformer_engine ranked 14 such plans
    among its top 20 for Qwen3-30B-A3B on 64 H100s, all of which Megatron-LM refuses."""
    plan = ["--tp", "1", "--pp", "1", "--ep", "8", "--overlap-moe-expert-parallel-comm"]
    refused = run_cli(["explain", *QWEN_FSDP, *plan, "--cuda-graph-modules", "attn"])
    assert refused.exit_code == 2 and "1F1B overlap with FSDP does not support per-layer CUDA graphs" in refused.stderr
    full = [*QWEN_FSDP[:-1], "full_iteration", *plan, "--json"]
    assert json.loads(run_cli(["explain", *full]).stdout)["parallel"]["overlap_moe_expert_parallel_comm"] is True
    found = json.loads(run_cli(["search", *QWEN_FSDP, "--top", "20", "--json"]).stdout)
    assert not [
        p for p in found["plans"] if p["parallel"]["fsdp"] and p["parallel"]["overlap_moe_expert_parallel_comm"]
    ]
    assert found["rejected"]["per-layer CUDA graphs not with Megatron FSDP and the expert all-to-all overlap"] > 0


QWEN_EP = ["--model", "qwen3-30b-a3b", "--hardware", "dgx-h100-superpod", "--gpus", "64", "--tp", "1", "--pp", "1",
           "--ep", "8", "--moe-token-dispatcher", "alltoall", "--distributed-optimizer"]  # fmt: skip
GPT3 = ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]


@pytest.mark.parametrize(
    ("args", "breach"),
    [
        (
            [*QWEN_EP, "--cuda-graph-modules", "moe,moe_router"],
            "--cuda-graph-modules takes moe or moe_router, not both",
        ),
        ([*QWEN_EP, "--cuda-graph-modules", "moe_preprocess"], "--cuda-graph-modules moe_preprocess needs moe_router"),
        ([*QWEN_EP, "--cuda-graph-modules", "moe"], "--cuda-graph-modules moe graphs only drop-and-pad routing"),
        (
            [*QWEN_EP, "--cuda-graph-modules", "moe_router,moe_preprocess", "--moe-capacity-factor", "1"],
            "moe_preprocess with the alltoall dispatcher and a capacity factor",
        ),
        (
            [*QWEN_EP, "--cuda-graph-modules", "moe_router", "--recompute", "selective", "--recompute-modules", "moe"],
            "moe recomputation with a transformer_engine moe_router graph",
        ),
        ([*GPT3, "--recompute", "selective"], "core_attn recomputation inside the graph with attention dropout 0.1"),
        (
            [*GPT3, "--cuda-graph-modules", "mlp", "--recompute", "selective", "--recompute-modules", "mlp"],
            "mlp/moe recomputation inside the graph with hidden dropout 0.1",
        ),
    ],
)
def test_cuda_graphs_megatron_core_refuses_are_refused(args, breach):
    """TransformerConfig.__post_init__ (transformer_config.py:2798-2935 @ d98e8a64) refuses these CUDA graph
    settings; megaplan priced and exported each of them. GPT-3 has dropout 0.1: a graph replays its random numbers,
    so a module recomputed inside it is refused."""
    result = run_cli(["explain", *args, "--cuda-graph-impl", "transformer_engine", "--brief"])
    assert result.exit_code == 2 and breach in result.stderr, result.output


def test_cuda_graphs_megatron_core_takes_still_run():
    for extra in (
        [*QWEN_EP, "--cuda-graph-modules", "attn,moe_router,moe_preprocess"],  # the Bridge recipes' graphs
        [*QWEN_EP, "--cuda-graph-modules", "attn,moe_router", "--overlap-moe-expert-parallel-comm"],
        [*GPT3, "--cuda-graph-modules", "mlp", "--recompute", "selective"],  # core_attn recomputed outside the graph
    ):
        assert run_cli(["explain", *extra, "--cuda-graph-impl", "transformer_engine", "--brief"]).exit_code == 0


SMALL_FULL = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 "
    "--micro-batch-size 1 --global-batch-size 64 --vocab-size 32000 --bf16 --distribute-saved-activations "
)
FULL_1 = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "


@pytest.mark.parametrize(
    "extra",
    [
        FULL_1 + "--tensor-model-parallel-size 1",
        FULL_1 + "--tensor-model-parallel-size 2 --sequence-parallel",
        "--recompute-granularity selective --tensor-model-parallel-size 2",
    ],
)
def test_distribute_saved_activations_needs_full_recomputation_tp_and_no_sequence_parallelism(extra):
    """validate_args asserts tp > 1 and full granularity; TransformerConfig (transformer_config.py:1934-1938)
    refuses it with sequence parallelism. megaplan read all three lines without a word (and exported the tp 1 one)."""
    result = run_cli(["explain", "--megatron-args", SMALL_FULL + extra, "--gpus", "8", "--hardware",
                      "dgx-h100-superpod", "--brief"])  # fmt: skip
    assert result.exit_code == 2
    assert "distribute-saved-activations needs full recomputation, tp > 1 and no sequence parallelism" in result.stderr


def test_distribute_saved_activations_round_trips_where_megatron_takes_it():
    line = SMALL_FULL + FULL_1
    req = import_megatron(line + "--tensor-model-parallel-size 2", gpus=8, hardware="dgx-h100-superpod").request
    assert req.ctx.options.distribute_saved_activations
    argv = export.megatron_argv(req)
    assert "--distribute-saved-activations" in argv and megatron_problems(argv) == []
    back = import_megatron(shlex.join(argv), gpus=8, hardware="dgx-h100-superpod").request
    assert back.ctx.options == req.ctx.options and explain(back)["estimate"] == explain(req)["estimate"]
