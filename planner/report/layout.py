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
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from planner.report.labels import plan_text  # noqa: F401 - the views' plan column, where they look for it
from planner.report.wrap import wrapped

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
            sizes = [measured(self.console, self.options, c) for c in (col.header, *cells)]
            self.measured[col] = (max(m.minimum for m in sizes), max(m.maximum for m in sizes))
        return self.measured[col]

    def table(self, columns: Sequence[Column]) -> int:
        extra = 3 * (len(columns) - 1) if columns else 0
        lows, highs = zip(*(self._column(c) for c in columns), strict=True) if columns else ((0,), (0,))
        return max(sum(lows), sum(highs)) + extra


def measured(console: Console, options: ConsoleOptions, cell) -> Measurement:
    """``Measurement.get(console, options, cell)``, at an unbounded width: a text (a ``Text``, or a str without
    console markup or emoji codes, which is its own text) measured here as ``Text.__rich_measure__`` measures it
    (widest line, widest word), without rich's rendering of the str and its calls per cell."""
    if isinstance(cell, Text):
        plain = cell.plain
    elif isinstance(cell, str) and "[" not in cell and ":" not in cell:
        plain = cell
    else:
        return Measurement.get(console, options, cell)
    lines, words = plain.splitlines(), plain.split()
    widest = max(cell_len(line) for line in lines) if lines else 0
    size = Measurement(max(cell_len(word) for word in words) if words else widest, widest).normalize()
    return Measurement(0, 0) if size.maximum < 1 else size.normalize()


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


CSV_TOO = "--json or --csv"  # where a command with --csv carries a table's hidden columns (search, sweep, compare)


class FittedTable:
    """A table whose columns are chosen at render time to fit the console; hidden columns are named
    in a line under it, with where they are whole: ``elsewhere``, the output options of the command that
    carry them ("--json"; "--json or --csv" where the command has --csv: explain and validate --choice
    said "or --csv" and refused it). ``gaps``: the rows a "…" row goes before (rows left out between them
    and the row above); ``footer(shown headers)``: a note under the table that may refer only to the
    columns shown."""

    def __init__(
        self,
        columns: Sequence[Column],
        rows: Sequence[Any],
        title: str | None = None,
        gaps: Sequence[int] = (),
        footer: Callable[[list[str]], str] | None = None,
        elsewhere: str = "--json",
    ) -> None:
        self.columns, self.rows, self.title, self.gaps = list(columns), list(rows), title, frozenset(gaps)
        self.footer, self.elsewhere = footer, elsewhere

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown, hidden = fit_columns(console, options, self.columns, self.rows)
        width = options.max_width
        if self.title:
            yield Text(wrapped(self.title, width), style="bold")
        drawn = drawn_table(console, options, shown, self.rows, self.gaps)
        yield from drawn if drawn is not None else [_table(shown, self.rows, None, gaps=self.gaps)]
        if hidden:
            names = ", ".join(c.header for c in hidden)
            yield Text(wrapped(f"(hidden at this width: {names}; see {self.elsewhere})", width), style="dim")
        if self.footer and (text := self.footer([c.header for c in shown])):
            yield Text(wrapped(text, width), style="dim")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        shown, _ = fit_columns(console, options, self.columns, self.rows)
        return Measurement.get(console, options, _table(shown, self.rows, None, measuring=True))


def _one_line_cell(console: Console, cell: str | Text, col: Column, header: bool) -> Text | None:
    """The one-line text rich draws for a cell of ``_table(shown, rows)`` (or a header), or None where it would
    take more than one line whatever the width: a str is read as console markup (``Console.render_str``: "[b]",
    ":smile:"; plain words are themselves); a column with ``breaks`` draws its ``Breakable`` (its text's plain
    words and base style, measured by len)."""
    if col.breaks and not header:
        base = cell if isinstance(cell, Text) else Text(str(cell))
        text = Text(base.plain, style=base.style, overflow="fold")
        if len(text.plain) != cell_len(text.plain):
            return None
    elif isinstance(cell, Text):
        text = cell
    elif isinstance(cell, str):
        text = Text(cell) if "[" not in cell and ":" not in cell else console.render_str(cell, highlight=False)
    else:
        return None
    if "\n" in text.plain or "\t" in text.plain or (text.justify or col.justify) not in ("left", "right"):
        return None
    return text


def drawn_table(
    console: Console, options: ConsoleOptions, columns: Sequence[Column], rows: Sequence[Any], gaps: frozenset
) -> list[Segment] | None:
    """The segments of ``_table(columns, rows, None, gaps=gaps)`` as rich draws them, drawn here without rich's
    measuring of every cell (twice), its padding and cropping per cell: 0.1-0.15 s of CPU on validate's 200-row
    table. Each column takes its widest cell; where the table is wider than ``options.max_width`` the wrapping
    columns shrink as rich's ``Table._collapse_widths`` shrinks them, and a cell wider than its column is drawn by
    rich itself (``render_lines``: a run id wraps at its hyphens). None where rich's table would do more than
    this (a cell of several lines or a tab, centred text, columns that still do not fit): rich draws it.
    The header row (style ``table.header``), its rule (``box.SIMPLE_HEAD``'s head row or its substitute), the
    dividers and every cell's padding (0, 1), none at the table's edges, are rich's."""
    if not columns:
        return None
    grid = [[col.header for col in columns], *_rows_with_gaps(columns, rows, gaps)]
    texts = [
        [_one_line_cell(console, c, col, k == 0) for col, c in zip(columns, cells, strict=True)]
        for k, cells in enumerate(grid)
    ]
    if any(t is None for row in texts for t in row):
        return None
    n = len(columns)
    pads = [(0 if i == 0 else 1, 0 if i == n - 1 else 1) for i in range(n)]
    extra = [left + right for left, right in pads]
    widths = [max(cell_len(row[i].plain) for row in texts) + extra[i] for i in range(n)]
    if any(w == e for w, e in zip(widths, extra, strict=True)):
        return None
    room = options.max_width - (n - 1)  # the dividers
    if room < 1:
        return None
    if sum(widths) > room:  # rich measures each column at the room there is, then shrinks the wrapping ones
        widths = [min(w, room) for w in widths]
        shrunk = Table._collapse_widths(widths, [col.wrap for col in columns], room)
        if sum(shrunk) > room or any(w - e < 1 for w, e in zip(shrunk, extra, strict=True)):
            return None
        widths = [min(w, s) for w, s in zip(widths, shrunk, strict=True)]  # rich's measure again at each width
    return _drawn(console, options, columns, grid, texts, widths, pads)


def _rows_with_gaps(columns: Sequence[Column], rows: Sequence[Any], gaps: frozenset) -> list[list]:
    out: list[list] = []
    for k, row in enumerate(rows):
        if k in gaps:
            out.append([GAP] + [""] * (len(columns) - 1))
        out.append([col.cell(row) for col in columns])
    return out


def _cell_lines(console: Console, options: ConsoleOptions, col: Column, cell, text: Text, width: int, pads, style):
    """A cell's lines as rich's table draws them: its content at ``width`` less the padding (a one-line text that
    fits justified here as ``Lines.justify`` does and rendered as ``Text.__rich_console__`` does; anything
    longer by rich's ``render_lines``), between its padding (``Padding``), under the cell's style."""
    inner, pad_style = width - pads[0] - pads[1], console.get_style("none")
    if cell_len(text.plain) <= inner:
        line = text.copy()
        if (text.justify or col.justify) == "left":
            line.truncate(inner, overflow=text.overflow, pad=True)
        else:
            line.rstrip()
            line.pad_left(inner - cell_len(line.plain))
        lines = [list(Text("\n").join([line]).render(console))]
    else:
        overflow = "fold" if col.wrap else "ellipsis"  # as _table gives each column
        opts = options.update(width=inner, justify=col.justify, no_wrap=not col.wrap, overflow=overflow, height=None)
        lines = console.render_lines(cell, opts.update(highlight=False), style=pad_style, pad=True)
    left = [Segment(" " * pads[0], pad_style)] if pads[0] else []
    right = [Segment(" " * pads[1], pad_style)] if pads[1] else []
    lines = [left + line + right for line in lines]
    return [list(Segment.apply_style(line, style)) for line in lines] if style else lines


def _drawn(console: Console, options: ConsoleOptions, columns, grid, texts, widths, pads) -> list[Segment]:
    """Rows of cells as rich's ``Table._render`` joins them: each row as tall as its tallest cell (the header's
    cells aligned to the bottom, the others to the top), its box's dividers, a rule under the header."""
    get = console.get_style
    the_box = box.SIMPLE_HEAD.substitute(options, safe=console.safe_box)
    border = get("none") + get("")
    dividers = [Segment(v, border) for v in (the_box.head_vertical, the_box.mid_vertical, the_box.foot_vertical)]
    dividers = [d if d.text.strip() else Segment(d.text, Style.null().background_style + d.style) for d in dividers]
    header_style, styles = get("table.header") + get(""), [get(col.style or "") for col in columns]
    out: list[Segment] = []
    for k, (cells, row) in enumerate(zip(grid, texts, strict=True)):
        divider = dividers[0 if k == 0 else (2 if k == len(texts) - 1 else 1)]
        drawn = []
        for i, col in enumerate(columns):
            style = header_style if k == 0 else styles[i]
            cell = Breakable(cells[i], col.breaks) if col.breaks and k else cells[i]
            drawn.append((_cell_lines(console, options, col, cell, row[i], widths[i], pads[i], style), style))
        height = max(len(lines) for lines, _ in drawn)
        if height > 1:
            align = Segment.align_bottom if k == 0 else Segment.align_top
            drawn = [(align(lines, w, height, style), style) for (lines, style), w in zip(drawn, widths, strict=True)]
        for line_no in range(height):
            for i, (lines, _) in enumerate(drawn):
                out += lines[line_no]
                if i < len(drawn) - 1:
                    out.append(divider)
            out.append(Segment.line())
        if k == 0:
            out += [Segment(the_box.get_row(widths, "head", edge=False), border), Segment.line()]
    return out


def console_width(is_terminal: bool, environ: dict[str, str], beside: int | None = None) -> int | None:
    """The width to render at: the terminal's own (None: rich asks the terminal) when output is a
    terminal, else ``COLUMNS`` when it is set, else ``beside`` (the width of the terminal the command runs
    in, read from stderr, when output goes to a pipe or file from one: ``megaplan explain ... | less`` wrapped
    every 160-column line in an 80-column terminal, ux14), else 160 (no terminal at all: a script, CI)."""
    if is_terminal:
        return None
    columns = environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return beside if beside else 160


def tokens_text(tokens: float) -> str:
    """A token count in three significant digits at most, by its unit: 300B, 15T, 4.9T, 500M; one that three digits
    round says so by keeping them (2²¹ × 10⁶ = 2,097,152,000,000 reads 2.10T: it read "2.09715T", Python's ``g``
    six digits, ux18); past a thousand trillion in powers of ten (--tokens 1e30 read "1e+18T", and "1e+21B tokens"
    below explain's verdict: fresh user trial 10)."""
    if tokens >= 1e15:
        return f"{tokens:.3g}"
    shown = float(f"{tokens:.3g}")  # rounded first: 999.96B is 1.00T, not 1.00e+03B
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if shown >= scale:
            value = shown / scale
            return f"{value:g}{suffix}" if shown == tokens else f"{value:#.3g}".rstrip(".") + suffix
    return f"{tokens:,.0f}" if tokens >= 1 else f"{tokens:.3g}"
