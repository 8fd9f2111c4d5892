"""A small vector picture in pixels (filled rectangles in named groups, lines, text) written as SVG
text directly, or as PNG through matplotlib, which then draws exactly the same shapes.

Why not matplotlib for the SVG too: a 16-stage pipeline schedule has ~12,000 blocks, and matplotlib
took 2.3 s to lay them out and write them (import 0.5 s, one path element per block); the same
blocks as SVG ``<rect>`` elements are written in a few tens of milliseconds, with no import."""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

from planner.errors import PlannerError

# from the checkout: "megaplan" on the public package index is an unrelated package (README)
INSTALL_HINT = 'pip install ".[plot]" from the megaplan checkout (or pip install matplotlib)'
DPI = 100
FONT = "DejaVu Sans, Bitstream Vera Sans, Arial, sans-serif"  # matplotlib's default font first
BASELINE_EM = 0.36  # from the middle of a line of DejaVu Sans to its baseline (x-height 0.55 em, cap 0.73 em)
ANCHORS = {"start": "left", "middle": "center", "end": "right"}


def matplotlib_or_error(option: str):
    """matplotlib (drawing off screen), or one line saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlannerError(f"{option} needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    matplotlib.use("Agg", force=False)
    return matplotlib


@dataclass
class Group:
    """Rectangles (x, y, width, height in pixels, y down) filled with one colour."""

    gid: str
    fill: str
    boxes: list[tuple[float, float, float, float]]
    stroke: str | None = None
    stroke_px: float = 0.0


@dataclass
class Picture:
    width_px: float
    height_px: float
    groups: list[Group] = field(default_factory=list)
    lines: list[tuple[float, float, float, float, str, float, bool]] = field(default_factory=list)  # dotted last
    texts: list[tuple[float, float, str, float, str, str]] = field(
        default_factory=list
    )  # x, y, text, px, colour, anchor

    def rects(self, gid: str, fill: str, boxes, stroke: str | None = None, stroke_px: float = 0.0) -> None:
        if boxes:
            self.groups.append(Group(gid, fill, list(boxes), stroke, stroke_px))

    def line(self, x1: float, y1: float, x2: float, y2: float, color="black", px=0.8, dotted=False) -> None:
        self.lines.append((x1, y1, x2, y2, color, px, dotted))

    def text(self, x: float, y: float, text: str, px: float, color="black", anchor="middle") -> None:
        """Text centred vertically on y; anchor start/middle/end places x at its left/centre/right."""
        self.texts.append((x, y, text, px, color, anchor))

    def svg(self) -> str:
        w, h = self.width_px, self.height_px
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}">',
            f'<rect width="{w:.0f}" height="{h:.0f}" fill="white"/>',
        ]
        for g in self.groups:
            stroke = f' stroke="{g.stroke}" stroke-width="{g.stroke_px:g}"' if g.stroke and g.stroke_px else ""
            out.append(f'<g id="{g.gid}" fill="{g.fill}"{stroke}>')
            out += [f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{bh:.2f}"/>' for x, y, bw, bh in g.boxes]
            out.append("</g>")
        for x1, y1, x2, y2, color, px, dotted in self.lines:
            dash = ' stroke-dasharray="1,2"' if dotted else ""
            out.append(
                f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" '
                f'stroke="{color}" stroke-width="{px:g}"{dash}/>'
            )
        for x, y, text, px, color, anchor in self.texts:
            out.append(  # the baseline 0.36 em below the centre: renderers differ on dominant-baseline
                f'<text x="{x:.2f}" y="{y + BASELINE_EM * px:.2f}" font-size="{px:g}px" '
                f'font-family={quoteattr(FONT)} fill="{color}" '
                f'text-anchor="{anchor}">{escape(text)}</text>'
            )
        return "\n".join([*out, "</svg>", ""])

    def save(self, path: str, option: str) -> None:
        """SVG as text; PNG through matplotlib (the figure spans the picture, one pixel per unit)."""
        try:
            if path.lower().endswith(".svg"):
                with open(path, "w", encoding="utf-8") as f:
                    f.write(self.svg())
            else:
                self._png(path, option)
        except OSError as err:
            raise PlannerError(f"{option} {path!r}: cannot write: {err.strerror or err}") from err

    def _png(self, path: str, option: str) -> None:
        matplotlib_or_error(option)
        import numpy as np
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.patches import PathPatch
        from matplotlib.path import Path

        fig = Figure(figsize=(self.width_px / DPI, self.height_px / DPI), dpi=DPI)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, self.width_px)
        ax.set_ylim(self.height_px, 0)
        ax.set_axis_off()
        rect = [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]
        for g in self.groups:  # one compound path per group, limits set above (add_patch would walk 60k curves)
            x, y, bw, bh = np.asarray(g.boxes, dtype=float).T
            corners = [(x, y), (x + bw, y), (x + bw, y + bh), (x, y + bh), (x, y)]
            verts = np.stack([np.stack(c, axis=-1) for c in corners], axis=1).reshape(-1, 2)
            lw = g.stroke_px * 72 / DPI if g.stroke else 0.0
            shape = Path(verts, np.tile(rect, len(g.boxes)))
            ax.add_artist(PathPatch(shape, facecolor=g.fill, edgecolor=g.stroke or "none", linewidth=lw))
        for dotted in (False, True):
            segs = [ln for ln in self.lines if ln[6] is dotted]
            if segs:
                ax.add_collection(
                    LineCollection(
                        [((x1, y1), (x2, y2)) for x1, y1, x2, y2, *_ in segs],
                        colors=[ln[4] for ln in segs],
                        linewidths=[ln[5] * 72 / DPI for ln in segs],
                        linestyles=":" if dotted else "-",
                    )
                )
        for x, y, text, px, color, anchor in self.texts:
            ax.text(
                x, y + BASELINE_EM * px, text, fontsize=px * 72 / DPI, color=color, ha=ANCHORS[anchor], va="baseline"
            )
        fig.savefig(path, dpi=DPI, facecolor="white")
