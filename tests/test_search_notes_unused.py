"""search, sweep and --min-gpus say which options they cannot use instead of dropping them: those no plan of the
context uses (as explain says them: an expert option on a dense model, an FP8 recipe without FP8) and those that
pin only some of the plans ranked (--data-parallel-sharding-strategy pins the Megatron FSDP plans; plans without
FSDP are ranked beside them). Each ran without a word (audit ux12-16)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

SMALL = ["--model", "gpt-1.7b", "--gpus", "8", "--hardware", "dgx-h100-superpod"]  # dense, 24 layers, B 512


def search(args: list[str], base: list[str] = SMALL):
    result = run_cli(["search", *base, *args, "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    return result, json.loads(result.stdout)["plans"]


@pytest.mark.parametrize(
    ("args", "note"),
    [
        (["--etp", "2"], "note: --etp ignored: gpt-1.7b has no experts"),
        (["--fp8-recipe", "blockwise"], "note: --fp8-recipe ignored: no --fp8 (training is not in FP8)"),
        (["--fp8-param-gather"], "note: --fp8-param-gather ignored: no --fp8"),
        (["--cuda-graph-modules", "attn"], "note: --cuda-graph-modules ignored: no --cuda-graph-impl"),
        (["--precision", "fp16", "--grad-reduce-in-bf16"], "note: --grad-reduce-in-bf16 ignored: fp16 training"),
        (["--fsdp", "--no-distributed-optimizer"], "note: --no-distributed-optimizer ignored: Megatron FSDP runs on"),
        (["--tp", "1", "--sequence-parallel"], "note: --sequence-parallel is off with tp 1"),
    ],
)
def test_an_option_no_plan_of_the_context_uses_is_noted(args, note):
    result, plans = search(args)
    assert note in result.stderr and plans


@pytest.mark.parametrize(
    ("args", "note", "keep", "check"),
    [
        (
            ["--data-parallel-sharding-strategy", "optim"],
            "--data-parallel-sharding-strategy optim applies only to plans with Megatron FSDP; plans without it",
            ["--fsdp"],
            lambda par: par["fsdp"] and par["fsdp_sharding"] == "optim",
        ),
        (
            ["--microbatch-group-size-per-virtual-pipeline-stage", "8"],
            "--microbatch-group-size-per-virtual-pipeline-stage 8 applies only to interleaved plans (vpp > 1)",
            ["--vpp", "2"],
            lambda par: par["vpp"] == 2 and (par["microbatch_group_size"] or par["pp"]) == 8,  # G = pp: None
        ),
        (
            ["--no-overlap-p2p-comm"],  # Megatron-LM turns it off without interleaving (arguments.py)
            "--no-overlap-p2p-comm applies only to interleaved plans (vpp > 1)",
            ["--vpp", "2"],
            lambda par: par["vpp"] == 2 and par["pp"] > 2,  # interleaving without p2p overlap needs pp > 2
        ),
    ],
)
def test_an_option_that_pins_some_plans_only_says_so_until_the_pins_keep_only_those(args, note, keep, check):
    result, _ = search(args)
    assert f"megaplan: note: {note}" in result.stderr
    kept, plans = search([*args, *keep])
    assert "applies only" not in kept.stderr
    assert plans and all(check(p["parallel"]) for p in plans)


def test_sweep_and_min_gpus_say_it_too():
    swept = run_cli(["sweep", "--model", "gpt-1.7b", "--gpus", "8", "--fp8-recipe", "blockwise", "--json"])
    assert swept.exit_code == 0 and "--fp8-recipe ignored: no --fp8" in swept.stderr
    smallest = run_cli(["search", "--model", "gpt-1.7b", "--min-gpus", "--etp", "2", "--json"])
    assert smallest.exit_code == 0 and "--etp ignored: gpt-1.7b has no experts" in smallest.stderr


def test_explain_says_an_interleaving_group_or_flex_backend_its_plan_does_not_use():
    plan = ["explain", *SMALL, "--tp", "1", "--pp", "2", "--brief"]
    grouped = run_cli([*plan, "--microbatch-group-size-per-virtual-pipeline-stage", "4"])
    assert grouped.exit_code == 0 and "this plan has no interleaving (vpp 1)" in grouped.stderr
    moe = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "32", "--tp", "1", "--pp", "1", "--ep", "8", "--brief"]
    backend = run_cli([*moe, "--moe-token-dispatcher", "alltoall", "--moe-flex-dispatcher-backend", "hybridep"])
    assert backend.exit_code == 0, backend.output
    assert "--moe-flex-dispatcher-backend ignored: they configure --moe-token-dispatcher flex" in backend.stderr


def test_a_bridge_userbuffer_config_is_said_where_no_preset_fits_or_only_some_plans_overlap():
    """gpt-1.7b (h 2,304): Megatron-Bridge has no userbuffer preset at that width, so every plan ran Transformer
    Engine's defaults; gpt-18b (h 6,144): Bridge's h6144 tp2 preset, for the plans with --tp-comm-overlap."""
    result, _ = search(["--tp-comm-overlap-cfg", "bridge"])
    assert "--tp-comm-overlap-cfg ignored: Megatron-Bridge has no userbuffer preset for H100-SXM5-80GB at hidden " in (
        result.stderr
    )
    assert "applies only" not in result.stderr  # said once
    wider = ["--model", "gpt-18b", "--gpus", "8", "--hardware", "dgx-h100-superpod", "--tp-comm-overlap-cfg", "bridge"]
    some, _ = search([], wider)
    assert "--tp-comm-overlap-cfg bridge applies only to plans with --tp-comm-overlap" in some.stderr
    kept, plans = search(["--tp-comm-overlap"], wider)
    assert "applies only" not in kept.stderr and "ignored" not in kept.stderr
    assert plans and all(p["parallel"]["tp"] > 1 and p["options"]["tp_comm_overlap"] for p in plans)
