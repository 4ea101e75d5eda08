"""Source positions, computed only for files that have findings.

LibCST's PositionProvider regenerates the module while building a CodeRange
for every node (about twice the cost of parsing).  Code generation alone is
cheap, so this state tracks a single character offset instead, records the
same syntactic spans as PositionProvider (leading whitespace and comments
excluded), and converts only the requested nodes' offsets to rows and columns.
LibCST round-trips source exactly, so offsets index the text it parsed.  That
is the user's text with identifiers folded to NFKC (spelling.py); where a
folding changed the length, offsets are mapped back to the user's text, so
rows, columns and `# noqa` lines are always the user's.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from contextlib import contextmanager
from typing import Callable, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

from kanalyze.analyzer.spelling import python_spelling


_LINE_END = re.compile(r"\r\n?|\n")


class _OffsetState(CodegenState):
    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.spans: dict[int, tuple[int, int]] = {}
        self.starts: list[int] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        pass  # nothing follows the last token, so the offsets already recorded stand

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        self.spans.setdefault(id(node), (start, self.offset))

    @contextmanager
    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> Iterator[None]:
        start = self.offset
        yield   # (an error inside, a RecursionError on a deep tree, goes on up as it is: no span)
        end = self.offset
        if start_node is not None:
            start = self.spans[id(start_node)][0]
        if end_node is not None:
            end = self.spans[id(end_node)][1]
        self.spans[id(node)] = (start, end)


class Positions:
    def __init__(self, module: cst.Module, text: str) -> None:
        state = _OffsetState(module)
        module._codegen(state)
        self._spans = state.spans
        self._to_user = _offset_map(text, module)
        # LibCST ends lines at "\r\n", "\n" or a lone "\r".
        self._line_starts = [0] + [m.end() for m in _LINE_END.finditer(text)]

    def _row_column(self, offset: int) -> tuple[int, int]:
        row = bisect_right(self._line_starts, offset)
        return row, offset - self._line_starts[row - 1] + 1

    def offsets(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """(start, end) character offsets of `node` in the user's text, None if it has no span."""
        span = self._spans.get(id(node))
        if span is None or self._to_user is None:
            return span
        return self._to_user(span[0]), self._to_user(span[1])

    def row_column(self, offset: int) -> tuple[int, int]:
        """1-based (row, column) of a character offset."""
        return self._row_column(offset)

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(row, column, end_row, end_column), rows and columns 1-based."""
        span = self.offsets(node)
        if span is None:
            return (1, 1, 1, 1)
        return (*self._row_column(span[0]), *self._row_column(span[1]))


def _offset_map(text: str, module: cst.Module) -> Callable[[int], int] | None:
    """Parsed offset → offset in `text`, or None when they are the same.

    A module parsed from `text` with identifiers folded to a different length
    needs the map; one parsed from `text` itself does not (rare: the extra
    code generation runs only for such files)."""
    spelling = python_spelling(text)
    if not spelling.resized or module.code != spelling.text:
        return None
    return spelling.to_user
