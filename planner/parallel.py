"""Independent jobs run in two processes: the search's blocks of whole families (``search._with_tp_overlap_twins``),
and (``map_jobs``: jobs that return their results) validate's plan evaluations, searches and memory rows.

Each job writes its results only into rows of arrays no other job writes (``shared_empty``: anonymous
shared memory, which a forked child writes and its parent reads), so splitting the jobs between a
forked child and the parent gives the very numbers running them one after the other would: the same
calls on the same rows. The child runs every second job (the blocks' costs vary along the family
order, so alternating balances them) and exits; where it fails, the parent runs its jobs again.

Forking only happens where it is safe and pays: a POSIX system with at least two CPUs, a process with
no other thread (forking one with threads can deadlock the child on a lock another thread held), and
at least two jobs. The child is reaped before the parent goes on, so the parent's resource usage
(``getrusage(RUSAGE_CHILDREN)``, ``wait4``) counts its CPU time and its peak resident memory.
"""

from __future__ import annotations

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


def can_fork() -> bool:
    """Whether ``run_jobs`` would split the jobs: fork exists, two CPUs or more, no thread but this one, and
    this process is not itself a forked child (two processes at most, whatever calls what)."""
    if _in_child or PROCESSES < 2 or not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        return False
    return threading.active_count() == 1


def _child() -> None:
    global _in_child
    _in_child = True


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
        for job in mine:
            job()
    except BaseException:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if status != 0:
        for job in theirs:
            job()


def map_jobs(jobs: Sequence[Callable[[], object]], fork: bool) -> list:
    """Every job's result, in the jobs' order; with ``fork`` (``can_fork``) every second job runs in a forked
    child, which sends its results back pickled through a pipe (the jobs must return what pickle can carry,
    and must not rely on state they leave behind: the child's is lost). A child that fails (exit status not 0,
    or results that do not read back) has its jobs run here again."""
    if not fork or len(jobs) < 2:
        return [job() for job in jobs]
    mine, theirs = jobs[0::2], jobs[1::2]
    read_fd, write_fd = os.pipe()
    gc.freeze()  # the objects so far stay out of the collector's scans: neither process touches (copies) their pages
    pid = os.fork()
    gc.unfreeze() if pid else None
    if pid == 0:  # the child: never returns into the parent's stack, never flushes the parent's buffers
        status = 1
        try:
            _child()
            os.close(read_fd)
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump([job() for job in theirs], pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        try:
            ours = [job() for job in mine]
        except BaseException:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            raise
        data = pipe.read()  # the child may block on a full pipe until this reads it
    _, status = os.waitpid(pid, 0)
    try:
        got = pickle.loads(data) if status == 0 else None
    except Exception:
        got = None
    if not isinstance(got, list) or len(got) != len(theirs):
        got = [job() for job in theirs]
    out = [None] * len(jobs)
    out[0::2], out[1::2] = ours, got
    return out


def start_job(job: Callable[[], object], fork: bool) -> Callable[[], object]:
    """``job`` started now in a forked child (``fork``: ``can_fork``) while this process goes on; returns the
    function that gives its result (pickled back through a pipe, as ``map_jobs``), waiting for the child.
    Without ``fork``, or where the child fails, that function runs the job here."""
    if not fork:
        return job
    read_fd, write_fd = os.pipe()
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's stack, never flushes the parent's buffers
        status = 1
        try:
            os.close(read_fd)
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(job(), pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    gc.unfreeze()
    os.close(write_fd)

    def result():
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        try:
            return pickle.loads(data) if status == 0 else job()
        except Exception:
            return job()

    return result
