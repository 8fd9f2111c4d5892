"""Nothing the user wrote is overwritten without --overwrite (--force only writes a plan that does not
fit), output options that exclude each other are refused, and an option that applies to some plans
only says so instead of being dropped."""

from __future__ import annotations

import pytest

from conftest import one_line_error, run_cli

SMALL = ["--model", "gpt-1.7b", "--gpus", "8"]


run = run_cli


@pytest.mark.parametrize(
    ("args", "option", "name"),
    [
        (["export", *SMALL, "--tp", "1", "--pp", "1"], "-o", "train.sh"),
        (["explain", *SMALL, "--tp", "1", "--pp", "1"], "--schedule-file", "schedule.svg"),
        (["sweep", "--model", "gpt-1.7b", "--gpus", "8"], "--plot", "scaling.svg"),
    ],
)
def test_an_existing_file_is_replaced_only_with_overwrite(tmp_path, args, option, name):
    path = tmp_path / name
    path.write_text("the user's own file\n")
    line = one_line_error(run([*args, option, str(path)]))
    assert f"{path} exists; pass --overwrite to replace it" in line
    if args[0] == "export":  # --force writes a plan that does not fit; it never replaces a file
        one_line_error(run([*args, option, str(path), "--force"]))
    assert path.read_text() == "the user's own file\n"
    replaced = run([*args, option, str(path), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert path.read_text() != "the user's own file\n"


@pytest.mark.parametrize(
    "args",
    [
        ["search", *SMALL],
        ["sweep", "--model", "gpt-1.7b", "--gpus", "8,16"],
        ["validate"],
        ["compare", *SMALL, "--a", "--tp 1", "--b", "--tp 2"],
    ],
)
def test_json_and_csv_together_are_refused(args):
    assert "--json and --csv: choose one output format" in one_line_error(run([*args, "--json", "--csv"]))


@pytest.mark.parametrize("command", [["search", *SMALL, "--top", "1"], ["explain", *SMALL, "--brief"]])
def test_a_block_recompute_method_without_full_recomputation_is_noted(command):
    result = run([*command, "--recompute-method", "block"])
    assert result.exit_code == 0, result.output
    assert "note: --recompute-method block applies only to plans with full recomputation" in result.stderr
    pinned = run([*command, "--recompute-method", "block", "--recompute", "full"])
    assert pinned.exit_code == 0 and "applies only" not in pinned.stderr
