"""Pictures written to files with matplotlib (the optional ``plot`` extra): the pipeline schedule
of one plan and a scaling sweep. The core never imports matplotlib; these functions import it
when called and say in one line how to install it when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import PlannerError
from planner.timeline import FWD, Timeline

SUFFIXES = (".svg", ".png")
# from the checkout: "megaplan" on the public package index is an unrelated package (README)
INSTALL_HINT = 'pip install ".[plot]" from the megaplan checkout (or pip install matplotlib)'
FWD_COLORS = ("#1f5fbf", "#4f8fe6", "#86b6f0", "#b9d5f7")
BWD_COLORS = ("#2e8b3a", "#5cb85c", "#95d195", "#c4e6c4")
COMM_COLOR, DP_COLOR, OPT_COLOR = "#e6a700", "#b03aa8", "#c0392b"
DPI = 100


def check_picture_path(path: str, option: str) -> Path:
    """Refuse an unknown suffix, a folder that does not exist or cannot be written, or a missing
    matplotlib, before any work."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise PlannerError(f"{option} {path!r}: unknown picture format {p.suffix or '(none)'!r}; allowed: .svg, .png")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise PlannerError(f"{option} {path!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and (p.is_dir() or not os.access(p, os.W_OK))):
        raise PlannerError(f"{option} {path!r}: cannot write there (permission denied)")
    _matplotlib(option)
    return p


def _matplotlib(option: str):
    try:
        import matplotlib
    except ImportError:
        raise PlannerError(f"{option} needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    matplotlib.use("Agg", force=False)
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


def schedule_figure(tl: Timeline, title: str, option: str = "--schedule-file"):
    """The pipeline schedule: one broken_barh row per stage (stage 0 on top), forwards blue, backwards
    green (lighter for later interleaved chunks), blocking p2p sends amber, the DP gradient sync and
    optimizer step after the flush; micro-batch numbers (from 1) on the blocks wide enough for them."""
    _, Figure = _matplotlib(option)
    from matplotlib.patches import Patch

    width_in = min(max(8.0, 0.06 * len(tl.ops) / tl.p), 40.0)  # about 0.06 inch per block, within 8-40 inches
    fig = Figure(figsize=(width_in, 1.5 + 0.45 * tl.p), layout="constrained")
    ax = fig.add_subplot()
    px_per_s = width_in * DPI * 0.85 / tl.iteration_s
    edge = 0.4 if min(tl.forward_s) / tl.vpp * px_per_s >= 8 else 0.0  # white gaps only where blocks are wide
    for i in range(tl.p):
        y = tl.p - 1 - i
        ops = tl.stage_ops(i)
        for kind, colors in ((FWD, FWD_COLORS), ("bwd", BWD_COLORS)):
            for chunk in range(tl.vpp):
                bars = [(o.start_s, o.duration_s) for o in ops if o.kind == kind and o.chunk == chunk]
                if bars:
                    coll = ax.broken_barh(
                        bars, (y - 0.4, 0.8), facecolors=colors[chunk % len(colors)], edgecolors="white", linewidth=edge
                    )
                    coll.set_gid(f"stage{i}-{kind}-chunk{chunk}")
        sends = [(t.start_s, t.end_s - t.start_s) for t in tl.stage_sends(i) if t.blocking]
        if sends:
            ax.broken_barh(sends, (y - 0.15, 0.3), facecolors=COMM_COLOR).set_gid(f"stage{i}-p2p")
        t0 = tl.pipeline_s
        for name, color in (("dp_comm", DP_COLOR), ("optimizer", OPT_COLOR)):
            secs = tl.tail_s.get(name, 0.0)
            if secs > 0:
                ax.broken_barh([(t0, secs)], (y - 0.4, 0.8), facecolors=color).set_gid(f"stage{i}-{name}")
                t0 += secs
        for o in ops:
            label = f"{o.microbatch + 1}{chr(ord('a') + o.chunk) if tl.vpp > 1 else ''}"
            if o.duration_s * px_per_s >= 7 * len(label) + 2:
                ax.text(
                    o.start_s + o.duration_s / 2,
                    y,
                    label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if o.chunk < 2 else "black",
                )
    ax.set_yticks(range(tl.p), [f"stage {tl.p - 1 - y}" for y in range(tl.p)])
    ax.set_ylim(-0.6, tl.p - 0.4)
    ax.set_xlim(0, tl.iteration_s)
    ax.set_xlabel("time (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    handles = [
        Patch(color=FWD_COLORS[0], label="forward"),
        Patch(color=BWD_COLORS[0], label="backward (+ recompute)"),
        Patch(color=COMM_COLOR, label=f"p2p send ({_ms(tl.p2p_s)} each)"),
        Patch(color=DP_COLOR, label="DP grad sync"),
        Patch(color=OPT_COLOR, label="optimizer"),
        Patch(facecolor="white", edgecolor="grey", label="bubble (idle)"),
    ]
    if tl.vpp > 1:
        handles[0:2] = [
            Patch(color=FWD_COLORS[0], label="forward, chunk a"),
            Patch(color=FWD_COLORS[1], label="chunk b"),
            Patch(color=BWD_COLORS[0], label="backward, chunk a"),
            Patch(color=BWD_COLORS[1], label="chunk b"),
        ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


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
