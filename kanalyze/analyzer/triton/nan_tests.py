"""Where a kernel or its wrapper tests values for NaN or ±Inf, and what only reads a tensor's metadata.

Read by EXC001 (a NaN test whose branch replaces the special value swallows it).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text
from kanalyze.analyzer.triton.model import TritonModule

NAN_TESTS = {"isnan": "NaN", "isinf": "±Inf", "isfinite": "NaN and ±Inf", "isfinited": "NaN and ±Inf",
             "isposinf": "+Inf", "isneginf": "-Inf"}
SHAPE_ATTRS = {"shape", "dtype", "device", "type"}
SHAPE_CALLS = {"zeros_like", "ones_like", "full_like", "empty_like"}


def shape_only(model: TritonModule, node: cst.CSTNode) -> bool:
    """`x.shape`, `x.dtype`, `zeros_like(x)`: read x's metadata, not its values."""
    if isinstance(node, cst.Attribute):
        return node.attr.value in SHAPE_ATTRS
    if isinstance(node, cst.Call):
        return (model.call_name(node) or "").rpartition(".")[2] in SHAPE_CALLS
    return False


def value_names(model: TritonModule, expr: cst.CSTNode) -> set[str]:
    found, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if shape_only(model, node):
            continue
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, cst.Attribute):
            stack.append(node.value)
        else:
            stack.extend(node.children)
    return found


def nan_test(model: TritonModule, cond: cst.BaseExpression) -> tuple[cst.BaseExpression, bool, str] | None:
    """For a NaN/Inf test, (tested value, is the test True on the special
    lanes, which specials)."""
    if isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1:
        op, right = cond.comparisons[0].operator, cond.comparisons[0].comparator
        same = node_text(model.module, cond.left).replace(" ", "") == node_text(model.module, right).replace(" ", "")
        if same and isinstance(op, (cst.NotEqual, cst.Equal)):
            return cond.left, isinstance(op, cst.NotEqual), "NaN"
    if isinstance(cond, cst.Call):
        func = cond.func
        leaf = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if leaf in NAN_TESTS:
            qualname = model.call_name(cond) or ""
            subject = cond.args[0].value if cond.args else func.value if isinstance(func, cst.Attribute) else None
            if subject is not None and (cond.args and qualname.startswith(("triton", "torch")) or not cond.args):
                return subject, not leaf.startswith("isfinite"), NAN_TESTS[leaf]
    return None
