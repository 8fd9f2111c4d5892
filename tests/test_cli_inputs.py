"""Never silently ignored, never silently wrong: each bad input exits 2 with one line that says what is
allowed, each nonsensical input warns, options beside a plan file or a launch script override it with a
note (or are refused), export refuses a plan that does not fit, and every output people use exists."""

from __future__ import annotations

import csv
import io
import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import cli
from planner.errors import PlannerError
from planner.report.layout import plan_text

from conftest import one_line_error, run_cli

DATA = Path(__file__).parent / "data"
GPT3 = ["--model", "gpt3-175b", "--gpus", "1024"]


run = run_cli


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ["search", *GPT3[:2], "--gpus", "1000"],
            ["on 1,000 GPUs", "nearest GPU counts with a legal plan: 896 and 1,024"],
        ),
        (
            ["search", *GPT3, "--cp", "3"],
            ["--cp 3 does not divide 1,024 GPUs", "seq_len 2048 is not divisible by 2·cp = 6"],
        ),
        (["search", *GPT3, "--tp", "3", "--pp", "5"], ["--tp 3 and --pp 5 do not divide 1,024 GPUs"]),
        (["explain", "--model", "gpt3-175", "--gpus", "8"], ["did you mean gpt3-175b?"]),
        (
            ["explain", *GPT3, "--tensor-model-parallel-size", "8"],
            ["Megatron-LM's spelling; megaplan's option is --tp"],
        ),
        (["search", *GPT3, "--num-layers", "8"], ["--num-layers is a Megatron-LM flag", "--megatron-args"]),
        (["explain", *GPT3, "--tp", "8", "--pp", "16", "--rank", "2"], ["--rank", "--plan FILE"]),
        (["explain", *GPT3, "--tp", "8", "--pp", "16", "--env", "A=1"], ["--env", "--megatron-args-file"]),
        (["presets", "show", "DGX-H100-superpd"], ["did you mean dgx-h100-superpod?"]),
        (["explain", *GPT3, "--tp", "8", "--pp", "16", "--global-batch", "12"], ["allowed: a global batch"]),
        # 6,600 plans fit here: --top 100000 used to build and draw every one of them (over 10 s)
        (["search", *GPT3, "--top", "100000", "--json"], ["'--top'", "1<=x<=1000"]),
        (
            ["search", *GPT3, "--top", "1000"],
            ["--top 1000: the table shows at most 200 plans", "--csv list up to 1,000"],
        ),
    ],
)
def test_bad_input_is_one_line_that_says_what_is_allowed(args, needles):
    line = one_line_error(run(args))
    for needle in needles:
        assert needle in line, line


def test_preset_names_are_read_in_any_case():
    result = run(["explain", "--model", "GPT3-175B", "--hardware", "DGX-A100-SUPERPOD", *GPT3[2:], "--tp", "8"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "is a directory"), ("", "the file is empty"), ("- 1\n- 2\n", "got a list"), ("name: 3\n", "name")],
)
def test_a_yaml_that_is_not_a_model_says_exactly_why(tmp_path, content, needle):
    path = tmp_path / "model.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    assert needle in one_line_error(run(["explain", "--model", str(path), "--gpus", "8", "--tp", "8"]))


def test_presets_show_takes_a_path(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(run(["presets", "show", "llama2-7b"]).stdout.replace("name: llama2-7b", "name: mine"))
    shown = run(["presets", "show", str(mine), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["name"] == "mine"


def test_nonsensical_inputs_warn_and_still_run():
    tiny_batch = run(["search", *GPT3, "--global-batch", "4", "--top", "1"])
    assert tiny_batch.exit_code == 0
    assert "global batch 4 is smaller than data-parallel size × micro-batch" in tiny_batch.stderr
    assert "is low because of the batch" in tiny_batch.stderr
    short = run(["explain", *GPT3, "--tp", "8", "--pp", "16", "--seq-len", "64", "--brief"])
    assert short.exit_code == 0 and "sequence length 64 is under 128 tokens" in short.stderr


def test_export_refuses_a_plan_that_does_not_fit_and_writes_nothing(tmp_path):
    out = tmp_path / "train.sbatch"
    args = ["export", *GPT3[:2], "--gpus", "128", "--tp", "8", "--pp", "1", "--format", "slurm", "-o", str(out)]
    line = one_line_error(run(args))
    assert "does not fit: it needs" in line and "GiB more than the 79.2 GiB PyTorch can allocate" in line
    assert "--force" in line
    assert not out.exists()
    forced = run([*args, "--force"])
    assert forced.exit_code == 0 and "warning" in forced.stderr
    assert out.read_text().splitlines()[1].startswith("# WARNING: megaplan predicts this plan does NOT fit")


def test_options_beside_a_plan_file_override_it_with_a_note(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(run(["explain", *GPT3, "--tp", "8", "--pp", "16", "--json"]).stdout)
    result = run(["explain", "--plan", str(plan), "--tp", "4", "--recompute", "selective", "--json"])
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert (out["parallel"]["tp"], out["parallel"]["dp"], out["parallel"]["recompute"]) == (4, 16, "selective")
    assert "--tp 4 overrides the plan file's 8" in result.stderr
    assert "--recompute selective overrides the plan file's none" in result.stderr


def test_options_beside_a_launch_script_override_it_with_a_note():
    script = DATA / "launch" / "srun_sh_c.sh"
    args = ["explain", "--megatron-args-file", str(script), "--tp", "4", "--recompute", "selective", "--json"]
    result = run(args)
    assert result.exit_code == 0, result.output
    par = json.loads(result.stdout)["parallel"]
    assert (par["tp"], par["pp"], par["dp"], par["recompute"]) == (4, 4, 8, "selective")
    assert "--tp 4 overrides the script's 8" in result.stderr
    assert "--recompute selective overrides the script's full" in result.stderr
    gpus = run(["explain", "--megatron-args-file", str(script), "--gpus", "256", "--json"])
    assert "--gpus 256 overrides the script's 128 GPUs" in gpus.stderr


def test_explain_without_tp_and_pp_takes_searchs_best_plan_and_says_so():
    best = json.loads(run(["search", *GPT3, "--top", "1", "--json"]).stdout)["plans"][0]
    result = run(["explain", *GPT3, "--brief"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "search's best of" in result.stdout and plan_text(best) in result.stdout
    assert f"{best['estimate']['iteration_s']:.2f} s/iteration" in result.stdout
    assert len(result.stdout.strip().splitlines()) <= 15


def test_each_search_row_carries_the_command_lines_that_reproduce_it():
    plans = json.loads(run(["search", *GPT3, "--top", "3", "--recompute", "selective", "--json"]).stdout)["plans"]
    for pj in plans:
        explain = shlex.split(pj["commands"]["explain"])
        assert explain[:2] == ["megaplan", "explain"] and pj["commands"]["export"].endswith("--format slurm")
        again = json.loads(run([*explain[1:], "--json"]).stdout)
        assert again["parallel"] == pj["parallel"] and again["estimate"]["iteration_s"] == pj["estimate"]["iteration_s"]


@pytest.mark.parametrize(
    ("args", "column"),
    [
        (["search", *GPT3, "--top", "3"], "explain_command"),
        (["sweep", "--model", "gpt3-175b", "--gpus", "512,1024"], "scaling_efficiency"),
        (["validate"], "error_pct"),
        (["compare", *GPT3, "--tp", "8", "--pp", "16", "--a", "--recompute full"], "delta"),
    ],
)
def test_csv_output(args, column):
    result = run([*args, "--csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and column in rows[0]


def _commands(group, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        yield (*prefix, name)
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


@pytest.mark.parametrize("command", list(_commands(cli)), ids=" ".join)
def test_every_help_ends_with_examples(command):
    lines = run([*command, "--help"]).stdout.rstrip().splitlines()
    start = max(k for k, line in enumerate(lines) if line.strip() == "Examples:")
    examples = [line.strip() for line in lines[start + 1 :]]
    assert all(line.startswith(("megaplan ", "--")) for line in examples), lines  # nothing after the examples
    assert 2 <= sum(line.startswith("megaplan ") for line in examples) <= 3, lines


def test_megaplan_alone_prints_its_help_not_a_flattened_error_line():
    """``megaplan`` with no command: the help with its command list, as ``megaplan --help`` prints it.
    Click 8.2 raises NoArgsIsHelpError (a UsageError), which the one-line error handler used to flatten
    into a single 700-character ``megaplan: error: Usage: ...`` line with exit code 2."""
    result = CliRunner().invoke(cli, [])
    assert result.exit_code == 0, result.output
    assert result.stdout == CliRunner().invoke(cli, ["--help"]).stdout
    assert "\nCommands:\n" in result.stdout and "error" not in result.stderr


def test_a_pinned_pp_that_does_not_split_the_layers_is_one_line_not_a_traceback():
    """gpt-1.7b has 24 layers: --pp 16 divides the 16 GPUs but splits no layer count evenly, so the
    pinned pp axis is empty and the world-size reason took max() of it (ValueError, found by
    hypothesis in test_random_arguments_to_search_export_sweep_compare_never_escape)."""
    result = CliRunner().invoke(cli, ["search", "--model", "gpt-1.7b", "--gpus", "16", "--pp", "16"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "the pinned pp is not legal for this model" in line
    assert (
        "24 layers do not split over pp 16" in line and "allowed pp for an even split: 1, 2, 3, 4, 6, 8, 12, 24" in line
    )


def test_sequence_parallel_at_tp_1_is_noted_not_dropped_silently():
    """Megatron-LM turns SP off with tp 1 and warns (arguments.py); explain says so (issue 21's trial)."""
    result = run(["explain", *GPT3, "--tp", "1", "--pp", "16", "--sequence-parallel", "--brief"])
    assert "--sequence-parallel is off with tp 1" in result.stderr
    plan = next(line for line in result.stdout.splitlines() if line.startswith("plan"))
    assert "TP1 PP16" in plan and " SP" not in plan


def test_a_bridge_recipe_is_checked_and_never_ignored_silently():
    """The trial: `explain --bridge-recipe no_such_recipe` ran and exited 0. An unknown name is one error line
    naming the allowed recipes; a known one without --bridge-config/--bridge-override is noted."""
    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--brief"]
    line = one_line_error(run([*base, "--bridge-recipe", "no_such_recipe"]))
    assert "--bridge-recipe no_such_recipe" in line and "llama3_8b_pretrain_2gpu_h100_bf16_config" in line
    ok = run([*base, "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config"])
    assert ok.exit_code == 0 and "--bridge-recipe is read with --bridge-config or --bridge-override" in ok.stderr


def test_a_token_dispatcher_on_a_dense_model_is_noted():
    """The trial: `--moe-token-dispatcher flex` on GPT-3 was accepted without a word."""
    result = run(["explain", *GPT3, "--tp", "8", "--pp", "16", "--moe-token-dispatcher", "flex", "--brief"])
    assert result.exit_code == 0 and "--moe-token-dispatcher flex ignored: gpt3-175b has no experts" in result.stderr


def test_a_sequence_beyond_a_rope_models_positions_is_noted_not_silent():
    """Megatron-LM asserts max_position_embeddings >= seq_length for every position type (arguments.py);
    with RoPE the export raises the flag to the sequence, so llama3-8b (8,192 positions) at 1,000,000 is
    priced, and explain says it is beyond the length the model was built for (issue 21's trial). At 8,192
    nothing is said."""
    args = ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "8", "--cp", "8", "--brief"]
    long = run([*args, "--seq-len", "1000000"])
    assert long.exit_code == 0
    assert "seq 1,000,000 is beyond llama3-8b's max_position_embeddings 8,192" in long.stderr
    assert "--max-position-embeddings 1000000" in long.stderr
    assert "max_position_embeddings" not in run([*args, "--seq-len", "8192"]).stderr


def test_two_orders_or_two_validations_asked_at_once_are_refused_not_one_dropped():
    """Trial 4: `search --rank-by memory --sort time` ranked by memory and `--rank-by risk --sort memory` too,
    dropping one without a word; `validate --choice --regret` ran --choice only."""
    base = ["search", "--model", "llama3-8b", "--gpus", "64", "--top", "1"]
    assert "--sort time and --rank-by memory ask for two orders" in one_line_error(
        run([*base, "--rank-by", "memory", "--sort", "time"])
    )
    assert "--sort memory and --rank-by risk" in one_line_error(run([*base, "--rank-by", "risk", "--sort", "memory"]))
    same = run([*base, "--rank-by", "memory", "--sort", "memory", "--json"])
    assert same.exit_code == 0 and json.loads(same.stdout)["plans"]
    assert "--choice and --regret: choose one" in one_line_error(run(["validate", "--choice", "--regret"]))


def test_a_bridge_recipe_alone_is_explained_as_search_reads_it():
    """Trial 4: `explain --bridge-recipe NAME --gpus N` (no --model) said --model was missing, though search
    takes the recipe alone; now the recipe is the plan, with its assumed-fields note and no 'other options' one."""
    res = run(["explain", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config", "--gpus", "8", "--brief"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("llama3-8b on 8 GPUs") and "assumed from base recipe" in res.stderr
    assert "the plan here comes from the other options" not in res.stderr


def test_a_path_through_a_file_names_the_file_not_a_missing_folder(tmp_path):
    # fresh user trial 4: --schedule-file existing.txt/s.svg said folder 'existing.txt' "does not exist"
    (tmp_path / "existing.txt").write_text("x")
    bad = str(tmp_path / "existing.txt" / "s.svg")
    line = one_line_error(run_cli(["explain", "--model", "gpt3-175b", "--gpus", "1024", "--schedule-file", bad]))
    assert "existing.txt' is a file, not a folder" in line
    line = one_line_error(
        run_cli(["export", "--model", "gpt3-175b", "--gpus", "1024", "-o", bad.replace(".svg", ".sh")])
    )
    assert "is a file, not a folder" in line
    line = one_line_error(
        run_cli(["explain", "--model", "gpt3-175b", "--gpus", "1024", "--schedule-file", "/no/such/s.svg"])
    )
    assert "folder '/no/such' does not exist" in line


def test_an_empty_preset_name_is_one_line():
    # fresh user trial 4: `presets show ''` said "preset file '.' is a directory"
    assert "NAME is empty" in one_line_error(run_cli(["presets", "show", ""]))
    from planner.errors import PresetError
    from planner.presets import load_model

    with pytest.raises(PresetError, match="model name is empty"):
        load_model(" ")


def test_nothing_fits_names_a_real_peak_not_nan():
    # a uniform full-recomputation split the model cannot take has a NaN peak (0/0); the message named it
    # "needs nan GiB" (DeepSeek-V3 on 128 H100, global batch 256)
    args = ["search", "--model", "deepseek-v3", "--gpus", "128", "--global-batch", "256"]
    line = one_line_error(run_cli([*args, "--hardware", "dgx-h100-superpod"]))
    assert "every legal plan needs more than 72.8 GiB" in line and "nan" not in line
    assert float(line.split(" needs ")[-1].split(" GiB")[0]) > 72.8


def test_notes_and_warnings_wrap_at_spaces_on_a_terminal(monkeypatch):
    # fresh user trial 4: long notes on stderr broke mid-word at 80 columns (the terminal's wrap); on a terminal
    # they now break at spaces, continuation lines indented; errors too (fresh user trial 8); a pipe gets them whole
    import io

    from planner.cli.held import _Held, _Stream, wrapped

    note = "megaplan: note: set by the perf scripts after the workload: use_precision_aware_optimizer=True, x=1\n"
    assert wrapped(note, 40) == (
        "megaplan: note: set by the perf scripts\n  after the workload:\n  use_precision_aware_optimizer=True,\n  x=1\n"
    )

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "41")
    for real, expect in ((Tty(), wrapped(note, 40)), (io.StringIO(), note)):
        held = _Held(real)
        stream = _Stream(real, held, holds=True)
        stream.write(note)
        stream.write("megaplan: error: " + "y " * 40 + "\n")
        held.release()
        error = "megaplan: error: " + "y " * 40 + "\n"
        assert real.getvalue() == expect + (wrapped(error, 40) if isinstance(real, Tty) else error)


def test_an_edited_plan_file_with_a_mistyped_field_is_one_line_not_a_traceback(tmp_path):
    # fresh user trial 5: "tp": "eight" ended in a TypeError traceback (gpus % 'eight'), "tp": NaN in
    # "--gpus 64 is not divisible by tp·pp·cp = nan"; "gpus": "64" was not read as a count either
    plan = json.loads(run(["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--json"]).stdout)
    for field, value, needle in [
        (
            "tp",
            "eight",
            "plan: parallel.tp is 'eight': Input should be a valid integer, unable to parse string as an integer",
        ),
        ("tp", float("nan"), "plan: parallel.tp is nan: Input should be a finite number"),
        ("pp", 0, "plan: parallel.pp is 0: Input should be greater than 0"),
        ("gpus", "64", "plan: gpus is '64'; allowed: a whole number ≥ 1"),
    ]:
        edited = json.loads(json.dumps(plan))
        (edited if field == "gpus" else edited["parallel"])[field] = value
        path = tmp_path / "edited.json"
        path.write_text(json.dumps(edited))
        assert one_line_error(run(["explain", "--plan", str(path), "--brief"])) == f"megaplan: error: {needle}"
    path.write_text(json.dumps(plan))
    assert run(["explain", "--plan", str(path), "--brief"]).exit_code == 0


def test_bridges_own_legacy_recipe_names_run_as_bridge_runs_them():
    # fresh user trial 5: Bridge v0.6.0 keeps `llama3_8b_pretrain_config` as an alias of
    # llama3_8b_pretrain_2gpu_h100_bf16_config (recipes/llama/llama3.py), megaplan refused it
    base = ["explain", "--gpus", "8", "--brief", "--bridge-override", "train.global_batch_size=64"]
    legacy = run([*base, "--bridge-recipe", "llama3_8b_pretrain_config"])
    full = run([*base, "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config"])
    assert legacy.exit_code == 0 and legacy.stdout == full.stdout
    assert "assumed from base recipe llama3_8b_pretrain_2gpu_h100_bf16_config (v0.6.0)" in legacy.stderr


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        # trial 5: a traceback (int('two')); 0 was read as unset, so TP 1 without a word
        ("model.tensor_model_parallel_size=two", "model.tensor_model_parallel_size='two': allowed: a whole number ≥ 1"),
        ("model.tensor_model_parallel_size=0", "model.tensor_model_parallel_size=0: allowed: a whole number ≥ 1"),
        ("model.context_parallel_size=2.5", "model.context_parallel_size=2.5: allowed: a whole number ≥ 1"),
        # trial 5: a misspelt key was dropped silently and the recipe's value kept
        ("model.tensor_parallel_size=2", "no 'tensor_parallel_size' in Bridge v0.6.0's ConfigContainer; did you mean "),
        ("modell.tensor_model_parallel_size=2", "no 'modell' in Bridge v0.6.0's ConfigContainer; did you mean model?"),
    ],
)
def test_a_bridge_override_that_is_not_a_size_or_not_a_field_is_one_line(override, needle):
    args = ["explain", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config", "--gpus", "8", "--brief"]
    assert needle in one_line_error(run([*args, "--bridge-override", override]))


def test_an_unknown_bridge_override_field_is_warned_about_not_dropped():
    args = ["explain", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config", "--gpus", "8", "--brief"]
    res = run([*args, "--bridge-override", "model.foo_bar=1"])
    assert res.exit_code == 0
    assert "--bridge-override model.foo_bar: not a field of Bridge v0.6.0's model config megaplan knows" in res.stderr
    assert "--bridge-override" not in run([*args, "--bridge-override", "logger.log_interval=5"]).stderr


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--recompute", "selective"],
        ["search", "--model", "llama3-8b", "--gpus", "64", "--recompute", "none"],
        [
            "export",
            "--model",
            "llama3-8b",
            "--gpus",
            "64",
            "--tp",
            "2",
            "--recompute",
            "selective",
            "--format",
            "flags",
        ],
    ],
)
def test_a_recompute_method_without_full_recomputation_is_refused_not_dropped(args):
    # fresh user trial 5: `--recompute selective --recompute-method uniform` ran as if the method had not been
    # given; Megatron-LM asserts the method is unset with selective recomputation (arguments.py)
    line = one_line_error(run([*args, "--recompute-method", "uniform"]))
    assert "--recompute-method uniform goes with --recompute full only" in line


def test_compare_sides_refuse_a_recompute_method_without_full_recomputation():
    # fresh user trial 5: --b '--recompute selective --recompute-method uniform' was compared as plain selective
    args = ["compare", "--model", "llama3-8b", "--gpus", "64", "--a", "--tp 2"]
    line = one_line_error(run([*args, "--b", "--tp 2 --recompute selective --recompute-method uniform"]))
    assert line.startswith(
        "megaplan: error: --b '--tp 2 --recompute selective --recompute-method uniform': --recompute-method"
    )
    assert run([*args, "--b", "--tp 2 --recompute full --recompute-method uniform"]).exit_code == 0


def test_a_launch_line_with_selective_recomputation_and_a_method_is_what_megatron_refuses():
    from planner.megatron.option_flags import recompute_fields

    with pytest.raises(PlannerError, match="Megatron-LM would reject this: --recompute-method uniform with selective"):
        recompute_fields({"recompute_granularity": "selective", "recompute_method": "uniform"})
    assert recompute_fields({"recompute_granularity": "selective"}) == {"recompute": "selective"}


MA = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 256 --bf16 --tokenizer-type GPT2BPETokenizer"
)


def test_fp16_and_bf16_together_are_what_megatron_refuses_not_one_taken():
    # fresh user trial 5: `--bf16 ... --fp16` was priced as fp16 without a word
    line = one_line_error(run(["explain", "--gpus", "8", "--megatron-args", MA + " --fp16", "--brief"]))
    assert "Megatron-LM would reject this: --fp16 and --bf16 together" in line
    assert run(["explain", "--gpus", "8", "--megatron-args", MA, "--brief"]).exit_code == 0


def test_megatron_args_beside_a_script_say_which_of_its_values_they_replace(tmp_path):
    # fresh user trial 5: --megatron-args '--num-layers 48' beside a script of 32 layers was applied silently
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun --nproc-per-node 8 pretrain_gpt.py {MA} --tensor-model-parallel-size 2\n")
    res = run(["explain", "--megatron-args-file", str(script), "--megatron-args", "--num-layers 48 --use-flash-attn"])
    assert res.exit_code == 0 and "model 48 layers" in res.stdout
    assert "note: --megatron-args overrides the script: --num-layers 48 (the script's 32)" in res.stderr
    assert "overrides the script" not in run(["explain", "--megatron-args-file", str(script)]).stderr


def test_bridge_overrides_beside_a_model_start_from_its_bridge_recipe_as_bridge_does():
    # fresh user trial 5: `--model llama3-8b --bridge-override model.tensor_model_parallel_size=2` priced the
    # one override over Megatron-LM's defaults (fp32, global batch 4), not over Bridge's recipe of the model
    res = run(
        ["explain", "--model", "llama3-8b", "--gpus", "8", "--brief", "--bridge-override", "train.global_batch_size=64"]
    )
    assert res.exit_code == 0 and "global batch 64" in res.stdout and "· bf16 ·" in res.stdout
    assert "--bridge-override over llama3_8b_pretrain_2gpu_h100_bf16_config, Bridge v0.6.0's recipe" in res.stderr
    line = one_line_error(
        run(["explain", "--model", "mixtral-8x7b", "--gpus", "8", "--bridge-override", "train.global_batch_size=64"])
    )
    assert "no Megatron-Bridge v0.6.0 base recipe for model 'mixtral-8x7b' is known" in line


def test_a_script_with_a_latin1_comment_is_read_as_bash_reads_it_and_a_binary_is_not(tmp_path):
    # fresh user trial 5: one Latin-1 byte in a comment made the whole script "not a text file"
    script = tmp_path / "run.sh"
    script.write_bytes(b"# entra\xeenement\ntorchrun --nproc-per-node 8 pretrain_gpt.py " + MA.encode() + b"\n")
    res = run(["explain", "--megatron-args-file", str(script), "--brief"])
    assert res.exit_code == 0 and "imported on 8 GPUs" in res.stdout
    (tmp_path / "binary").write_bytes(b"\x7fELF\x00\x01")
    assert "is not a text file" in one_line_error(run(["explain", "--megatron-args-file", str(tmp_path / "binary")]))


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        # fresh user trial 5: --seq-length 0 said "--seq-len is required", --global-batch-size 0 ran at micro × dp
        (
            MA.replace("--seq-length 4096", "--seq-length 0"),
            "training: seq_len: Input should be greater than 0 (got 0)",
        ),
        (
            MA.replace("--global-batch-size 256", "--global-batch-size 0"),
            "training: global_batch: Input should be greater than 0",
        ),
    ],
)
def test_a_zero_sequence_or_batch_on_a_launch_line_is_refused_as_zero(flags, needle):
    assert needle in one_line_error(run(["explain", "--gpus", "8", "--megatron-args", flags, "--brief"]))


def test_a_plan_from_a_device_is_refused_and_one_from_a_pipe_is_read(tmp_path):
    """`--plan /dev/zero` said "not found" (it exists; reading it would never end); a pipe, as
    `--plan <(megaplan search ... --json)` gives, was "not found" too and is now read."""
    import os
    import threading

    from planner.plan_file import read_plan_file

    with pytest.raises(PlannerError, match=r"'/dev/zero' is not a file \(a device or socket\)"):
        read_plan_file("/dev/zero")
    plan = json.loads(CliRunner().invoke(cli, ["explain", "--model", "gpt3-175b", "--gpus", "64", "--json"]).stdout)
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(json.dumps(plan)))
    writer.start()
    try:
        got = read_plan_file(str(fifo))
    finally:
        writer.join(timeout=10)
    assert (got["model"], got["gpus"], got["parallel"]["tp"]) == (plan["model"], 64, plan["parallel"]["tp"])


def test_a_launch_line_without_a_sequence_length_names_its_flag_and_megaplans_option(tmp_path):
    """Megatron-LM v2.5's BERT example sets no --seq-length: the error said "--seq-len is required: model
    'imported' has no published training defaults", naming megaplan's option and a model the user never named."""
    script = tmp_path / "bert.sh"
    script.write_text(
        "python pretrain_bert.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 "
        "--micro-batch-size 4 --global-batch-size 32 --tensor-model-parallel-size 2 --fp16\n"
    )
    result = CliRunner().invoke(cli, ["explain", "--megatron-args-file", str(script), "--gpus", "8"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "megaplan: error: the launch line sets no --seq-length: give --seq-len N beside it"
    )
