"""A launch script read without --hardware is read on the GPU its file name states as a word.

NVIDIA's Megatron-LM examples name their GPU (examples/llama/train_llama3_8b_h100_fp8.sh,
examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh); read on the default A100 preset their FP8 was refused
("--fp8 needs FP8 tensor cores"). The script below is written here in that pattern."""

import json

import pytest

from planner.hardware.names import gpu_in_name

from conftest import run_cli

SCRIPT = """#!/bin/bash
GPUS_PER_NODE=8
NUM_NODES=1
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm \\
    --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \\
    --seq-length 8192 --max-position-embeddings 8192 --vocab-size 128256 \\
    --micro-batch-size 1 --global-batch-size 128 --bf16 \\
    --fp8-format hybrid --fp8-recipe tensorwise --use-distributed-optimizer
"""


@pytest.mark.parametrize(
    "name, found",
    [
        ("train_llama3_8b_h100_fp8.sh", ("H100", "dgx-h100-superpod")),
        ("run-GB200-70b.sh", ("GB200", "gb200-nvl72")),  # not B200: gb200's b200 is inside a word
        ("b200.sh", ("B200", "dgx-b200-superpod")),
        ("a100_vs_h100.sh", None),  # two GPUs: none chosen
        ("train_h1000.sh", None),  # not a word
        ("train.sh", None),
    ],
)
def test_the_gpu_a_file_name_states(name, found):
    assert gpu_in_name(name) == found


def test_an_h100_script_is_read_on_h100_and_says_so(tmp_path):
    path = tmp_path / "train_llama3_8b_h100_fp8.sh"
    path.write_text(SCRIPT)
    result = run_cli(["explain", "--megatron-args-file", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["hardware"] == "dgx-h100-superpod"
    assert "hardware dgx-h100-superpod from the script's name train_llama3_8b_h100_fp8.sh" in result.stderr
    given = run_cli(["explain", "--megatron-args-file", str(path), "--hardware", "gb200-nvl72", "--json"])
    assert given.exit_code == 0 and json.loads(given.stdout)["hardware"] == "gb200-nvl72"
    assert "from the script's name" not in given.stderr


def test_a_script_whose_name_states_no_gpu_stays_on_the_default(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT)
    result = run_cli(["explain", "--megatron-args-file", str(path)])
    assert result.exit_code == 2 and "--fp8 needs FP8 tensor cores" in result.stderr
