"""The preset listings (``megaplan presets``): one row per preset, its name and its facts, fitted to the
terminal. The facts wrap between fields (never inside "B 512 × s 2048") under the description column;
when that column would be too narrow for the longest fact, each description folds onto its own
indented lines under the name. Returned, never printed here."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

SEP = ", "
INDENT = 2  # before a name
FOLD_INDENT = 4  # before a description folded under its name
GAP = 2  # between the name and the description
MAX_FIELD = 50  # a fact longer than this may wrap inside itself rather than fold the whole listing


def pack(fields: Sequence[str], width: int) -> list[str]:
    """The fields joined by ", " into lines of at most ``width`` characters, broken only between fields
    (a field wider than the width alone is broken between its words, a word wider than it is cut)."""
    pieces: list[str] = []
    for k, field in enumerate(fields):
        comma = "," if k < len(fields) - 1 else ""
        words = [field] if len(field + comma) <= width else _words(field, max(width - len(comma), 1))
        pieces += words[:-1] + [words[-1] + comma]
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def _words(text: str, width: int) -> list[str]:
    """A long field broken between its words into pieces of at most ``width`` characters."""
    out: list[str] = []
    for word in text.split():
        while len(word) > width:
            out.append(word[:width])
            word = word[width:]
        if out and len(out[-1]) + 1 + len(word) <= width:
            out[-1] += " " + word
        else:
            out.append(word)
    return out


class PresetListing:
    """Presets of one kind under a bold title: the name, then the description, whose facts wrap between
    fields under the description's first line (a hanging indent); on a terminal too narrow for the
    longest fact, the description folds onto indented lines of its own under each name. Every fact is
    shown at every width."""

    def __init__(self, title: str, rows: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.title, self.rows = title, list(rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(self.title, style="bold")
        width = options.max_width
        name_w = max((len(name) for name, _ in self.rows), default=0)
        longest = max((len(f) for _, fields in self.rows for f in fields), default=0)
        desc_w = width - INDENT - name_w - GAP
        if desc_w >= min(longest, MAX_FIELD):  # name and description side by side, a hanging indent
            for name, fields in self.rows:
                lines = pack(fields, desc_w)
                yield Text(f"{'':{INDENT}}{name:<{name_w}}{'':{GAP}}{lines[0]}")
                for line in lines[1:]:
                    yield Text(" " * (INDENT + name_w + GAP) + line)
            return
        for name, fields in self.rows:
            yield Text(" " * INDENT + name)
            for line in pack(fields, max(width - FOLD_INDENT, 1)):
                yield Text(" " * FOLD_INDENT + line)
