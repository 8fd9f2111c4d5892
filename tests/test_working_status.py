"""A command at work in silence on a terminal says so on stderr within a second ("megaplan sweep: working…",
planner.cli.status), erased before anything else is written and when it ends; nothing when stderr is not a
terminal; a progress bar replaces it (fresh user trial: no command may seem to hang for 2 s)."""

from __future__ import annotations

import io
import os
import signal
import sys
import time

import click
import pytest

from planner import parallel
from planner.cli import progress, status
from planner.cli.held import notes_held


def _busy(seconds: float) -> None:
    """Work without a word for ``seconds`` (the handler runs between bytecodes, as in a search)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


def _read(fd: int) -> str:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode()


class _Pty:
    """stderr as a terminal (a pseudo-terminal's slave end) whose screen bytes the test reads at the master."""

    def __init__(self):
        self.master, self.slave = os.openpty()
        self.stream = io.TextIOWrapper(io.FileIO(self.slave, "w", closefd=False), encoding="utf-8", line_buffering=True)

    def screen(self) -> str:
        self.stream.flush()
        return _read(self.master).replace("\r\n", "\n")

    def close(self):
        self.stream.close()
        os.close(self.slave), os.close(self.master)


@pytest.fixture
def terminal(monkeypatch):
    """A pseudo-terminal the test sets as stderr itself (pytest sets its own between a fixture and the test)."""
    pty = _Pty()
    monkeypatch.setattr(status, "DELAY_S", 0.05)
    monkeypatch.setattr(status, "TICK_S", 0.02)
    yield pty
    pty.close()


def test_the_line_is_drawn_over_itself_and_erased_before_anything_else_is_written():
    read_fd, write_fd = os.pipe()
    clock = iter([10.0, 11.25, 12.5, 13.0, 13.5, 14.5, 20.0]).__next__  # made, drawn twice, written to, ...
    line = status.Status("sweep", write_fd, 80, clock=clock)
    try:
        _drawn_then_erased(line, read_fd)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)  # ``wrote`` armed the timer with no handler set
    narrow = status.Status("validate", write_fd, 20, frames="|/", clock=iter([0.0, 5.0]).__next__)
    narrow.tick()
    assert _read(read_fd) == "\r| megaplan validate"  # never wider than the terminal (a wrapped line stays)
    os.close(read_fd), os.close(write_fd)


def _drawn_then_erased(line: status.Status, read_fd: int) -> None:
    line.tick(), line.tick()
    assert _read(read_fd) == "\r⠋ megaplan sweep: working… 1.2 s\r⠙ megaplan sweep: working… 2.5 s"
    line.wrote("the output\n")  # the line goes first, its width in spaces, the cursor back at its start
    assert _read(read_fd) == "\r" + " " * len("⠙ megaplan sweep: working… 2.5 s") + "\r" and line.drawn == 0
    line.tick()  # less than DELAY_S after it (a signal that arrived just before the write)
    assert _read(read_fd) == ""
    line.wrote("no newline yet")  # a line left open by the command is not drawn over
    line.quiet_until = 0.0
    line.tick()
    assert _read(read_fd) == "" and line.line_open


def test_a_silent_command_on_a_terminal_says_it_is_working_and_leaves_no_trace(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal.stream)
    monkeypatch.setattr(sys, "stdout", terminal.stream)  # the output to the same terminal
    with notes_held(), status.working(["sweep", "--model", "gpt3-175b"]):
        _busy(0.4)
        assert signal.getsignal(signal.SIGALRM) == status._current.tick
        click.echo("the table")  # through the streams the CLI writes through: the line goes first
        _busy(0.3)
    screen = terminal.screen()
    assert "⠋ megaplan sweep: working… 0." in screen
    before, after = screen.split("the table\n")
    assert before.endswith("\r" + " " * len("⠋ megaplan sweep: working… 0.0 s") + "\r")  # erased, then the table
    assert "working…" in after and after.endswith(" \r")  # back after more silence, erased at the end
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_nothing_is_drawn_where_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(status, "DELAY_S", 0.01)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with status.working(["validate"]):
        assert status._current is None and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
        _busy(0.1)
    assert err.getvalue() == ""


def test_a_progress_bar_replaces_the_line_while_it_runs(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal.stream)
    with notes_held(), status.working(["validate", "--choice"]):
        with progress("searching each tuned recipe", total=2) as step:
            before = terminal.screen()  # the line until the bar is drawn (rich's import may take a while)
            _busy(0.3)
            step("one")
            _busy(0.3)
            shown = terminal.screen()
            step("two")
    assert "searching each tuned recipe" in before + shown and "1/2" in shown and "working…" not in shown


def test_jobs_shared_with_a_forked_child_give_their_results_under_the_line(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal.stream)
    parent = os.getpid()
    jobs = [lambda k=k: (time.sleep(0.05), k, os.getpid() != parent)[1:] for k in range(6)]
    with notes_held(), status.working(["validate"]):
        out = parallel.map_jobs(jobs, parallel.can_fork())  # the parent's waits, interrupted, go on
    assert [k for k, _ in out] == list(range(6))
    assert "working…" in terminal.screen()
