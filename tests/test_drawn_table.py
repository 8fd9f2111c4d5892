"""FittedTable draws its rows itself (report/layout.py ``drawn_table``) where rich's Table would only pad,
justify and wrap: the segments (text and style, piece by piece, so the same bytes on a terminal and in a pipe)
must be rich's own, at any width, with the header, dividers, gaps, styles, markup, wrapped ids and columns
hidden at narrow widths; and ``measured`` must be ``Measurement.get``."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from planner.report import layout
from planner.report.layout import KEEP, Column, FittedTable


def _console(width: int, terminal: bool, ascii_only: bool = False) -> Console:
    file = io.TextIOWrapper(io.BytesIO(), encoding="ascii") if ascii_only else io.StringIO()
    return Console(file=file, width=width, force_terminal=terminal, color_system="truecolor" if terminal else None)


def _segments(table: FittedTable, console: Console, monkeypatch, drawn: bool) -> list:
    with monkeypatch.context() as m:
        if not drawn:
            m.setattr(layout, "drawn_table", lambda *a: None)  # rich's Table draws every row
        return list(console.render(table, console.options))


def _runs_table() -> FittedTable:
    """validate's runs table: ids that wrap at hyphens, a wrapping metric, numbers, a coloured error."""
    ids = ["DGXC-v25.04-H100-GPT3-175B-bf16-n1024", "MB-25.09-GB200-LLAMA31_405B-PRETRAIN-FP8_MX-n128-gbs64", "N21-T1"]
    rows = [
        {"id": i, "metric": m, "pub": p, "err": e}
        for i, m, p, e in zip(
            ids,
            ["step time (s)", "TFLOP/s per GPU (Eq. 3)", "tokens/s per GPU"],
            [8.453, 578, 137],
            [3.0, -15.1, 0.3],
            strict=True,
        )
    ]
    columns = [
        Column("run", lambda r: r["id"], KEEP, "left", wrap=True, breaks="-", min_width=24),
        Column("metric", lambda r: r["metric"], 1, "left", wrap=True),
        Column("published", lambda r: f"{r['pub']:.4g}", 3),
        Column("error", lambda r: Text(f"{r['err']:+.1f}%", style="green" if abs(r["err"]) < 5 else "red"), KEEP),
    ]
    return FittedTable(columns, rows, "Predicted vs published", gaps=[2])


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 160])
@pytest.mark.parametrize("terminal", [False, True])
def test_runs_table_drawn_as_rich_draws_it(width, terminal, monkeypatch):
    table, console = _runs_table(), _console(width, terminal)
    assert _segments(table, console, monkeypatch, True) == _segments(table, console, monkeypatch, False)
    shown, _ = layout.fit_columns(console, console.options, table.columns, table.rows)
    drawn = layout.drawn_table(console, console.options, shown, table.rows, table.gaps)
    assert (
        drawn is not None
    )  # drawn here at every width, the wrapped ids included (else the test compares rich to rich)


def test_ascii_console_gets_rich_substitute_box(monkeypatch):
    table, console = _runs_table(), _console(100, False, ascii_only=True)
    drawn = _segments(table, console, monkeypatch, True)
    assert drawn == _segments(table, console, monkeypatch, False)
    assert "─" not in "".join(s.text for s in drawn)


WORDS = st.sampled_from(
    ["a", "bb", "GPT3-175B", "n1024", "[b]bold[/b]", "[1 run]", ":smile:", "x:y", "…", "—", "×", "宽字", "", " ", "a b"]
)
CELL = st.lists(WORDS, max_size=6).map(" ".join) | st.lists(WORDS, max_size=4).map("-".join)
STYLE = st.sampled_from(["", "green", "bold red", "dim"])


@st.composite
def tables(draw):
    n = draw(st.integers(1, 5))
    columns = []
    for i in range(n):
        wrap = draw(st.booleans())
        columns.append(
            Column(
                draw(CELL) or f"c{i}",
                lambda r, i=i: r[i],
                draw(st.integers(0, 3)),
                draw(st.sampled_from(["left", "right"])),
                wrap=wrap,
                breaks=draw(st.sampled_from(["", "-"])) if wrap else "",
                style=draw(st.sampled_from([None, "cyan"])),
                min_width=draw(st.integers(0, 30)),
            )
        )
    cell = CELL | st.builds(
        lambda t, s, j: Text(t, style=s, justify=j), CELL, STYLE, st.sampled_from([None, "left", "right"])
    )
    rows = draw(st.lists(st.tuples(*[cell] * n), max_size=6))
    gaps = draw(st.sets(st.integers(0, 5), max_size=2))
    return FittedTable(columns, rows, draw(st.none() | CELL), gaps=sorted(gaps))


@settings(max_examples=80, deadline=None)
@given(table=tables(), width=st.integers(8, 140), terminal=st.booleans())
def test_any_table_drawn_as_rich_draws_it(table, width, terminal):
    console = _console(width, terminal)
    mp = pytest.MonkeyPatch()
    try:
        assert _segments(table, console, mp, True) == _segments(table, console, mp, False)
    finally:
        mp.undo()


@settings(max_examples=100, deadline=None)
@given(cell=CELL | st.builds(Text, CELL, style=STYLE) | st.just("a\nbb b") | st.just("\t x"))
def test_measured_is_rich_measurement(cell):
    console = _console(80, False)
    options = console.options.update_width(layout.UNBOUNDED)
    assert layout.measured(console, options, cell) == Measurement.get(console, options, cell)
