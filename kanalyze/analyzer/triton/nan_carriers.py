"""Which kernel values can hold a NaN of the input, and how far it has spread.

Answers, for a Triton kernel value: none (integers, indices, program ids, a count
of mask lanes, random draws, a value already clamped by a NaN-dropping min/max),
in its own lanes (a load, arithmetic on one), or over every lane of a row (a
`tl.sum` mixed it in, so a `tl.max` of that row is NaN too).  Also: which calls
drop their operands' NaN (`tl.maximum` without `propagate_nan`, `tl.max`), and
which `tl.where` sends a compared value's NaN lanes to the other branch.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text
from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import bind_call_args, keyword, string_literal
from kanalyze.analyzer.triton.dataflow import Def, own_value
from kanalyze.analyzer.triton.dtypes import INTEGERS, UNKNOWN, DtypeFlow, cast_operand, cast_target, resolve_dtypes
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_tests import shape_only
from kanalyze.analyzer.triton.reaching import Reaching

TL = "triton.language."
# Triton 3.x: maximum/minimum/clamp default to PropagateNan.NONE (maxnumf:
# NaN loses), and tl.max/tl.min reduce with that same maximum/minimum.
ELEMENTWISE = {TL + "maximum": 2, TL + "minimum": 2, "max": 2, "min": 2}
REDUCTIONS = {TL + "max", TL + "min"}
CLAMP = TL + "clamp"
# How far an input NaN has spread in a value: not at all, in its own lanes, or over
# every lane of a row (mixed in by a `tl.sum`: after `x - mean`, every lane is NaN).
NONE, LANE, ROW = 0, 1, 2
FLIP = {cst.GreaterThan: "<=", cst.GreaterThanEqual: "<", cst.LessThan: ">=", cst.LessThanEqual: ">"}


# Calls whose result is never NaN, whatever their arguments: indices, program ids,
# constant fills and random draws.
NAN_FREE_LEAVES = {"arange", "program_id", "num_programs", "zeros", "zeros_like", "rand", "randn", "randint",
                   "randint4x", "rand4x", "randn4x", "cdiv", "umulhi", "philox", "full_like", "argmax", "argmin"}
# Reductions that mix every lane of a row into each result.
MIXING = {TL + f for f in ("sum", "reduce", "xor_sum", "softmax")}
_NAN_FREE_NODES = (cst.Comparison, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                   cst.ConcatenatedString, cst.FormattedString, cst.Lambda, cst.Ellipsis)
_BIT_OPS = (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift)


def propagates(jit: JitFunction, value: cst.BaseExpression | None) -> bool:
    """Is this `propagate_nan=` argument `tl.PropagateNan.ALL` (or a constexpr that can be)?"""
    if value is None:
        return False
    name = dotted(value) or ""
    if name.endswith(".ALL"):
        return True
    if name.endswith(".NONE"):
        return False
    values = jit.constexpr_values(name) if "." not in name else []
    return not values or any((dotted(v) or "").endswith(".ALL") for v in values)


class NanLevels:
    """How far can a NaN of the input have spread in a kernel value?  Loads hold it
    in their lanes; comparisons, integer casts, `tl.arange`, program ids,
    literals, constexprs and random draws hold none, and neither does anything
    computed from those alone (a float count of mask lanes, `min(BLOCK, n - start)`);
    `tl.maximum`/`tl.minimum`/`tl.clamp` drop it (it is reported there); `tl.sum`
    spreads it over the row, and a `tl.max` of a row that is NaN everywhere is NaN.
    A launched kernel's scalar parameters are sizes, strides and hyperparameters:
    NaN-free; a helper's parameter holds what the arguments at its call sites hold;
    a jit function nobody launches or calls here (a `tl.reduce` combine, a library
    helper) may get NaN in every parameter.  A fixpoint over each function's
    definitions, so loop-carried values settle."""

    PASSES = 40
    DEPTH = 150  # nested expressions (and helper summaries) followed, well inside Python's recursion limit

    def __init__(self, model: TritonModule) -> None:
        self.model = model
        self.dtypes = DtypeFlow(model)
        self.depth = 0
        self.levels: dict[tuple[int, int | None], dict[Def, int]] = {}
        self.open: set[tuple[int, int | None]] = set()

    def reaching(self, jit: JitFunction) -> Reaching:
        return Reaching.of(self.model, jit)

    def level(self, jit: JitFunction, expr: cst.CSTNode) -> int:
        return self._expr(jit, expr, self._fix(jit, None), None)

    def drops(self, jit: JitFunction, call: cst.CSTNode) -> bool:
        """Does this call hold none of its operands' NaN?  The elementwise min/max
        and clamps without `propagate_nan`, and `tl.max`/`tl.min` of lanes that are
        not all NaN."""
        if not isinstance(call, cst.Call):
            return False
        name = self.model.call_name(call) or ""
        if name in (TL + "maximum", TL + "minimum", "min", "max"):
            return not propagates(jit, keyword(call, "propagate_nan", 2))
        if name == CLAMP:
            return not propagates(jit, keyword(call, "propagate_nan", 3))
        if name in REDUCTIONS:
            indices = keyword(call, "return_indices", 2)
            operand = keyword(call, "input", 0)
            return (indices is None or dotted(indices) == "False") and operand is not None \
                and self.level(jit, operand) < ROW
        return False

    def to_integer(self, jit: JitFunction, call: cst.Call) -> bool:
        """`x.to(tl.int32)`: an integer holds no NaN."""
        target = cast_target(self.model, call)
        if target is None:
            return False
        dtypes = resolve_dtypes(self.model, jit, target)
        return bool(dtypes) and dtypes <= INTEGERS

    # -- one function's fixpoint -------------------------------------------------

    def _fix(self, jit: JitFunction, context: int | None) -> dict[Def, int]:
        """Every definition's level, with the parameters at `context` (None: from
        the callers or launches)."""
        key = (id(jit), context)
        if key in self.levels:
            return self.levels[key]
        levels: dict[Def, int] = {}
        if key in self.open:
            return levels  # a call cycle: what is known so far
        self.open.add(key)
        flow = self.model.flow(jit)
        for _ in range(self.PASSES):
            changed = False
            for d in flow.defs:
                new = self._def(jit, d, levels, context)
                if new > levels.get(d, NONE):
                    levels[d], changed = new, True
            if not changed:
                break
        self.open.discard(key)
        self.levels[key] = levels
        return levels

    def _def(self, jit: JitFunction, d: Def, levels: dict[Def, int], context: int | None) -> int:
        if d.kind == "param":
            if d.name in jit.constexpr_names:
                return NONE
            return context if context is not None else self._param(jit, d.name)
        found = self._expr(jit, own_value(d), levels, context)
        if d.kind == "augassign":
            earlier = self.reaching(jit).defs(d.name, d.node)
            found = max(found, max((levels.get(p, NONE) for p in earlier), default=NONE))
        return found

    def _param(self, jit: JitFunction, name: str) -> int:
        if jit.called_from:
            found = NONE
            for caller, call in jit.called_from:
                caller_jit = self.model.jit.get(caller.name)
                if caller_jit is None or caller_jit.function is not caller:
                    return LANE
                arg = bind_call_args(call, jit.params).get(name)
                if arg is not None:  # else a default value
                    found = max(found, self.level(caller_jit, arg))
            return found
        return NONE if jit.launches else LANE

    # -- expressions -------------------------------------------------------------

    def _expr(self, jit: JitFunction, node: cst.CSTNode | None, levels: dict[Def, int], context: int | None) -> int:
        self.depth += 1
        try:
            if self.depth > self.DEPTH:
                return LANE  # an expression nested deeper than any kernel writes: assume the worst
            return self._node(jit, node, levels, context)
        finally:
            self.depth -= 1

    def _node(self, jit: JitFunction, node: cst.CSTNode | None, levels: dict[Def, int], context: int | None) -> int:
        if node is None or isinstance(node, _NAN_FREE_NODES) or shape_only(self.model, node):
            return NONE
        each = lambda nodes: max((self._expr(jit, n, levels, context) for n in nodes if n is not None), default=NONE)
        if isinstance(node, cst.Name):
            if node.value in ("None", "True", "False") or node.value in jit.constexpr_names:
                return NONE
            return max((levels.get(d, NONE) for d in self.reaching(jit).defs(node.value, node)), default=NONE)
        if isinstance(node, cst.Attribute):
            if node.attr.value in ("nan", "NaN"):
                return LANE
            return self._expr(jit, node.value, levels, context)  # `x.T`; `tl.float32` reads no local
        if isinstance(node, cst.BinaryOperation):
            return NONE if isinstance(node.operator, _BIT_OPS) else each((node.left, node.right))
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, (cst.Not, cst.BitInvert)):
                return NONE
            return self._expr(jit, node.expression, levels, context)
        if isinstance(node, cst.BooleanOperation):
            return each((node.left, node.right))
        if isinstance(node, cst.IfExp):
            return each((node.body, node.orelse))
        if isinstance(node, cst.Subscript):
            return self._expr(jit, node.value, levels, context)
        if isinstance(node, (cst.Tuple, cst.List)):
            return each(e.value for e in node.elements)
        if isinstance(node, cst.Call):
            return self._call(jit, node, levels, context, each)
        return each(node.children)

    def _call(self, jit: JitFunction, call: cst.Call, levels, context, each) -> int:
        name = self.model.call_name(call) or dotted(call.func) or ""
        leaf = name.rpartition(".")[2]
        args = [a.value for a in call.args]
        if leaf in NAN_FREE_LEAVES:
            return NONE
        if name == TL + "full":
            return each([keyword(call, "value", 1)])
        if self.to_integer(jit, call):
            return NONE
        if name == TL + "where":
            a, b = keyword(call, "x", 1), keyword(call, "y", 2)
            return each([b] if self.select_drops(jit, call, a) else [a, b])
        if name == "float":
            if args and isinstance(args[0], cst.SimpleString):
                return LANE if "nan" in (string_literal(args[0]) or "").lower() else NONE
            return each(args)
        if cast_target(self.model, call) is not None:
            return each([cast_operand(call)])
        if name == TL + "load" or name.startswith(TL + "atomic_"):
            # a load from an integer tensor (`torch.empty(n, dtype=torch.int32)` in the wrapper)
            dtypes = self.dtypes.value(jit.function, call)
            return NONE if dtypes and UNKNOWN not in dtypes and dtypes <= INTEGERS else LANE
        if name in (TL + "maximum", TL + "minimum", "min", "max"):
            return each(args) if propagates(jit, keyword(call, "propagate_nan", 2)) else NONE
        if name == CLAMP:
            return each(args) if propagates(jit, keyword(call, "propagate_nan", 3)) else NONE
        if name in REDUCTIONS:
            indices = keyword(call, "return_indices", 2)
            found = each([keyword(call, "input", 0)])
            return found if (indices is not None and dotted(indices) != "False") or found == ROW else NONE
        if name in MIXING:
            return ROW if each(args) else NONE
        helper = self.model.jit.get(name) if "." not in name else None
        if helper is not None and helper.function.node is not jit.function.node:
            return self._returns(helper, each(args))
        # A method reads its receiver (`x.sum()`); a module (`tl`, `math`) has no local definition.
        receiver = [call.func.value] if isinstance(call.func, cst.Attribute) else []
        return each(receiver + args)

    def select_drops(self, jit: JitFunction, call: cst.Call, a: cst.BaseExpression | None) -> bool:
        """`tl.where(v > m, v, m)`: an ordered comparison of `v` is False on its NaN
        lanes, which take the other branch (reported at the `where`)."""
        cond = keyword(call, "condition", 0)
        if isinstance(cond, cst.Name):
            defs = self.reaching(jit).defs(cond.value, call)
            cond = defs[0].value if len(defs) == 1 and defs[0].kind == "assign" else None
        if a is None or not (isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1
                             and type(cond.comparisons[0].operator) in FLIP):
            return False
        key = lambda e: node_text(self.model.module, e).replace(" ", "")
        return key(a) in (key(cond.left), key(cond.comparisons[0].comparator)) and not literal(a)

    def _returns(self, helper: JitFunction, context: int) -> int:
        levels = self._fix(helper, context)
        return max((self._expr(helper, n.value, levels, context) for n in walk(helper.node)
                    if isinstance(n, cst.Return) and n.value is not None), default=NONE)


def literal(expr: cst.BaseExpression) -> bool:
    """A number, or a negated one: the constant branch of a `where`, never its subject."""
    while isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float)) or (
        isinstance(expr, cst.Call) and dotted(expr.func) == "float")
