"""Each option is given once: both ways of an on/off pair, or one option twice with different values, is
refused with one line naming it (the last one never wins silently); the same value twice loses nothing
and is accepted. Found by the new-user trial: `search --sequence-parallel --no-sequence-parallel` searched
without SP and `export --plan a.json --plan b.json` exported b.json, without a word."""

from __future__ import annotations

import click
import pytest

from planner.cli import cli

from conftest import one_line_error, run_cli


def _commands():
    """(command path, click command) for every command and sub-command of megaplan."""
    found = []
    for name in sorted(cli.commands):
        command = cli.commands[name]
        if isinstance(command, click.Group):
            found += [([name, sub], command.commands[sub]) for sub in sorted(command.commands)]
        found.append(([name], command))
    return found


def _flags(command: click.Command):
    """The command's on/off pairs (on, off) and its single-value options (long name)."""
    pairs, valued = [], []
    for param in command.params:
        if not isinstance(param, click.Option) or param.multiple or param.count or param.hidden:
            continue
        if param.is_flag and param.secondary_opts:
            pairs.append((param.opts[0], param.secondary_opts[0]))
        elif not param.is_flag:
            valued.append(max(param.opts, key=len))
    return pairs, valued


@pytest.mark.parametrize(("path", "command"), [pytest.param(p, c, id=" ".join(p)) for p, c in _commands()])
def test_every_on_off_pair_both_ways_and_every_option_twice_is_refused_naming_it(path, command):
    pairs, valued = _flags(command)
    for on, off in pairs:
        line = one_line_error(run_cli([*path, on, off]))
        assert line == f"megaplan: error: {on} and {off} both given; give one of them"
    for option in valued:
        line = one_line_error(run_cli([*path, option, "1", option, "2"]))
        assert line == f"megaplan: error: {option} given twice with different values (1, then 2); give it once"


def test_the_commands_of_the_trial_have_the_pairs_and_options_checked_above():
    flags = {tuple(path): _flags(command) for path, command in _commands()}
    for command in ("search", "explain", "export", "sweep", "compare"):
        assert ("--sequence-parallel", "--no-sequence-parallel") in flags[(command,)][0]
    assert "--plan" in flags[("export",)][1] and "--output" in flags[("calibrate",)][1]


def test_export_with_two_plan_files_names_both_in_order(tmp_path):
    line = one_line_error(run_cli(["export", "--plan", "a.json", "--plan", "b.json"]))
    assert "--plan given twice with different values (a.json, then b.json)" in line


def test_three_values_are_all_named():
    args = ["search", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--tp", "4", "--tp", "2"]
    line = one_line_error(run_cli(args))
    assert "--tp given 3 times with different values (8, then 4, then 2)" in line


def test_a_short_and_long_spelling_of_one_option_count_as_one_option(tmp_path):
    line = one_line_error(run_cli(["export", "--model", "gpt3-175b", "-o", "x.sh", "--output", "y.sh"]))
    assert "--output given twice with different values (x.sh, then y.sh)" in line


def test_compare_sides_take_each_option_once():
    args = ["compare", "--model", "llama3-8b", "--gpus", "64", "--a", "--tp 2 --tp 4", "--b", "--tp 8"]
    line = one_line_error(run_cli(args))
    assert line.startswith("megaplan: error: --a '--tp 2 --tp 4': --tp given twice with different values (2, then 4)")


def test_the_same_value_twice_loses_nothing_and_is_accepted():
    once = run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--json", "--top", "1"])
    twice = run_cli(
        ["search", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--tp", "2", "--json", "--json", "--top", "1"]
    )
    assert once.exit_code == twice.exit_code == 0 and once.stdout == twice.stdout
    assert '"tp": 2' in twice.stdout


def test_a_script_variable_given_two_values_by_env_is_refused():
    args = ["explain", "--megatron-args", "--num-layers $L", "--env", "L=4", "--env", "L=8"]
    line = one_line_error(run_cli(args))
    assert line == "megaplan: error: --env L given twice with different values (4, then 8); give it once"


def test_a_rank_given_after_hash_and_with_rank_is_refused_naming_both():
    # the trial: `--plan plans.json#2 --rank 3` said "the rank after # must be a whole number ≥ 1"
    line = one_line_error(run_cli(["explain", "--plan", "plans.json#2", "--rank", "3"]))
    assert line == "megaplan: error: --plan 'plans.json#2' and --rank 3: give the rank once, after # or with --rank"


@pytest.mark.parametrize(("path", "command"), [pytest.param(p, c, id=" ".join(p)) for p, c in _commands()])
def test_every_option_given_an_empty_value_is_refused_naming_it(path, command):
    # `explain --schedule-file ''` wrote no picture and `--hardware ''` took the default, both with exit 0
    _, valued = _flags(command)
    for option in valued:
        if option in ("--megatron-args", "--a", "--b"):  # an empty flag string or override set is valid
            continue
        line = one_line_error(run_cli([*path, option, ""]))
        assert line == f"megaplan: error: {option} is empty (''): give a value, or leave the option out"


def test_an_empty_override_set_is_still_valid():
    out = run_cli(
        ["compare", "--model", "gpt-1.7b", "--gpus", "8", "--tp", "1", "--pp", "1", "--a", "", "--b", "--tp 2"]
    )
    assert out.exit_code == 0, out.output
