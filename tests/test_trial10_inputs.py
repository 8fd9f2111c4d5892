"""A new user's second day, fresh user trial 10 (issue 21): each test reproduces a mistake that ended in a
traceback, was ignored without a word, or ended in a line that did not say what to do, with files written
here in the pattern of the real ones (the real scripts and logs stay outside the repository)."""

from __future__ import annotations

import sys

import pytest

import planner.cli

from conftest import one_line_error, run_cli

EXPLAIN = ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2"]


def test_closed_standard_output_is_one_error_line_not_a_traceback(monkeypatch, capsys):
    """`megaplan search ... >&-`: Python sets sys.stdout to None; the table's first print was an
    AttributeError traceback ('NoneType' object has no attribute 'isatty')."""
    monkeypatch.setattr(sys, "argv", ["megaplan", "presets", "models"])
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(SystemExit) as stop:
        planner.cli.main()
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "megaplan: error: cannot write the output: standard output is closed (>&-): redirect it to a file or /dev/null"
    ]


def test_closed_standard_error_keeps_the_exit_code_of_bad_input(monkeypatch):
    """`megaplan search --model nope ... 2>&-`: exit 1 from the failed error line; bad input is exit 2."""
    monkeypatch.setattr(sys, "argv", ["megaplan", "presets", "show", "nope"])
    monkeypatch.setattr(sys, "stderr", None)
    with pytest.raises(SystemExit) as stop:
        planner.cli.main()
    assert stop.value.code == 2


def test_a_cost_beyond_a_float_is_refused_not_written_as_infinity():
    """--gpu-hour-price 1e308: 2.34e4 GPU-hours × 1e308 wrote "cost": Infinity, which JSON.parse, Go and
    jq --strict refuse, and the table said "cost inf"."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--gpu-hour-price", "1e308"]))
    assert line.startswith("megaplan: error: --tokens 3e+11 × --gpu-hour-price 1e+308: 2.34e+04 GPU-hours")
    assert "beyond a float (1.8e308)" in line
    ok = run_cli([*EXPLAIN, "--gpu-hour-price", "1e300", "--json"])
    assert ok.exit_code == 0 and '"cost": 2.26' in ok.stdout and "e+304" in ok.stdout  # 22,607 GPU-hours × 1e300


@pytest.mark.parametrize(
    ("extra", "note"),
    [
        (["--etp", "3"], "--etp ignored: llama3-8b has no experts"),
        (["--tp-comm-overlap-cfg", "bridge"], "--tp-comm-overlap-cfg ignored: it configures --tp-comm-overlap"),
        (["--grad-reduce-in-bf16", "--main-grads-dtype", "fp32"], "--main-grads-dtype ignored: --grad-reduce-in-bf16"),
        (["--pp-scatter-gather"], "--pp-scatter-gather ignored: pp 1 sends nothing between pipeline stages"),
        (
            ["--pp", "2", "--sequence-parallel", "--pp-scatter-gather"],
            "--pp-scatter-gather ignored: with --sequence-parallel",
        ),
    ],
)
def test_an_option_the_plan_cannot_use_is_noted(extra, note):
    """Each of these ran without a word (fresh user trial 10)."""
    result = run_cli([*EXPLAIN, "--brief", *extra])
    assert result.exit_code == 0, result.output
    assert f"megaplan: note: {note}" in result.stderr


def test_no_note_when_the_option_is_used():
    result = run_cli([*EXPLAIN, "--pp", "2", "--pp-scatter-gather", "--brief"])
    assert result.exit_code == 0 and "ignored" not in result.stderr


def test_bridge_overrides_without_their_recipe_ask_for_it(tmp_path):
    """Bridge's own quantized_llama3_8b_pretrain_override_example.yaml (model: tensor_model_parallel_size ...,
    train: ...) said "the command line does not define the model: --num-layers ... missing"."""
    path = tmp_path / "quantized_llama3_8b_pretrain_override_example.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 1\n  context_parallel_size: 1\ntrain:\n  global_batch_size: 8\n"
    )
    line = one_line_error(run_cli(["explain", "--brief", "--bridge-config", str(path), "--gpus", "8"]))
    assert "Bridge overrides without the recipe they override" in line
    assert "--bridge-recipe llama3_8b_pretrain_config" in line  # the recipe its name holds
    alone = ["explain", "--bridge-override", "model.tensor_model_parallel_size=4", "--gpus", "8"]
    line = one_line_error(run_cli(alone))
    assert line.startswith("megaplan: error: --bridge-override: Bridge overrides without the recipe")
    recipe = ["--bridge-recipe", "llama3_8b_pretrain_config"]
    ok = run_cli(["explain", "--brief", "--bridge-config", str(path), "--gpus", "8", *recipe])
    assert ok.exit_code == 0, ok.output


def test_a_bridge_override_file_with_a_typo_or_spaces_around_the_equals_names_it(tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text("model:\n  tensor_model_paralel_size: 4\n")
    line = one_line_error(run_cli(["explain", "--brief", "--bridge-config", str(typo), "--gpus", "8"]))
    assert "model.tensor_model_paralel_size: no 'tensor_model_paralel_size' in Bridge v0.6.0's model config" in line
    assert line.endswith("did you mean tensor_model_parallel_size?")
    spaced = tmp_path / "spaced.overrides"
    spaced.write_text("model.tensor_model_parallel_size = 4\n")
    line = one_line_error(run_cli(["explain", "--brief", "--bridge-config", str(spaced), "--gpus", "8"]))
    assert "spaces around '='" in line and line.endswith("write model.tensor_model_parallel_size=4")
