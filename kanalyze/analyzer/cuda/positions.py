"""Rows and columns for CUDA findings, computed only for files that have some.

A finding in a `.cu` file is at its byte offset in the file.  A finding in an
inline string is at the Python file's row and column: the unit offset goes
through the unit's SourceMap to a character of a Python literal, whose offset
LibCST positions give.  Tree-sitter counts bytes; units with non-ASCII text
convert to characters first.  Also here: what a unit that was read in part
says about what was skipped (one KAN000 per unit).
"""

from __future__ import annotations

from typing import Any

from kanalyze.analyzer.cuda.inline_plain import PyPlace
from kanalyze.analyzer.cuda.sources import CudaUnit, line_starts, row_column

Span = tuple[int, int, int, int]


class CudaLocator:
    def __init__(self, text: str, host: Any = None) -> None:
        self.positions = None
        self.starts: list[int] | None = None
        if host is not None:
            from kanalyze.analyzer.positions import Positions

            self.positions = Positions(host.module, text)
        else:
            self.starts = line_starts(text)

    def rows(self, start: int, end: int) -> Span:
        if self.positions is not None:
            return (*self.positions.row_column(start), *self.positions.row_column(end))
        return (*row_column(self.starts, start), *row_column(self.starts, end))

    def python_span(self, node: Any) -> Span:
        """Where a LibCST node (or a PyPlace of a plain file) of the Python file is."""
        offsets = _offsets(self.positions, node)
        return self.rows(*offsets) if offsets else (1, 1, 1, 1)

    def unit_span(self, unit: CudaUnit, start_byte: int, end_byte: int) -> Span:
        """Where bytes [start_byte, end_byte) of a unit are in the file the user edits."""
        start, end = _characters(unit, start_byte), _characters(unit, end_byte)
        origin = unit.source_map.origin(start, self._resolve)
        last = unit.source_map.origin(max(end - 1, start), self._resolve) + (1 if end > start else 0)
        return self.rows(origin, last)

    def _resolve(self, node: Any) -> int | None:
        offsets = _offsets(self.positions, node)
        return offsets[0] if offsets else None


def _offsets(positions: Any, node: Any) -> tuple[int, int] | None:
    if isinstance(node, PyPlace):  # a plain file, read with `ast`: the offsets are known already
        return node.start, node.end
    return positions.offsets(node) if positions is not None else None


def _characters(unit: CudaUnit, byte: int) -> int:
    if unit.text.isascii():
        return byte
    return len(unit.text.encode("utf-8", "surrogatepass")[:byte].decode("utf-8", "ignore"))


def read_in_part(unit: CudaUnit, model: Any, why: str, locator: CudaLocator) -> tuple[Span, str]:
    """(where, message) of the one KAN000 for a unit read in part: the regions
    tree-sitter could not parse, blocks behind macros the unit does not define,
    and the pieces of an inline string that are not constant."""
    parts: list[str] = []
    span = None
    if why:
        parts.append(why)
        span = locator.unit_span(unit, 0, 0)
    errors = model.errors if model is not None else []
    regions = []
    for error in errors[:6]:
        first = locator.unit_span(unit, error.start_byte, max(error.end_byte, error.start_byte + 1))
        span = span or first
        regions.append(f"{first[0]}" if first[2] == first[0] else f"{first[0]}-{first[2]}")
    if regions:
        more = len(errors) - len(regions)
        parts.append(f"tree-sitter could not parse line{'s' if len(regions) > 1 or '-' in regions[0] else ''} "
                     f"{', '.join(regions)}{f' and {more} more regions' if more > 0 else ''} (a macro the unit "
                     f"does not define, or syntax it does not support); that code was skipped")
    for node in (model.unknown_macros if model is not None else [])[:3]:
        first = locator.unit_span(unit, node.start_byte, node.start_byte + 1)
        span = span or first
        head = node.child_by_field_name("declarator")
        parts.append(f"`{model.text(head, 40)}` on line {first[0]} is a macro the unit does not define; its block "
                     f"was read as plain statements")
    counts: dict[str, int] = {}
    for note in unit.skipped:
        counts[note.what] = counts.get(note.what, 0) + 1
        if span is None and note.node is not None:
            span = locator.python_span(note.node)
    parts.extend(what if n == 1 else f"{what} ({n} places)" for what, n in counts.items())
    where = "this file" if unit.origin == "file" else f"the `{unit.origin}` CUDA source"
    return span or (1, 1, 1, 1), f"{where} was read in part: {'; '.join(parts)}. Findings in that code may be missing"
