"""Where a kernel makes NaN that the reference does not: exponentials that overflow float32.

A ratio of exponentials (`(tl.exp(2 * x) - 1) / (tl.exp(2 * x) + 1)`, a tanh or
GELU-tanh by hand) is inf / inf = NaN for large inputs where the function it
stands for is finite: `OverflowRatio` evaluates the ratio in float32 and float64
at a few inputs and returns one where only float32 is NaN.  A cumulative product
through logarithms (`tl.exp(tl.cumsum(tl.log(x)))`) is NaN from the first negative
x on: `log_product_operand` finds its x where x can be negative.  A value added to
its own absolute value (`(x + tl.abs(x)) * 0.5`, a ReLU by hand; `tl.abs(x) - x`) is
-inf + inf = NaN at an infinite x where the function it stands for is 0:
`abs_cancellation` finds the x and the infinity.
"""

from __future__ import annotations

import libcst as cst
import numpy as np

from kanalyze.analyzer.cstwalk import node_text
from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.dtypes import cast_operand, cast_target, resolve_dtypes
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import TL
from kanalyze.analyzer.triton.reaching import Reaching

_EXP_LEAVES = {"exp": np.exp, "exp2": np.exp2}
_MATH_LEAVES = {"log": np.log, "log2": np.log2, "sqrt": np.sqrt, "abs": np.abs, "fabs": np.abs,
                "sqrt_rn": np.sqrt, **_EXP_LEAVES}
# Inputs where float32 exponentials overflow (exp from 88.7, exp2 from 128) but float64 ones do not.
_PROBES = [s * v for v in (1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 50.0, 60.0, 80.0, 100.0, 150.0, 200.0, 300.0,
                           500.0, 700.0) for s in (1.0, -1.0)]


class _NotArithmetic(Exception):
    """The expression is not arithmetic on one variable and constants."""


class OverflowRatio:
    """`A / B` where A and B are arithmetic on one variable and both hold `exp` of it:
    evaluated in float32 and float64 at a few inputs, a NaN in float32 where float64
    is not NaN is inf / inf (or inf - inf) from an overflow, not the function's value."""

    DEPTH = 12

    def __init__(self, model: TritonModule, jit: JitFunction, reach: Reaching) -> None:
        self.model, self.jit, self.reach = model, jit, reach

    def witness(self, div: cst.BinaryOperation) -> tuple[float, float, str] | None:
        """(input, float64 value, the variable's text) where float32 gives NaN."""
        self.variables: dict[tuple[int, ...], cst.CSTNode] = {}
        if not self._exp_on_both_sides(div):
            return None
        try:
            compute = self._compile(div, 0)
        except _NotArithmetic:
            return None
        if len(self.variables) != 1:
            return None
        with np.errstate(all="ignore"):
            for probe in _PROBES:
                low = compute(np.float32, np.float32(probe))
                high = compute(np.float64, np.float64(probe))
                if np.isnan(low) and not np.isnan(high):
                    variable = next(iter(self.variables.values()))
                    return probe, float(high), node_text(self.model.module, variable)
        return None

    def _exp_on_both_sides(self, div: cst.BinaryOperation) -> bool:
        seen: dict[int, bool] = {}

        def holds_exp(expr, depth=0) -> bool:
            if depth > self.DEPTH:
                return False
            for node in walk(expr):
                if isinstance(node, cst.Call) and (self.model.call_name(node) or "").rpartition(".")[2] in _EXP_LEAVES:
                    return True
                if isinstance(node, cst.Name):
                    defs = self.reach.defs(node.value, node)
                    if len(defs) == 1 and defs[0].kind == "assign":
                        if id(defs[0]) not in seen:
                            seen[id(defs[0])] = False  # a cycle reads as no exp
                            seen[id(defs[0])] = holds_exp(defs[0].value, depth + 1)
                        if seen[id(defs[0])]:
                            return True
            return False
        return holds_exp(div.left) and holds_exp(div.right)

    def _compile(self, node: cst.CSTNode, depth: int):
        if depth > self.DEPTH:
            raise _NotArithmetic
        if isinstance(node, (cst.Integer, cst.Float)):
            try:
                value = float(node.evaluated_value)
            except OverflowError:   # an integer literal past float's range
                raise _NotArithmetic from None
            return lambda t, x: t(value)
        if isinstance(node, cst.BinaryOperation):
            left, right = self._compile(node.left, depth + 1), self._compile(node.right, depth + 1)
            op = {cst.Add: np.add, cst.Subtract: np.subtract, cst.Multiply: np.multiply,
                  cst.Divide: np.divide, cst.Power: np.power}.get(type(node.operator))
            if op is None:
                raise _NotArithmetic
            return lambda t, x: t(op(left(t, x), right(t, x)))
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
            inner = self._compile(node.expression, depth + 1)
            sign = -1.0 if isinstance(node.operator, cst.Minus) else 1.0
            return lambda t, x: t(sign * inner(t, x))
        if isinstance(node, cst.Call):
            name = self.model.call_name(node) or ""
            leaf = name.rpartition(".")[2]
            target = cast_target(self.model, node)
            if target is not None:
                if not (resolve_dtypes(self.model, self.jit, target) & {"float32", "float64"}):
                    raise _NotArithmetic  # to half precision or an integer: other overflow points
                return self._compile(cast_operand(node), depth + 1)
            positional = [a.value for a in node.args if a.keyword is None]
            known = name.startswith(("triton", "tl.")) or "libdevice" in name or "." not in name
            if leaf in _MATH_LEAVES and len(positional) == 1 and (known or leaf in _EXP_LEAVES):
                inner, fn = self._compile(positional[0], depth + 1), _MATH_LEAVES[leaf]
                return lambda t, x: t(fn(inner(t, x)))
            raise _NotArithmetic
        if isinstance(node, cst.Name):
            if node.value in self.jit.constexpr_names:
                raise _NotArithmetic
            defs = self.reach.defs(node.value, node)
            if len(defs) == 1 and defs[0].kind == "assign" and not isinstance(defs[0].value, cst.Tuple):
                before = dict(self.variables)
                try:
                    return self._compile(defs[0].value, depth + 1)
                except _NotArithmetic:
                    self.variables = before  # a load, a reduction: the name is the variable
            if not defs:
                raise _NotArithmetic  # a global: a constant we cannot read
            self.variables.setdefault(tuple(sorted(id(d) for d in defs)), node)
            if len(self.variables) > 1:
                raise _NotArithmetic
            return lambda t, x: x
        raise _NotArithmetic


def log_product_operand(model: TritonModule, reach: Reaching, call: cst.Call,
                        name: str | None) -> cst.BaseExpression | None:
    """The x of `tl.exp(tl.cumsum(tl.log(x)))` (`call` is the exp, `name` its
    qualified name), unless x is never negative."""
    leaf = (name or "").rpartition(".")[2]
    if leaf not in _EXP_LEAVES or not call.args:
        return None
    scan = through_names(reach, call.args[0].value)
    if not (isinstance(scan, cst.Call) and model.call_name(scan) == TL + "cumsum" and scan.args):
        return None
    log = through_names(reach, scan.args[0].value)
    if not (isinstance(log, cst.Call) and (model.call_name(log) or "").rpartition(".")[2]
            in ("log", "log2") and log.args):
        return None
    operand = log.args[0].value
    return None if nonnegative(model, reach, operand) else operand


def through_names(reach: Reaching, expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr`, or the value of the one assignment a name in it comes from (a few deep)."""
    for _ in range(4):
        if not isinstance(expr, cst.Name):
            break
        defs = reach.defs(expr.value, expr)
        if len(defs) != 1 or defs[0].kind != "assign" or defs[0].value is None:
            break
        expr = defs[0].value
    return expr


def nonnegative(model: TritonModule, reach: Reaching, expr: cst.BaseExpression) -> bool:
    """`tl.abs(x)`, `tl.exp(x)`, `x * x`, `tl.sigmoid(x)`, `tl.maximum(x, 1e-6)`, a literal."""
    expr = through_names(reach, expr)
    for _ in range(8):  # `x.to(tl.float32)`: the cast keeps the sign
        if not (isinstance(expr, cst.Call) and cast_target(model, expr) is not None):
            break
        expr = through_names(reach, cast_operand(expr))
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        key = lambda e: node_text(model.module, e).replace(" ", "")
        return key(expr.left) == key(expr.right)
    if isinstance(expr, cst.Call):
        leaf = (model.call_name(expr) or "").rpartition(".")[2]
        if leaf == "maximum":  # from below by a literal (which is never negative unless written so)
            return any(isinstance(a.value, (cst.Integer, cst.Float)) for a in expr.args)
        return leaf in ("abs", "fabs", "exp", "exp2", "sigmoid", "sqrt", "sqrt_rn", "softmax")
    return False


def abs_cancellation(model: TritonModule, reach: Reaching, node: cst.BinaryOperation) -> tuple[str, str] | None:
    """(x's text, the infinity) where `node` is `x + tl.abs(x)`, `tl.abs(x) + x` (NaN at
    x = -inf), `x - tl.abs(x)` or `tl.abs(x) - x` (NaN at x = +inf)."""
    if not isinstance(node.operator, (cst.Add, cst.Subtract)):
        return None
    for plain, absolute, abs_first in ((node.left, node.right, False), (node.right, node.left, True)):
        call = through_names(reach, absolute)
        if not (isinstance(call, cst.Call) and (model.call_name(call) or "").rpartition(".")[2] in ("abs", "fabs")
                and len(call.args) == 1):
            continue
        inner = call.args[0].value
        if node_text(model.module, plain) != node_text(model.module, inner) or not _same_value(reach, plain, inner):
            continue
        if isinstance(node.operator, cst.Add):
            return node_text(model.module, plain), "-inf"
        return node_text(model.module, plain), "+inf"   # x - |x| and |x| - x: inf - inf at +inf
    return None


def _same_value(reach: Reaching, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Do two spellings of one name read the same definitions?"""
    if isinstance(a, cst.Name) and isinstance(b, cst.Name):
        return {id(d) for d in reach.defs(a.value, a)} == {id(d) for d in reach.defs(b.value, b)}
    return True

