"""search times a row with --tp-comm-overlap and its twin without only where the twin rule can read both
(``search._timed_versions``): under ``KEEP_TWIN`` a row's own time is read only where its twin's is not finite, under
``KEEP_OVERLAP`` the twin's only where the row's is not. Leaving the other version untimed must change nothing
``_time_rows`` writes: checked here against timing every version, with times written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import planner.search as search_module
from planner.api import make_request
from planner.search import BY_TIME, KEEP_OVERLAP, KEEP_TWIN, ROW, SMALLER, TWIN, _time_rows

# ten rows: 0-1 the row alone (its twin not asked), 2 the twin alone (the row does not fit), 3-9 both
CODES = [ROW, ROW, TWIN | SMALLER, *[ROW | TWIN] * 7]
OWN = 10.0 + np.arange(10)  # the row as it is: 10 + r seconds
TW = 5.0 + np.arange(10)  # its twin without the overlap: 5 + r seconds
OWN[4] = np.inf  # row 4 has no finite time as it is, twin 3 none without the overlap
TW[3] = np.inf


def _fake_timed(calls: list):
    def timed(rows, ctx, kept):
        twin = np.arange(len(rows.rows)) >= rows.start
        calls.extend(zip(rows.rows.tolist(), twin.tolist(), strict=True))
        ticket = 2 * rows.rows + twin  # names the version timed: the same whichever call timed it
        return np.where(twin, TW[rows.rows], OWN[rows.rows]), (None if kept is None else ticket)

    return timed


def _run(monkeypatch, rule: int, split_from: int):
    calls: list = []
    monkeypatch.setattr(search_module, "_timed", _fake_timed(calls))
    monkeypatch.setattr(search_module, "SPLIT_FROM", split_from)
    n = len(CODES)
    iteration, peak, off_wins = np.full(n, np.inf), np.full(n, 8.0), np.zeros(n)
    need, twin_peak, ticket = np.array(CODES, dtype=np.int8), np.full(n, 6.0), np.full(n, -1)
    out = (iteration, peak, off_wins, need, twin_peak, ticket, "kept", rule)
    _time_rows(None, np.arange(n), None, out)
    return (iteration, peak, off_wins, need, ticket), sorted(calls)


@pytest.mark.parametrize("rule", [KEEP_TWIN, KEEP_OVERLAP, BY_TIME])
def test_what_time_rows_writes_is_the_same_with_every_version_timed(monkeypatch, rule):
    split, split_calls = _run(monkeypatch, rule, 0)
    whole, whole_calls = _run(monkeypatch, rule, 10**9)
    for a, b in zip(split, whole, strict=True):
        np.testing.assert_array_equal(a, b)
    # every version timed: rows 0-1 and 3-9 as they are, 2-9 as twins
    assert whole_calls == sorted([(r, False) for r in (0, 1, *range(3, 10))] + [(r, True) for r in range(2, 10)])
    if rule == KEEP_TWIN:  # as they are: rows 0-1 (no twin asked) and 3 (its twin has no time) alone
        assert split_calls == sorted([(0, False), (1, False), (3, False)] + [(r, True) for r in range(2, 10)])
    elif rule == KEEP_OVERLAP:  # as twins: 2 (its row does not fit) and 4 (its row has no time) alone
        assert split_calls == sorted([(r, False) for r in (0, 1, *range(3, 10))] + [(2, True), (4, True)])
    else:
        assert split_calls == whole_calls


def test_keep_twin_times_by_hand(monkeypatch):
    (iteration, peak, off_wins, _, ticket), _ = _run(monkeypatch, KEEP_TWIN, 0)
    # rows 0-1 their own 10, 11 s; 2 its twin's 7 s (the row does not fit); 3 its own 13 s (no twin time);
    # 4-9 their twins' 5 + r s, with the twin's peak 6 and its ticket 2·r + 1
    np.testing.assert_array_equal(iteration, [10, 11, 7, 13, 9, 10, 11, 12, 13, 14])
    np.testing.assert_array_equal(off_wins, [0, 0, 1, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(peak, [8, 8, 6, 8, 6, 6, 6, 6, 6, 6])
    np.testing.assert_array_equal(ticket, [0, 2, 5, 6, 9, 11, 13, 15, 17, 19])


def test_keep_overlap_times_by_hand(monkeypatch):
    (iteration, _, off_wins, _, ticket), _ = _run(monkeypatch, KEEP_OVERLAP, 0)
    # every row its own 10 + r s, but 2 (does not fit: its twin's 7 s) and 4 (no time as it is: its twin's 9 s)
    np.testing.assert_array_equal(iteration, [10, 11, 7, 13, 9, 15, 16, 17, 18, 19])
    np.testing.assert_array_equal(off_wins, [0, 0, 1, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(ticket, [0, 2, 5, 6, 9, 10, 12, 14, 16, 18])


def test_a_search_is_the_same_with_every_version_timed(monkeypatch):
    """Llama 3 8B on 64 A100 (KEEP_TWIN: no Ampere run overlaps TP communication), its rows timed both ways from
    the first or never split: the same plans, times and peaks."""
    ctx = make_request(model="llama3-8b", gpus=64, hardware="dgx-a100-superpod").ctx
    results = []
    for split_from in (0, 10**9):
        monkeypatch.setattr(search_module, "SPLIT_FROM", split_from)
        result = search_module.search(ctx, 64, top=20)
        results.append((result.plans, result.evaluated, result.feasible, result.tp_overlap_rule))
    assert results[0] == results[1]
    assert "without --tp-comm-overlap" in results[0][3]
