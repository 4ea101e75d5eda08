"""Host values that are a size read from the input as it is, never rounded up to a block.

`M = x.numel()`, `B, T, H, K = k.shape`, `G = HQ // H`, `D = inp.numel() // N // C`, a size
the caller passes in (`dv`, not a `block_size`) and, in a `backward`, `D = ctx.D` saved by
`forward` from such a value: an arange that wide covers its axis exactly.
`next_power_of_2(n)` or a helper's result may be wider.

Two readings: `exact_size` (every value the name can hold anywhere in the function) and
`exact_at` (in order: the definitions that reach one place, so that `M = x.numel()` before a
launch is not confused with `M = x.numel() // N` in another branch).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import assigned_value, shape_kind
from kanalyze.analyzer.triton.size_literals import EXACT_CALL, TILE_NAME, call_text, rounded

_SIZE_CALLS = ("numel", "size")


def exact_size(model: TritonModule, fn: Function, value) -> bool:
    """Is a host value a size read from the input as it is (`x.shape[1]`, `HQ // H`), not rounded?"""
    if shape_kind(model, fn, value) is None or rounded(model, fn, value):
        return False
    for _, e in model.sources(fn, value):
        for n in walk(e):  # a helper's result (`calculate_settings(n)`) may be a rounded block
            if isinstance(n, cst.Call) and not EXACT_CALL.search(call_text(model, n)):
                return False
    return True


def exact_at(model: TritonModule, fn: Function, expr, at: cst.CSTNode, depth: int = 8) -> bool:
    """Is `expr`, read at `at`, a size of the input as it is: a shape read, a product or an
    exact quotient of such sizes, or a name whose reaching definitions all are?  `depth`
    bounds how many names are followed."""
    if depth <= 0:
        return False
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _SIZE_CALLS:
            return True  # `x.numel()`, `x.size(1)`
        if isinstance(func, cst.Name) and func.value in ("int", "list", "tuple") and len(expr.args) == 1:
            return exact_at(model, fn, expr.args[0].value, at, depth)
        return False
    if isinstance(expr, cst.Attribute):
        if expr.attr.value == "shape":
            return True
        return _saved(model, fn, expr, depth)
    if isinstance(expr, cst.Subscript):
        return exact_at(model, fn, expr.value, at, depth)  # `x.shape[1]`, `shape[0]` of `list(x.shape)`
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.FloorDivide, cst.Multiply)):
        sides = [expr.left, expr.right]
        exact = [exact_at(model, fn, s, at, depth) for s in sides]
        return any(exact) and all(e or int_literal(s) is not None for e, s in zip(exact, sides))
    if isinstance(expr, cst.IfExp):
        return all(exact_at(model, fn, s, at, depth) or int_literal(s) is not None
                   for s in (expr.body, expr.orelse)) and not all(
            int_literal(s) is not None for s in (expr.body, expr.orelse))
    if isinstance(expr, cst.Name):
        defs = Reaching.of(model, fn).defs(expr.value, at)
        if not defs:
            return False
        for d in defs:
            if d.kind == "param" and _passed_size(model, fn, d.name, depth):
                continue
            if d.kind != "assign":
                return False
            value = assigned_value(d, expr.value)
            if value is None and isinstance(d.node, cst.Assign):
                value = d.node.value  # `B, T, H, K = k.shape`: each name one of its sizes
                if not (isinstance(value, cst.Attribute) and value.attr.value == "shape"):
                    return False
            if value is None or not exact_at(model, fn, value, d.node, depth - 1):
                return False
        return True
    return False


def _passed_size(model: TritonModule, fn: Function, name: str, depth: int) -> bool:
    """A parameter of a host function: what its callers in this file pass, where there are
    any (`fwd_inner(..., BK=BK)` with `BK = min(64, next_power_of_2(K))` is a block); else a
    size the caller gives as it is (`HEAD_DIM_V=dv`), unless named or used as a block (a
    `block_size`, the divisor of a `cdiv`)."""
    params = [p.name.value for p in fn.node.params.params]
    calls = [(other, site.node) for other in model.host_functions for site in model.calls_in(other)
             if isinstance(site.node.func, cst.Name) and site.node.func.value == fn.name]
    if calls:
        return all((arg := bind_call_args(call, params).get(name)) is not None
                   and exact_at(model, other, arg, call, depth - 1) for other, call in calls)
    if TILE_NAME.search(name):
        return False
    return not any(isinstance(n, cst.Call) and len(n.args) == 2 and call_text(model, n).endswith("cdiv")
                   and isinstance(n.args[1].value, cst.Name) and n.args[1].value.value == name
                   for n in walk(fn.node))


def _saved(model: TritonModule, fn: Function, expr: cst.Attribute, depth: int) -> bool:
    """`ctx.D` in a `backward`: every `ctx.D = ...` in the class's other methods an exact size."""
    params = fn.node.params.params
    if not (fn.class_name and params and isinstance(expr.value, cst.Name)
            and expr.value.value == params[0].name.value):
        return False
    found = False
    for other in model.host_functions:
        if other.class_name != fn.class_name or other is fn or not other.node.params.params:
            continue
        holder = other.node.params.params[0].name.value
        for node in walk(other.node):
            if isinstance(node, cst.Assign) and any(
                    isinstance(t.target, cst.Attribute) and t.target.attr.value == expr.attr.value
                    and isinstance(t.target.value, cst.Name) and t.target.value.value == holder
                    for t in node.targets):
                if not exact_at(model, other, node.value, node, depth - 1):
                    return False
                found = True
    return found
