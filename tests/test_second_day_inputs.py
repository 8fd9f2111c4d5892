"""A new user's second day (issue 21, fresh user trial 7): each test reproduces a mistake that hung, was
dropped without a word or ended in a line that did not say what to do, with files written here in the
pattern of the real ones (the real scripts stay outside the repository)."""

from __future__ import annotations

import os
import stat

import pytest

from conftest import one_line_error, run_cli

DEVICE = "/dev/zero"
needs_device = pytest.mark.skipif(
    not (os.path.exists(DEVICE) and stat.S_ISCHR(os.stat(DEVICE).st_mode)), reason="no /dev/zero character device"
)
SCRIPT = (
    "#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
    "--global-batch-size 256 --bf16 --tokenizer-type GPT2BPETokenizer --tensor-model-parallel-size 2\n"
)


@needs_device
@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--megatron-args-file", DEVICE],
        ["explain", "--bridge-config", DEVICE, "--gpus", "8"],
        ["search", "--model", DEVICE, "--gpus", "64"],
        ["search", "--model", "llama3-8b", "--gpus", "64", "--hardware", DEVICE],
        ["calibrate", "--from-log", DEVICE, "--megatron-args-file", "SCRIPT", "-o", "OUT"],
        ["calibrate", "--from-log", "LOG", "--megatron-args-file", DEVICE, "-o", "OUT"],
    ],
)
def test_a_device_given_as_an_input_file_is_one_line_not_a_hang(tmp_path, args):
    """`--megatron-args-file /dev/zero` (and --bridge-config, --model, --hardware, calibrate's --from-log and
    script) read the device until killed: the trial's runs timed out after 10 s with no output."""
    (tmp_path / "s.sh").write_text(SCRIPT)
    (tmp_path / "t.log").write_text("iteration 10/ 100 | elapsed time per iteration (ms): 4000.0 |\n")
    paths = {"SCRIPT": str(tmp_path / "s.sh"), "LOG": str(tmp_path / "t.log"), "OUT": str(tmp_path / "c.yaml")}
    line = one_line_error(run_cli([paths.get(a, a) for a in args]))
    assert f"'{DEVICE}' is a device or socket, not a file" in line
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize(
    "option, value", [("--memory-headroom", "nan"), ("--gpu-hour-price", "inf"), ("--gpu-hour-price", "nan")]
)
def test_a_number_option_refuses_nan_and_inf(option, value):
    """`--memory-headroom nan` passed click's range (nan compares false) and ended in "every legal plan needs
    more than nan GiB per GPU"; `--gpu-hour-price inf` ran and wrote "gpu_hour_price": Infinity into --json."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus", "64", option, value]))
    assert line.startswith(f"megaplan: error: Invalid value for '{option}': '{value}' is not a finite number")


def test_an_env_the_script_never_reads_is_said_not_dropped(tmp_path):
    """`--env TP=4` beside a script that writes `--tensor-model-parallel-size 2` (no $TP) changed nothing and
    said nothing: the user believed TP 4 was priced. A variable the launch does read gets no warning."""
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size ${TP_OF[$SZ]}"))
    script.write_text("declare -A TP_OF=([8b]=2 [70b]=8)\nSZ=${SZ:-8b}\n" + script.read_text())
    result = run_cli(["explain", "--brief", "--megatron-args-file", str(script), "--env", "TP=4", "--env", "SZ=70b"])
    assert result.exit_code == 0, result.output
    warned = [ln for ln in result.stderr.splitlines() if "--env" in ln]
    assert warned == [
        "megaplan: warning: --env TP: the script never reads it before its launch, so it changes nothing (a flag "
        "goes in --megatron-args '--flag VALUE', a plan size in --tp/--pp/--gpus ...)"
    ]
    assert "TP8 PP1 DP1" in result.stdout  # SZ=70b was read: the table's TP 8


def test_a_nemo2_line_gives_its_world_size_and_says_what_it_does_not_read(tmp_path):
    """A NeMo 2 line with trainer.num_nodes=2 trainer.devices=8 ended in "the world size is unknown: pass --gpus N
    (a Bridge config does not hold it)"; a misspelt strategy key was dropped without a word."""
    line = tmp_path / "nemo.sh"
    line.write_text(
        "nemo llm pretrain --factory llama3_8b trainer.num_nodes=2 trainer.devices=8 \\\n"
        "    trainer.strategy.tensor_model_parallel_size=2 trainer.strategy.tensor_parallel_size=4 log.log_dir=/x -y\n"
    )
    result = run_cli(["explain", "--brief", "--bridge-config", str(line)])
    assert result.exit_code == 0, result.output
    assert "llama3-8b on 16 GPUs" in result.stdout and "TP2 PP1 DP4 CP2" in result.stdout  # the recipe's CP 2
    warned = [ln for ln in result.stderr.splitlines() if "warning" in ln]
    assert warned == [
        "megaplan: warning: NeMo 2 key trainer.strategy.tensor_parallel_size: not one megaplan reads; ignored"
    ]
    line.write_text("nemo llm pretrain --factory llama3_8b trainer.num_nodes=2 -y\n")
    assert "give trainer.num_nodes and trainer.devices on the NeMo 2 line" in one_line_error(
        run_cli(["explain", "--bridge-config", str(line)])
    )


def test_a_misspelt_nemo2_factory_names_the_one_meant(tmp_path):
    """`--factory llama3_8B` ended in "no Megatron-LM entry point (pretrain_*.py, train*.py) or flags found"."""
    line = tmp_path / "nemo.sh"
    line.write_text("nemo llm pretrain --factory llama3_8B trainer.num_nodes=1 trainer.devices=8 -y\n")
    error = one_line_error(run_cli(["explain", "--bridge-config", str(line)]))
    assert error.startswith("megaplan: error: NeMo 2 --factory llama3_8B: did you mean llama3_8b? (megaplan reads ")


def test_a_precision_field_the_preset_overwrites_is_said():
    """`--bridge-override model.fp8=hybrid` over a bf16 recipe was priced bf16 without a word: Bridge's
    runtime_config_update copies the mixed_precision preset (fp8=None) onto model, so the field is lost there
    too. The check compared the field with the preset's own keys (a name reused in apply_precision)."""
    from planner.bridge.runtime import apply_precision

    fields = {"mixed_precision": "bf16_mixed", "model.fp8": "hybrid"}
    warned = apply_precision(fields, {"model.fp8"})
    assert fields["model.fp8"] is None
    assert warned == [
        "model.fp8=hybrid is overwritten by mixed_precision.fp8=None: Bridge copies the precision preset onto model, "
        "optimizer and ddp; give mixed_precision.fp8=hybrid"
    ]
    result = run_cli(
        ["explain", "--brief", "--bridge-recipe", "llama3_8b_pretrain_config", "--gpus", "8",
         "--bridge-override", "mixed_precision.fp8=hybrid"]
    )  # fmt: skip
    assert result.exit_code == 0 and "bf16 FP8-hybrid" in result.stdout, result.output


def test_a_modelzoo_yaml_with_variables_given_as_bridge_config_says_how_to_fill_them(tmp_path):
    """A moe-modelzoo MODEL_ARGS YAML (${TP}, ${PP} ... that its launcher fills in) as --bridge-config ended in
    "--tensor-model-parallel-size expects an integer, got '${TP}'", and --env is refused beside --bridge-config."""
    config = tmp_path / "Model.yaml"
    config.write_text(
        "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --tensor-model-parallel-size: ${TP}\n"
        "  --pipeline-model-parallel-size: ${PP}\n  --num-layers: 32\n  --hidden-size: 4096\n"
        "  --num-attention-heads: 32\n  --micro-batch-size: ${MBS}\n  --global-batch-size: 256\n"
        "  --seq-length: ${SEQ_LEN}\n  --max-position-embeddings: 4096\n  --data-path: ${DATA_PATH}\n"
    )
    error = one_line_error(run_cli(["explain", "--bridge-config", str(config), "--gpus", "8"]))
    assert error == (
        f"megaplan: error: {config}: its MODEL_ARGS use ${{TP}}, ${{PP}}, ${{MBS}}, ${{SEQ_LEN}} and 1 more, which "
        f"its launcher fills in; read it as a launch script, --megatron-args-file {config} (it names the --env "
        "NAME=VALUE each flag the estimate needs takes)"
    )
    env = ["--env", "TP=2", "--env", "PP=1", "--env", "MBS=1", "--env", "SEQ_LEN=4096"]
    result = run_cli(["explain", "--brief", "--megatron-args-file", str(config), "--gpus", "8", *env])
    assert result.exit_code == 0 and "TP2 PP1 DP4" in result.stdout, result.output


@pytest.mark.parametrize(
    "text, option, needle",
    [
        ('[{"model": "llama3-8b", "parallel": {"tp": 2}}]', "--megatron-args-file", "megaplan plan file (JSON)"),
        ('{"model": "llama3-8b", "parallel": {"tp": 2}}', "--bridge-config", "megaplan plan file (JSON)"),
        ("torchrun --nproc-per-node 8 run_recipe.py --recipe llama3_8b_pretrain_config", "--megatron-args-file",
         "Megatron-Bridge's run_recipe.py launch line, not Megatron-LM's: read it with --bridge-config FILE"),
        ("nemo llm pretrain --factory llama3_8b -y", "--megatron-args-file", "NeMo 2 command line"),
        ("trainer:\n  devices: 1\nmodel:\n  encoder_seq_length: 2048\n  max_position_embeddings: "
         "${.encoder_seq_length}\n  megatron_amp_O2: false\n", "--bridge-config", "a NeMo 1 model config"),
        ("model:\n  seq_length: ${oc.env:SEQ}\n", "--bridge-config", "an OmegaConf interpolation"),
        ("torchrun --nproc-per-node 8 scripts/training/run_recipe.py --recipe X $(grep -v '^#' o.txt)",
         "--bridge-config", "takes overrides from $(grep -v '^#' o.txt), a command megaplan does not run"),
    ],
)  # fmt: skip
def test_a_file_of_another_kind_says_what_it_is_and_which_option_reads_it(tmp_path, text, option, needle):
    """A plan JSON, Bridge's run_recipe.py line, a NeMo 2 line or a NeMo 1 config given to the option that does not
    read it ended in "not a shell script bashlex can parse", "no Megatron-LM entry point" or "world size unknown"."""
    path = tmp_path / "given"
    path.write_text(text)
    assert needle in one_line_error(run_cli(["explain", option, str(path), "--gpus", "8"]))


def test_bridges_run_recipe_line_is_read_with_its_recipe_gpus_and_overrides(tmp_path):
    """The README's Bridge launch line, `torchrun ... scripts/training/run_recipe.py --recipe NAME key=value ...`,
    was "the world size is unknown: pass --gpus N (a Bridge config does not hold it)"."""
    line = tmp_path / "launch.sh"
    line.write_text(
        "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 2 --nproc-per-node=8 scripts/training/run_recipe.py \\\n"
        "    --recipe llama3_8b_pretrain_config model.tensor_model_parallel_size=2 train.global_batch_size=128\n"
    )
    result = run_cli(["explain", "--brief", "--bridge-config", str(line)])
    assert result.exit_code == 0, result.output
    assert "llama3-8b on 16 GPUs" in result.stdout and "global batch 128" in result.stdout
    assert "TP2 PP1 DP4 CP2" in result.stdout  # the recipe's CP 2 kept, its TP overridden


def test_a_backslash_followed_by_a_space_is_named_as_the_cause(tmp_path):
    """`--merge-file m.txt \\ ` (a space after the backslash) ends the command in bash, with ' ' passed as an
    argument; the error blamed "a value with spaces split into words" and told to quote "${ARGS[@]}"."""
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.rstrip("\n") + " \\ \n    --pipeline-model-parallel-size 2\n")
    error = one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))
    assert "stray word ' ' after --tensor-model-parallel-size and its value: a backslash followed by a space" in error
    assert error.endswith("delete the space after the backslash")


def test_an_unknown_flag_says_how_to_price_the_rest(tmp_path):
    """A fork's flag (BigScience's --mup, moe-modelzoo's --offload-optimizer-states) was refused with no way on."""
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.rstrip("\n") + " --offload-optimizer-states\n")
    error = one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))
    assert "unknown Megatron-LM flag: --offload-optimizer-states" in error
    assert error.endswith("a fork's flag cannot be priced: to price the rest, drop it from a copy of the script)")


def test_an_expert_grid_that_does_not_divide_the_world_names_a_gpu_count_that_works(tmp_path):
    """Megatron-LM core_v0.19.0's Mixtral example runs EP 8 × PP 4 on its default 1 node of 8 GPUs: the error
    said "etp·ep·pp = 1·8·4 does not divide 8 GPUs" and nothing of what would."""
    script = tmp_path / "mixtral.sh"
    script.write_text(
        "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
        "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--seq-length 4096 --max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 256 --bf16 "
        "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 --pipeline-model-parallel-size 4 "
        "--tensor-model-parallel-size 1 --tokenizer-type Llama2Tokenizer --tokenizer-model t.model\n"
    )
    error = one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))
    assert error.endswith(
        "etp·ep·pp = 1·8·4 does not divide 8 GPUs; allowed: a GPU count that is a multiple of 32 (e.g. --gpus 32), "
        "or ep, etp, pp that divide 8"
    )
    assert run_cli(["explain", "--brief", "--megatron-args-file", str(script), "--gpus", "32"]).exit_code == 0


def test_full_recomputation_without_its_layer_count_is_said_not_assumed(tmp_path):
    """`--recompute-granularity full --recompute-method block` without `--recompute-num-layers` was priced as
    1 layer a chunk with no word (fresh user trial 7): Megatron-LM's default was 1 up to 23.06, None from
    core_r0.4.0, where transformer_config.py rejects the line. With the count given, no warning."""
    full = " --recompute-granularity full --recompute-method block"
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.replace(" --bf16", full + " --bf16"))
    result = run_cli(["explain", "--brief", "--megatron-args-file", str(script)])
    assert result.exit_code == 0, result.output
    warned = [ln for ln in result.stderr.splitlines() if "--recompute-num-layers" in ln]
    assert len(warned) == 1
    assert "--recompute-method block without --recompute-num-layers: priced as 1 layer" in warned[0]
    assert "rc-blk:1" in result.stdout
    script.write_text(SCRIPT.replace(" --bf16", full + " --recompute-num-layers 2 --bf16"))
    result = run_cli(["explain", "--brief", "--megatron-args-file", str(script)])
    assert result.exit_code == 0 and "--recompute-num-layers" not in result.stderr
    assert "rc-blk:2" in result.stdout


def test_plan_dash_reads_standard_input_and_a_terminal_is_refused(monkeypatch):
    """`megaplan search ... --json | megaplan explain --plan -` said "plan file '-' not found" (fresh user trial 7):
    `-` is standard input, as for most tools, with FILE#RANK's rank (`-#2`); a terminal on standard input is
    refused in one line instead of waiting for typing."""
    searched = run_cli(["search", "--model", "llama3-8b", "--gpus", "8", "--top", "3", "--json"])
    assert searched.exit_code == 0, searched.output
    first = run_cli(["explain", "--brief", "--plan", "-"], input=searched.stdout)
    second = run_cli(["explain", "--brief", "--plan", "-#2"], input=searched.stdout)
    assert first.exit_code == 0 and second.exit_code == 0, (first.output, second.output)
    assert first.stdout.splitlines()[1] != second.stdout.splitlines()[1]  # rank 1's plan line, then rank 2's

    class Terminal:
        def isatty(self):
            return True

    from planner import plan_file

    monkeypatch.setattr(plan_file.sys, "stdin", Terminal())
    with pytest.raises(plan_file.PlannerError, match=r"--plan -: reads the plan from standard input, but nothing"):
        plan_file.read_plan_file("-")


def test_fp8_on_a_gpu_without_it_names_the_option_and_the_presets_that_have_it():
    """`--fp8 e4m3` on the default A100 said "use an H100/H200/B200 preset" (fresh user trial 7): no option
    named, no preset name the user could type. Now it names --hardware and every shipped preset with FP8."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus", "8", "--fp8", "e4m3"]))
    assert "A100-SXM4-80GB (dgx-a100-superpod) has none: give --hardware with one that has them" in line
    assert "dgx-h100-superpod" in line and "gb200-nvl72" in line and "dgx-a100-40gb-superpod" not in line


def test_a_stream_as_output_is_written_without_overwrite(tmp_path):
    """`export -o /dev/null` asked for --overwrite (fresh user trial 7): a character device or a pipe holds no
    file of the user's to replace. A regular file that exists still needs --overwrite."""
    args = ["export", "--model", "gpt-1.7b", "--gpus", "8", "--format", "json", "-o"]
    assert run_cli([*args, os.devnull]).exit_code == 0
    kept = tmp_path / "plan.json"
    kept.write_text("mine")
    assert "exists; pass --overwrite" in one_line_error(run_cli([*args, str(kept)]))
    assert kept.read_text() == "mine"


def test_ctrl_c_exits_130_as_a_shell_reports_an_interrupted_command(monkeypatch):
    """Ctrl-C printed 'megaplan: aborted' and exited 1, the code of an ordinary failure (fresh user trial 7);
    a shell reports an interrupted command as 128 + SIGINT = 130, and scripts test for it."""
    import planner.search as search_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search_module, "search", interrupted)
    from planner.cli import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["search", "--model", "llama3-8b", "--gpus", "8"])
    assert stop.value.code == 130


def test_torchrun_one_process_per_gpu_says_so(tmp_path):
    """`torchrun --nproc-per-node gpu` (torch/distributed/run.py: one process per GPU of the node) was reported as
    a value the script leaves unset (fresh user trial 7); the line now says what `gpu` means and what to give."""
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.replace("torchrun --nproc-per-node 8", "torchrun --nproc-per-node gpu --nnodes 2"))
    line = one_line_error(run_cli(["explain", "--brief", "--megatron-args-file", str(script)]))
    assert line == (
        "megaplan: error: the world size is unknown: torchrun --nproc-per-node gpu starts one process per GPU of "
        "each node, which the script does not say; pass --gpus N (nodes × GPUs per node)"
    )
    given = run_cli(["explain", "--brief", "--megatron-args-file", str(script), "--gpus", "16"])
    assert given.exit_code == 0 and "on 16 GPUs" in given.stdout


def test_arguments_a_script_writes_with_a_heredoc_and_reads_back_with_cat(tmp_path):
    """`cat > args.txt <<EOF ... EOF` then `pretrain_gpt.py $(cat args.txt)` (fresh user trial 7): the flags
    vanished and the error blamed the model flags; the file the script wrote is read back as bash would, its
    lines split into words (unquoted). A file the script did not write still stays unknown."""
    flags = SCRIPT.split("pretrain_gpt.py ")[1].replace(" --tensor-model-parallel-size 2\n", "")
    body = flags.replace(" --num-attention-heads", "\n--num-attention-heads").replace(" --micro", "\n--micro")
    script = tmp_path / "run.sh"
    launch = "torchrun --nproc-per-node 8 pretrain_gpt.py $(cat /tmp/mp_args.txt) --tensor-model-parallel-size 2\n"
    script.write_text(f"#!/bin/bash\ncat > /tmp/mp_args.txt <<EOF\n{body}\nEOF\n{launch}")
    result = run_cli(["explain", "--brief", "--megatron-args-file", str(script)])
    assert result.exit_code == 0, result.output
    assert "model 32 layers · hidden 4096" in result.stdout and "TP2 PP1 DP4" in result.stdout
    script.write_text(f"#!/bin/bash\n{launch}")
    assert "does not define the model" in one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))


def test_a_bridge_performance_launcher_points_to_the_bridge_options(tmp_path):
    """NVIDIA dgxc-benchmarking's deepseek_v3 launch.sh runs Megatron-Bridge's scripts/performance/
    setup_experiment.py: megaplan said only "no Megatron-LM entry point" (fresh user trial 7). It now says what
    the script runs, the recipe it names, and the options that read a Bridge run."""
    script = tmp_path / "launch.sh"
    script.write_text(
        "#!/bin/bash\nset -eu\ncd $LLMB_REPO\npython3 scripts/performance/setup_experiment.py \\\n"
        "    --model_family_name deepseek \\\n    --model_recipe_name deepseek_v3 \\\n    --gpu h100 -ng 1024\n"
    )
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))
    assert line.startswith("megaplan: error: no Megatron-LM entry point (pretrain_*.py, train*.py) or flags found")
    assert line.endswith(
        "it runs Megatron-Bridge's setup_experiment.py, not a Megatron-LM launch (it names deepseek_v3): give the "
        "recipe with --bridge-recipe NAME --gpus N (a NAME megaplan does not know lists those it does), or its "
        "overrides with --bridge-config FILE"
    )


def test_a_required_variable_is_shown_whole_not_cut_at_its_message(tmp_path):
    """`NNODES=${NODES:?set NODES}` then `--nnodes $NNODES` was shown as "nnodes = ${NODES:?set" (fresh user trial
    7): the message's space split the placeholder. It is shown as ${NODES:?}, and --env NODES=2 fills it."""
    script = tmp_path / "run.sh"
    body = SCRIPT.replace("torchrun --nproc-per-node 8", "torchrun --nproc-per-node 8 --nnodes $NNODES")
    script.write_text(body.replace("#!/bin/bash\n", "#!/bin/bash\nNNODES=${NODES:?set NODES}\n"))
    line = one_line_error(run_cli(["explain", "--brief", "--megatron-args-file", str(script)]))
    assert "(nproc = 8, nnodes = ${NODES:?})" in line and line.endswith("pass --gpus N or --env NODES=VALUE")
    given = run_cli(["explain", "--brief", "--megatron-args-file", str(script), "--env", "NODES=2"])
    assert given.exit_code == 0 and "on 16 GPUs" in given.stdout
