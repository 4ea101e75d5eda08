"""Inline SVG bar charts for the audit's HTML report (html.py): no plotting library, a few kB a chart.

    grouped_bars(groups, series, title) -> "<svg ...>...</svg>"

groups: [(label, [value per series])], e.g. [("MEM002", [12, 12, 9])]; series:
[(name, colour)], e.g. [("violations", "#b3261e"), ...].  One horizontal bar per
value, the groups one under the other, every bar on one scale (the largest value),
its count written at its end and its name and count in a tooltip (<title>).  Labels
are escaped here: clause codes are kanalyze's, but nothing is assumed of them.
"""

from __future__ import annotations

from html import escape

LABEL_WIDTH = 90
BAR_AREA = 460
COUNT_WIDTH = 60
BAR_HEIGHT = 11
BAR_GAP = 2
GROUP_GAP = 12
LEGEND_HEIGHT = 26


def _text(x: float, y: float, content: str, anchor: str = "start", css: str = "") -> str:
    css_class = f' class="{css}"' if css else ""
    return (f'<text x="{x:g}" y="{y:g}" text-anchor="{anchor}" dominant-baseline="middle"{css_class}>'
            f"{escape(content)}</text>")


def _legend(series: list[tuple[str, str]]) -> list[str]:
    parts, x = [], LABEL_WIDTH
    for name, colour in series:
        parts.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{escape(colour)}"/>')
        parts.append(_text(x + 16, 12, name))
        x += 24 + 7 * len(name)
    return parts


def grouped_bars(groups: list[tuple[str, list[int]]], series: list[tuple[str, str]], title: str) -> str:
    largest = max((value for _, values in groups for value in values), default=0) or 1
    group_height = len(series) * (BAR_HEIGHT + BAR_GAP) - BAR_GAP
    width = LABEL_WIDTH + BAR_AREA + COUNT_WIDTH
    height = LEGEND_HEIGHT + len(groups) * (group_height + GROUP_GAP)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {width} {height}" '
              f'width="{width}" height="{height}" aria-label="{escape(title)}">'), f"<title>{escape(title)}</title>"]
    parts += _legend(series)
    for index, (label, values) in enumerate(groups):
        top = LEGEND_HEIGHT + index * (group_height + GROUP_GAP)
        parts.append(_text(LABEL_WIDTH - 8, top + group_height / 2, label, anchor="end", css="label"))
        for row, ((name, colour), value) in enumerate(zip(series, values)):
            y = top + row * (BAR_HEIGHT + BAR_GAP)
            length = BAR_AREA * value / largest
            parts.append(f'<rect x="{LABEL_WIDTH}" y="{y}" width="{length:.1f}" height="{BAR_HEIGHT}" '
                         f'fill="{escape(colour)}"><title>{escape(f"{label}: {value} {name}")}</title></rect>')
            parts.append(_text(LABEL_WIDTH + length + 4, y + BAR_HEIGHT / 2, str(value), css="count"))
    parts.append("</svg>")
    return "".join(parts)
