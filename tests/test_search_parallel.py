"""search splits its blocks of whole families between two processes (``planner.parallel``): the result must be
the one a single process gives, number for number (``SearchResult.to_json`` whole), and a child that fails
must cost nothing but time. Small blocks make small spaces split, so the check runs on many cases."""

from __future__ import annotations

import os
import time
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.search as search_module
from planner import parallel
from planner.api import make_request
from planner.costs.process_memory import usable_bytes
from planner.errors import InfeasibleError
from planner.search import search
from planner.space.candidates import NO_PINS, Pins, candidate_grid

CASES = {
    "gpt3": ("gpt3-175b", "dgx-a100-superpod", (64, 128)),
    "mixtral": ("mixtral-8x7b", "dgx-h100-superpod", (16, 32)),
    "deepseek": ("deepseek-v3", "dgx-h100-superpod", (128, 256)),
}


def _searched(ctx, gpus, pins, processes, **kw):
    """(the result, or the error's text; whether any jobs were split between processes)."""
    forks = []
    run_jobs = parallel.run_jobs

    def counting(jobs, fork):
        forks.append(fork and len(jobs) > 1)
        return run_jobs(jobs, fork)

    with (
        mock.patch.object(parallel, "PROCESSES", processes),
        mock.patch.object(parallel, "run_jobs", counting),
        mock.patch.object(search_module, "BLOCK", 1024),  # several blocks even on small spaces
    ):
        try:
            return search(ctx, gpus, pins, **kw).to_json(), any(forks)
        except InfeasibleError as e:
            return str(e), any(forks)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(sorted(CASES)),
    which=st.integers(0, 1),
    batch=st.sampled_from([64, 256]),
    rank=st.sampled_from([("time", "risk"), ("time", "estimate"), ("memory", "risk")]),
    tpo=st.sampled_from([None, None, False]),
)
def test_a_search_split_between_two_processes_equals_one_process(case, which, batch, rank, tpo):
    model, hardware, sizes = CASES[case]
    gpus = sizes[which]
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, global_batch=batch).ctx
    kw = dict(top=5, sort=rank[0], rank_by=rank[1])
    split, forked = _searched(ctx, gpus, Pins(tp_comm_overlap=tpo), 2, **kw)
    alone, forked_alone = _searched(ctx, gpus, Pins(tp_comm_overlap=tpo), 1, **kw)
    assert forked == parallel.can_fork() and not forked_alone  # the two processes really ran (on POSIX)
    assert split == alone


def test_the_jobs_of_a_failed_child_are_run_again_by_the_parent():
    """Every job writes its own rows of a shared array; the ones the child runs fail there, and the parent
    runs them again: every row ends written exactly as in one process, and the parent runs no job twice."""
    parent = os.getpid()
    fork = parallel.can_fork()
    out = parallel.shared_empty(6, np.int64, fork)
    out[:] = -1
    ran_here = []

    def job(k):
        def run():
            if os.getpid() != parent:
                raise RuntimeError("the child fails")
            out[k] = 10 * k
            ran_here.append(k)

        return run

    parallel.run_jobs([job(k) for k in range(6)], fork)
    assert out.tolist() == [0, 10, 20, 30, 40, 50]
    assert sorted(ran_here) == list(range(6))


def test_a_child_writes_the_shared_rows_its_parent_reads():
    """Where the child succeeds, its rows come back through the shared array (the parent never ran them)."""
    parent, fork = os.getpid(), parallel.can_fork()
    out = parallel.shared_empty(4, float, fork)
    where = parallel.shared_empty(4, np.int64, fork)

    def job(k):
        def run():
            out[k], where[k] = k + 0.5, os.getpid()

        return run

    parallel.run_jobs([job(k) for k in range(4)], fork)
    assert out.tolist() == [0.5, 1.5, 2.5, 3.5]
    assert (where[1::2] != parent).all() == fork and (where[0::2] == parent).all()


def test_meanwhile_work_runs_while_the_parent_waits_for_a_busy_child():
    """``parallel.meanwhile``: the job runs once, in the parent, while it waits for a child still at work (here
    the child's job sleeps); without a fork, or once the block is left, it never runs (the caller does the work)."""
    fork, ran = parallel.can_fork(), []
    with parallel.meanwhile(lambda: ran.append(os.getpid())):
        parallel.run_jobs([lambda: None, lambda: time.sleep(0.5)], fork)
        parallel.run_jobs([lambda: None, lambda: time.sleep(0.5)], fork)  # once: already done
    assert ran == ([os.getpid()] if fork else [])
    with parallel.meanwhile(lambda: ran.append(0)):
        parallel.run_jobs([lambda: None, lambda: None], False)
    parallel.run_jobs([lambda: None, lambda: time.sleep(0.5)], fork)
    assert ran == ([os.getpid()] if fork else []) and not parallel._meanwhile


def test_a_forked_child_never_forks_again():
    """A job run in the child (a search inside one of validate's jobs) sees ``can_fork`` false there, so
    there are never more than two processes; the parent's answer is unchanged."""
    fork = parallel.can_fork()
    seen = parallel.shared_empty(2, np.int8, fork)

    def job(k):
        def run():
            seen[k] = parallel.can_fork()

        return run

    parallel.run_jobs([job(0), job(1)], fork)
    assert seen.tolist() == [False, False]  # the parent's share runs beside the child: no third process either
    assert parallel.can_fork() == fork


@pytest.mark.parametrize(("case", "gpus", "batch"), [("mixtral", 32, 256), ("gpt3", 64, 64)])
def test_block_variants_found_in_each_process_are_those_of_the_whole_grid(case, gpus, batch):
    """Each process finds the block-recomputation variants of its own blocks' rows (``_BlockVariants``): put
    back together they are the variants ``_block_candidates`` finds on every scored row at once, row for
    row in the same order (ties in the ranking break by position), with the same layers, times and peaks."""
    model, hardware, _ = CASES[case]
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, global_batch=batch).ctx
    capacity = usable_bytes(ctx.hardware.memory.allocatable_bytes, None)
    grid = candidate_grid(ctx, gpus, NO_PINS)
    grid, options = search_module.recipe_options(
        ctx, NO_PINS, grid.take(search_module._legal_rows(ctx, grid, NO_PINS, gpus)[0])
    )
    forks = []
    run_jobs = parallel.run_jobs

    def counting(jobs, fork):
        forks.append(fork and len(jobs) > 1)
        return run_jobs(jobs, fork)

    with mock.patch.object(parallel, "run_jobs", counting), mock.patch.object(search_module, "BLOCK", 1024):
        scored, _, split, _ = search_module._with_tp_overlap_twins(grid, options, capacity, True, True, False)
    assert any(forks) == parallel.can_fork()
    whole, _ = search_module._block_candidates(scored, capacity)
    iteration, peak, _, _ = search_module._evaluate(whole, np.arange(len(whole)), options.evaluating, capacity)
    assert len(whole) > 100
    for name in search_module.FIELDS:
        if name != "layouts":
            got, want = getattr(split.grid, name), getattr(whole, name)
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
    np.testing.assert_array_equal(split.iteration, iteration)
    np.testing.assert_array_equal(split.peak, peak)


@settings(max_examples=40, deadline=None)
@given(
    families=st.lists(st.integers(1, 300), min_size=1, max_size=80),
    size=st.integers(1, 2000),
    seed=st.integers(0, 2**16),
)
def test_family_blocks_hold_whole_families_in_row_order(families, size, seed):
    """``_family_blocks`` puts every row in exactly one block, every family (equal keys) in one block, the rows
    of a block in their order, and cuts a space larger than ``size`` near every ``size`` rows (at most a
    family's rows beyond each end)."""
    rng = np.random.default_rng(seed)
    key = rng.permutation(np.repeat(rng.choice(2**40, len(families), replace=False), families)).astype(np.int64)
    idx = np.arange(len(key)) * 3 + 1  # positions of some grid's rows
    blocks = search_module._family_blocks(None, idx, size, key)
    assert sorted(np.concatenate(blocks).tolist()) == idx.tolist()
    with mock.patch.object(search_module, "FEW_CUTS", -1):  # every cut count by the sort of rows by block
        assert [b.tolist() for b in search_module._family_blocks(None, idx, size, key)] == [b.tolist() for b in blocks]
    home = {}
    for j, block in enumerate(blocks):
        assert len(block) and np.all(np.diff(block) > 0)
        for k in np.unique(key[(block - 1) // 3]):
            assert home.setdefault(int(k), j) == j
    if len(key) <= size:
        assert len(blocks) == 1
    else:  # a block runs from one cut's family to the next's (a family may hold several cuts)
        assert max(len(b) for b in blocks) <= size + 2 * max(families)
        assert len(blocks) >= len(key) // (size + 2 * max(families))


def test_block_and_hybrid_variants_evaluated_in_one_call_are_each_evaluated_alone():
    """In one process the search defers its block variants' evaluation (``_with_tp_overlap_twins(defer=True)``: their
    grid, the same rows as evaluated at once) and evaluates them with the hybrid variants in one call of the cost
    functions (``_evaluated``): every time and peak is the one each grid gets alone, and above ``ONE_CALL`` rows
    in all each grid is evaluated alone (so each grid's micro-batches are measured as alone either way)."""
    model, hardware, _ = CASES["gpt3"]
    ctx = make_request(model=model, gpus=64, hardware=hardware, global_batch=64).ctx
    capacity = usable_bytes(ctx.hardware.memory.allocatable_bytes, None)
    grid = candidate_grid(ctx, 64, NO_PINS)
    grid, options = search_module.recipe_options(
        ctx, NO_PINS, grid.take(search_module._legal_rows(ctx, grid, NO_PINS, 64)[0])
    )
    every = np.arange(len(grid))  # each call on its own copy: the rows keep the overlap they win (in place)
    twins = search_module._with_tp_overlap_twins  # not pruned, as the search on so small a grid (``PRUNE_FROM``)
    scored, _, now, _ = twins(grid.take(every), options, capacity, True, True, prune=False)
    _, _, later, _ = twins(grid.take(every), options, capacity, True, True, prune=False, defer=True)
    assert isinstance(later, search_module.PlanGrid) and len(later) == len(now.grid) > 100  # one block: no fork
    for name in search_module.FIELDS:
        if name != "layouts":
            np.testing.assert_array_equal(getattr(later, name), getattr(now.grid, name), err_msg=name)
    hybrid = search_module.hybrid_variants(scored, ctx, NO_PINS, 64, capacity)
    assert len(hybrid) > 50 and len(later) + len(hybrid) <= search_module.ONE_CALL
    calls = []
    evaluate = search_module._evaluate

    def counting(grid, *args, **kwargs):
        calls.append(len(grid))
        return evaluate(grid, *args, **kwargs)

    for one_call in (search_module.ONE_CALL, 100):
        calls.clear()
        with mock.patch.object(search_module, "ONE_CALL", one_call):
            with mock.patch.object(search_module, "_evaluate", counting):
                together = search_module._evaluated([later, hybrid], options, capacity)
            alone = [evaluate(g, np.arange(len(g)), options.evaluating, capacity, whole=True) for g in (later, hybrid)]
        assert calls == ([len(later) + len(hybrid)] if one_call > 100 else [len(later), len(hybrid)])
        for part, g, (it, pk, _, _) in zip(together, (later, hybrid), alone, strict=True):
            assert part.grid is g
            np.testing.assert_array_equal(part.iteration, it)
            np.testing.assert_array_equal(part.peak, pk)
    np.testing.assert_array_equal(together[0].peak, now.peak)
    np.testing.assert_array_equal(together[0].iteration, now.iteration)


@pytest.mark.parametrize(("model", "gpus"), [("mixtral-8x7b", 64), ("gpt3-175b", 64)])
def test_family_keys_are_the_mixed_radix_of_every_field(model, gpus):
    """``_family_keys`` (digits summed in int32 groups, ``_mixed_radix``) gives the integers of the plain mixed radix
    in int64, one field at a time: sum_i (col_i - low_i) * prod_{j > i} width_j over the fields that vary but the
    micro-batch and the dispatcher; on every row and on rows taken (each column's own low and width there)."""
    ctx = make_request(model=model, gpus=gpus, hardware=CASES["mixtral"][1]).ctx
    grid, _ = search_module.recipe_options(ctx, NO_PINS, candidate_grid(ctx, gpus, NO_PINS))
    for idx in (np.arange(len(grid)), np.sort(np.random.default_rng(0).permutation(len(grid))[: len(grid) // 3])):
        want = np.zeros(len(idx), dtype=np.int64)
        for name in search_module.FAMILY_FIELDS:
            col = np.asarray(getattr(grid, name))[idx].astype(np.int64)
            want = want * (col.max() - col.min() + 1) + (col - col.min())
        got = search_module._family_keys(grid, idx)
        assert got.dtype == np.int64 and np.array_equal(got, want)
        if len(idx) == len(grid):  # None: every row, in order
            assert np.array_equal(search_module._family_keys(grid, None), want)
