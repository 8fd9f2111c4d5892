"""The progress bar on a terminal is drawn by the command's own thread at each step: a second thread (rich's
refresher) would keep the work in one process (``parallel.can_fork``), as it did for `validate --choice`,
`--regret`, sweep and calibrate on a terminal."""

from __future__ import annotations

import io
import os
import sys
import threading
import time

import numpy as np

from planner import parallel
from planner.cli import progress


def _jobs():
    """Three jobs returning (k, ran in a child); job 0 returns only once jobs 1 and 2 have ended, whichever
    process ran them (shared memory), or after 20 s: in one process it would wait the 20 s and say so."""
    parent, done = os.getpid(), parallel.shared_empty(3, np.int8, True)
    done[:] = 0

    def job(k):
        def run():
            deadline = time.monotonic() + 20
            while k == 0 and done[1:].sum() < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            done[k] = 1
            return k, os.getpid() != parent

        return run

    return [job(k) for k in range(3)]


class _Terminal(io.StringIO):
    """stderr as a terminal that keeps what is drawn (never blocks, unlike a pty nobody reads)."""

    def isatty(self) -> bool:
        return True


def test_work_under_the_progress_bar_on_a_terminal_is_shared_with_a_forked_child(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress("searching", total=3) as step:
        threads, fork = threading.active_count(), parallel.can_fork()
        out = parallel.map_jobs(_jobs(), fork, lambda k: step(f"job {k} done"))
    assert threads == 1 and fork == ((os.cpu_count() or 1) >= 2 and parallel.PROCESSES >= 2)
    where = [in_child for _, in_child in out]
    assert [k for k, _ in out] == [0, 1, 2] and where[1] == where[2] != where[0]  # two processes ran them
    assert "3/3" in terminal.getvalue() and "job" in terminal.getvalue()  # each step drawn, the last with its count
