"""The source under a finding, as ruff's `full` format shows it: each line of the span
behind a gutter with its row number, and a caret line under the span.

    kern.py:10:9: PRC001 `tl.dot(a, b)` ... runs in TF32 by default ...
       |
    10 |     c = tl.dot(a, b)
       |         ^^^^^^^^^^^^ PRC001
       |

Rows and columns are the finding's (1-based; `end_column` is one past the span).
The lines come from the checked file, so every character goes through `printable`
(a control or bidi character shows as its escape, and the carets still line up
under it); a tab shows as four spaces, a wide character as two cells.  A span of
more than MAX_ROWS rows shows its first and last rows; a line wider than
MAX_WIDTH cells shows a window around the span.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

from kanalyze.findings import Finding
from kanalyze.report.escape import printable

MAX_ROWS = 6
MAX_WIDTH = 160
_ROW_BREAK = re.compile(r"\r\n|\r|\n")  # how the parsers count rows: not str.splitlines()'s \f, \x1c, \u2028 ...


def split_rows(text: str) -> list[str]:
    """`text`'s rows, as findings number them from 1."""
    return _ROW_BREAK.split(text)


def _cell(ch: str) -> tuple[str, int]:
    """What one character of a checked file shows as, and how many cells that takes."""
    if ch == "\t":
        return "    ", 4
    shown = printable(ch)
    if shown != ch:
        return shown, len(shown)
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return ch, 0
    return ch, 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _line(line: str, start: int, end: int) -> tuple[str, int, int]:
    """`line` as shown, the cell where the span `[start, end)` begins, and its width."""
    cells = [_cell(ch) for ch in line]
    widths = [w for _, w in cells]
    first, last = 0, len(line)
    if sum(widths) > MAX_WIDTH:  # a window around the span's start
        first = max(0, start - MAX_WIDTH // 4)
        width, last = 0, first
        while last < len(line) and width + widths[last] <= MAX_WIDTH:
            width += widths[last]
            last += 1
    start, end = min(max(start, first), last), min(max(end, first), last)
    head = "…" if first > 0 else ""
    shown = head + "".join(text for text, _ in cells[first:last]) + ("…" if last < len(line) else "")
    offset = len(head) + sum(widths[first:start])
    return shown, offset, max(1, sum(widths[start:end]))


def render_snippet(finding: Finding, rows: list[str], paint: Callable[..., str], caret_colour: str,
                   gutter_colour: str) -> list[str]:
    """The lines under `finding`'s header; none when its row is not in `rows`."""
    loc = finding.location
    if not 1 <= loc.row <= len(rows):
        return []
    end_row = min(max(loc.end_row, loc.row), len(rows))
    shown: list[int | None] = list(range(loc.row, end_row + 1))
    if len(shown) > MAX_ROWS:
        shown = shown[:3] + [None] + shown[-2:]
    width = len(str(end_row))
    bar = paint(f"{' ' * width} |", gutter_colour)
    lines = [bar]
    for row in shown:
        if row is None:
            lines.append(paint(f"{'.' * width} |", gutter_colour))
            continue
        text = rows[row - 1]
        indent = len(text) - len(text.lstrip(" \t"))
        start = loc.column - 1 if row == loc.row else indent
        end = loc.end_column - 1 if row == loc.end_row else len(text)
        start = min(max(start, 0), len(text))
        line, offset, carets = _line(text, start, max(end, start))
        label = f" {printable(finding.code)}" if row == end_row else ""
        lines.append(paint(f"{row:>{width}} |", gutter_colour) + f" {line}".rstrip())
        lines.append(bar + " " * (offset + 1) + paint("^" * carets + label, caret_colour))
    lines.append(bar)
    return lines
