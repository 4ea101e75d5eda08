"""Does a float value hold whole numbers only, whatever the inputs: a count?

`n = tl.sum(tl.where(mask, 1.0, 0.0))` is a float, but every value it takes is a
whole number, and float32 adds whole numbers exactly while the sums stay below
2^24: in any order they give the same bits.  A float `tl.atomic_add` of such a
count is not an order dependence (ORD001), unlike the sum of the data beside it.

Whole: an integer or a float literal with no fraction, a comparison or `not`
(0 or 1), `tl.zeros`, `tl.full` of a whole value, `tl.arange` / `tl.program_id`,
`+`, `-`, `*`, `//` and `%` of whole values, `tl.where(c, a, b)` of whole `a` and
`b`, sums, maxima, minima, reshapes and casts of whole values, and a local name
all of whose definitions in the function are whole.  Anything loaded, any
parameter, any true division or float function is not; nor a value whose
expressions take more than a few thousand steps to read (then ORD001 reports).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.triton.calls import int_literal, keyword
from kanalyze.analyzer.triton.dtype_names import cast_operand, cast_target
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
EXACT_BELOW = 2 ** 24  # float32 holds every whole number up to here
WHOLE_CALLS = {"zeros", "zeros_like", "arange", "program_id", "num_programs"}
SAME_AS_ARGS = {"sum", "cumsum", "max", "min", "maximum", "minimum", "abs", "reshape", "view", "trans",
                "permute", "broadcast_to", "expand_dims", "ravel", "flip", "cast"}
WHOLE_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)
STEPS = 4000


def holds_whole_numbers(model: TritonModule, func: Function, expr: cst.BaseExpression | None) -> bool:
    return _whole(model, func, expr, frozenset(), [STEPS])


def _whole(model: TritonModule, func: Function, expr: cst.BaseExpression | None,
           seen: frozenset[str], steps: list[int]) -> bool:
    def whole(e: cst.BaseExpression | None) -> bool:
        return _whole(model, func, e, seen, steps)

    steps[0] -= 1
    if expr is None or steps[0] < 0:
        return False
    if int_literal(expr) is not None or isinstance(expr, (cst.Comparison, cst.BooleanOperation)):
        return True
    if isinstance(expr, cst.Float):
        try:
            value = float(expr.value.replace("_", ""))
        except ValueError:
            return False
        return value.is_integer() and abs(value) < EXACT_BELOW
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False") or _whole_name(model, func, expr.value, seen, steps)
    if isinstance(expr, cst.UnaryOperation):
        return isinstance(expr.operator, cst.Not) or whole(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return isinstance(expr.operator, WHOLE_OPERATORS) and whole(expr.left) and whole(expr.right)
    if isinstance(expr, cst.IfExp):
        return whole(expr.body) and whole(expr.orelse)
    if isinstance(expr, cst.Call):
        return _whole_call(model, func, expr, whole)
    return False


def _whole_name(model: TritonModule, func: Function, name: str, seen: frozenset[str], steps: list[int]) -> bool:
    if name in seen:
        return True  # `n = n + 1.0` in a loop: whole if its other definitions are
    defs = model.flow(func).defs_of(name)
    if not defs:
        return False
    for d in defs:
        if d.kind == "for":
            loop = d.value.func if isinstance(d.value, cst.Call) else None
            if loop is None or (model.qualify(loop) or "").rpartition(".")[2] not in ("range", "static_range"):
                return False
        elif d.kind not in ("assign", "augassign", "walrus") or d.operator in ("/=", "**="):
            return False
        elif not _whole(model, func, d.value, seen | {name}, steps):
            return False
    return True


def _whole_call(model: TritonModule, func: Function, call: cst.Call, whole) -> bool:
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    if cast_target(model, call) is not None:  # `.to(tl.float32)`, `tl.cast(x, ...)`
        return whole(cast_operand(call))
    name = model.call_name(call) or ""
    leaf = name[len(TL):] if name.startswith(TL) else None
    if leaf in WHOLE_CALLS:
        return True
    if leaf == "full":
        return whole(keyword(call, "value", 1))
    if leaf == "where":
        return len(args) >= 3 and whole(args[1]) and whole(args[2])
    if leaf in ("maximum", "minimum"):
        return len(args) >= 2 and whole(args[0]) and whole(args[1])
    if leaf in SAME_AS_ARGS:
        return bool(args) and whole(args[0])
    if leaf is None and isinstance(call.func, cst.Attribute) and call.func.attr.value in SAME_AS_ARGS:
        return whole(call.func.value)  # `m.sum(axis=0)`
    return False
