"""A user's pass over megaplan (qa21): each test reproduces a message that misled or an option dropped without a
word, found by running the commands an ML-infrastructure engineer would run before a long training run."""

from __future__ import annotations

import json

import pytest

from conftest import one_line_error, run_cli

LLAMA8 = ["--model", "llama3-8b", "--gpus", "64", "--top", "1"]


# --- 1. a pinned TP that crosses NVLink domains ---------------------------------------------------------------


def test_search_tp_across_nodes_says_the_nvlink_domain_not_the_model():
    """`search --model llama3-70b --gpus 64 --tp 16` said "the pinned tp is not legal for this model"; 64 heads
    divide by 16, and explain prices that plan: the search keeps TP inside one node's 8 GPUs unless --max-tp."""
    line = one_line_error(run_cli(["search", "--model", "llama3-70b", "--gpus", "64", "--tp", "16"]))
    assert "not legal for this model" not in line
    assert "--tp 16 spans 2 NVLink domains of 8 GPUs (dgx-a100-superpod)" in line
    assert "--max-tp 16" in line
    # with --max-tp the same search runs
    result = run_cli(["search", "--model", "llama3-70b", "--gpus", "64", "--tp", "16", "--max-tp", "16", "--json"])
    assert result.exit_code == 0, result.output
    assert {p["parallel"]["tp"] for p in json.loads(result.stdout)["plans"]} == {16}


def test_search_tp_that_does_not_divide_an_nvl72_domain_says_so():
    """GB200 NVL72: 72 GPUs share NVLink, so TP 16 groups (72 mod 16 = 8) straddle two racks' domains."""
    line = one_line_error(
        run_cli(["search", "--model", "llama3-70b", "--gpus", "288", "--tp", "16", "--hardware", "gb200-nvl72"])
    )
    assert "not legal for this model" not in line
    assert "--tp 16 does not divide the 72 GPUs of an NVLink domain (gb200-nvl72)" in line
    assert "allowed: a divisor of 72" in line


def test_search_tp_the_heads_forbid_still_names_the_heads():
    """The model's own rule keeps its message (96 heads, tp 5)."""
    line = one_line_error(run_cli(["search", "--model", "gpt3-175b", "--gpus", "1000", "--tp", "5"]))
    assert "NVLink" not in line
    assert "96 attention heads are not divisible by tp 5" in line


# --- 2. --recompute-num-layers with a pinned recompute that is not full ------------------------------------------


@pytest.mark.parametrize("recompute", ["selective", "none"])
def test_search_recompute_num_layers_without_full_is_refused_as_explain_refuses_it(recompute):
    """`search --recompute selective --recompute-num-layers 3` noted that "plans with selective or no
    recomputation are searched as well (add --recompute full ...)": the user had pinned selective, so no plan
    used the number. Megatron-Core refuses it with selective recomputation ("recompute_num_layers must be None",
    transformer_config.py:1926-1932 @ d98e8a64) and explain refused it; search now says so too."""
    result = run_cli(["search", *LLAMA8, "--recompute", recompute, "--recompute-num-layers", "3"])
    line = one_line_error(result)
    assert line == (
        "megaplan: error: --recompute-num-layers 3 goes with --recompute full only (Megatron-Core refuses it "
        "with selective recomputation and ignores it without one); drop it or give --recompute full"
    )
    assert result.stdout == ""


def test_search_recompute_num_layers_unpinned_recompute_still_notes_the_full_plans():
    result = run_cli(["search", *LLAMA8, "--recompute-num-layers", "3"])
    assert result.exit_code == 0, result.output
    assert "--recompute-num-layers 3 applies only to plans with full recomputation" in result.stderr


# --- 3. an option only some plans use, when the pins leave none of them -------------------------------------------


@pytest.mark.parametrize(
    ("pins", "given", "why"),
    [
        (
            ["--vpp", "1", "--microbatch-group-size-per-virtual-pipeline-stage", "4"],
            "--microbatch-group-size-per-virtual-pipeline-stage 4",
            "it applies only to interleaved plans (vpp > 1), and --vpp 1 leaves none",
        ),
        (
            ["--pp", "1", "--no-overlap-p2p-comm"],
            "--no-overlap-p2p-comm",
            "it applies only to interleaved plans (vpp > 1), and --pp 1 leaves none",
        ),
        (
            ["--no-fsdp", "--data-parallel-sharding-strategy", "optim"],
            "--data-parallel-sharding-strategy optim",
            "it applies only to plans with Megatron FSDP, and --no-fsdp leaves none",
        ),
        (
            ["--no-fsdp", "--outer-dp-sharding-strategy", "optim"],
            "--outer-dp-sharding-strategy optim",
            "it applies only to Megatron FSDP plans with more than one distributed-optimizer instance (hybrid), "
            "and --no-fsdp leaves none",
        ),
        (
            ["--pp", "1", "--pp-scatter-gather"],
            "--pp-scatter-gather",
            "it applies only to plans with pp > 1 and no sequence parallelism, and --pp 1 leaves none",
        ),
        (
            ["--sequence-parallel", "--pp-scatter-gather"],
            "--pp-scatter-gather",
            "it applies only to plans with pp > 1 and no sequence parallelism, and --sequence-parallel leaves none",
        ),
    ],
)
def test_search_option_the_pins_exclude_is_said_ignored(pins, given, why):
    """`search --vpp 1 --microbatch-group-size-per-virtual-pipeline-stage 4` noted "plans without interleaving are
    searched as well (add --vpp N, N > 1 ...)": with vpp pinned to 1 every plan is one without, and the option
    is dropped; explain says "ignored" for the same option on its one plan."""
    result = run_cli(["search", *LLAMA8, *pins])
    assert result.exit_code == 0, result.output
    assert f"megaplan: note: {given} ignored: {why}" in result.stderr.splitlines()
    assert "searched as well" not in result.stderr


def test_search_option_the_pins_keep_is_not_noted():
    result = run_cli(
        ["search", *LLAMA8, "--pp", "2", "--vpp", "2", "--microbatch-group-size-per-virtual-pipeline-stage", "4"]
    )
    assert "microbatch-group-size" not in result.stderr


# --- 4. BF16 first/last layers without FP8 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [["--first-last-layers-bf16"], ["--num-layers-at-start-in-bf16", "2"], ["--num-layers-at-end-in-bf16", "0"]],
)
def test_bf16_end_layers_without_fp8_are_said_ignored(given):
    """--first-last-layers-bf16 (and its counts) keep some layers in BF16 out of FP8; without --fp8 every layer is
    BF16 already, and the option was dropped without a word (--fp8-recipe without --fp8 is noted)."""
    result = run_cli(["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--brief", *given])
    assert result.exit_code == 0, result.output
    assert (
        f"megaplan: note: {given[0]} ignored: no --fp8 or --fp4 (every layer's GEMMs run in BF16 already)"
        in result.stderr.splitlines()
    )


def test_bf16_end_layer_counts_without_the_switch_are_said_ignored():
    """With --fp8 but no --first-last-layers-bf16, --num-layers-at-start-in-bf16 2 is dropped (Megatron-LM reads
    the counts only with the switch, arguments.py)."""
    result = run_cli(
        [
            "explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--brief", "--hardware",
            "dgx-h100-superpod", "--fp8", "hybrid", "--fp8-recipe", "tensorwise", "--num-layers-at-start-in-bf16", "2",
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (
        "megaplan: note: --num-layers-at-start-in-bf16 ignored: no --first-last-layers-bf16 (Megatron-Core reads the "
        "counts only with it, fp8_utils.py:714-717 and fp4_utils.py:250-253 @ d98e8a64)"
    ) in result.stderr.splitlines()


# --- 5. megaplan's own export given back as --plan -------------------------------------------------------------------


def test_a_launch_script_given_as_plan_names_the_option_that_reads_it(tmp_path):
    """`explain --plan train.sbatch` (megaplan's own Slurm export) said only "is not JSON: Expecting value: line 1
    column 1 (char 0)"."""
    script = tmp_path / "train.sbatch"
    result = run_cli(
        [
            "export",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--tp",
            "2",
            "--distributed-optimizer",
            "--format",
            "slurm",
            "-o",
            str(script),
        ]
    )
    assert result.exit_code == 0, result.output
    line = one_line_error(run_cli(["explain", "--plan", str(script)]))
    assert line.endswith(
        "is not JSON: Expecting value: line 1 column 1 (char 0); it reads as a Megatron-LM command line or launch "
        "script: give it with --megatron-args-file"
    )
    flags = tmp_path / "plan.flags"
    flags.write_text("--tensor-model-parallel-size 2 \\\n--num-layers 32\n")
    assert "give it with --megatron-args-file" in one_line_error(run_cli(["explain", "--plan", str(flags)]))
    overrides = tmp_path / "megaplan.overrides"
    overrides.write_text("# a comment\nmodel.tensor_model_parallel_size=4\ntrain.micro_batch_size=1\n")
    assert one_line_error(run_cli(["explain", "--plan", str(overrides)])).endswith(
        "it reads as Megatron-Bridge overrides or a config: give it with --bridge-config"
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    assert one_line_error(run_cli(["explain", "--plan", str(notes)])).endswith("(char 0)")


# --- 6. --min-gpus with a pin no GPU count allows -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "pin", "why"),
    [
        ("llama3-70b", ["--tp", "3"], "attention heads divisible by tp: 64 attention heads are not divisible by tp 3"),
        ("gpt3-175b", ["--tp", "3"], "--tp 3 does not divide the 8 GPUs of an NVLink domain (dgx-a100-superpod)"),
        ("llama3-70b", ["--tp", "16"], "--tp 16 spans 2 NVLink domains of 8 GPUs (dgx-a100-superpod)"),
        ("llama3-70b", ["--pp", "7"], "layers split over pipeline stages: 80 layers do not split over pp 7"),
    ],
)
def test_min_gpus_names_why_a_pin_is_legal_nowhere(model, pin, why):
    """`search --model llama3-70b --min-gpus --tp 3` scanned to 131,072 GPUs and said "--tp 3 does not divide
    131,072 GPUs", though 24 GPUs (3 nodes) had been tried: the heads forbid TP 3 on any GPU count."""
    line = one_line_error(run_cli(["search", "--model", model, "--min-gpus", *pin]))
    assert line.startswith(f"megaplan: error: no GPU count has a legal plan for {model} on dgx-a100-superpod: ")
    assert why in line
    assert "131,072" not in line


# --- 7. a user's YAML named without its suffix, or with the other one; `presets show` of a part of a name ------------


def _my_model(folder) -> None:
    data = {
        "name": "my-13b",
        "source": "written for this test",
        "num_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_query_groups": 8,
        "ffn_hidden_size": 13824,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
        "swiglu": True,
        "normalization": "RMSNorm",
        "position_embedding_type": "rope",
        "training": {"global_batch": 512, "seq_len": 4096},
    }
    (folder / "my-13b.yaml").write_text(json.dumps(data))


def test_a_model_file_named_without_its_suffix_is_pointed_at(tmp_path, monkeypatch):
    """`--model my-13b` beside my-13b.yaml suggested the preset llama2-13b; `--model my-13b.yml` said "models file
    'my-13b.yml' not found"."""
    _my_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(run_cli(["search", "--model", "my-13b", "--gpus", "8"]))
    assert line.startswith(
        "megaplan: error: unknown model preset 'my-13b'; my-13b.yaml is a file here: give my-13b.yaml "
        "(a preset name has no suffix, a file needs it); known: deepseek-v3, "
    )
    assert "llama2-13b?" not in line
    line = one_line_error(run_cli(["search", "--model", "my-13b.yml", "--gpus", "8"]))
    assert line == "megaplan: error: model file 'my-13b.yml' not found; 'my-13b.yaml' is here (the other suffix)"
    result = run_cli(["search", "--model", "my-13b.yaml", "--gpus", "8", "--top", "1"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("name", "near"),
    [("h100", "dgx-h100-superpod? hardware presets: "), ("llama3", "one of llama3-70b, llama3-8b, llama3.1-405b?")],
)
def test_presets_show_a_part_of_a_name_suggests_the_presets_holding_it(name, near):
    """`presets show h100` listed all 34 names, where `search --hardware h100` suggested dgx-h100-superpod."""
    line = one_line_error(run_cli(["presets", "show", name]))
    assert line.startswith(f"megaplan: error: unknown preset {name!r}; did you mean {near}")
    assert ("gb300-nvl72" in line) == (name == "h100")  # the resembled kind's names only


# --- 8. megaplan's Slurm export read back without --hardware ---------------------------------------------------------


def test_a_megaplan_slurm_script_read_back_without_its_hardware_is_warned(tmp_path):
    """`explain --megatron-args-file train.sbatch` of a GB200 export priced it on the default A100 preset (DOES NOT
    FIT, flex/HybridEP "on Ampere") with only the first line to say so; the script's header names gb200-nvl72."""
    script = tmp_path / "train.sbatch"
    export = ["export", "--model", "llama3-8b", "--hardware", "gb200-nvl72", "--gpus", "8", "--tp", "1"]
    result = run_cli([*export, "--distributed-optimizer", "--format", "slurm", "-o", str(script)])
    assert result.exit_code == 0, result.output
    warning = (
        "megaplan: warning: this script was written by megaplan for gb200-nvl72, but no --hardware was given: it is "
        "read on dgx-a100-superpod (the default); its 'Read it back' line gives the options (--hardware gb200-nvl72)"
    )
    result = run_cli(["explain", "--megatron-args-file", str(script), "--brief"])
    assert result.exit_code == 0, result.output
    assert warning in result.stderr.splitlines()
    assert "of dgx-a100-superpod" in result.stdout
    given = run_cli(["explain", "--megatron-args-file", str(script), "--brief", "--hardware", "gb200-nvl72"])
    assert given.exit_code == 0, given.output
    assert "written by megaplan" not in given.stderr
    assert "of gb200-nvl72" in given.stdout


def test_rank_by_estimate_counts_the_tied_plans_with_thousands_separators():
    """ "The 7405 tied plans come first", beside "67,000 plans evaluated, 22,788 legal and fit"."""
    result = run_cli(
        ["search", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "dgx-h100-superpod", "--top", "1"]
        + ["--rank-by", "estimate"],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    tied = json.loads(
        run_cli(
            ["search", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "dgx-h100-superpod", "--top", "1"]
            + ["--rank-by", "estimate", "--json"]
        ).stdout
    )["tied_with_fastest"]
    assert tied > 999
    assert f"The {tied:,} tied plans come first" in result.stdout


def test_rank_by_help_says_the_order_search_ranks_by():
    """--help said risk ranks by "the pessimistic end of each plan's band, widened for features no published run
    exercises"; search ranks by the count of such features first (RANK_RULES, the footer), then by that end."""
    from planner.search import RANK_RULES

    shown = " ".join(run_cli(["search", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert (
        "risk: fewest features no published run on the GPU generation exercises first, then the pessimistic end"
        in shown
    )
    assert RANK_RULES["risk"].startswith("fewest features no published setting of the GPU generation exercises first")


def test_compare_of_two_plans_within_each_others_band_says_they_are_tied(tmp_path):
    """`compare plans.json#1 plans.json#2` of Llama 3 70B on 64 B200 (55.53 against 55.57 s, bands ± 6.9 %) said
    only "A is faster: B runs at ×0.999 the speed of A"; search marks both '=' (tied with #1)."""
    plans = tmp_path / "plans.json"
    result = run_cli(
        ["search", "--model", "llama3-70b", "--hardware", "dgx-b200-superpod", "--gpus", "64", "--top", "2", "--json"]
    )
    plans.write_text(result.stdout)
    two = json.loads(result.stdout)["plans"][:2]
    assert all(p["tied_with_fastest"] for p in two)
    shown = " ".join(run_cli(["compare", f"{plans}#1", f"{plans}#2"], env={"COLUMNS": "200"}).stdout.split())
    ratio = two[0]["estimate"]["iteration_s"] / two[1]["estimate"]["iteration_s"]
    assert f"A is faster: B runs at ×{ratio:.3f} the speed of A; tied within the model's error" in shown
    apart = run_cli(
        ["compare", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]
        + ["--a", "--recompute full", "--b", "--recompute selective --sequence-parallel"]
    )
    assert apart.exit_code == 0, apart.output
    assert apart.stdout.startswith("B is faster: B runs at ×1.412 the speed of A\n")


def test_validate_assumptions_wrap_under_their_text():
    """validate's assumption list at 80 columns went on at column 0, "[2" on one line and "runs]" on the next."""
    from rich.console import Console

    from planner.report.fidelity import assumptions_text

    long = "the recipe's DeepSeek-V3 pipeline layout Et*4|(t*4|)*14tmL (its config)"
    runs = [
        {"id": "A", "assumptions": [long]},
        {"id": "A:mfu", "assumptions": [long]},
        {"id": "C", "assumptions": [long]},
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(assumptions_text({"runs": runs}))
    lines = console.export_text().splitlines()
    assert lines == [
        "Assumptions:",
        "  - the recipe's DeepSeek-V3 pipeline layout Et*4|(t*4|)*14tmL (its config)",
        "    [2 runs]",
    ]


def test_min_gpus_reasons_for_the_sizes_below_wrap_under_their_text():
    """The '  4 GPUs: every legal plan needs more than ...' lines under --min-gpus went on at column 0."""
    result = run_cli(
        ["search", "--model", "llama3-8b", "--min-gpus", "--hardware", "dgx-a100-40gb-superpod", "--top", "1"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("  4 GPUs: every legal plan needs more than"))
    assert lines[k + 1].startswith("    8 % headroom); the smallest, TP2 PP1 DP2 b1")
    assert lines[k + 2].startswith("    ") and lines[k + 3].startswith("    ")
    assert lines[k + 4] == "explain the smallest:"
