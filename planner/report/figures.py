"""Pictures written to files: the pipeline schedule of one plan (SVG written directly, PNG through
matplotlib, both from one ``Picture``) and a scaling sweep (matplotlib, the optional ``plot`` extra).
The core never imports matplotlib; these functions import it when called and say in one line how
to install it when it is missing."""

from __future__ import annotations

import math
import os
from pathlib import Path

from planner.errors import PlannerError
from planner.report.picture import DPI, INSTALL_HINT, Picture, matplotlib_or_error
from planner.timeline import FWD, Timeline

__all__ = ["DPI", "INSTALL_HINT", "check_drawable", "check_picture_path", "save", "schedule_picture", "sweep_figure"]

SUFFIXES = (".svg", ".png")
FWD_COLORS = ("#1f5fbf", "#4f8fe6", "#86b6f0", "#b9d5f7")
BWD_COLORS = ("#2e8b3a", "#5cb85c", "#95d195", "#c4e6c4")
COMM_COLOR, DP_COLOR, WAIT_COLOR, OPT_COLOR = "#e6a700", "#b03aa8", "#dcb6d9", "#c0392b"


def check_picture_path(path: str, option: str, svg_without_matplotlib: bool = False, *, drawable: bool = True) -> Path:
    """Refuse an unknown suffix, a folder that does not exist or cannot be written, or (``drawable``,
    ``check_drawable``) a missing matplotlib, before any work."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise PlannerError(f"{option} {path!r}: unknown picture format {p.suffix or '(none)'!r}; allowed: .svg, .png")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise PlannerError(f"{option} {path!r}: folder {str(folder)!r} {what}")
    if not os.access(folder, os.W_OK) or (p.exists() and (p.is_dir() or not os.access(p, os.W_OK))):
        raise PlannerError(f"{option} {path!r}: cannot write there (permission denied)")
    if drawable:
        check_drawable(path, option, svg_without_matplotlib)
    return p


def check_drawable(path: str, option: str, svg_without_matplotlib: bool = False) -> None:
    """Refuse a picture matplotlib would draw when it is missing (an SVG written directly needs none): the
    command line checks the path and whether the file exists first, so a user is told of their file before
    being asked to install anything."""
    if not (svg_without_matplotlib and Path(path).suffix.lower() == ".svg"):
        _matplotlib(option)


def _matplotlib(option: str):
    matplotlib = matplotlib_or_error(option)
    from matplotlib.figure import Figure

    return matplotlib, Figure


def save(fig, path: str, option: str) -> None:
    """Write a figure as SVG (text kept as text, so labels stay searchable) or PNG."""
    matplotlib, _ = _matplotlib(option)
    try:
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "megaplan"}):
            fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Date": None} if path.endswith(".svg") else None)
    except OSError as err:
        raise PlannerError(f"{option} {path!r}: cannot write: {err.strerror or err}") from err


def schedule_picture(tl: Timeline, title: str) -> Picture:
    """The pipeline schedule: one row per stage (stage 0 on top), forwards blue, backwards green
    (lighter for later interleaved chunks), blocking p2p sends amber, the DP gradient sync, the wait for the
    slowest GPU and the optimizer step after the flush; micro-batch numbers (from 1) on the blocks wide enough
    for them."""
    width_px = DPI * min(max(8.0, 0.06 * len(tl.ops) / tl.p), 40.0)  # about 0.06 inch per block, 8-40 inches
    legend = _legend_rows(_schedule_legend(tl), width_px)
    pic = Picture(width_px, DPI * (1.5 + 0.45 * tl.p) + 20 * (len(legend) - 1))
    x0, x1, y0, y1 = 16 + 7.5 * len(f"stage {tl.p - 1}"), width_px - 16, 32.0, pic.height_px - 44 - 20 * len(legend)
    px_per_s, row_px = (x1 - x0) / tl.iteration_s, (y1 - y0) / (tl.p + 0.2)
    edge = 0.6 if min(tl.forward_s) / tl.vpp * px_per_s >= 8 else 0.0  # white gaps only where blocks are wide
    for i in range(tl.p):
        y = y0 + (i + 0.6) * row_px
        box = lambda t, d, h, y=y: (x0 + t * px_per_s, y - h / 2 * row_px, d * px_per_s, h * row_px)
        ops = tl.stage_ops(i)
        for kind, colors in ((FWD, FWD_COLORS), ("bwd", BWD_COLORS)):
            for chunk in range(tl.vpp):
                boxes = [box(o.start_s, o.duration_s, 0.8) for o in ops if o.kind == kind and o.chunk == chunk]
                pic.rects(f"stage{i}-{kind}-chunk{chunk}", colors[chunk % len(colors)], boxes, "white", edge)
        sends = [box(t.start_s, t.end_s - t.start_s, 0.3) for t in tl.stage_sends(i) if t.blocking]
        pic.rects(f"stage{i}-p2p", COMM_COLOR, sends)
        t0 = tl.pipeline_s
        for name, color in (("dp_comm", DP_COLOR), ("stragglers", WAIT_COLOR), ("optimizer", OPT_COLOR)):
            secs = tl.tail_s.get(name, 0.0)
            pic.rects(f"stage{i}-{name}", color, [box(t0, secs, 0.8)] if secs > 0 else [])
            t0 += secs
        for o in ops:
            label = f"{o.microbatch + 1}{chr(ord('a') + o.chunk) if tl.vpp > 1 else ''}"
            if o.duration_s * px_per_s >= 7 * len(label) + 2:
                x = x0 + (o.start_s + o.duration_s / 2) * px_per_s
                pic.text(x, y, label, 9.7, "white" if o.chunk % len(FWD_COLORS) < 2 else "black")
        pic.line(x0 - 3.5, y, x0, y)
        pic.text(x0 - 6, y, f"stage {i}", 12, anchor="end")
    _time_axis(pic, (x0, x1, y0, y1), tl.iteration_s, title)
    for r, row in enumerate(legend):
        _legend(pic, row, y1 + 56 + 20 * r)
    return pic


def _time_axis(pic: Picture, box: tuple[float, float, float, float], span_s: float, title: str) -> None:
    """The frame, the time ticks with a dotted grid, the axis label and the title."""
    x0, x1, y0, y1 = box
    for a, b, c, d in ((x0, y0, x1, y0), (x0, y1, x1, y1), (x0, y0, x0, y1), (x1, y0, x1, y1)):
        pic.line(a, b, c, d)
    for v in _ticks(span_s, max(2, int((x1 - x0) // 80))):
        x = x0 + v / span_s * (x1 - x0)
        pic.line(x, y0, x, y1, "#b0b0b0", 0.5, dotted=True)
        pic.line(x, y1, x, y1 + 3.5)
        pic.text(x, y1 + 12, f"{v:g}", 12)
    pic.text((x0 + x1) / 2, y1 + 32, "time (s)", 12)
    pic.text((x0 + x1) / 2, 16, title, 13)


def _ticks(hi: float, n: int) -> list[float]:
    """0 to hi in round steps (1, 2, 2.5 or 5 × 10^k), at most n of them, as matplotlib's MaxNLocator."""
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(f * mag for f in (1, 2, 2.5, 5, 10) if f * mag >= raw * (1 - 1e-9))
    return [round(k * step, 12) for k in range(int(hi / step * (1 + 1e-9)) + 1)]


def _schedule_legend(tl: Timeline) -> list[tuple[str, str, str]]:
    """(fill, outline, label) of each colour the schedule uses."""
    blocks = [(FWD_COLORS[0], "", "forward"), (BWD_COLORS[0], "", "backward (+ recompute)")]
    if tl.vpp > 1:  # one colour per chunk, up to 4 (chunk e is drawn as chunk a again)
        n = min(tl.vpp, len(FWD_COLORS))
        letters = [", ".join(chr(ord("a") + c) for c in range(k, tl.vpp, n)) for k in range(n)]
        blocks = [(FWD_COLORS[k], "", f"{'forward, ' if k == 0 else ''}chunk {letters[k]}") for k in range(n)]
        blocks += [(BWD_COLORS[k], "", f"{'backward, ' if k == 0 else ''}chunk {letters[k]}") for k in range(n)]
    tail = [(COMM_COLOR, "", f"p2p send ({_ms(tl.p2p_s)} each)"), (DP_COLOR, "", "DP grad sync")]
    tail += [(WAIT_COLOR, "", "wait for the slowest GPU")] if tl.tail_s.get("stragglers", 0.0) > 0 else []
    return blocks + tail + [(OPT_COLOR, "", "optimizer"), ("white", "grey", "bubble (idle)")]


def _legend_width(label: str) -> float:
    return 18 + 5 + 6.4 * len(label) + 14  # swatch, gap, text (11 px DejaVu Sans ~ 6.4 px a character), space


def _legend_rows(items: list, width_px: float) -> list[list]:
    """The legend entries in rows that fit the picture's width."""
    rows: list[list] = [[]]
    for item in items:
        if rows[-1] and sum(_legend_width(it[2]) for it in rows[-1] + [item]) > width_px - 20:
            rows.append([])
        rows[-1].append(item)
    return rows


def _legend(pic: Picture, row: list, y: float) -> None:
    x = (pic.width_px - sum(_legend_width(label) for *_, label in row)) / 2
    for fill, outline, label in row:
        pic.rects(f"legend-{fill.lstrip('#')}", fill, [(x, y - 4.5, 18, 9)], outline or None, 1.0 if outline else 0.0)
        pic.text(x + 23, y, label, 11, anchor="start")
        x += _legend_width(label)


def _si(value: float, _pos=None) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def sweep_figure(rows: list[dict], title: str, option: str = "--plot"):
    """Throughput (tokens/s, with the linear-scaling line from the smallest size) and scaling
    efficiency against GPUs on a log2 axis; sizes without a plan are left out."""
    _, Figure = _matplotlib(option)
    ok = [r for r in rows if r.get("plan")]
    gpus = [r["gpus"] for r in ok]
    tps = [r["plan"]["estimate"]["tokens_per_s"] for r in ok]
    eff = [100 * r["scaling_efficiency"] for r in ok]
    fig = Figure(figsize=(7.5, 6.5))
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(gpus, tps, "o-", color=FWD_COLORS[0], label="predicted")
    if gpus:
        top.plot(gpus, [tps[0] * g / gpus[0] for g in gpus], "--", color="grey", label="linear from smallest")
    from matplotlib.ticker import FuncFormatter, LogLocator

    top.set_ylabel("tokens/s")
    top.set_yscale("log")
    top.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    top.yaxis.set_minor_locator(LogLocator(base=10, subs=()))
    top.yaxis.set_major_formatter(FuncFormatter(_si))
    top.legend(fontsize=8)
    top.set_title(title, fontsize=10)
    bottom.plot(gpus, eff, "s-", color=BWD_COLORS[0])
    for g, e in zip(gpus, eff, strict=False):
        bottom.annotate(f"{e:.0f}%", (g, e), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    bottom.set_ylabel("scaling efficiency (%)\n(tokens/s per GPU vs smallest)")
    bottom.set_ylim(0, max([105.0] + [e + 10 for e in eff]))
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(gpus, [str(g) for g in gpus])
    bottom.set_xlabel("GPUs")
    for ax in (top, bottom):
        ax.grid(True, which="both", linestyle=":", linewidth=0.5)
    fig.tight_layout()
    return fig
