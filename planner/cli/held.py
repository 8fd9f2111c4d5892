"""An error comes alone: the notes and warnings a command says on stderr ("megaplan: note: ...",
"megaplan: warning: ...") are held until it writes anything else (its output, a "wrote FILE" line) or ends
well, and dropped when it ends in an error, so a failed command prints its one error line and nothing before
it. Warnings were once said at once, as true of the input whatever came next; a refused script then printed
"--num-layers given twice" and two more warnings above its error, and a user reads the last line of four as
one of several complaints (err16: the rule is one clear line). A progress bar writes past the held lines
(``unheld``): they come after it, before the output they are about."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import click

from planner.cli import status
from planner.errors import PlannerError

NOTE = "megaplan: note:"
WARNING = "megaplan: warning:"
ERROR = "megaplan: error:"


def wrapped(text: str, width: int) -> str:
    """A note or warning broken at spaces to ``width`` columns, the continuation lines indented two spaces
    (a terminal would break it mid-word, fresh user trial 4); each line of ``text`` on its own."""
    import textwrap

    out = []
    for line in text.rstrip("\n").split("\n"):
        out.append(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def say_error(message: str) -> None:
    """An error on stderr: one message, ``megaplan: error: ...``, its spaces and newlines made single spaces,
    broken at spaces to the terminal's width when stderr is one (continuation lines indented two spaces)."""
    line = f"{ERROR} {' '.join(message.split())}\n"
    sys.stderr.write(_for_terminal(sys.stderr, line))
    sys.stderr.flush()


def _for_terminal(stream, text: str) -> str:
    """``text`` wrapped to the terminal when ``stream`` is one and ``text`` is a note, warning or error; else as
    is: a pipe or a file gets each message on one line, for grep (fresh user trial 8: an error of 300 characters
    broke mid-word at 80 columns, `--bridge-` / `config`)."""
    if not text.startswith((NOTE, WARNING, ERROR)) or not getattr(stream, "isatty", lambda: False)():
        return text
    import shutil

    return wrapped(text, max(shutil.get_terminal_size().columns - 1, 40))


class _Held:
    def __init__(self, stderr):
        self.stderr = stderr
        self.lines: list[str] = []

    def release(self) -> None:
        lines, self.lines = self.lines, []
        for line in lines:
            self.stderr.write(line)
        if lines:
            self.stderr.flush()  # before the output that follows, as a terminal shows it


class _Stream:
    """sys.stdout or sys.stderr, seen through: a note to stderr is held, anything else first releases
    the held notes. Every other attribute is the real stream's."""

    def __init__(self, real, held: _Held, *, holds: bool):
        self._real, self._held, self._holds = real, held, holds

    def write(self, text):
        if self._holds and isinstance(text, str) and text.startswith((NOTE, WARNING)):
            self._held.lines.append(_for_terminal(self._real, text))
            return len(text)
        if text:
            status.wrote(text)  # the "working…" line goes first (planner.cli.status)
            self._held.release()
        if self._holds and isinstance(text, str):
            self._real.write(_for_terminal(self._real, text))
            return len(text)
        return self._real.write(text)

    def __getattr__(self, name):
        return getattr(self._real, name)


def unheld(stream):
    """The real stream behind ``stream`` (sys.stderr seen through ``_Stream``): what a progress bar writes to,
    so that drawing it does not say the held notes and warnings of a command that may still fail."""
    return getattr(stream, "_real", stream)


# bad input, an abort, an output that cannot be written (OSError: -o on a full disk, a closed pipe)
REFUSED = (click.ClickException, click.exceptions.Abort, PlannerError, KeyboardInterrupt, OSError)


@contextmanager
def notes_held():
    """Run a command with its notes and warnings held (see the module): dropped when it fails (bad input, an
    abort, an output it cannot write), said when it ends in any other way."""
    out, err = sys.stdout, sys.stderr
    held = _Held(err)
    sys.stdout, sys.stderr = _Stream(out, held, holds=False), _Stream(err, held, holds=True)
    try:
        yield
    except REFUSED:
        held.lines.clear()
        raise
    finally:
        sys.stdout, sys.stderr = out, err
        held.release()
