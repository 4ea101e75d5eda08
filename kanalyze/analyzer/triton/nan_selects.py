"""Which selects send a value's NaN lanes to a branch that does not hold it.

Read by EXC001 for `tl.where` in kernels and `torch.where` in wrappers: a NaN test whose
branch replaces the special value (`tl.where(x != x, 0.0, x)`), a comparison of the value
with something (`tl.where(x > 0, x, 0.0)`, a running max `tl.where(v > m, v, m)`), and a
domain guard (`tl.where(norm > 0.0, 1.0 / tl.sqrt(norm + eps), 0.0)`).  Each answer is
(subject, NaN branch, pattern, message).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import FLIP, literal
from kanalyze.analyzer.triton.nan_tests import nan_test
from kanalyze.analyzer.triton.size_literals import expr_text


def where_swallow(model: TritonModule, call: cst.Call, cond, a, b, carries, host: bool = False):
    """Shared by the kernel (`tl.where`) and the host (`torch.where`) checks."""
    if cond is None or a is None or b is None:
        return None
    negated = False
    while isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, (cst.BitInvert, cst.Not)):
        negated, cond = not negated, cond.expression
    text = expr_text(model, call)
    test = nan_test(model, cond)
    if test is not None:
        subject, nan_true, specials = test
        nan_branch = a if nan_true != negated else b
        if carries(nan_branch, subject):
            return None
        return subject, nan_branch, "nan-replaced", (
            f"`{text}` replaces {specials} in `{expr_text(model, subject)}` with "
            f"`{expr_text(model, nan_branch)}`; the reference propagates it: remove the replacement")
    if host:
        return None
    if not negated and isinstance(cond, cst.BinaryOperation) and isinstance(cond.operator, cst.BitAnd):
        # `valid & (v > m)`: a conjunct that is False for NaN makes the whole test False there
        for part in _conjuncts(cond):
            if isinstance(part, cst.Comparison) and len(part.comparisons) == 1 and \
                    (type(part.comparisons[0].operator) in FLIP or isinstance(part.comparisons[0].operator, cst.Equal)):
                found = _compare_swallow(model, text, part, a, b, carries, negated, conjunct=True)
                if found is not None:
                    return found
        return None
    return _compare_swallow(model, text, cond, a, b, carries, negated)


def _compare_swallow(model: TritonModule, text: str, cond, a, b, carries, negated: bool, conjunct: bool = False):
    """A select on a comparison of the value with something (`tl.where(x > 0, x, 0.0)`)."""
    if not (isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1):
        return None
    op, right = cond.comparisons[0].operator, cond.comparisons[0].comparator
    if type(op) not in FLIP and not isinstance(op, (cst.Equal, cst.NotEqual)):
        return None
    nan_true = isinstance(op, cst.NotEqual) != negated  # every ordered comparison with NaN is False
    nan_branch, kept = (a, b) if nan_true else (b, a)
    key = lambda e: node_text(model.module, e).replace(" ", "")
    subject = next((s for s in (cond.left, right) if key(s) == key(kept) and not literal(s)), None)
    if subject is None:
        return _guard_swallow(model, text, cond, nan_branch, kept, carries, nan_true, negated, conjunct)
    if carries(nan_branch, subject):
        return None  # a branch that is not the tested value: a mask or a step function
    fix = "rewrite it so that NaN lanes take the value branch"
    if type(op) in FLIP and not negated and not conjunct:   # (rewriting a conjunct alone drops the mask)
        fix = (f"use `tl.where({expr_text(model, cond.left)} {FLIP[type(op)]} {expr_text(model, right)}, "
               f"{expr_text(model, nan_branch)}, {expr_text(model, kept)})` so that NaN lanes keep the value")
    return subject, nan_branch, "compare", (
        f"`{text}` sends NaN lanes to `{expr_text(model, nan_branch)}` (a comparison with NaN is "
        f"{'True' if nan_true else 'False'}), where the reference propagates NaN; {fix}")


def _guard_swallow(model: TritonModule, text: str, cond, nan_branch, kept, carries, nan_true: bool, negated: bool,
                   conjunct: bool):
    """A domain guard: a value compared with a constant selects a constant or a division by
    that value, its square root or its logarithm (`tl.where(norm > 0.0, 1.0 / tl.sqrt(norm +
    eps), 0.0)`).  A NaN value fails the comparison and takes the constant, where the
    reference's `x / torch.norm(x)` is NaN.  Piecewise functions are left alone (`tl.where(x
    <= 3, x / 3 + 0.5, 1.0)`, hardswish's gradient): torch's own are comparison cascades
    that send NaN to a piece too."""
    right = cond.comparisons[0].comparator
    sides = [(cond.left, right), (right, cond.left)]
    subject = next((s for s, bound in sides if not literal(s) and literal(bound)), None)
    if subject is None or not literal(nan_branch) or carries(nan_branch, subject) \
            or not any(carries(part, subject, nan=True) for part in _domain_operands(model, kept)):
        return None
    fix = "rewrite it so that NaN lanes take the value branch"
    if type(cond.comparisons[0].operator) in FLIP and not negated and not conjunct:
        op = cond.comparisons[0].operator
        fix = (f"use `tl.where({expr_text(model, cond.left)} {FLIP[type(op)]} {expr_text(model, right)}, "
               f"{expr_text(model, nan_branch)}, {expr_text(model, kept)})` so that NaN lanes keep NaN")
    return subject, nan_branch, "guard", (
        f"`{text}` sends lanes where `{expr_text(model, subject)}` is NaN to `{expr_text(model, nan_branch)}` (a "
        f"comparison with NaN is {'True' if nan_true else 'False'}), where the reference's "
        f"`{expr_text(model, kept)}` is NaN; {fix}")


_DOMAIN_CALLS = {"sqrt", "sqrt_rn", "rsqrt", "log", "log2", "log10", "div_rn", "fdiv"}


def _domain_operands(model: TritonModule, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """What `expr` divides by, or takes the square root or logarithm of."""
    found = []
    for node in walk(expr):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.FloorDivide)):
            found.append(node.right)
        elif isinstance(node, cst.Call) and node.args and \
                (model.call_name(node) or "").rpartition(".")[2] in _DOMAIN_CALLS:
            found.append(node.args[-1].value if (model.call_name(node) or "").endswith(("div_rn", "fdiv"))
                         else node.args[0].value)
    return found


def _conjuncts(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of a chain of `&`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitAnd):
        return _conjuncts(expr.left) + _conjuncts(expr.right)
    return [expr]

