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
