"""Source positions, computed only for files that have findings.

LibCST computes positions for a whole module at once; doing that for every
file would double the cost of a check, so the pipeline asks only when a rule
has reported something.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider


class Positions:
    def __init__(self, module: cst.Module) -> None:
        # unsafe_skip_copy: keep node identity, so the rules' nodes are the keys.
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self._ranges = wrapper.resolve(PositionProvider)

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(row, column, end_row, end_column), rows and columns 1-based."""
        code_range = self._ranges.get(node)
        if code_range is None:
            return (1, 1, 1, 1)
        start, end = code_range.start, code_range.end
        return (start.line, start.column + 1, end.line, end.column + 1)
