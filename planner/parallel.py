"""Independent jobs run in two processes: the search's blocks of whole families (``search._with_tp_overlap_twins``),
and (``map_jobs``: jobs that return their results) validate's plan evaluations, searches and memory rows (``later``:
a job that joins the next queue).

Each job writes its results only into rows of arrays no other job writes (``shared_empty``: anonymous
shared memory, which a forked child writes and its parent reads), so splitting the jobs between a
forked child and the parent gives the very numbers running them one after the other would: the same
calls on the same rows. In ``run_jobs`` the child runs every second job (the blocks' costs vary along the
family order, so alternating balances them); in ``map_jobs`` both processes take the next job from a shared
queue as they are free (validate's searches and evaluations differ a lot in cost). Where the child fails,
the parent runs its jobs again.

Forking only happens where it is safe and pays: a POSIX system with at least two CPUs, a process with
no other thread (forking one with threads can deadlock the child on a lock another thread held), and
at least two jobs. The child is reaped before the parent goes on, so the parent's resource usage
(``getrusage(RUSAGE_CHILDREN)``, ``wait4``) counts its CPU time and its peak resident memory.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import mmap
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence

import numpy as np

PROCESSES = 2  # the most processes the jobs are split over (the parent and one forked child)
_in_child = False  # set in a forked child: its jobs (a search inside validate's) run in it, never fork again
_beside_a_child = 0  # > 0 while this process runs its share of jobs beside a forked child (run_jobs, map_jobs)


def can_fork() -> bool:
    """Whether ``run_jobs`` would split the jobs: fork exists, two CPUs or more, no thread but this one, and
    this process is neither a forked child nor running jobs beside one (a search inside one of validate's
    jobs runs where the job runs: two processes at most, whatever calls what)."""
    if _in_child or _beside_a_child or PROCESSES < 2 or not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        return False
    return threading.active_count() == 1


def _child() -> None:
    global _in_child
    _in_child = True


@contextlib.contextmanager
def _beside_child():
    """This process's share of the jobs while a forked child runs the rest: ``can_fork`` is false meanwhile."""
    global _beside_a_child
    _beside_a_child += 1
    try:
        yield
    finally:
        _beside_a_child -= 1


def shared_empty(n: int, dtype, shared: bool) -> np.ndarray:
    """An uninitialised array of n values; in anonymous shared memory (``shared``) when a forked child
    is to write it, an ordinary one otherwise."""
    if not shared or n == 0:
        return np.empty(n, dtype=dtype)
    size = n * np.dtype(dtype).itemsize
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=n)


def run_jobs(jobs: Sequence[Callable[[], None]], fork: bool) -> None:
    """Runs every job; with ``fork`` (``can_fork``; the jobs write only shared arrays, each its own rows)
    every second one in a forked child, the rest here, then waits for the child. A child that fails
    (exit status not 0) has its jobs run here again."""
    if not fork or len(jobs) < 2:
        for job in jobs:
            job()
        return
    mine, theirs = jobs[0::2], jobs[1::2]
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's stack, never flushes the parent's buffers
        status = 1
        try:
            _child()
            for job in theirs:
                job()
            status = 0
        finally:
            os._exit(status)
    try:
        with _beside_child():
            for job in mine:
                job()
    except BaseException:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        raise
    status = _waited(pid)
    if status != 0:
        for job in theirs:
            job()


_meanwhile: list[Callable[[], None]] = []  # work this process does later anyway (``meanwhile``), not yet done


@contextlib.contextmanager
def meanwhile(job: Callable[[], None]):
    """Within the block, ``job`` (work this process would do after the block anyway: the CLI imports the modules
    that draw its table) runs once while ``run_jobs`` waits for a forked child still at work, in the time this
    process would idle (DeepSeek-V3 / 1024 H100: the child's blocks take longer than the parent's); where no such
    wait comes, it does not run (the caller does the work after the block, as it would have). Its failure is
    left to the caller's own run of it."""
    _meanwhile.append(job)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _meanwhile.remove(job)


def _waited(pid: int) -> int:
    """The exit status of child ``pid``, once it ends; while it still runs, the ``meanwhile`` jobs first."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        return status
    while _meanwhile:
        with contextlib.suppress(Exception):
            _meanwhile.pop(0)()
    return os.waitpid(pid, 0)[1]


def map_jobs(jobs: Sequence[Callable[[], object]], fork: bool, step=None, costs: Sequence[float] | None = None) -> list:
    """Every job's result, in the jobs' order; ``step(i)`` (if given) as job i ends, the child's as this process
    hears of them. With ``fork`` (``can_fork``) the jobs are shared with a forked child through a queue: each
    process takes the next job as it is free (``costs``: each job's expected cost, the dearest taken first;
    else in order), so one long job does not leave the other process idle; the child sends its results back
    pickled through a pipe (the jobs must return what pickle can carry, and must not rely on state they leave
    behind: the child's is lost). Whichever process runs a job, it runs the same calls on the same inputs: the
    same numbers. The jobs a failed child took (exit status not 0, or results that do not read back) run here."""
    step = step or (lambda i: None)
    if not fork or len(jobs) < 2:
        return [_stepped(job, i, step) for i, job in enumerate(jobs)]
    if len(jobs) > QUEUE_JOBS:  # runs of consecutive jobs share the queue instead
        return _in_runs(jobs, step, costs)
    if _later:  # the jobs started with ``later`` join this queue, first: the dearest, and not yet waited for
        mine, extra = len(jobs), [*_later]
        _later.clear()
        first = None if costs is None else [float("inf")] * len(extra) + list(costs)
        every = map_jobs(
            [*(x.job for x in extra), *jobs], fork, lambda i: i >= len(extra) and step(i - len(extra)), first
        )
        for x, value in zip(extra, every, strict=False):
            x.value, x.done = value, True
        return every[len(extra) :][:mine]
    order = sorted(range(len(jobs)), key=lambda i: -costs[i]) if costs is not None else range(len(jobs))
    queue = _job_queue(order)
    read_fd, write_fd = os.pipe()
    done_fd, tell_fd = os.pipe()  # the child's word on each job it ended, for ``step``
    gc.freeze()  # the objects so far stay out of the collector's scans: neither process touches (copies) their pages
    pid = os.fork()
    gc.unfreeze() if pid else None
    if pid == 0:  # the child: never returns into the parent's stack, never flushes the parent's buffers
        _child_jobs(jobs, queue, (read_fd, done_fd), (write_fd, tell_fd))
    os.close(write_fd), os.close(tell_fd)
    os.set_blocking(done_fd, False)
    out, told = {}, _Told(done_fd, step)
    try:
        with _beside_child():
            for i in iter(lambda: _next_job(queue), None):
                out[i] = _stepped(jobs[i], i, step)
                told.hear()
    except BaseException:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        told.close(), os.close(read_fd)
        raise
    finally:
        os.close(queue)
    told.hear(until_closed=True)  # the child closes it before it sends its results
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()  # the child may block on a full pipe until this reads it
    _, status = os.waitpid(pid, 0)
    try:
        got = pickle.loads(data) if status == 0 else {}
    except Exception:
        got = {}
    out.update(got if isinstance(got, dict) else {})
    for i in range(len(jobs)):  # the jobs of a failed child
        if i not in out:
            out[i] = jobs[i]() if i in told.heard else _stepped(jobs[i], i, step)
    return [out[i] for i in range(len(jobs))]


QUEUE_JOBS = 1_000  # jobs in the queue at most: 4 bytes each, within any pipe's buffer (written before anyone reads)
_INDEX = 4  # bytes per job index in the queue and on the child's progress pipe


def _in_runs(jobs, step, costs) -> list:
    """``map_jobs`` of more than QUEUE_JOBS jobs: QUEUE_JOBS runs of consecutive jobs, each run one job of the queue."""
    size = -(-len(jobs) // QUEUE_JOBS)
    runs = [range(start, min(start + size, len(jobs))) for start in range(0, len(jobs), size)]
    parts = map_jobs(
        [functools.partial(_run_of, jobs, run) for run in runs],
        True,
        lambda k: [step(i) for i in runs[k]],
        None if costs is None else [sum(costs[i] for i in run) for run in runs],
    )
    return [result for part in parts for result in part]


def _run_of(jobs, run: range) -> list:
    return [jobs[i]() for i in run]


def _stepped(job, i: int, step):
    result = job()
    step(i)
    return result


def _job_queue(order) -> int:
    """A pipe holding each job's index (in ``order``), its writing end closed: the read end, from which both
    processes take jobs. A read of 4 bytes from a pipe is atomic against the other reader (the kernel's pipe
    lock), and every index is written before the fork, so each job is taken once; at the end a read gives
    nothing (no writer left)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"".join(i.to_bytes(_INDEX, "little") for i in order))
    os.close(write_fd)
    return read_fd


def _next_job(queue: int) -> int | None:
    data = os.read(queue, _INDEX)
    return int.from_bytes(data, "little") if len(data) == _INDEX else None


def _child_jobs(jobs, queue: int, unused: tuple[int, int], ends: tuple[int, int]) -> None:
    """The forked child of ``map_jobs``: takes jobs from the queue until none is left, saying on ``tell`` which
    it ended, then sends {index: result} through ``pipe`` and exits (never returning into the parent's stack)."""
    status = 1
    try:
        _child()
        for fd in unused:
            os.close(fd)
        pipe, tell = ends
        results = {}
        for i in iter(lambda: _next_job(queue), None):
            results[i] = jobs[i]()
            os.write(tell, i.to_bytes(_INDEX, "little"))
        os.close(tell)
        with os.fdopen(pipe, "wb") as out:
            pickle.dump(results, out, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    finally:
        os._exit(status)


class _Told:
    """The indices of the jobs the child says it ended, read from ``fd`` (not blocking), each passed to ``step``."""

    def __init__(self, fd: int, step):
        self.fd, self.step, self.heard, self._partial = fd, step, set(), b""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def hear(self, until_closed: bool = False) -> None:
        if self.fd is None:
            return
        if until_closed:
            os.set_blocking(self.fd, True)
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            if not data:  # the child closed it (or ended)
                return self.close()
            data, self._partial = self._partial + data, b""
            whole = len(data) - len(data) % _INDEX
            data, self._partial = data[:whole], data[whole:]
            for at in range(0, whole, _INDEX):
                i = int.from_bytes(data[at : at + _INDEX], "little")
                self.heard.add(i)
                self.step(i)


_later: list[_Later] = []  # jobs started with ``later``, not yet run: the next ``map_jobs`` that forks takes them


class _Later:
    """A job ``later`` started: its value once a ``map_jobs`` ran it (either process), else run here when asked."""

    def __init__(self, job: Callable[[], object]):
        self.job, self.value, self.done = job, None, False

    def __call__(self) -> object:
        if not self.done:
            if self in _later:
                _later.remove(self)
            self.value, self.done = self.job(), True
        return self.value


def later(job: Callable[[], object]) -> Callable[[], object]:
    """``job`` to run as one more job of the next ``map_jobs`` that forks (the first of its queue), in whichever of
    the two processes takes it; returns the function that gives its result, running the job here if no such
    queue ran it before. Two processes at most: validate's memory rows, forked on their own beside its searches'
    and evaluations' ``map_jobs``, made three on two CPUs."""
    pending = _Later(job)
    _later.append(pending)
    return pending
