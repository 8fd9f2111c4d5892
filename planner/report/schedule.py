"""The pipeline schedule drawn in the terminal: one row per stage, time to scale left to right.

Each column is a fixed slice of time. A forward is drawn ``>>3>>`` (micro-batch 3, counted from
1 as in Narayanan et al. 2021 Figure 3), a backward ``<<3<<``, a p2p send ``~``, the data-parallel
gradient sync ``=``, the wait for the slowest GPU ``.`` and the optimizer step ``#``; a blank is the
bubble. Under interleaving a chunk's micro-batch carries the chunk's letter (``3a``, ``3b``) and a
lighter colour for later chunks. When the blocks would be narrower than their labels at the terminal's width, the view
shows the start and the end of the iteration at a readable scale and elides the steady state in
between (and elides middle stages beyond ``MAX_STAGE_ROWS``), saying so in its caption.
"""

from __future__ import annotations

import bisect
import math

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from planner.timeline import FWD, Timeline

MAX_STAGE_ROWS = 16
GAP = " ┆ "
FWD_STYLES = (
    "bold white on blue",
    "bold white on dodger_blue2",
    "bold white on deep_sky_blue3",
    "bold white on steel_blue",
)
BWD_STYLES = (
    "bold white on green4",
    "bold white on green3",
    "bold black on chartreuse3",
    "bold black on dark_olive_green3",
)
COMM_STYLE, DP_STYLE, WAIT_STYLE, OPT_STYLE = "yellow", "bold magenta", "magenta", "bold red"
TAIL = {"dp_comm": ("=", DP_STYLE), "stragglers": (".", WAIT_STYLE), "optimizer": ("#", OPT_STYLE)}


def _label(tl: Timeline, microbatch: int, chunk: int) -> str:
    return f"{microbatch + 1}{chr(ord('a') + chunk) if tl.vpp > 1 else ''}"


def _windows(tl: Timeline, cols: int) -> tuple[float, list[tuple[float, float]]]:
    """(seconds per column, shown time windows). The whole iteration when a forward chunk spans two
    columns or more at ``cols`` columns; else the fill (until every stage has started its first
    backward) and the drain with the tail after it, so the bubble's two triangles stay visible."""
    total = tl.iteration_s
    shortest = min(tl.forward_s) / tl.vpp
    if shortest <= 0 or shortest * cols / total >= 2:
        return total / cols, [(0.0, total)]
    cycle = (max(tl.forward_s) + max(tl.backward_s)) / tl.vpp + 2 * tl.p2p_s
    fill_end = max(op.start_s for op in _first_bwd(tl)) + cycle
    drain_start = min(op.end_s for op in _last_fwd(tl)) - cycle
    if fill_end >= drain_start:
        return total / cols, [(0.0, total)]
    per_col = (fill_end + total - drain_start) / (cols - len(GAP))
    left = int(fill_end / per_col)
    return per_col, [(0.0, left * per_col), (total - (cols - len(GAP) - left) * per_col, total)]


def _first_bwd(tl: Timeline):
    seen: dict[int, object] = {}
    for op in tl.ops:
        if op.kind != FWD and op.stage not in seen:
            seen[op.stage] = op
    return seen.values()


def _last_fwd(tl: Timeline):
    last: dict[int, object] = {}
    for op in tl.ops:
        if op.kind == FWD:
            last[op.stage] = op
    return last.values()


class ScheduleView:
    """A rich renderable of a Timeline that fits the console's width."""

    def __init__(self, tl: Timeline, title: str = ""):
        self.tl, self.title = tl, title

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        tl = self.tl
        name_w = len(f"stage {tl.p - 1} ")
        cols = max(options.max_width - name_w - 1, 20)
        per_col, windows = _windows(tl, cols)
        if self.title:
            yield Text(self.title, style="bold")
        shown = list(range(tl.p))
        if tl.p > MAX_STAGE_ROWS:
            half = MAX_STAGE_ROWS // 2
            shown = shown[:half] + [-1] + shown[-half:]
        for i in shown:
            if i < 0:
                yield Text(
                    f"{'⋮':>{name_w - 1}}  stages {MAX_STAGE_ROWS // 2}–{tl.p - MAX_STAGE_ROWS // 2 - 1} not shown",
                    style="dim",
                )
                continue
            row = Text(f"{'stage ' + str(i):<{name_w}}│", style="bold")
            for k, (lo, hi) in enumerate(windows):
                if k:
                    row.append(GAP, style="dim")
                row.append_text(_row(tl, tl.stage_ops(i), tl.stage_sends(i), lo, hi, per_col))
            yield row
        yield _ruler(name_w, windows, per_col)
        yield Text.assemble(*_legend(tl))
        yield Text(_caption(tl, windows, per_col), style="dim")


def _row(tl: Timeline, ops, sends, lo: float, hi: float, per_col: float) -> Text:
    """One stage's cells between times lo and hi. A cell shows the operation covering at least half
    of it (labelled when its run of cells is wide enough); else, if operations and blocking sends
    together cover half of it, the kind that covers most (several small blocks in one cell); else
    it is bubble."""
    n = max(int(round((hi - lo) / per_col)), 1)
    starts = [op.start_s for op in ops]
    first = max(bisect.bisect_right(starts, lo) - 1, 0)
    items = [(op.start_s, op.end_s, op) for op in ops[first:] if op.start_s < hi]
    items += [(t.start_s, t.end_s, "comm") for t in sends if t.blocking and t.end_s > lo and t.start_s < hi]
    t0 = tl.pipeline_s
    for name, secs in tl.tail_s.items():
        if secs > 0:
            items.append((t0, t0 + secs, name))
            t0 += secs
    cells = _paint(items, lo, per_col, n)
    text = Text()
    c = 0
    while c < n:
        it, run = cells[c], c + 1
        while run < n and cells[run] is it:
            run += 1
        text.append_text(_block(tl, it, run - c))
        c = run
    return text


def _category(it) -> object:
    """Operations group by (kind, chunk); sends, the DP sync and the optimizer are their own kinds."""
    return it if isinstance(it, str) else (it.kind, it.chunk)


def _paint(items, lo: float, per_col: float, n: int) -> list:
    """What each column shows: an operation, a kind (tuple or str), or None for the bubble."""
    best: list[tuple[float, object]] = [(0.0, None)] * n
    by_kind: list[dict] = [{} for _ in range(n)]
    for s, e, it in items:
        c0, c1 = max(int((s - lo) / per_col), 0), min(int((e - lo) / per_col), n - 1)
        for c in range(c0, c1 + 1):
            cover = min(e, lo + (c + 1) * per_col) - max(s, lo + c * per_col)
            if cover <= 0:
                continue
            if cover > best[c][0]:
                best[c] = (cover, it)
            kind = _category(it)
            by_kind[c][kind] = by_kind[c].get(kind, 0.0) + cover
    cells: list = []
    for (cover, it), kinds in zip(best, by_kind, strict=False):
        if cover >= per_col / 2:
            cells.append(it)
        elif sum(kinds.values()) >= per_col / 2:
            cells.append(max(kinds, key=kinds.get))
        else:
            cells.append(None)
    return cells


def _block(tl: Timeline, it, width: int) -> Text:
    if it is None:
        return Text(" " * width)
    if it == "comm":
        return Text("~" * width, style=COMM_STYLE)
    if isinstance(it, str):
        ch, style = TAIL[it]
        return Text(ch * width, style=style)
    kind, chunk = (it.kind, it.chunk) if not isinstance(it, tuple) else it
    fill = ">" if kind == FWD else "<"
    style = (FWD_STYLES if kind == FWD else BWD_STYLES)[chunk % len(FWD_STYLES)]
    label = "" if isinstance(it, tuple) else _label(tl, it.microbatch, it.chunk)
    if not label or width < len(label) + 1:
        return Text(fill * width, style=style)
    left = (width - len(label)) // 2
    return Text(fill * left + label + fill * (width - len(label) - left), style=style)


def _ruler(name_w: int, windows, per_col: float) -> Text:
    """Tick labels in seconds under the rows, one every ~12 columns."""
    out = Text(" " * name_w + "└")
    for k, (lo, hi) in enumerate(windows):
        n = max(int(round((hi - lo) / per_col)), 1)
        if k:
            out.append(GAP, style="dim")
        cells = [" "] * n
        step = 12
        digits = max(0, -math.floor(math.log10(step * per_col)))
        for c in range(0, n - 6, step):
            tick = f"|{lo + c * per_col:.{digits}f}s"
            cells[c : c + len(tick)] = list(tick)
        out.append("".join(cells[:n]), style="dim")
    return out


def _seconds(x: float) -> str:
    return f"{x:.3g}s" if x >= 0.1 or x == 0 else f"{x * 1e3:.3g}ms"


def _legend(tl: Timeline) -> list:
    parts = [
        (">>1>>", FWD_STYLES[0]),
        " forward (micro-batch 1) · ",
        ("<<1<<", BWD_STYLES[0]),
        " backward · ",
        ("~", COMM_STYLE),
        " p2p · ",
        ("=", DP_STYLE),
        " DP sync · ",
        *([(".", WAIT_STYLE), " wait for the slowest GPU · "] if tl.tail_s.get("stragglers", 0.0) > 0 else []),
        ("#", OPT_STYLE),
        " optimizer · blank: bubble",
    ]
    if tl.vpp > 1:
        parts += [" · ", ("1a", FWD_STYLES[0]), ("1b", FWD_STYLES[1]), " chunks"]
    return parts


def _blocking(tl: Timeline) -> bool:
    return any(t.blocking for t in tl.transfers)


def _caption(tl: Timeline, windows, per_col: float) -> str:
    kind = f"interleaved 1F1B, {tl.vpp} chunks per stage" if tl.vpp > 1 else "1F1B"
    text = (
        f"{kind}: p {tl.p}, m {tl.m}; pipeline {_seconds(tl.pipeline_s)} + tail {_seconds(sum(tl.tail_s.values()))} "
        f"= iteration {_seconds(tl.iteration_s)}; 1 column = {_seconds(per_col)}"
    )
    if tl.p > 1:
        overlapped = " (overlapped, not drawn)" if tl.vpp > 1 and not _blocking(tl) else ""
        text += f"; one p2p send = {_seconds(tl.p2p_s)}{overlapped}"
    if len(windows) > 1:
        (a0, a1), (b0, b1) = windows
        text += (
            f"; showing the fill {_seconds(a0)}–{_seconds(a1)} and the drain {_seconds(b0)}–{_seconds(b1)}; "
            f"the steady state in between (┆) is not drawn"
        )
    if tl.p > MAX_STAGE_ROWS:
        text += f"; {MAX_STAGE_ROWS} of {tl.p} stages drawn"
    return text
