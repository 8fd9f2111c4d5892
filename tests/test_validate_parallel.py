"""validate splits its plan evaluations, its searches and its memory rows between two processes
(``parallel.map_jobs``): every result must be the one a single process gives, in the same order, and a child
that fails must cost nothing but time."""

from __future__ import annotations

import os
import time
from unittest import mock

import numpy as np
import pytest

from planner import parallel
from planner.fidelity import validate as val
from planner.fidelity.memory import load_memory_runs, validate_memory
from planner.fidelity.runs import load_runs


def test_map_jobs_returns_every_result_in_the_jobs_order_each_job_stepped_once():
    parent = os.getpid()
    jobs = [lambda k=k: (k, k * k, os.getpid() != parent) for k in range(7)]
    steps: list[int] = []
    out = parallel.map_jobs(jobs, parallel.can_fork(), steps.append)
    assert [(k, sq) for k, sq, _ in out] == [(k, k * k) for k in range(7)]
    assert sorted(steps) == list(range(7))  # the child's jobs too, as the parent hears of them
    assert parallel.map_jobs(jobs, False) == [(k, k * k, False) for k in range(7)]


def _waiting_jobs(n: int, waits: int):
    """n jobs returning (k, ran in a child); job ``waits`` returns only once every other job has ended (in
    shared memory, so whichever process runs them), or after 20 s."""
    parent, done = os.getpid(), parallel.shared_empty(n, np.int8, True)
    done[:] = 0

    def job(k):
        def run():
            deadline = time.monotonic() + 20
            while k == waits and done.sum() < n - 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            done[k] = 1
            return k, os.getpid() != parent

        return run

    return [job(k) for k in range(n)]


def test_map_jobs_shares_a_queue_the_dearest_job_first_so_one_long_job_does_not_hold_up_the_rest():
    if not parallel.can_fork():
        pytest.skip("one process here: nothing to share")
    steps: list[int] = []
    costs = [1.0, 1.0, 1.0, 5.0, 1.0, 1.0]  # job 3 is taken first, and waits for all the others
    out = parallel.map_jobs(_waiting_jobs(6, 3), True, steps.append, costs)
    assert [k for k, _ in out] == list(range(6)) and sorted(steps) == list(range(6))
    where = [in_child for _, in_child in out]
    assert all(where[k] != where[3] for k in range(6) if k != 3)  # the other process ran every other job


def test_map_jobs_runs_the_jobs_of_a_failed_child_again_here():
    parent, ran_here = os.getpid(), []

    def job(k):
        def run():
            if os.getpid() != parent:
                os._exit(3)  # the child dies without a word
            ran_here.append(k)
            return np.full(2, k)

        return run

    out = parallel.map_jobs([job(k) for k in range(5)], parallel.can_fork())
    assert [list(a) for a in out] == [[k, k] for k in range(5)]
    assert sorted(ran_here) == list(range(5)) and len(ran_here) == 5  # each job once here: none twice


def _alone(fn):
    """``fn()`` with every job in this process (``parallel.PROCESSES`` = 1)."""
    with mock.patch.object(parallel, "PROCESSES", 1):
        return fn()


def test_evaluations_split_between_two_processes_equal_one_process():
    runs = load_runs()[:60]
    reqs = [val.prepared(r) for r in runs]
    layers = [r.metric.startswith("layer") for r in runs]
    assert len(val.shared_contexts(reqs, layers)) >= val.FORK_GROUPS  # enough grids to split
    forks = []
    map_jobs = parallel.map_jobs

    def counting(jobs, fork):
        forks.append(fork)
        return map_jobs(jobs, fork)

    with mock.patch.object(parallel, "map_jobs", counting):
        split = val.evaluations(reqs, layers)
    alone = _alone(lambda: val.evaluations(reqs, layers))
    assert forks == [parallel.can_fork()]
    for a, b in zip(split, alone, strict=True):
        a, b = (a, b) if isinstance(a, dict) else (vars(a), vars(b))
        for name in a:
            x, y = a[name], b[name]
            for key in x if isinstance(x, dict) else [None]:
                u, v = (x[key], y[key]) if key is not None else (x, y)
                assert (u is None and v is None) or np.array_equal(u, v, equal_nan=True), name


def test_the_searches_and_the_memory_rows_split_equal_one_process():
    runs = [r for r in load_runs() if r.searched][:6]
    keys = [(r.id.split(":")[0], r.hardware, val._ReqKey(r.request)) for r in runs]
    for k in keys:
        val._PUBLISHED.pop(k, None)
    val.search_published(runs)
    split = [val._PUBLISHED[k] for k in keys]
    for k in keys:
        val._PUBLISHED.pop(k, None)
    alone = _alone(lambda: [val._published_plans(*k) for k in keys])
    assert len(split) == len(alone) and all(len(p) for p in split)
    assert split == alone
    memory_runs = load_memory_runs()[:6]
    assert validate_memory(memory_runs) == _alone(lambda: validate_memory(memory_runs))


def test_the_tuned_recipes_searched_in_two_processes_equal_one_process():
    from planner.fidelity.choice import CHOICE_TEST, validate_choice

    steps = []
    split = validate_choice(CHOICE_TEST, step=steps.append)
    assert split == _alone(lambda: validate_choice(CHOICE_TEST))
    assert sorted(steps) == sorted(f"searched {i}" for i in CHOICE_TEST)  # every recipe's step, as each ends


def test_the_mixture_of_experts_recipes_are_searched_first():
    from planner.fidelity.choice import CHOICE_RECIPES, recipe_cost, recipe_runs

    costs = {run.id: recipe_cost(run) for run in recipe_runs(CHOICE_RECIPES)}
    assert costs["MB-26.04.01-H100-QWEN3-235B-256"] == costs["MB-25.09-H100-DSV3-1024"] == 1.0
    assert costs["DGXC-v25.04-H100-Llama3-8B-fp8-n8"] == costs["DGXC-v25.05.05-H100-Llama3.1-405B-bf16-n512"] == 0.0


def test_a_later_job_joins_the_next_queue_first_and_two_processes_run_everything():
    """validate's memory rows were forked on their own beside map_jobs' child: three processes on two CPUs."""
    parent, forks, real_fork = os.getpid(), [], os.fork
    later = parallel.later(lambda: (os.getpid() != parent, [1.5, 2.5]))
    jobs = [lambda k=k: (k, os.getpid() != parent) for k in range(5)]
    with mock.patch.object(os, "fork", lambda: forks.append(1) or real_fork()):
        steps: list[int] = []
        out = parallel.map_jobs(jobs, parallel.can_fork(), steps.append, [1.0] * 5)
    assert [k for k, _ in out] == list(range(5)) and sorted(steps) == list(range(5))  # the queue's own jobs alone
    assert len(forks) == (1 if parallel.can_fork() else 0) and later.done  # one child took jobs of both
    assert later()[1] == [1.5, 2.5] and parallel._later == []
    alone = parallel.later(lambda: "here")  # no queue ran it: it runs where its result is asked, once
    assert parallel.map_jobs([lambda: 1], parallel.can_fork()) == [1] and not alone.done
    assert alone() == "here" and alone.done and parallel._later == []


def test_a_later_job_the_child_fails_on_runs_here():
    parent, ran_here = os.getpid(), []

    def dies_in_child():
        if os.getpid() != parent:
            os._exit(3)
        ran_here.append(1)
        return "here"

    later = parallel.later(dies_in_child)
    assert parallel.map_jobs([lambda: 1, lambda: 2], parallel.can_fork(), costs=[0.0, 0.0]) == [1, 2]
    assert later() == "here" and ran_here == [1]


def test_the_memory_rows_read_in_another_process_make_the_same_validation():
    from planner.fidelity.memory import memory_rows

    runs = load_memory_runs()[:4]
    rows = parallel.later(lambda: memory_rows(runs, fork=False))
    parallel.map_jobs([lambda: 1, lambda: 2], parallel.can_fork())
    assert validate_memory(runs, rows=rows()) == _alone(lambda: validate_memory(runs))


def test_the_memory_rows_and_evidence_settings_from_another_process_make_the_same_validation(monkeypatch):
    from planner.fidelity import memory
    from planner.fidelity.evidence import settings_per_preset

    runs = load_memory_runs()[:3]
    monkeypatch.setattr(memory, "load_memory_runs", lambda: runs)
    other = parallel.later(memory.rows_and_settings)
    parallel.map_jobs([lambda: 1, lambda: 2], parallel.can_fork())
    rows, settings = other()
    assert settings == settings_per_preset() and settings["dgx-h100-superpod"]["rows"] > 50
    assert validate_memory(runs, rows=rows) == _alone(lambda: validate_memory(runs))
    given = {"dgx-h100-superpod": {"dense_settings": 1, "moe_settings": 2, "rows": 3}}  # validate uses what it is given
    summary = val.validate(settings=lambda: given)["summary"]
    assert summary["settings_by_hardware"] == given and list(summary["factors_by_hardware"]) == ["dgx-h100-superpod"]


def test_the_runs_are_read_once_and_each_request_keyed_once():
    first, again = load_runs(), load_runs()
    assert first == again and first is not again and all(a is b for a, b in zip(first, again, strict=True))
    first.pop()  # a caller's list is its own
    assert len(load_runs()) == len(again)
    run = next(r for r in again if r.searched)
    assert val._req_key(run.request) is val._req_key(run.request) == val._ReqKey(run.request)
    assert val.plan_request(run) is val.plan_request(run)  # the best published plan, found once


def test_more_jobs_than_the_queue_holds_share_it_in_runs_of_consecutive_jobs(monkeypatch):
    monkeypatch.setattr(parallel, "QUEUE_JOBS", 4)
    parent, steps = os.getpid(), []
    jobs = [lambda k=k: (k, os.getpid() != parent) for k in range(11)]
    out = parallel.map_jobs(jobs, parallel.can_fork(), steps.append, [float(k) for k in range(11)])
    assert [k for k, _ in out] == list(range(11)) and sorted(steps) == list(range(11))


def test_a_job_run_beside_the_forked_child_never_forks_again():
    """The parent's share of map_jobs' and run_jobs' jobs runs beside the child: a search inside one of them
    (validate --choice, --regret, the published plans) must not fork a third process onto two CPUs."""
    if not parallel.can_fork():
        pytest.skip("one process here: nothing to share")
    waiting = _waiting_jobs(6, 0)  # job 0 ends only after the others: each process runs some of the jobs
    seen = parallel.shared_empty(6, np.int8, True)

    def job(k):
        def run():
            seen[k] = parallel.can_fork()
            return waiting[k]()

        return run

    out = parallel.map_jobs([job(k) for k in range(6)], True)
    assert {in_child for _, in_child in out} == {False, True} and list(seen) == [0] * 6
    seen[:] = -1

    def saw(k):
        def run():
            seen[k] = parallel.can_fork()

        return run

    parallel.run_jobs([saw(k) for k in range(4)], True)  # jobs 0 and 2 here, 1 and 3 in the child
    assert list(seen[:4]) == [0, 0, 0, 0] and parallel.can_fork()  # and this process may fork again after


def test_a_search_inside_a_job_run_beside_the_child_forks_nothing(monkeypatch):
    from planner import api
    from planner.search import search

    if not parallel.can_fork():
        pytest.skip("one process here: nothing to share")
    parent, forks = os.getpid(), []
    fork = os.fork

    def counted():
        forks.append(os.getpid())
        return fork()

    monkeypatch.setattr(parallel.os, "fork", counted)
    req = api.make_request(model="gpt3-175b", gpus=1024)
    alone = search(req.ctx, req.gpus, top=5).plans
    assert forks == [parent]  # this search alone splits its blocks between two processes
    forks.clear()
    out = parallel.map_jobs([lambda: search(req.ctx, req.gpus, top=5).plans for _ in range(3)], True)
    assert forks == [parent]  # map_jobs' own child; the searches in this process ran in it alone
    assert out == [alone] * 3
