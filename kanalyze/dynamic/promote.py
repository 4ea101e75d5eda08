"""The PRC002 promotion differential: the candidate rewritten with fp32 accumulators (LibCST).

In every Triton kernel that holds a flagged line (every kernel when no line is
given): `dtype=` and `out_dtype=` arguments naming fp16/bf16
(`tl.zeros(..., dtype=tl.float16)`, `tl.dot(..., out_dtype=tl.float16)`)
become fp32, and so does any fp16/bf16 dtype on a flagged line itself (a
running `acc.to(tl.float16)`).  Launch arguments named like an accumulator
dtype (`ACC_DTYPE=tl.float16`) become fp32 too.  Stores cast back to the
output's dtype on their own, so the rewrite changes the accumulation only.

If the promoted kernel's error vanishes where the original's does not, the
accumulator was the cause: that difference is the PRC002 witness.  CUDA C++
held in `load_inline` strings is promoted by promote_cuda.py.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

LOW = {"float16", "bfloat16", "half", "fp16", "bf16"}
DTYPE_KEYWORDS = {"dtype", "out_dtype"}


def _is_low(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value in LOW


def jit_decorated(node: cst.FunctionDef) -> bool:
    for decorator in node.decorators:
        expr = decorator.decorator
        expr = expr.func if isinstance(expr, cst.Call) else expr
        name = expr.attr.value if isinstance(expr, cst.Attribute) else getattr(expr, "value", "")
        if name in ("jit", "autotune", "heuristics"):
            return True
    return False


class _Promote(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, rows: set[int] | None) -> None:
        super().__init__()
        self.rows = rows
        self.depth = 0            # > 0 inside a kernel being promoted
        self.changes: list[dict] = []

    def _row(self, node) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.depth or not jit_decorated(node):
            if self.depth:
                self.depth += 1
            return
        span = self.get_metadata(PositionProvider, node)
        if self.rows is None or any(span.start.line <= r <= span.end.line for r in self.rows):
            self.depth = 1

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if self.depth:
            self.depth -= 1
        return updated

    def _promote(self, original: cst.Attribute, updated: cst.Attribute, why: str) -> cst.Attribute:
        self.changes.append({"row": self._row(original), "from": f"{original.attr.value}", "to": "float32",
                             "why": why})
        return updated.with_changes(attr=cst.Name("float32"))

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        keyword = original.keyword.value if original.keyword else None
        if not _is_low(original.value):
            return updated
        if self.depth and keyword in DTYPE_KEYWORDS:
            return updated.with_changes(value=self._promote(original.value, updated.value, f"{keyword}="))
        if not self.depth and keyword and "ACC" in keyword.upper():
            return updated.with_changes(value=self._promote(original.value, updated.value, f"launch {keyword}="))
        if self.depth and self.rows and self._row(original) in self.rows:
            return updated.with_changes(value=self._promote(original.value, updated.value, "flagged line"))
        return updated


def promote_accumulators(source: str, rows: list[int] | None = None) -> tuple[str, list[dict]]:
    """(promoted source, the rewrites made); the source unchanged and [] when nothing applies."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return source, []
    transformer = _Promote(set(rows) if rows else None)
    promoted = MetadataWrapper(module).visit(transformer)
    if not transformer.changes and "load_inline" in source:   # CUDA C++ in strings: promote_cuda.py
        from kanalyze.dynamic.promote_cuda import promote_cuda_accumulators

        return promote_cuda_accumulators(source, rows)
    return promoted.code, transformer.changes
