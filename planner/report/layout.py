"""Tables that fit the terminal: each column has a priority, and the least important columns go first
as the width shrinks. The plan column (priority 0) is never dropped and never wrapped.

A view lists its columns once (``Column(header, cell, priority)``); ``FittedTable`` is a rich
renderable that picks, at render time, the columns that fit ``options.max_width`` and says which ones
it hid. Adding a column to a view is one more ``Column`` in its list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from planner.report.labels import plan_text  # noqa: F401 - the views' plan column, where they look for it

KEEP = 0  # priority of a column that is never dropped


@dataclass(frozen=True)
class Column:
    """One column of a view: its header, how a row becomes its cell, and how important it is.

    ``priority`` 0 is never dropped; as the width shrinks the column with the largest priority goes
    first (the rightmost of equals). ``wrap`` lets a text column wrap inside its width instead, at
    spaces and, with ``breaks``, after any of those characters too (a run id at its hyphens).
    """

    header: str
    cell: Callable[[Any], str | Text]
    priority: int = 1
    justify: str = "right"
    wrap: bool = False
    style: str | None = None
    breaks: str = ""
    min_width: int = 0  # a wrapping column is not squeezed below this when the view chooses its columns
    wrap_priority: int | None = None  # a one-line column that wraps (at spaces) when the width comes to this


WRAP_MIN = 24  # a wrapping column is given at least this many characters (or its longest word)


def _chunks(text: str, breaks: str) -> list[str]:
    """The text cut after each space or each of ``breaks``: the pieces a line may end between."""
    after = re.escape(" " + breaks)
    return re.findall(rf"[^{after}]*[{after}]|[^{after}]+$", text)


def _narrowest(cell: str | Text, col: Column) -> str:
    """A stand-in for a wrapping cell at the narrowest width it is allowed to wrap to."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    longest = max((len(w.strip()) for w in _chunks(text, col.breaks)), default=0)
    return "x" * min(len(text), max(longest, WRAP_MIN, col.min_width))


class Breakable:
    """A cell that wraps after any of ``breaks`` as well as at spaces (rich's own wrap breaks only at
    spaces, so an id like ``DGXC-v25.04-H100-GPT3-175B-bf16-n1024`` would not wrap at all)."""

    def __init__(self, cell: str | Text, breaks: str) -> None:
        self.text = cell if isinstance(cell, Text) else Text(str(cell))
        self.chunks = _chunks(self.text.plain, breaks)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(max((len(c.strip()) for c in self.chunks), default=0), len(self.text))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = [""]
        for chunk in self.chunks:
            if lines[-1] and len((lines[-1] + chunk).rstrip()) > options.max_width:
                lines[-1] = lines[-1].rstrip()
                lines.append("")
            lines[-1] += chunk
        yield Text("\n".join(lines), style=self.text.style, overflow="fold")


GAP = "…"  # the row that stands for rows left out between two shown ones


def _table(
    columns: Sequence[Column],
    rows: Sequence[Any],
    title: str | None,
    measuring: bool = False,
    gaps: frozenset = frozenset(),
) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", show_edge=False, pad_edge=False, padding=(0, 1)
    )
    for col in columns:  # a cell that must be cut after all ends with "…"; a wrapping one folds, losing nothing
        overflow = "fold" if col.wrap else "ellipsis"
        table.add_column(col.header, justify=col.justify, no_wrap=not col.wrap, overflow=overflow, style=col.style)
    for k, row in enumerate(rows):
        if k in gaps:
            table.add_row(GAP, *[""] * (len(columns) - 1))
        cells = [col.cell(row) for col in columns]
        if measuring:
            cells = [_narrowest(c, col) if col.wrap else c for col, c in zip(columns, cells, strict=True)]
        else:
            cells = [Breakable(c, col.breaks) if col.breaks else c for col, c in zip(columns, cells, strict=True)]
        table.add_row(*cells)
    return table


def plain_table(columns: Sequence[Column], rows: Sequence[Any]) -> Table:
    """The table of these columns and rows, as views draw it (no fitting)."""
    return _table(columns, rows, None)


UNBOUNDED = 100_000


def table_width(console: Console, options: ConsoleOptions, table: Table) -> int:
    """The width a table takes with no cell wrapped or cut (a measurement is clamped to the width it is
    given, so it is taken at an unbounded one)."""
    return Measurement.get(console, options.update_width(UNBOUNDED), table).maximum


class ColumnWidths:
    """What ``table_width`` gives for the measuring table (``_table(..., measuring=True)``) of any of a
    view's columns, each column's cells measured once (not once per column dropped: a search table of
    1,000 rows at 80 columns was measured nine times over). Rich's ``Table.__rich_measure__`` at an
    unbounded width is the sum of each column's widest cell (header included) and its padding, plus
    one character of rule between columns: the padding (0, 1) without ``pad_edge`` is 2 per column
    but 1 on the first and the last (0 when alone), so n columns add 3(n − 1)."""

    def __init__(self, console: Console, options: ConsoleOptions, rows: Sequence[Any]) -> None:
        self.console, self.options, self.rows = console, options.update_width(UNBOUNDED), rows
        self.measured: dict[Column, tuple[int, int]] = {}

    def _column(self, col: Column) -> tuple[int, int]:
        """(widest minimum, widest maximum) of the column's header and measuring cells."""
        if col not in self.measured:
            cells = [col.cell(row) for row in self.rows]
            cells = [_narrowest(c, col) for c in cells] if col.wrap else cells
            sizes = [Measurement.get(self.console, self.options, c) for c in (col.header, *cells)]
            self.measured[col] = (max(m.minimum for m in sizes), max(m.maximum for m in sizes))
        return self.measured[col]

    def table(self, columns: Sequence[Column]) -> int:
        extra = 3 * (len(columns) - 1) if columns else 0
        lows, highs = zip(*(self._column(c) for c in columns), strict=True) if columns else ((0,), (0,))
        return max(sum(lows), sum(highs)) + extra


def fit_columns(
    console: Console, options: ConsoleOptions, columns: Sequence[Column], rows: Sequence[Any]
) -> tuple[list[Column], list[Column]]:
    """(shown, hidden): until the table fits ``options.max_width``, drop the least important column or
    let a column with a ``wrap_priority`` wrap, whichever comes first (largest priority, then rightmost).
    A shown column that wraps is returned with ``wrap=True``."""
    shown = list(columns)
    hidden: list[Column] = []
    widths = ColumnWidths(console, options, rows)
    while True:
        width = widths.table(shown)
        steps = [(c.priority, k, False) for k, c in enumerate(shown) if c.priority != KEEP]
        steps += [(c.wrap_priority, k, True) for k, c in enumerate(shown) if c.wrap_priority and not c.wrap]
        if width <= options.max_width or not steps:
            return shown, hidden
        _, k, wrap = max(steps)
        if wrap:
            shown[k] = replace(shown[k], wrap=True)
        else:
            hidden.insert(0, shown.pop(k))


def wrapped(text: str, width: int) -> str:
    """``text`` wrapped at spaces to ``width`` columns, each paragraph (line) on its own: no line ends in the
    space it was broken at ("… × seq 4096," not "… × seq 4096, "), and options are never split at their
    hyphens. A word longer than the width stays whole (the terminal folds it)."""
    import textwrap

    return "\n".join(
        "\n".join(textwrap.wrap(line, width, break_on_hyphens=False, break_long_words=False)) or ""
        for line in text.split("\n")
    )


class FittedTable:
    """A table whose columns are chosen at render time to fit the console; hidden columns are named
    in a line under it (they are all in --json and --csv). ``gaps``: the rows a "…" row goes before
    (rows left out between them and the row above); ``footer(shown headers)``: a note under the table
    that may refer only to the columns shown."""

    def __init__(
        self,
        columns: Sequence[Column],
        rows: Sequence[Any],
        title: str | None = None,
        gaps: Sequence[int] = (),
        footer: Callable[[list[str]], str] | None = None,
    ) -> None:
        self.columns, self.rows, self.title, self.gaps = list(columns), list(rows), title, frozenset(gaps)
        self.footer = footer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown, hidden = fit_columns(console, options, self.columns, self.rows)
        width = options.max_width
        if self.title:
            yield Text(wrapped(self.title, width), style="bold")
        yield _table(shown, self.rows, None, gaps=self.gaps)
        if hidden:
            names = ", ".join(c.header for c in hidden)
            yield Text(wrapped(f"(hidden at this width: {names}; see --json or --csv)", width), style="dim")
        if self.footer and (text := self.footer([c.header for c in shown])):
            yield Text(wrapped(text, width), style="dim")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        shown, _ = fit_columns(console, options, self.columns, self.rows)
        return Measurement.get(console, options, _table(shown, self.rows, None, measuring=True))


def console_width(is_terminal: bool, environ: dict[str, str]) -> int | None:
    """The width to render at: the terminal's own (None: rich asks the terminal) when output is a
    terminal, else ``COLUMNS`` when it is set, else 160."""
    if is_terminal:
        return None
    columns = environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else 160
