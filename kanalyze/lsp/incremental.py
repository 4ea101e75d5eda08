"""One document's findings, re-analyzing only the pieces an edit changed.

`IncrementalAnalyzer.analyze` gives what `analysis.analyze_document` gives for
the same text, the findings in the same order.  A Python text that layout.py
can cut is analyzed piece by piece (the context and one component of kernels
each), every piece through `analyze_document`.  A piece's findings are kept
by a digest of its text, which holds no row of the document: an edit that
leaves a kernel's text alone, wherever it moves it, finds its findings kept.
Rows are mapped back to the document, findings in the context (which every
piece holds) are counted once, and the union is sorted as the pipeline sorts.
Anything else (CUDA, a text layout.py leaves whole, a piece that gives a
KAN000/KAN001, a row that does not map) is analyzed whole, and so is a text
that may launch a kernel while the bounds proofs are on (one solver and one
budget per file), and one where a piece reports a kernel that nothing launches
(RES001 lists every kernel the file launches in that finding).

The count of findings `# noqa` suppressed is the pieces' counts less the
context's count in every piece but one.

Runs inside the worker process, which keeps one analyzer for its lifetime;
imports nothing of pygls.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter, OrderedDict

from kanalyze.findings import Finding
from kanalyze.lsp.analysis import PYTHON, analyze_document
from kanalyze.lsp.layout import Layout, Piece, cut

PIECE_CACHE_SIZE = 2048  # pieces kept (about a kernel's findings each): fifty 40-kernel versions
LAYOUTS_KEPT = 16        # documents whose last layout is kept, for the next version's `cut`

Result = tuple[list[Finding], int]


class IncrementalAnalyzer:
    """`analyze_document`, with the findings of every piece kept between calls.

    `stats` counts how texts were analyzed: "whole", "cut", and the pieces
    "analyzed" and "kept"."""

    def __init__(self, capacity: int = PIECE_CACHE_SIZE) -> None:
        self.capacity = capacity
        self.stats: Counter[str] = Counter()
        self._pieces: OrderedDict[tuple, Result | None] = OrderedDict()
        self._layouts: OrderedDict[str, Layout] = OrderedDict()

    def analyze(self, path: str, text: str, kind: str, proofs: dict | None = None) -> Result:
        layout = cut(text, self._layouts.pop(path, None)) if kind == PYTHON else "not Python"
        if isinstance(layout, Layout):
            self._layouts[path] = layout
            if len(self._layouts) > LAYOUTS_KEPT:
                self._layouts.popitem(last=False)
            proving = layout.may_launch and (proofs or {}).get("proofs", True)
            result = None if proving else self._by_pieces(path, layout, proofs)
            if result is not None:
                self.stats["cut"] += 1
                return result
        self.stats["whole"] += 1
        return analyze_document(path, text, kind, proofs)

    def _by_pieces(self, path: str, layout: Layout, proofs: dict | None) -> Result | None:
        settings = repr(sorted((proofs or {}).items()))
        findings: list[Finding] = []
        seen: set[str] = set()
        suppressed = 0
        for piece in layout.pieces:
            result = self._piece(path, piece, settings, proofs)
            if result is None:
                return None
            for finding in result[0]:
                placed = _placed(finding, piece.rows)
                if placed is None or _file_wide(finding):
                    return None
                identity = repr(placed.to_dict())
                if identity not in seen:
                    seen.add(identity)
                    findings.append(placed)
            suppressed += result[1]
        if suppressed:
            context = self._piece(path, layout.context, settings, proofs, whole_file=False)
            if context is None:
                return None
            suppressed -= (len(layout.pieces) - 1) * context[1]
        findings.sort(key=lambda f: f.sort_key)
        return findings, suppressed

    def _piece(self, path: str, piece: Piece, settings: str, proofs: dict | None,
               whole_file: bool = True) -> Result | None:
        """A piece's findings at the piece's own rows; None when the piece cannot stand
        for its part of the file (a parse error, an internal error)."""
        key = (path, settings, whole_file, hashlib.sha256(piece.text.encode("utf-8", "surrogatepass")).digest())
        if key in self._pieces:
            self._pieces.move_to_end(key)
            self.stats["kept"] += 1
            return self._pieces[key]
        self.stats["analyzed"] += 1
        if whole_file:
            found, suppressed = analyze_document(path, piece.text, PYTHON, proofs)
        else:
            # The context alone holds no kernel, so the prefilter would skip it: run the pass itself.
            from kanalyze.check import analyze_text

            found, suppressed = analyze_text(path, piece.text, proofs)
        result = None if any(f.code.startswith("KAN") for f in found) else (found, suppressed)
        self._pieces[key] = result
        if len(self._pieces) > self.capacity:
            self._pieces.popitem(last=False)
        return result


def _file_wide(finding: Finding) -> bool:
    """A finding whose text says something of the whole file: RES001's kernel that nothing
    launches lists every kernel the file launches."""
    return finding.code == "RES001" and "launched" in finding.evidence


def _placed(finding: Finding, rows: tuple[int, ...]) -> Finding | None:
    """The finding at the document's rows; None when a row is not one of the piece's lines."""
    location = finding.location
    if not (1 <= location.row <= len(rows) and 1 <= location.end_row <= len(rows)):
        return None
    moved = dataclasses.replace(location, row=rows[location.row - 1], end_row=rows[location.end_row - 1])
    return dataclasses.replace(finding, location=moved)
