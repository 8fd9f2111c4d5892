"""Every hint is checked before it is printed, compare answers first, and counts read right: explain's
fix line says what a search on the same GPUs really finds (with a command that finds it), the
matplotlib hint names the checkout's extra, the README's examples say what they print."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli

README = (Path(__file__).parents[1] / "README.md").read_text()


run = run_cli


def test_the_fix_line_never_promises_a_plan_search_does_not_find():
    # GPT-3 175B on 8 A100s: 398 GiB per GPU; the smallest legal plan needs 333 GiB: no plan fits
    out = run(["explain", "--model", "gpt3-175b", "--gpus", "8", "--tp", "8", "--pp", "1", "--brief"])
    assert out.exit_code == 0, out.output
    fix = next(line for line in out.stdout.splitlines() if line.startswith("fix"))
    assert "finds a plan" not in fix and "no legal plan fits on these 8 GPUs either" in fix
    pasted = " ".join(out.stdout.replace(" \\\n", " ").split())  # the command continued over lines (ux15)
    assert "megaplan search --model gpt3-175b --hardware dgx-a100-superpod --min-gpus" in pasted


def test_the_fix_line_names_what_search_finds_with_a_command_that_finds_it():
    args = ["--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--seq-len", "32768"]
    out = run(["explain", *args, "--tp", "1", "--pp", "1", "--micro-batch", "8", "--json"])
    hint = json.loads(out.stdout)["search_hint"]
    assert hint["finds"] and hint["feasible"] > 1 and "--seq-len 32768" in hint["command"]  # the user's training
    found = run(shlex.split(hint["command"])[1:] + ["--top", "1"], env={"COLUMNS": "200"})  # the label unwrapped
    assert found.exit_code == 0 and hint["plan"] in found.stdout and f"{hint['iteration_s']:.2f}" in found.stdout


def test_the_matplotlib_hint_names_the_checkouts_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    line = one_line_error(run(["sweep", "--model", "gpt-1.7b", "--gpus", "8", "--plot", str(tmp_path / "s.svg")]))
    assert 'pip install ".[plot]" from the megaplan checkout' in line and "megaplan[plot]" not in line


def test_the_readme_examples_say_what_they_print():
    example = README[README.index("# Narayanan et al. 2021: GPT-3 175B") :]
    first, second = (
        [a for a in shlex.split(example.split("megaplan explain ", k + 1)[k + 1].split("\n\n")[0]) if a != "\n"]
        for k in (0, 1)
    )
    pj = json.loads(run(["explain", *first, "--json"]).stdout)["estimate"]
    said = re.search(r'"(\d+) TFLOP/s per GPU" counts model FLOPs.*?hardware" line below, (\d+)', example, re.S)
    assert said and int(said[1]) == round(pj["tflops_per_gpu"]) and int(said[2]) == round(pj["hw_tflops_per_gpu"])
    llama = run(["explain", *second, "--brief"])
    assert "DOES NOT FIT" in llama.stdout and "--cp 2" in llama.stdout
    comment = example.split("# today's Megatron-LM on H100")[1].split("megaplan explain")[0]
    assert "DOES NOT FIT" in comment and "83.0 GiB" in llama.stdout and "83.0 GiB" in comment


def test_compare_answers_first_with_a_fits_line_per_plan():
    args = ["compare", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]
    out = run([*args, "--a", "--recompute full", "--b", "--micro-batch 4"])
    lines = out.stdout.splitlines()
    assert lines[0].startswith("B is faster") and "B does not fit" in lines[0]
    body = [line.strip() for line in lines]
    fits = [line for line in body if line.startswith(("FITS", "TIGHT", "DOES NOT FIT"))]
    assert fits[0].startswith("FITS 34.0 of 72.8 GiB") and fits[1].startswith("DOES NOT FIT")
    # each plan's fits line is followed by what the published runs say of it (explain's runs line)
    at = [i for i, line in enumerate(body) if line.startswith(("FITS", "DOES NOT FIT", "runs "))]
    assert [body[i].split()[0] for i in at[:4]] == ["FITS", "runs", "DOES", "runs"]


def test_compare_with_one_side_says_the_other_is_the_shared_plan():
    line = one_line_error(run(["compare", "--model", "gpt3-175b", "--gpus", "1024", "--a", "--tp 8 --pp 16"]))
    assert line.startswith("megaplan: error: plan B is the shared options alone (no --b given), TP1 PP1 DP1024")
    assert "give --b '...' as well" in line


@pytest.mark.parametrize("command", [["search", "--gpus", "64"], ["search", "--min-gpus"], ["explain", "--gpus", "64"]])
def test_an_expert_parallel_size_that_does_not_divide_the_experts_says_so(command):
    line = one_line_error(run([command[0], "--model", "mixtral-8x7b", *command[1:], "--ep", "3"]))
    assert "--ep 3 must divide the 8 experts of mixtral-8x7b; allowed: 1, 2, 4, 8" in line


def test_counts_read_right(tmp_path):
    from planner.errors import counted

    assert (counted(1, "plan"), counted(2, "plan"), counted(1024, "run")) == ("1 plan", "2 plans", "1,024 runs")
    plans = json.loads(run(["search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "1", "--json"]).stdout)["plans"]
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"plans": plans[:1]}))
    line = one_line_error(run(["explain", "--plan", str(one), "--rank", "2"]))
    assert "holds 1 plan (" in line


def test_a_single_tie_reads_as_one_plan():
    from types import SimpleNamespace

    from planner.report.memory import ties_footnote

    result = SimpleNamespace(
        tied=1, fastest_rank=1, plans=[{"rank": 1}], band_frac=0.03, rank_by="estimate", moved_down=0
    )
    assert "The one tied plan comes first" in ties_footnote(result)


def test_min_gpus_shows_memory_against_what_a_plan_may_fill():
    from planner.report.runs import fit_columns_spec

    est = {"peak_memory_gib": 72.1, "capacity_gib": 72.8, "iteration_s": 1.0, "tokens_per_s": 1.0, "mfu": 0.5}
    columns = fit_columns_spec({"sizes": [{"gpus": 24, "plan": {"estimate": est}}], "gpus_per_node": 8})
    memory = next(c for c in columns if c.header.startswith("GiB"))
    assert memory.header == "GiB/72.8" and memory.cell({"plan": {"estimate": est}}) == "72.1"


def test_a_micro_batch_no_data_parallel_size_can_take_is_one_line_not_a_traceback():
    line = one_line_error(run(["search", "--model", "gpt-1.7b", "--gpus", "8", "--micro-batch", "3046"]))
    assert "the micro-batch does not divide the global batch 512, so no dp can" in line


def test_an_expert_parallel_size_on_a_dense_model_says_it_has_no_experts():
    line = one_line_error(run(["search", "--model", "gpt-1.7b", "--gpus", "8", "--ep", "2"]))
    assert "--ep 2: gpt-1.7b has no experts (a dense model); allowed: --ep 1" in line
