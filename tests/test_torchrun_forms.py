"""torchrun's process counts in a launch script, read as torchrun reads them, or one line saying why they give no world
size (bridge17). torch 2.13's torch/distributed/run.py: --nproc-per-node and --nnodes go through Python's int()
(``determine_local_world_size``, ``parse_min_max_nnodes``: '2_0' is 20, '+8' is 8), --nnodes may be an elastic range
MIN:MAX, --nproc-per-node also takes gpu/auto/cpu/xpu, both default from PET_NPROC_PER_NODE / PET_NNODES
(argparse_util.env), and --standalone is a rendezvous on localhost; elastic/rendezvous/api.py refuses MIN < 1 and
MAX < MIN."""

import json

import pytest

from planner.bridge.importer import read_bridge_source
from tests.conftest import one_line_error, run_cli

FLAGS = (
    "pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
    "--max-position-embeddings 512 --vocab-size 1000 --micro-batch-size 1 --global-batch-size 320 --bf16 "
    "--tensor-model-parallel-size 2"
)


def _explain(tmp_path, launcher: str, *extra: str, before: str = ""):
    script = tmp_path / "launch.sh"
    script.write_text(f"#!/bin/bash\n{before}\n{launcher} {FLAGS}\n")
    return run_cli(
        ["explain", "--megatron-args-file", str(script), "--hardware", "dgx-h100-superpod", *extra, "--json"]
    )


def _gpus(result) -> int:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["gpus"]


@pytest.mark.parametrize(
    ("launcher", "gpus", "said"),
    [
        # Python's int(): 20 nodes × 8 = 160 (before: "come from values the script leaves unset", exit 2)
        ("torchrun --nproc-per-node 8 --nnodes 2_0", 160, "torchrun --nnodes 2_0: 20, as torchrun reads it"),
        ("torchrun --nproc-per-node +8", 8, "torchrun --nproc-per-node +8: 8, as torchrun reads it"),
        ("torchrun --nproc-per-node 8 --nnodes=2:2", 16, None),  # a range of one size: 2 × 8
        ("torchrun --standalone --nproc-per-node 8", 8, None),  # one node (--nnodes defaults to 1:1)
        # torchrun's defaults from the environment: 8 per node (before: torchrun's own default, 1 GPU, without a word)
        ("PET_NPROC_PER_NODE=8 torchrun", 8, "torchrun's --nproc-per-node from PET_NPROC_PER_NODE=8"),
    ],
)
def test_torchrun_counts_are_read_as_torchrun_reads_them(tmp_path, launcher, gpus, said):
    result = _explain(tmp_path, launcher)
    assert _gpus(result) == gpus
    assert said is None or said in result.stderr


def test_exported_pet_variables_give_the_counts(tmp_path):
    result = _explain(tmp_path, "torchrun", before="export PET_NPROC_PER_NODE=4 PET_NNODES=2")
    assert _gpus(result) == 4 * 2 and "from PET_NNODES=2" in result.stderr


@pytest.mark.parametrize(
    ("launcher", "said"),
    [
        (
            "torchrun --nproc-per-node 8 --nnodes=2:4",
            "torchrun --nnodes 2:4 is an elastic range: 2 to 4 nodes of 8 processes (16 to 32 GPUs) may join",
        ),
        (  # before: 16 GPUs, while the standalone rendezvous (localhost) waits for a second node that cannot join
            "torchrun --standalone --nproc-per-node 8 --nnodes 2",
            "torchrun --standalone --nnodes 2: a standalone rendezvous is this node's (localhost)",
        ),
        ("torchrun --nproc-per-node 8 --nnodes 0", "torchrun --nnodes '0': torchrun refuses it; allowed: N or MIN:MAX"),
        ("torchrun --nproc-per-node 8 --nnodes 2:1", "torchrun --nnodes '2:1': torchrun refuses it"),
        ("torchrun --nproc-per-node 8 --nnodes 1:2:3", "torchrun --nnodes '1:2:3': torchrun refuses it"),
        ("torchrun --nproc-per-node 8 --nnodes 1:", "torchrun --nnodes '1:': torchrun refuses it"),  # before: 1 node
        ("torchrun --nproc-per-node cpu", "torchrun --nproc-per-node cpu starts one process per CPU core"),
        (
            "torchrun --nproc-per-node eight",
            "torchrun --nproc-per-node eight: allowed: a whole number ≥ 1, gpu or auto",
        ),
        ("torchrun --nproc-per-node gpu --nnodes 2", "torchrun --nproc-per-node gpu starts one process per GPU"),
    ],
)
def test_counts_that_give_no_world_size_are_one_line_naming_them(tmp_path, launcher, said):
    assert said in one_line_error(_explain(tmp_path, launcher))


def test_gpus_given_beside_an_elastic_range_prices_that_size(tmp_path):
    assert _gpus(_explain(tmp_path, "torchrun --nproc-per-node 8 --nnodes 2:4", "--gpus", "32")) == 32


RUN_RECIPE = "torchrun --nproc-per-node 8 {nodes} scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config\n"


def test_bridge_run_recipe_lines_read_torchrun_the_same_way(tmp_path):
    path = tmp_path / "launch.txt"
    path.write_text(RUN_RECIPE.format(nodes="--nnodes 2_0"))
    read, _ = read_bridge_source({"bridge_config": str(path)})
    assert read.data["gpus"] == 160  # before: 8, the nodes dropped
    path.write_text(RUN_RECIPE.format(nodes="--nnodes 2:4"))
    with pytest.raises(Exception, match=r"--nnodes 2:4 is an elastic range: 2 to 4 nodes of 8 processes"):
        read_bridge_source({"bridge_config": str(path)})  # before: 8 GPUs, the range dropped
    read, _ = read_bridge_source({"bridge_config": str(path), "gpus": 32})
    assert read.data["gpus"] == 32


def test_a_count_from_an_unset_variable_is_still_named_as_such(tmp_path):
    """A number beside a variable's count is not the one refused (the full suite caught 'torchrun --nproc-per-node 8:
    allowed: ...' for --nnodes $NNODES)."""
    line = one_line_error(_explain(tmp_path, "torchrun --nproc-per-node 8 --nnodes $NODES"))
    assert "(nproc = 8, nnodes = $NODES)" in line and line.endswith("pass --gpus N or --env NODES=VALUE")
