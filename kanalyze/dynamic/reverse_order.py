"""The ORD001 reversal on a GPU: the candidate rewritten so that its programs run in reverse order.

A GPU schedules a launch's programs in nearly the same order every time: a
race whose outcome depends on which program writes last (several programs
storing to one address, a float sum of few atomic contributions) gives the same
bits launch after launch, so repeated launches alone cannot refute ORD001.
This rewrite gives each program the work of its mirror image: in every Triton
kernel, `tl.program_id(axis)` becomes
`(tl.num_programs(axis) - 1 - tl.program_id(axis))`, and in CUDA C++ held in
`load_inline` strings `blockIdx.x` becomes `(gridDim.x - 1 - blockIdx.x)` (y
and z alike).  Every program still computes what it computed before; only the
hardware's order of them is reversed.  A kernel whose result does not depend
on program order gives the same bits; one whose result does, where order can
show at all, gives others.

The rewrite is LibCST for Triton (nothing is imported or run) and text for CUDA
C++, as promote.py and promote_cuda.py do for PRC002.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from kanalyze.dynamic.promote import jit_decorated

_CUDA_BLOCK_INDEX = re.compile(r"\bblockIdx\s*\.\s*([xyz])\b")


class _Reverse(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0            # > 0 inside a Triton kernel or a helper it calls (@triton.jit)
        self.changes: list[dict] = []
        self.bare = False         # a `program_id` imported by name: `num_programs` must be imported too

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.depth or jit_decorated(node):
            self.depth += 1

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if self.depth:
            self.depth -= 1
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if not self.depth or name != "program_id":
            return updated
        # `tl.program_id(0)` → `(tl.num_programs(0) - 1 - tl.program_id(0))`, through the same module
        # the call names (`tl.`, `triton.language.`, or a bare imported `program_id`).
        self.bare = self.bare or isinstance(func, cst.Name)
        count = cst.Name("num_programs") if isinstance(func, cst.Name) else func.with_changes(
            attr=cst.Name("num_programs"))
        expression = cst.BinaryOperation(
            left=cst.BinaryOperation(left=updated.with_changes(func=count), operator=cst.Subtract(),
                                     right=cst.Integer("1")),
            operator=cst.Subtract(), right=updated,
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        row = self.get_metadata(PositionProvider, original).start.line
        self.changes.append({"row": row, "from": cst.Module([]).code_for_node(original),
                             "to": cst.Module([]).code_for_node(expression)})
        return expression


def reverse_program_order(source: str) -> tuple[str, list[dict]]:
    """(the source with every program's order reversed, the rewrites made); the source unchanged
    and [] where it has no program index to reverse (no Triton kernel, no CUDA C++ block index)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return source, []
    transformer = _Reverse()
    reversed_module = MetadataWrapper(module).visit(transformer)
    if transformer.changes:
        if transformer.bare:   # after the `from __future__` imports, which must come first
            body = list(reversed_module.body)
            at = max((i + 1 for i, line in enumerate(body) if _future_import(line)), default=0)
            body.insert(at, cst.parse_statement("from triton.language import num_programs\n"))
            reversed_module = reversed_module.with_changes(body=body)
        return reversed_module.code, transformer.changes
    if "load_inline" in source or "cpp_extension" in source:
        return _reverse_cuda(source)
    return source, []


def _future_import(line: cst.CSTNode) -> bool:
    return isinstance(line, cst.SimpleStatementLine) and any(
        isinstance(s, cst.ImportFrom) and isinstance(s.module, cst.Name) and s.module.value == "__future__"
        for s in line.body)


def _reverse_cuda(source: str) -> tuple[str, list[dict]]:
    lines = source.splitlines(keepends=True)
    changes: list[dict] = []
    for row, line in enumerate(lines, start=1):
        def mirror(match: re.Match, row=row) -> str:
            axis = match[1]
            replacement = f"(gridDim.{axis} - 1 - blockIdx.{axis})"
            changes.append({"row": row, "from": match[0], "to": replacement})
            return replacement
        lines[row - 1] = _CUDA_BLOCK_INDEX.sub(mirror, line)
    if not changes:
        return source, []
    return "".join(lines), changes
