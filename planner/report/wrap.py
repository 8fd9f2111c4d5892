"""Where the reports' prose may break a line: at spaces, but never between a figure and its unit ("10 %",
"82.88 s/iteration", "± 2.2 %") nor at a no-break space ("· off: --tp-comm-overlap" kept whole); and a line
of a labelled block (explain's verdict: "speed ", "runs  ") continues under its text, not at column 0.

rich's own wrap breaks at any Unicode space (rich._wrap: a word is ``\\s*\\S+\\s*``, and ``\\s`` takes the
no-break space too), so "leaving 10\\n% of the usable memory" could not be prevented by a no-break space alone:
``Hanging`` wraps its lines itself, and ``wrapped`` (textwrap, which breaks at ASCII spaces only) is given the
no-break spaces. Neither writes one: a line is printed with plain spaces, as before.
"""

from __future__ import annotations

import re
import textwrap

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

NBSP = "\u00a0"
# the units the reports print after a figure (longest first: "s/iteration" before "s")
UNITS = ("s/iteration", "tokens/s", "TFLOP/s", "GB/s", "GiB", "MiB", "GB", "ms", "µs", "days", "%", "s")
_UNIT = "|".join(re.escape(u) for u in UNITS)
_GLUE = re.compile(rf"(?<=\d) (?=(?:{_UNIT})(?:[\s),.;:·]|$))|(?<=±) (?=[\d+−-])")
_WORD = re.compile(rf"[^\S{NBSP}]*[\S{NBSP}]+[^\S{NBSP}]*")  # rich's \s*\S+\s*, a no-break space inside a word


def keep_units(text: str) -> str:
    """``text`` with a no-break space between each figure and its unit and after each ±: "10 %" → "10\\xa0%"."""
    return _GLUE.sub(NBSP, text)


def wrapped(text: str, width: int) -> str:
    """``text`` wrapped at spaces to ``width`` columns, each paragraph (line) on its own: no line ends in the
    space it was broken at ("… × seq 4096," not "… × seq 4096, "), options are never split at their hyphens,
    and a figure keeps its unit. A word longer than the width stays whole (the terminal folds it)."""
    lines = (
        "\n".join(textwrap.wrap(keep_units(line), width, break_on_hyphens=False, break_long_words=False)) or ""
        for line in text.split("\n")
    )
    return "\n".join(lines).replace(NBSP, " ")


def command_words(command: str) -> str:
    """A command line said in prose, held whole where it fits (no-break spaces): where it does not, ``Hanging``
    breaks it before an option with a shell continuation, so a pasted command runs whole."""
    return command.replace(" ", NBSP)


def continued(command: str, width: int, indent: int = 4) -> str:
    """``command`` broken before its options with a shell continuation (" \\") where a line would pass ``width``
    columns, each continuation ``indent`` in (an option with its value wider than that: between them too): rich
    broke "explain the smallest: megaplan explain ..." at spaces, and pasted, each line ran alone."""
    lines: list[str] = []
    for option in re.split(r" (?=--)", command):
        parts = [option] if indent + len(option) + 2 <= width else option.split(" ")
        for part in parts:
            if lines and len(lines[-1]) + 1 + len(part) + 2 <= width:
                lines[-1] += " " + part
            else:
                lines.append((" " * indent if lines else "") + part)
    return " \\\n".join(lines)


def _command_lines(piece: Text, width: int, indent: int) -> Text:
    """A line of ``Hanging`` that is one word wider than ``width``: a command held whole (``command_words``) is
    continued over lines (``continued``), the lines after the first ``indent`` further in; another word as is."""
    if piece.cell_len <= width or f"{NBSP}--" not in piece.plain:
        return piece
    lead = " " * indent
    text = continued(piece.plain.replace(NBSP, " "), width).replace("\n", "\n" + lead)
    return Text(text, style=piece.style)


def _breaks(plain: str, width: int) -> list[int]:
    """Where to break ``plain`` so each line takes at most ``width`` cells (a word wider stays whole): at the
    start of the first word that does not fit, words split as rich splits them, but a no-break space inside."""
    out, used = [], 0
    for word in _WORD.finditer(plain):
        size = cell_len(word.group().rstrip())
        if used and used + size > width:
            out.append(word.start())
            used = 0
        used += cell_len(word.group())
    return out


class Hanging:
    """Lines of text whose wrapped continuations start under the text, ``indent`` cells in (after the label
    the line starts with): explain's "speed 313.86 s/iteration … MFU 64.4% (causal" went on at column 0 with
    "60.1%) · 201 TFLOP/s per GPU" at 80 columns. Figures keep their units (``keep_units``), a no-break space
    holds (``NBSP``), and the lines are printed with plain spaces."""

    def __init__(self, text: Text, indent: int = 6) -> None:
        self.text, self.indent = text, indent

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        for line in self.text.split("\n"):
            if line.cell_len > width > self.indent + 8:  # narrower: rich's own wrap
                head, body = line.divide([self.indent])
                body.plain = keep_units(body.plain)  # one character for another: the styles' spans hold
                pieces = body.divide(_breaks(body.plain, width - self.indent))
                for piece in pieces:
                    piece.rstrip()
                pieces = [_command_lines(p, width - self.indent, self.indent) for p in pieces]
                line = Text.assemble(head, Text("\n" + " " * self.indent).join(pieces))
            line.plain = line.plain.replace(NBSP, " ")
            yield line
