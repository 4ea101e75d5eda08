"""`exp(x) - 1` standing for `expm1(x)` on a kernel's data, and whether its loss reaches the
kernel's output.

Read by EXC002.  For every |x| below 2^-24, float32 `exp(x)` rounds to exactly 1, so
`tl.exp(x) - 1` (and `1 - tl.exp(x)`, `tl.exp2`) is 0 where `expm1(x)` is about x.  It
stands for expm1 where torch's function uses one: the negative branch of an ELU, SELU or
CELU (a select or a `tl.minimum` that tests x itself: `tl.where(x > 0, x, a * (exp(x) - 1))`)
and the numerator of a tanh (`(e - 1) / (e + 1)`, one `e`).  Elsewhere it is the formula
itself: a cross-entropy gradient `p - 1` at the target column (the select tests the column,
not x), a KL term `1 - exp(r - l)`.  And the loss matters only where the difference is not
added to a constant on its way to the output: GELU's `0.5 * x * (1.0 + t)`, with `t` such a
tanh, is about `0.5 * x` either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.model import JitFunction, TritonModule
from kanalyze.analyzer.triton.nan_paths import NanPaths
from kanalyze.analyzer.triton.reaching import Reaching

EXPONENTIALS = {"exp", "exp2"}


@dataclass
class ExpMinusOne:
    node: cst.BinaryOperation      # the difference
    exp: cst.Call                  # its exponential
    negated: bool                  # `1 - exp(x)`: the fix is `-expm1(x)`


def exp_minus_ones(model: TritonModule, jit: JitFunction, make_paths: Callable[[], NanPaths]) -> Iterator[ExpMinusOne]:
    """The differences of one jit function whose exponential reads loaded data and whose
    value reaches the output unabsorbed.  The NaN paths (`make_paths`) and where values go
    are worked out only for a function that has such a difference."""
    reach = Reaching.of(model, jit)
    paths = flow = None
    for node in walk(jit.node):
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract)):
            continue
        if _one(node.right):
            found = ExpMinusOne(node, _exponential(model, reach, node.left, node), False)
        elif _one(node.left):
            found = ExpMinusOne(node, _exponential(model, reach, node.right, node), True)
        else:
            continue
        if found.exp is None:
            continue
        if paths is None:
            paths = make_paths()
            flow = _Flow(model, jit, paths)
        if _data(jit, paths, found.exp.args[0].value) and _stands_for_expm1(model, jit, paths, flow, found) \
                and flow.reaches_unabsorbed(node):
            yield found


def _one(expr: cst.BaseExpression) -> bool:
    return _number(expr) == 1.0


def _number(expr: cst.BaseExpression) -> float | None:
    """A numeric literal's value (None for anything else, and for one past float's range)."""
    if not isinstance(expr, (cst.Integer, cst.Float)):
        return None
    try:
        return float(expr.evaluated_value)
    except (OverflowError, ValueError):
        return None


def _exponential(model: TritonModule, reach: Reaching, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
    """The `tl.exp(...)` call `expr` is: the call itself, or a name whose only definition
    reaching `at` assigns it."""
    if isinstance(expr, cst.Name):
        defs = reach.defs(expr.value, at)
        if len(defs) != 1 or defs[0].kind != "assign":
            return None
        expr = defs[0].value
    name = model.call_name(expr) if isinstance(expr, cst.Call) and expr.args else None
    return expr if name and name.startswith("triton") and name.rpartition(".")[2] in EXPONENTIALS else None


def _data(jit: JitFunction, paths: NanPaths, expr: cst.BaseExpression) -> bool:
    """Does `expr` hold loaded data: a load's value, or a helper's parameter (its callers
    pass a kernel's values)?  Not a kernel's scalar parameters or constants."""
    return paths.evidence(expr)[1] or bool(_sources(jit, paths, expr))


def _stands_for_expm1(model: TritonModule, jit: JitFunction, paths: NanPaths, flow: "_Flow",
                      found: ExpMinusOne) -> bool:
    """Is the difference an ELU's negative branch or a tanh's numerator, where it is used or
    through the names it is assigned to (two deep)?"""
    if _min_with_zero(model, paths, found.exp.args[0].value, found.node):
        return True   # `tl.exp(tl.minimum(x, 0.0)) - 1`: an ELU's negative part
    x_loads = _sources(jit, paths, found.exp.args[0].value)
    exp_side = found.node.right if found.negated else found.node.left
    sites, names = [found.node], []
    for _ in range(2):
        for site in sites:
            for ancestor in model.ancestors(site):
                if isinstance(ancestor, cst.BaseSmallStatement):
                    if isinstance(ancestor, cst.Assign):
                        names += paths.reach.flow.defs_at(ancestor)
                    break
                if isinstance(ancestor, cst.Call) and _elu_select(model, jit, paths, ancestor, site, x_loads):
                    return True
                if isinstance(ancestor, cst.BinaryOperation) and isinstance(ancestor.operator, cst.Divide) \
                        and _within(ancestor.left, site) and _tanh_denominator(model, ancestor.right, exp_side):
                    return True
        sites = [use for d in names for use in flow.uses(d)]
        names = []
    return False


def _sources(jit: JitFunction, paths: NanPaths, expr: cst.BaseExpression) -> set[Def]:
    """The loads whose values `expr` holds, and in a helper, the parameters it holds."""
    reads = paths.reads(expr)
    params = {d for d in paths.closure(reads) if d.kind == "param"} if jit.called_from else set()
    return paths.loaded_upstream(reads) | params


def _elu_select(model: TritonModule, jit: JitFunction, paths: NanPaths, call: cst.Call, site: cst.CSTNode,
                x_loads: set[Def]) -> bool:
    """`tl.where(x > 0, x, a * (exp(x) - 1))`, `tl.minimum(0, a * (exp(x) - 1))`: a select
    whose test reads the exponential's own data, or a minimum with 0."""
    name = (model.call_name(call) or "").rpartition(".")[2]
    args = [a.value for a in call.args]
    if name == "where" and len(args) == 3 and any(_within(a, site) for a in args[1:]):
        return bool(_sources(jit, paths, args[0]) & x_loads)
    if name in ("minimum", "maximum") and len(args) >= 2 and any(_within(a, site) for a in args[:2]):
        return any(_number(a) == 0.0 for a in args[:2])
    return False


def _min_with_zero(model: TritonModule, paths: NanPaths, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`tl.minimum(x, 0.0)`, or a name whose only definition reaching `at` assigns it."""
    if isinstance(expr, cst.Name):
        defs = paths.reach.defs(expr.value, at)
        expr = defs[0].value if len(defs) == 1 and defs[0].kind == "assign" else None
    if not isinstance(expr, cst.Call) or (model.call_name(expr) or "").rpartition(".")[2] != "minimum":
        return False
    return any(_number(a.value) == 0.0 for a in expr.args[:2])


def _tanh_denominator(model: TritonModule, expr: cst.BaseExpression, exp_side: cst.BaseExpression) -> bool:
    """Does `expr` hold `e + 1` (or `1 + e`) for the `e` of the numerator?"""
    text = node_text(model.module, exp_side).replace(" ", "")
    for node in walk(expr):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for one, other in ((node.left, node.right), (node.right, node.left)):
                if _one(one) and node_text(model.module, other).replace(" ", "") == text:
                    return True
    return False


class _Flow:
    """Where a difference's value goes in one jit function: the reads each definition
    reaches (worked out once per name) and whether a constant absorbs it on every path."""

    def __init__(self, model: TritonModule, jit: JitFunction, paths: NanPaths) -> None:
        self.model, self.paths = model, paths
        targets = {id(n) for t in walk(jit.node) if isinstance(t, (cst.AssignTarget, cst.AugAssign, cst.For))
                   for n in walk(t.target)}
        self._reads: dict[str, list[cst.Name]] = {}
        for n in walk(jit.node):
            if isinstance(n, cst.Name) and id(n) not in targets:
                self._reads.setdefault(n.value, []).append(n)
        self._uses: dict[str, dict[Def, list[cst.Name]]] = {}
        self._unabsorbed: dict[Def, bool] = {}

    def uses(self, d: Def) -> list[cst.Name]:
        """The reads of `d`'s name that `d` reaches (not the names assigned to)."""
        if d.name not in self._uses:
            by_def: dict[Def, list[cst.Name]] = {}
            for n in self._reads.get(d.name, ()):
                for reaching in self.paths.reach.defs(d.name, n):
                    by_def.setdefault(reaching, []).append(n)
            self._uses[d.name] = by_def
        return self._uses[d.name].get(d, [])

    def reaches_unabsorbed(self, node: cst.CSTNode) -> bool:
        """Does `node`'s value reach a store, a return or a call by a path on which nothing
        adds a constant to it (`1.0 + t`)?  Followed through assignments; through anything
        else, it does."""
        child = node
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.BinaryOperation) and isinstance(ancestor.operator, (cst.Add, cst.Subtract)):
                other = ancestor.right if ancestor.left is child else ancestor.left
                if _number(other) not in (None, 0.0):
                    return False
            if isinstance(ancestor, cst.BaseSmallStatement):
                if not isinstance(ancestor, cst.Assign):
                    return True
                defs = self.paths.reach.flow.defs_at(ancestor)
                return not defs or any(self._def_unabsorbed(d) for d in defs)
            child = ancestor
        return True

    def _def_unabsorbed(self, d: Def) -> bool:
        if d not in self._unabsorbed:
            self._unabsorbed[d] = False     # a read that leads back here adds nothing new
            self._unabsorbed[d] = any(self.reaches_unabsorbed(use) for use in self.uses(d))
        return self._unabsorbed[d]


def _within(outer: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in walk(outer))
