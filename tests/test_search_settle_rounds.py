"""search's settling rounds (``search._Pending.settle``) find the rows that fit, their grid and their extrapolated
features once (``search._Fitting``); between rounds, timing a pending row changes its time and, where it keeps its
twin without --tp-comm-overlap, its peak and its overlap. Each round must see what gathering every row again sees:
compared here with ``_Fitting.of`` made afresh, number for number."""

from __future__ import annotations

import numpy as np

import planner.search as search_module
from planner.api import make_request
from planner.search import _Fitting, _Scored, recipe_options
from planner.space.candidates import NO_PINS, candidate_grid


def _parts():
    """Two parts (as the rows scored and their block variants) of GPT-3 175B's legal rows on 64 A100: on Ampere no
    published run overlaps TP communication, so a row with --tp-comm-overlap counts one extrapolated feature more
    than its twin without it (``evidence`` kind ``tp_overlap``)."""
    ctx = make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod").ctx
    grid = candidate_grid(ctx, 64, NO_PINS)
    grid = grid.take(search_module._legal_rows(ctx, grid, NO_PINS, 64)[0])
    grid, options = recipe_options(ctx, NO_PINS, grid)
    rng = np.random.default_rng(7)
    capacity = 1.0
    parts = []
    for rows in (np.arange(0, len(grid), 3), np.arange(1, len(grid), 5)):
        g = grid.take(rows)
        peak = np.where(rng.random(len(g)) < 0.6, 0.5, 2.0)  # about 60 % fit
        parts.append(_Scored(g, rng.random(len(g)), peak, options))
    return parts, capacity


def test_a_refreshed_round_sees_what_gathering_every_row_again_sees():
    parts, capacity = _parts()
    fitting = _Fitting.of(parts, capacity, "risk", 64)
    fitting.refresh(parts)  # the first round: as made
    first = fitting.extrapolated.copy()
    # a round's timing: some rows that fit with the overlap keep their twin without it (their peak no larger),
    # others get a time
    grid, fit = parts[0].grid, np.flatnonzero(parts[0].peak <= capacity)
    flipped = fit[grid.tp_comm_overlap[fit] > 0][::4]
    assert len(flipped) > 10
    grid.tp_comm_overlap[flipped] = 0
    parts[0].peak[flipped] *= 0.9
    parts[0].iteration[fit[::7]] = 3.0
    parts[1].iteration[:5] = 4.0
    fitting.refresh(parts)
    fresh = _Fitting.of(parts, capacity, "risk", 64)
    np.testing.assert_array_equal(fitting.extrapolated, fresh.extrapolated)
    np.testing.assert_array_equal(fitting.scored.iteration, fresh.scored.iteration)
    np.testing.assert_array_equal(fitting.scored.peak, fresh.scored.peak)
    for name in search_module.COLUMNS:
        np.testing.assert_array_equal(getattr(fitting.scored.grid, name), getattr(fresh.scored.grid, name))
    # the flipped rows lost the extrapolated TP overlap: one feature fewer each, the others as they were
    at = np.searchsorted(fit, flipped)
    np.testing.assert_array_equal(fitting.extrapolated[at], first[at] - 1)
    others = np.setdiff1d(np.arange(len(first)), at)
    np.testing.assert_array_equal(fitting.extrapolated[others], first[others])


def test_rows_that_stop_fitting_are_gathered_again():
    """Where the rows that fit change (never by timing a twin, whose peak is no larger), every row is gathered
    afresh: the same arrays as ``_Fitting.of``'s."""
    parts, capacity = _parts()
    fitting = _Fitting.of(parts, capacity, "estimate", 64)
    fitting.refresh(parts)
    parts[1].peak[np.flatnonzero(parts[1].peak <= capacity)[:3]] = 2.0
    fitting.refresh(parts)
    fresh = _Fitting.of(parts, capacity, "estimate", 64)
    assert len(fitting.scored.peak) == len(fresh.scored.peak) == sum(len(f) for f in fresh.fit)
    np.testing.assert_array_equal(fitting.extrapolated, fresh.extrapolated)
    np.testing.assert_array_equal(fitting.scored.peak, fresh.scored.peak)
    np.testing.assert_array_equal(fitting.scored.grid.tp, fresh.scored.grid.tp)
