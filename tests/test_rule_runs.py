"""The search's rule check (``rules.first_broken``) asks a rule that reads none of the knobs every candidate is
crossed with (``CROSSED``) once per run of candidates alike in every other column: each plan's first broken rule is
the one the rule table gives it, one mask at a time (``each_rule_mask``)."""

import numpy as np
import pytest

from planner.api import make_request
from planner.space import rules as rule_table
from planner.space.candidates import NO_PINS, candidate_grid
from planner.space.grid import COLUMNS
from planner.space.rules import CROSSED, Rule, _runs, each_rule_mask, first_broken


@pytest.mark.parametrize(
    ("model", "gpus", "hardware", "batch", "rejected"),
    [("gpt3-175b", 64, "dgx-a100-superpod", 64, 10_893), ("mixtral-8x7b", 64, "dgx-h100-superpod", None, 0)],
)
def test_first_broken_is_the_rule_table_one_mask_at_a_time(model, gpus, hardware, batch, rejected):
    # GPT-3 175B on 64 A100 (global batch 64): 42 + 6,732 + 21 + 4,098 candidates break a rule of the table (the
    # search's counts); Mixtral's MoE candidates are built legal
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, global_batch=batch).ctx
    grid = candidate_grid(ctx, gpus, NO_PINS)
    # runs: GPT-3's 20,601 candidates in 1,162; Mixtral's 70,324 in 487 (no selective rows: its searched rc-mlp
    # recomputes nothing), the MoE axes (crossed last) among CROSSED (without them every Mixtral run was one row)
    runs = len(_runs([getattr(grid, n) for n in COLUMNS if n not in CROSSED], len(grid))[0])
    assert (len(grid), runs) == {"gpt3-175b": (20_601, 1_162), "mixtral-8x7b": (70_324, 487)}[model]
    shuffled = grid.take(np.random.default_rng(0).permutation(len(grid)))  # runs of one row: every row asked
    for g in (grid, shuffled):
        want = np.zeros(len(g), dtype=np.int16)
        for k, (_, mask) in enumerate(
            each_rule_mask(g, ctx.model, ctx.training, ctx.options, gpus, hardware=ctx.hardware)
        ):
            want[(want == 0) & ~mask] = k + 1
        got = first_broken(g, ctx.model, ctx.training, ctx.options, gpus, hardware=ctx.hardware)
        assert got.dtype == np.int16 and np.array_equal(got, want)
        assert np.count_nonzero(want) == rejected


def test_runs_and_the_crossed_knobs_by_hand(monkeypatch):
    """Six copies of one candidate with (tp, sp) = (2, F), (2, T), (2, F), (4, F), (4, T), (2, F): runs of tp start at
    rows 0, 3, 5. A rule on tp (tp < 4) is asked once per run (three rows); a rule on sequence parallelism (sp,
    ``CROSSED``) on every row."""
    ctx = make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod").ctx
    grid = candidate_grid(ctx, 64, NO_PINS).take(np.zeros(6, dtype=np.int64))
    from dataclasses import replace

    grid = replace(
        grid,
        tp=np.array([2, 2, 2, 4, 4, 2], dtype=np.int32),
        sequence_parallel=np.array([False, True, False, False, True, False]),
    )
    first, inverse = _runs([grid.tp], 6)
    assert first.tolist() == [0, 3, 5] and inverse.tolist() == [0, 0, 0, 1, 1, 2]
    assert "sequence_parallel" in CROSSED and "tp" not in CROSSED
    asked = []
    monkeypatch.setattr(rule_table, "RUNS_FROM", 1)  # runs from the first row (a search's: from 4,096 rows)

    def on_tp(r):
        asked.append(len(r.grid))
        return r.grid.tp < 4

    rules = (Rule("tp < 4", on_tp, str), Rule("sp", lambda r: ~r.grid.sequence_parallel, str))
    got = first_broken(grid, ctx.model, ctx.training, ctx.options, 64, rules, hardware=ctx.hardware)
    assert got.tolist() == [0, 2, 0, 1, 1, 0]  # row 4 breaks both: the first counts
    assert asked == [3]


def test_a_rule_reading_a_crossed_knob_through_a_grid_method_is_asked_on_every_row(monkeypatch):
    """A rule that reads sequence parallelism only inside a PlanGrid method (here ``plan(i)``, which builds the
    plan from every column) sees every row: the method reads through the view that detects ``CROSSED`` columns.
    Before, the method ran on the grid of run heads and the three rows of one tp answered as their first."""
    ctx = make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod").ctx
    from dataclasses import replace

    grid = candidate_grid(ctx, 64, NO_PINS).take(np.zeros(3, dtype=np.int64))
    grid = replace(grid, tp=np.full(3, 8, dtype=np.int32), sequence_parallel=np.array([False, True, False]))
    monkeypatch.setattr(rule_table, "RUNS_FROM", 1)

    def sp_by_plan(r):
        return np.array([not r.grid.plan(i).sequence_parallel for i in range(len(r.grid))])

    got = first_broken(grid, ctx.model, ctx.training, ctx.options, 64, (Rule("sp", sp_by_plan, str),), hardware=None)
    assert got.tolist() == [0, 1, 0]
