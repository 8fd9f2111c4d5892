"""A command at work in silence on a terminal says so: after ``DELAY_S`` with nothing written, one line on
stderr ("⠹ megaplan sweep: working… 2.3 s"), redrawn every ``TICK_S`` and erased before anything else is
written (the command's output, a note, a warning) and when the command ends; a progress bar
(``planner.cli.progress``) replaces it while it runs. Nothing at all when stderr is not a terminal: a pipe
or a file gets exactly what it got before (fresh user trial: no command may seem to hang for 2 s).

The line is drawn from SIGALRM (``signal.setitimer``), not by a thread: a process with a second thread is
not forked (``planner.parallel.can_fork``), and a forked child inherits no interval timer. It is written to
the terminal's descriptor directly (``os.write``): a handler must not enter a stream the command may be in
the middle of writing."""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager

DELAY_S = 1.0  # silence before the line appears
TICK_S = 0.1  # its redraws
FRAMES, ASCII_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏", "|/-\\"  # rich's "dots" spinner; where the terminal cannot show it


class Status:
    """The line of one command (``label``) on the terminal descriptor ``fd`` of ``columns`` columns."""

    def __init__(self, label: str, fd: int, columns: int, frames: str = FRAMES, clock=time.monotonic):
        self.label, self.fd, self.columns, self.frames, self.clock = label, fd, columns, frames, clock
        self.started, self.drawn, self.frame, self.paused, self.line_open = clock(), 0, 0, 0, False
        self.quiet_until = self.started + DELAY_S

    def text(self, now: float) -> str:
        spin = self.frames[self.frame % len(self.frames)]
        return f"{spin} megaplan {self.label}: working… {now - self.started:.1f} s"[: self.columns - 1]

    def tick(self, *_) -> None:
        """Draw the line (over the last one), unless paused, the terminal's cursor is not at a line's start, or
        something was written less than ``DELAY_S`` ago (a signal that arrived just before it was written)."""
        now = self.clock()
        if self.paused or self.line_open or now < self.quiet_until:
            return
        text = self.text(now)
        self.frame += 1
        self._write("\r" + text + " " * max(self.drawn - len(text), 0))
        self.drawn = max(self.drawn, len(text))

    def clear(self) -> None:
        """Erase the line, if drawn (the cursor back at the start of the line it took)."""
        if self.drawn:
            self._write("\r" + " " * self.drawn + "\r")
            self.drawn = 0

    def wrote(self, text) -> None:
        """Something else is about to be written: the line goes, and comes back only after ``DELAY_S`` more of
        silence (``text``: what is written; after a line left open the line is not drawn)."""
        self.quiet_until = self.clock() + DELAY_S  # first: a signal taken from here on draws nothing
        self.clear()
        if text:
            self.line_open = not (text.endswith("\n") if isinstance(text, str) else text.endswith(b"\n"))
        signal.setitimer(signal.ITIMER_REAL, DELAY_S, TICK_S)

    def _write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode(sys.stderr.encoding or "utf-8", errors="replace"))
        except (OSError, ValueError):
            pass


_current: Status | None = None


def wrote(text) -> None:
    """``Status.wrote`` of the command's line, if it has one (called on every write to stdout or stderr)."""
    if _current is not None:
        _current.wrote(text)


@contextmanager
def paused():
    """No line while a progress bar is drawn (its lines are its own); the delay starts again after it."""
    if _current is None:
        yield
        return
    _current.clear()
    _current.paused += 1
    try:
        yield
    finally:
        _current.paused -= 1
        _current.wrote("")


def _terminal(stream) -> int | None:
    """The descriptor of ``stream`` where it is a terminal, else None."""
    try:
        return stream.fileno() if stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


@contextmanager
def working(args: list[str]):
    """The line for the command of ``args`` (its first word that is not an option) while it runs, where stderr
    is a terminal and the main thread can take SIGALRM; else nothing."""
    global _current
    import threading

    fd = _terminal(sys.stderr)
    main = threading.current_thread() is threading.main_thread()
    if fd is None or not main or _current is not None or signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL:
        yield
        return
    import shutil

    label = next((a for a in args if not a.startswith("-")), "")
    utf = (sys.stderr.encoding or "").lower().replace("-", "") == "utf8"
    _current = Status(label, fd, shutil.get_terminal_size().columns, FRAMES if utf else ASCII_FRAMES)
    previous = signal.signal(signal.SIGALRM, _current.tick)
    try:
        _current.wrote("")
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _current.clear()
        _current = None
