"""search measures only the rows that can change its result (``search._by_family_states``: a family's larger
micro-batches are left unmeasured once a smaller one does not fit; a twin without --tp-comm-overlap is kept
where neither fits, its userbuffers only adding memory). Pruned and unpruned searches must agree number for
number: the unpruned one here measures every micro-batch of every family whose smallest one fits (what
search did before), and both results are compared whole (``SearchResult.to_json``)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.search as search_module
from planner.api import make_request
from planner.costs.estimate import peak_memory_bytes
from planner.errors import InfeasibleError
from planner.search import HEAD_BOUND, MEASURED, recipe_options, search
from planner.space.candidates import NO_PINS, Pins, candidate_grid


def _every_micro_batch(grid, idx, measure, fails, keys=None, whole=False):
    """The unpruned screening: every family measured at every micro-batch (one row of each), and where its
    smallest micro-batch fails, its other rows take that value (``HEAD_BOUND``), as search did before."""
    values, state = np.empty(len(idx)), np.full(len(idx), MEASURED, dtype=np.int8)
    if not len(idx):
        return values, state
    key = search_module._family_keys(grid, idx) if keys is None else keys
    b = grid.micro_batch[idx]
    order = np.lexsort([b, key])
    _, sub = np.unique(np.stack([key[order], b[order]]), axis=1, return_inverse=True)
    sub = sub.reshape(-1)
    first = np.flatnonzero(np.r_[True, sub[1:] != sub[:-1]])  # one row of each (family, micro-batch)
    sub_value = measure(order[first])
    fam = key[order][first]
    head = np.r_[True, fam[1:] != fam[:-1]]
    head_of = np.flatnonzero(head)[np.cumsum(head) - 1]  # each sub's family's smallest micro-batch
    bounded = ~head & fails(sub_value[head_of])
    sub_value = np.where(bounded, sub_value[head_of], sub_value)
    values[order], state[order] = sub_value[sub], np.where(bounded, HEAD_BOUND, MEASURED)[sub]
    return values, state


@contextmanager
def unpruned():
    with mock.patch.object(search_module, "_by_family_states", _every_micro_batch):
        yield


CASES = {  # small spaces that still have twins, block variants, hybrid variants and rows that do not fit
    "gpt3": ("gpt3-175b", "dgx-a100-superpod", (64, 128)),
    "mixtral": ("mixtral-8x7b", "dgx-h100-superpod", (16, 32)),
    "llama": ("llama3-8b", "dgx-h100-superpod", (8, 16)),
}


def _result(ctx, gpus, pins, **kw):
    try:
        return search(ctx, gpus, pins, **kw).to_json()
    except InfeasibleError as e:
        return str(e)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(sorted(CASES)),
    which=st.integers(0, 1),
    batch=st.sampled_from([32, 64, 128]),
    top=st.sampled_from([1, 3, 10]),
    rank=st.sampled_from([("time", "risk"), ("time", "estimate"), ("memory", "risk")]),
    tpo=st.sampled_from([None, None, True, False]),
    headroom=st.sampled_from([None, 0.2]),
)
def test_pruned_search_equals_the_unpruned_one(case, which, batch, top, rank, tpo, headroom):
    model, hardware, sizes = CASES[case]
    gpus = sizes[which]
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, global_batch=batch).ctx
    pins = Pins(tp_comm_overlap=tpo)
    kw = dict(top=top, sort=rank[0], rank_by=rank[1], memory_headroom=headroom)
    pruned = _result(ctx, gpus, pins, **kw)
    with unpruned():
        whole = _result(ctx, gpus, pins, **kw)
    assert pruned == whole


def test_deepseek_v3_pruned_search_equals_the_unpruned_one():
    """A space where many families fit at their smallest micro-batch and not at larger ones, with twins
    whose row does not fit at its smallest micro-batch while the twin does (the measured case of
    ``_Twin.smaller``)."""
    ctx = make_request(model="deepseek-v3", gpus=256, hardware="dgx-h100-superpod", global_batch=512).ctx
    pruned = _result(ctx, 256, NO_PINS, top=5)
    with unpruned():
        whole = _result(ctx, 256, NO_PINS, top=5)
    assert isinstance(pruned, dict) and pruned["feasible"] > 0
    assert pruned == whole


@pytest.mark.parametrize(
    "model,gpus,hardware", [("gpt3-175b", 64, "dgx-a100-superpod"), ("mixtral-8x7b", 32, "dgx-h100-superpod")]
)
def test_a_twin_without_tp_overlap_always_needs_less_memory(model, gpus, hardware):
    """What ``_Twin.smaller`` relies on: the same plan without --tp-comm-overlap needs strictly less memory
    (its userbuffers, [s·b/c, h] each, and the TE workspaces of 3 userbuffer streams are gone), on every
    legal row with sequence parallelism, whatever else differs."""
    ctx = make_request(model=model, gpus=gpus, hardware=hardware).ctx
    grid = candidate_grid(ctx, gpus, NO_PINS)
    grid, options = recipe_options(ctx, NO_PINS, grid)
    rows = np.flatnonzero(grid.tp_comm_overlap > 0)
    rows = rows[np.random.default_rng(0).permutation(len(rows))[:4000]]
    on = grid.take(rows)
    off = replace(on, tp_comm_overlap=np.zeros(len(rows), dtype=np.int8))
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = peak_memory_bytes(on, options.evaluating), peak_memory_bytes(off, options.evaluating)
    finite = np.isfinite(a)
    assert np.array_equal(finite, np.isfinite(b)) and finite.sum() > 1000
    assert np.all(b[finite] < a[finite])
    # the difference is at least the userbuffers of one micro-batch: 10 buffers of s·b·h 16-bit elements / c
    s, h = ctx.training.seq_len, ctx.model.hidden_size
    least = 10 * 2 * s * on.micro_batch * h / on.cp
    assert np.all((a - b)[finite] >= least[finite] * (1 - 1e-12))


def test_a_twin_whose_bound_cannot_settle_it_is_measured():
    """Where the row's family failed at its smallest micro-batch (its peak: that value) and the twin's family
    at a larger one than the twin's own (its peak: a lower bound), the twin is measured: ``smaller`` is the
    exact comparison whichever side of the twin's exact peak the row's value falls."""
    ctx = make_request(model="gpt3-175b", gpus=64).ctx
    grid, options = recipe_options(ctx, NO_PINS, candidate_grid(ctx, 64, NO_PINS))
    row = np.flatnonzero(grid.tp_comm_overlap > 0)[:1]
    twin = replace(grid.take(row), tp_comm_overlap=np.zeros(1, dtype=np.int8))
    exact = peak_memory_bytes(twin, options.evaluating)[0]
    for row_value, expected in ((exact * 1.01, True), (exact * 0.99, False)):
        pair = search_module._Twin(
            np.array([HEAD_BOUND]), np.array([search_module.MID_BOUND]), np.array([row_value]), np.array([exact * 0.5])
        )
        assert pair.smaller(twin, options)[0] == expected


def _every_twin_measured(off, row_fits, keys, ctx, capacity):
    """The twins screened like any row, whether their row fits or not (what search did before ``_twins``)."""
    _, peak, state, _ = search_module._evaluate(off, np.arange(len(off)), ctx, capacity, keys)
    return peak, state, peak <= capacity


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(sorted(CASES)),
    which=st.integers(0, 1),
    batch=st.sampled_from([32, 128]),
    rank=st.sampled_from([("time", "risk"), ("time", "estimate"), ("memory", "risk")]),
    headroom=st.sampled_from([None, 0.2]),
)
def test_twins_of_rows_that_fit_are_timed_without_measuring_them(case, which, batch, rank, headroom):
    """A twin whose row fits is timed without measuring its memory (it fits: ``_Twin.smaller``), and the
    peak of those kept is measured then: the result equals measuring every twin. Small chunks make every
    block take that path (blocks over CHUNK rows)."""
    model, hardware, sizes = CASES[case]
    gpus = sizes[which]
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, global_batch=batch).ctx
    kw = dict(top=5, sort=rank[0], rank_by=rank[1], memory_headroom=headroom)
    skipped, twins = [], search_module._twins

    def counting(off, row_fits, keys, c, capacity):
        skipped.append(int(np.sum(row_fits)))
        return twins(off, row_fits, keys, c, capacity)

    with mock.patch.object(search_module, "CHUNK", 256), mock.patch.object(search_module, "_twins", counting):
        fast = _result(ctx, gpus, NO_PINS, **kw)
        with mock.patch.object(search_module, "_twins", _every_twin_measured):
            whole = _result(ctx, gpus, NO_PINS, **kw)
    assert fast == whole
    assert not isinstance(fast, dict) or sum(skipped) > 0  # the path was taken where a plan fits


def test_a_few_plans_whose_states_no_one_reads_are_measured_in_one_call():
    """``_by_family_states(whole=True)`` (block and hybrid variants: their callers read the values alone) on at
    most ``ONE_CALL`` (family, micro-batch) pairs measures every pair in one call, where the rounds make two and
    leave the micro-batches above a failing one unmeasured; the values agree wherever both measured."""
    ctx = make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod", global_batch=64).ctx
    grid, options = recipe_options(ctx, NO_PINS, candidate_grid(ctx, 64, NO_PINS))
    keys = search_module._family_keys(grid, np.arange(len(grid)))
    families = np.unique(keys)[::7]  # whole families, each with its micro-batches: some fail above the smallest
    idx = np.flatnonzero(np.isin(keys, families))[:900]
    capacity = 70e9
    for whole, calls_expected in ((True, 1), (False, 2)):
        calls, measured = [], np.zeros(len(idx), dtype=bool)

        def measure(pos, calls=calls, measured=measured):
            calls.append(len(pos))
            measured[pos] = True
            with np.errstate(divide="ignore", invalid="ignore"):
                return peak_memory_bytes(grid.take(idx[pos]), options.evaluating)

        values, state = search_module._by_family_states(grid, idx, measure, lambda v: v > capacity, whole=whole)
        assert len(calls) == calls_expected
        if whole:
            assert measured.all() and (state == MEASURED).all()
            exact = values
        else:
            assert not measured.all() and (state != MEASURED).any()  # the rounds left some unmeasured
            np.testing.assert_array_equal(values[state == MEASURED], exact[state == MEASURED])
            assert (values[state != MEASURED] <= exact[state != MEASURED]).all()  # a bound from below


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-(2**62), 2**62), max_size=60),
    pool=st.lists(st.integers(-(2**62), 2**62), max_size=20),
    shared=st.integers(0, 10),
)
def test_found_is_isin(values, pool, shared):
    """``_twins``' family test (which twins share a family with a twin whose row fits) is ``np.isin``."""
    values = np.array(values + pool[:shared], dtype=np.int64)
    pool = np.array(pool, dtype=np.int64)
    np.testing.assert_array_equal(search_module._found(values, pool), np.isin(values, pool))


@dataclass
class _Column:
    micro_batch: np.ndarray


def _check_family_states(keys: np.ndarray, b: np.ndarray, worth: np.ndarray, capacity: float, whole: bool) -> int:
    """``_by_family_states`` on plans with families ``keys`` and micro-batches ``b``, each worth ``worth``
    (equal within a (family, micro-batch) pair), fails above ``capacity``: every plan of a family below its first
    failing micro-batch measured; a plan left unmeasured takes that first failure's value, ``HEAD_BOUND`` if it
    is the family's smallest micro-batch, else ``MID_BOUND``; a pair measured once. Returns the calls made."""
    calls, seen = [], []

    def measure(pos):
        calls.append(len(pos))
        seen.extend(zip(keys[pos].tolist(), b[pos].tolist(), strict=True))
        return worth[pos]

    values, state = search_module._by_family_states(
        _Column(b), np.arange(len(b)), measure, lambda v: v > capacity, keys, whole
    )
    assert values.dtype == float and len(values) == len(state) == len(b)
    assert len(seen) == len(set(seen))  # each pair once
    measured = set(seen)
    for family in np.unique(keys):
        rows = np.flatnonzero(keys == family)
        sizes = np.unique(b[rows])
        worth_of = {int(s): worth[rows[b[rows] == s][0]] for s in sizes}
        failing = [s for s in sizes.tolist() if (int(family), s) in measured and worth_of[s] > capacity]
        first = min(failing) if failing else None
        for r in rows:
            s = int(b[r])
            if first is None or s <= first:  # below the first failure (and it): measured
                assert (int(family), s) in measured and state[r] == MEASURED and values[r] == worth[r]
            elif (int(family), s) in measured:
                assert state[r] == MEASURED and values[r] == worth[r]
            else:
                assert values[r] == worth_of[first]
                assert state[r] == (HEAD_BOUND if first == sizes[0] else search_module.MID_BOUND)
    return len(calls)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families=st.integers(1, 12), plans=st.integers(1, 80), seed=st.integers(0, 2**32 - 1), whole=st.booleans())
def test_family_states_measure_below_the_first_failure_and_bound_above(families, plans, seed, whole):
    """Plans in any order, several of a (family, micro-batch) pair (dispatchers), worth growing with the micro-batch
    or not: the states and values as ``_by_family_states`` documents them; with ``whole`` and a few pairs, one call."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, families, plans).astype(np.int64) * 7919  # any numbering
    b = 2 ** rng.integers(0, 5, plans)
    pair_worth = rng.random((families, 5))
    worth = pair_worth[keys // 7919, np.log2(b).astype(int)]
    calls = _check_family_states(keys, b, worth, 0.5, whole)
    assert calls == 1 if whole else calls <= 2


def test_family_states_of_many_pairs_go_in_rounds_of_doubling_ranks():
    """More pairs than ``CHUNK``: after the smallest micro-batches, ranks [1, 2], [3, 6], [7, 14] ... a call each."""
    rng = np.random.default_rng(0)
    families, sizes = 1200, 16
    keys = np.repeat(np.arange(families, dtype=np.int64), sizes)
    b = np.tile(np.arange(1, sizes + 1), families)
    worth = np.repeat(rng.random(families), sizes) * b / sizes  # growing with b: each family fails from some b on
    assert len(b) > search_module.CHUNK
    assert _check_family_states(keys, b, worth, 0.3, whole=False) == 5  # ranks 0, 1-2, 3-6, 7-14, 15


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    widths=st.lists(st.sampled_from([1, 2, 3, 7, 2**20, 2**31]), min_size=1, max_size=len(search_module.FAMILY_FIELDS)),
    plans=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_family_keys_are_equal_exactly_where_the_fields_are(widths, plans, seed):
    """``_family_keys``: equal keys exactly where every field of ``FAMILY_FIELDS`` is equal, whatever the fields'
    spans (past 2**62 in all: renumbered on the way); a field of one value (shared) adds no digit."""
    rng = np.random.default_rng(seed)
    grid = candidate_grid(make_request(model="llama3-8b", gpus=8, hardware="dgx-h100-superpod").ctx, 8, NO_PINS)
    rows = rng.integers(0, len(grid), plans)
    grid = grid.take(rows)
    columns = {}
    for name, width in zip(search_module.FAMILY_FIELDS, widths, strict=False):
        columns[name] = rng.integers(-5, -5 + width, plans).astype(np.int64)
    grid = replace(grid, **columns)
    keys = search_module._family_keys(grid, np.arange(plans))
    with mock.patch.object(search_module, "TABLE_ROWS", 0):  # field by field (many rows): the same integers
        np.testing.assert_array_equal(search_module._family_keys(grid, np.arange(plans)), keys)
    table = np.stack([getattr(grid, name) for name in search_module.FAMILY_FIELDS], axis=1)
    same_fields = (table[:, None, :] == table[None, :, :]).all(axis=2)
    np.testing.assert_array_equal(keys[:, None] == keys[None, :], same_fields)


def test_family_keys_are_mixed_radix_digits():
    """Two plans differing in tp (2, 8: digit 0 or 6 of 7) and pp (1, 4: 0 or 3 of 4), every other field alike:
    tp the more significant (``FAMILY_FIELDS`` order), keys 0·4 + 0 = 0 and 6·4 + 3 = 27."""
    grid = candidate_grid(make_request(model="llama3-8b", gpus=8, hardware="dgx-h100-superpod").ctx, 8, NO_PINS)
    grid = grid.take(np.zeros(2, dtype=np.int64))
    grid = replace(grid, tp=np.array([2, 8]), pp=np.array([1, 4]))
    np.testing.assert_array_equal(search_module._family_keys(grid, np.arange(2)), [0, 27])


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 3000),
    families=st.integers(1, 50),
    span=st.sampled_from([3, 2**20, 2**40, 2**61]),
    b_in_order=st.booleans(),
)
def test_family_order_is_the_stable_sort_by_family_then_micro_batch(seed, n, families, span, b_in_order):
    """``_family_order``: None where the plans come sorted, else ``np.lexsort([b, family])`` exactly (equal plans
    as they come), by one sort of the family above the position where each family's micro-batches come in order
    (the candidate grid's), by lexsort where they do not or the family keys span too much for the shift."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, span, families)
    family = values[rng.integers(0, families, n)]
    b = 2 ** rng.integers(0, 7, n)
    if b_in_order:  # each family's micro-batches ascending as they come (ties in place)
        for f in np.unique(family):
            at = np.flatnonzero(family == f)
            b[at] = np.sort(b[at])
    order = search_module._family_order(family, b)
    expected = np.lexsort([b, family])
    if order is None:
        np.testing.assert_array_equal(expected, np.arange(n))
    else:
        np.testing.assert_array_equal(order, expected)
