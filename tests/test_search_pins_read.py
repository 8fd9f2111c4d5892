"""search, sweep and --min-gpus read a pinned knob as Megatron-LM reads it, and pins that no plan can hold end in
one error naming the rule they break (the candidate grid leaves such rows out by construction, so no rule had
counted them and the error blamed the world size: "no tp·cp·pp·dp with --pp 1 multiplies to 8 GPUs")."""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import one_line_error, run_cli

SMALL = ["--model", "gpt-1.7b", "--gpus", "8", "--hardware", "dgx-h100-superpod"]


def plans(args: list[str]) -> list[dict]:
    result = run_cli(["search", *SMALL, *args, "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["plans"]


@pytest.mark.parametrize(
    ("args", "rule", "because"),
    [
        # gpt-1.7b, 24 layers: vpp 2 at pp 1 is no interleaving (arguments.py: pp > 1 with an interleaved schedule)
        (["--pp", "1", "--vpp", "2"], "interleaving needs pp > 1", "vpp 2 needs pp > 1"),
        # a layout of 2 virtual stages: 2 chunks per stage at pp 1
        (["--pp", "1", "--pipeline-model-parallel-layout", "Et*12|t*12L"], "interleaving needs pp > 1", "(pp is 1)"),
        # HFSDP needs weights sharded (Megatron FSDP param_and_grad_buffer.py)
        (
            ["--fsdp", "--data-parallel-sharding-strategy", "optim_grads", "--outer-dp-sharding-strategy", "optim"],
            "--outer-dp-sharding-strategy optim needs --data-parallel-sharding-strategy optim_grads_params",
            "not optim_grads",
        ),
    ],
)
def test_pins_no_plan_can_hold_name_the_rule_not_the_world_size(args, rule, because):
    line = one_line_error(run_cli(["search", *SMALL, *args]))
    assert rule in line and because in line, line
    assert "multiplies to" not in line


def test_outer_sharding_optim_with_one_instance_is_refused_as_explain_refuses_it():
    """R pinned to 1: the FSDP plans were listed at no_shard without a word; Megatron-LM fails at the first
    all-gather (ParallelPlan._hybrid_rules), and explain says so."""
    args = ["--fsdp", "--outer-dp-sharding-strategy", "optim", "--num-distributed-optimizer-instances", "1"]
    line = one_line_error(run_cli(["search", *SMALL, *args]))
    assert "--outer-dp-sharding-strategy optim needs --num-distributed-optimizer-instances > 1" in line
    explained = one_line_error(run_cli(["explain", *SMALL, "--tp", "1", "--pp", "1", *args]))
    assert "needs --num-distributed-optimizer-instances > 1" in explained


def test_fsdp_with_no_distributed_optimizer_runs_on_it_as_megatron_fsdp_does():
    """Megatron FSDP v1 turns the distributed optimizer on (arguments.py); the pair left no candidate."""
    found = plans(["--fsdp", "--no-distributed-optimizer"])
    assert found and all(p["parallel"]["fsdp"] and p["parallel"]["distributed_optimizer"] for p in found)


def test_sequence_parallel_at_tp_1_is_off_as_megatron_turns_it_off():
    found = plans(["--tp", "1", "--sequence-parallel"])
    assert found and all(p["parallel"]["tp"] == 1 and not p["parallel"]["sequence_parallel"] for p in found)


def test_a_pinned_layout_prices_without_numpy_warnings():
    """rows at a pp that does not divide the layout's virtual stages carry vpp 0; the interleaving rule divided by
    it and numpy's RuntimeWarning reached stderr (raised here: the search must not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = run_cli(["search", *SMALL, "--pipeline-model-parallel-layout", "Et*12|t*12L", "--json", "--top", "1"])
    assert result.exit_code == 0, (result.output, result.exception)
    (plan,) = json.loads(result.stdout)["plans"]
    assert plan["parallel"]["pp"] == 2 and plan["parallel"]["stage_layers"] == [12, 12]


def test_options_that_refuse_full_recomputation_get_no_block_variants():
    """Block-recomputation variants of unfit rows are made after the rules; with --cpu-offloading-num-layers (which
    needs no recomputation, transformer_config.py:1884-1899) they ranked #2 here (TP8 PP1 · rc-full block), a plan
    explain refuses. DeepSeek-V3 on 256 H100 ranked one first."""
    args = ["--model", "llama3-8b", "--gpus", "8", "--global-batch", "64", "--seq-len", "32768"]
    result = run_cli(["search", *args, "--cpu-offloading-num-layers", "2", "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["block_variants"] == 0
    assert [p["parallel"]["recompute"] for p in found["plans"]] == ["none"] * len(found["plans"])
    assert all(p["parallel"]["pp"] == 1 and p["legal"] for p in found["plans"])


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (["--no-overlap-grad-reduce"], ["--no-overlap-grad-reduce", "--no-overlap-param-gather"]),
        (["--no-overlap-param-gather"], ["--no-overlap-param-gather"]),
    ],
)
def test_each_plans_explain_command_keeps_an_overlap_turned_off(args, flags):
    """explain sets both overlaps as today's recipes do when a command leaves them out (recipe_overlaps); the
    commands search wrote left out the flag that turned one off, and priced the plan with it on."""
    (plan,) = plans([*args, "--tp", "1", "--pp", "1", "--distributed-optimizer", "--no-fsdp"])[:1]
    line = plan["commands"]["explain"]
    assert all(f" {flag}" in line for flag in flags), line
    again = run_cli([*line.split()[1:], "--json"])
    assert again.exit_code == 0, again.output
    estimate = json.loads(again.stdout)["estimate"]
    assert estimate["iteration_s"] == plan["estimate"]["iteration_s"]
    assert plan["options"]["overlap_param_gather"] is False


def test_min_gpus_says_the_rule_pins_break_not_the_largest_size():
    """--min-gpus with --pp 1 --vpp 2 ended "at most 8,192 GPUs can hold a legal plan" at 131,072 GPUs."""
    line = one_line_error(run_cli(["search", "--model", "gpt-1.7b", "--min-gpus", "--pp", "1", "--vpp", "2"]))
    assert "the knobs given break: interleaving needs pp > 1" in line and "vpp 2 needs pp > 1" in line, line


@pytest.mark.parametrize(("model", "refused"), [("qwen3-30b-a3b", False), ("deepseek-v3", True)])
def test_shared_expert_overlap_asks_for_a_dispatcher_only_with_shared_experts(model, refused):
    """Megatron-LM checks the dispatcher under moe_shared_expert_intermediate_size only (transformer_config.py
    1813-1826): Qwen3-30B-A3B has no shared experts, so allgather stays legal (and the flag is said to do nothing);
    DeepSeek-V3's 2,048-wide shared experts need alltoall or flex."""
    plan = ["explain", "--model", model, "--gpus", "64", "--tp", "1", "--pp", "1", "--ep", "64", "--brief"]
    result = run_cli([*plan, "--moe-token-dispatcher", "allgather", "--moe-shared-expert-overlap"])
    if refused:
        assert "moe-shared-expert-overlap needs the alltoall or flex dispatcher" in one_line_error(result)
    else:
        assert result.exit_code == 0, result.output
        assert f"--moe-shared-expert-overlap ignored: {model} has no shared experts" in result.stderr


def test_use_sharp_on_a_fabric_without_sharp_is_said(tmp_path):
    from planner.presets import presets_root

    text = (presets_root() / "hardware" / "dgx-h100-superpod.yaml").read_text()
    assert "  sharp: true\n" in text
    hardware = tmp_path / "no-sharp.yaml"
    hardware.write_text(text.replace("  sharp: true\n", "  sharp: false\n"))
    result = run_cli(["search", *SMALL[:4], "--hardware", str(hardware), "--use-sharp", "--json", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "--use-sharp ignored:" in result.stderr and "do not reduce (no SHARP)" in result.stderr


def test_fsdp_over_one_data_parallel_rank_is_refused_in_one_line_and_no_world_size_is_blamed():
    line = one_line_error(run_cli(["search", *SMALL, "--fsdp", "--dp", "1", "--cp", "1"]))
    assert "--fsdp with --dp 1 --cp 1: search builds Megatron FSDP plans sharded over d·c > 1 ranks only" in line
    # cp left free: gpt-1.7b's 2,048-token sequence takes no context parallelism (s/c ≥ 4096), so no candidate
    line = one_line_error(run_cli(["search", *SMALL, "--fsdp", "--dp", "1"]))
    assert "the knobs given leave no candidate plan on 8 GPUs (dp 1, fsdp True" in line, line
    assert "world size" not in line and "multiplies to" not in line
