"""Where a plan comes from and how the options beside it override it: planner.plan_sources.resolve_plan,
the one function every command on one plan goes through (flags, a plan file, a launch script, search's best)."""

from __future__ import annotations

import json

import pytest

from planner import api
from planner.errors import PlannerError
from planner.plan_file import request_to_json
from planner.plan_sources import LaunchScript, PlanFile, pick_source, resolve_plan

# every plan option by name with its plan default, as the command line hands them over
DEFAULTS = {
    "model": None,
    "hardware": None,
    "plan_file": None,
    "rank": None,
    "megatron_args": None,
    "megatron_args_file": None,
    "env_pairs": (),
    "gpus": None,
    "global_batch": None,
    "seq_len": None,
    "precision": "bf16",
    "tokens": None,
    "gpu_hour_price": None,
    "tp": 1,
    "pp": 1,
    "dp": None,
    "vpp": 1,
    "microbatch_group_size": None,
    "cp": 1,
    "ep": 1,
    "etp": None,
    "fsdp": False,
    "fsdp_sharding": "optim_grads_params",
    "fsdp_outer_sharding": "no_shard",
    "distributed_optimizer_instances": 1,
    "micro_batch": 1,
    "sequence_parallel": False,
    "recompute": "none",
    "recompute_method": "uniform",
    "recompute_num_layers": None,
    "distributed_optimizer": False,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "decoder_first_pipeline_num_layers": None,
    "decoder_last_pipeline_num_layers": None,
    "pipeline_layout": None,
    "moe_token_dispatcher": "allgather",
    "overlap_moe_expert_parallel_comm": False,
    "memory_headroom": None,
}

# a torchrun launch of 8 GPUs with TP 3: 3 does not divide 8 (a script a user means to fix with --tp)
TP3_ON_8 = """#!/bin/bash
GPUS_PER_NODE=8
MODEL_ARGS=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048
            --max-position-embeddings 2048 --vocab-size 50304)
torchrun --nproc-per-node $GPUS_PER_NODE --nnodes 1 pretrain_gpt.py \\
    "${MODEL_ARGS[@]}" --tensor-model-parallel-size 3 --micro-batch-size 1 --global-batch-size 64 --bf16
"""


def options(given: dict) -> tuple[dict, set[str]]:
    return {**DEFAULTS, **given}, set(given)


def test_flags_are_the_plan_and_give_the_same_request_as_make_request():
    values, given = options({"model": "gpt3-175b", "gpus": 1024, "tp": 8, "pp": 16, "recompute": "full"})
    resolved = resolve_plan(values, given)
    # a plan typed as flags runs the recipes' gradient overlap (plan_options.recipe_overlaps); the library keeps
    # Megatron-LM's defaults (off), so the direct request names it
    overlap = {"overlap_grad_reduce": True}
    direct = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="full", options=overlap)
    assert request_to_json(resolved.request) == request_to_json(direct)
    assert resolved.request.plan.dp == 8 and resolved.notes == () and resolved.searched is None


def test_a_plan_file_with_options_beside_it_is_checked_after_the_override(tmp_path):
    plan = tmp_path / "plan.json"
    base = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16)
    plan.write_text(json.dumps({**request_to_json(base), "hardware": "dgx-a100-superpod"}))
    values, given = options({"plan_file": str(plan), "tp": 4, "recompute": "selective"})
    resolved = resolve_plan(values, given)
    assert (resolved.request.plan.tp, resolved.request.plan.dp, resolved.request.gpus) == (4, 16, 1024)
    assert resolved.notes == (
        "note: --recompute selective overrides the plan file's none",
        "note: --tp 4 overrides the plan file's 8",
    )
    values, given = options({"plan_file": str(plan), "tp": 3})
    with pytest.raises(PlannerError) as err:
        resolve_plan(values, given)
    # 1024 GPUs came from the file: the error says so and never names a --gpus the user did not type
    assert "the plan file's 1024 GPUs are not divisible by tp·pp·cp = 48" in str(err.value)
    assert "--gpus 1024" not in str(err.value)


def test_a_scripts_parallel_sizes_are_overridden_before_the_plan_is_checked(tmp_path):
    script = tmp_path / "tp3.sh"
    script.write_text(TP3_ON_8)
    values, given = options({"megatron_args_file": str(script)})
    with pytest.raises(PlannerError) as err:
        resolve_plan(values, given)
    assert str(err.value).startswith("the script's 8 GPUs (nproc 8, nnodes 1) are not divisible by tp·pp·cp = 3")
    assert "--gpus" not in str(err.value).split(";")[0]
    values, given = options({"megatron_args_file": str(script), "tp": 2})
    resolved = resolve_plan(values, given)
    assert (resolved.request.plan.tp, resolved.request.plan.dp, resolved.request.gpus) == (2, 4, 8)
    assert "note: --tp 2 overrides the script's 3" in resolved.notes
    values, given = options({"megatron_args_file": str(script), "gpus": 9})
    resolved = resolve_plan(values, given)  # --gpus 9 beside it: 3 divides 9
    assert (resolved.request.plan.tp, resolved.request.plan.dp) == (3, 3)
    assert "note: --gpus 9 overrides the script's 8 GPUs" in resolved.notes


def test_search_best_pins_what_is_given_and_says_so():
    values, given = options({"model": "gpt-1.7b", "gpus": 32, "recompute": "full"})
    resolved = resolve_plan(values, given, search_best=True)
    assert resolved.request.plan.recompute.value == "full"
    assert resolved.searched.startswith("search's best of ") and "no --tp/--pp given" in resolved.searched
    assert resolve_plan(values, given).searched is None  # without search_best the flags are the plan


@pytest.mark.parametrize(
    ("given", "source", "error"),
    [
        ({"plan_file": "a.json"}, PlanFile, None),
        ({"megatron_args": "--tp 1"}, LaunchScript, None),
        ({"megatron_args_file": "run.sh", "megatron_args": "--fp8-format hybrid"}, LaunchScript, None),
        ({"plan_file": "a.json", "megatron_args": "x"}, None, "not --plan and --megatron-args"),
        ({"rank": 2}, None, "--rank picks a plan of a search --json file"),
        ({"megatron_args_file": "run.sh", "rank": 2}, None, "--rank picks a plan"),
        ({"env_pairs": ("A=1",)}, None, "--env sets variables of a launch script"),
        ({"model": "gpt3-175b"}, None, None),
    ],
)
def test_one_source_is_picked_and_stray_options_are_refused(given, source, error):
    values, names = options(given)
    if error:
        with pytest.raises(PlannerError, match=error):
            pick_source(values, names)
    else:
        picked = pick_source(values, names)
        assert (type(picked) if picked else None) is source
