"""Grouped program ordering that assumes the rows come in whole groups.

Triton's matmul tutorial orders a 1-D grid's programs in groups of `GROUP_M` row
tiles (better L2 reuse), and takes the last group's height as what is left:

    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

Written with `GROUP_M` itself in the `%` and the `//` (a common slip in generated
kernels, and in one that computes `group_size_m` and then does not use it), the
last group's programs, when `cdiv(M, BLOCK_M)` is not a multiple of `GROUP_M`,
spread over `GROUP_M` rows of which only the first exist: they land on rows past
the end (masked off), and the column tiles they should have covered are computed
by nobody.  The output is right exactly at the sizes whose row tiles fill every
group (KernelBench's 1024 rows in tiles of 128, eight to a group) and left
partly unwritten at the others.

`whole_group_orderings` finds a row index `first + (pid % G)` whose `G` is a
constexpr that names a group (`GROUP_M`, `GROUP_SIZE_M`), read directly or through a
plain local (`group_size_m = GROUP_M`), with a `//` by the same `G` beside it; not
where every value the constexpr takes is 1 (no grouping).
"""

from __future__ import annotations

import re

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

GROUP_NAME = re.compile(r"group", re.IGNORECASE)


def whole_group_orderings(model: TritonModule, jit: JitFunction) -> list[tuple[cst.BinaryOperation, str]]:
    """(the `%` node, the group constexpr's name) of each ordering that takes whole groups."""
    groups = {p.name for p in jit.params if p.is_constexpr and GROUP_NAME.search(p.name)}
    if not groups:
        return []
    modulos: list[tuple[cst.BinaryOperation, str]] = []
    divided: set[str] = set()
    for node in walk(jit.node.body):
        if not isinstance(node, cst.BinaryOperation):
            continue
        group = _group_param(model, jit, node.right, groups)
        if group is None:
            continue
        if isinstance(node.operator, cst.Modulo):
            parent = model.parent(node)   # `first_pid_m + (pid % GROUP_M)`: a row in the group
            if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Add):
                modulos.append((node, group))
        elif isinstance(node.operator, cst.FloorDivide):
            divided.add(group)
    return [(node, group) for node, group in modulos if group in divided and not _never_grouped(jit, group)]


def _group_param(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression, groups: set[str]) -> str | None:
    """The group constexpr `expr` is: itself, or a local whose every definition is that name."""
    if not isinstance(expr, cst.Name):
        return None
    defs = model.flow(jit.function).defs_of(expr.value)
    if expr.value in groups and all(d.kind == "param" for d in defs):
        return expr.value
    if defs and all(d.kind == "assign" and isinstance(d.value, cst.Name) and d.value.value in groups for d in defs):
        return defs[0].value.value
    return None


def _never_grouped(jit: JitFunction, group: str) -> bool:
    """Every value the constexpr takes (default, launches, autotune configs) is 1: no grouping."""
    values = jit.constexpr_values(group)
    return bool(values) and all(int_literal(v) == 1 for v in values)
