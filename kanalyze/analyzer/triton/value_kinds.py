"""What an expression's value is, as far as the source shows: an integer, a float, a value
loaded from memory (whose dtype the source may not show), or unknown.

A small structural inference for ORD001 (is an atomic add's value a float?): it follows
locals, jit helpers' returns, helper parameters back to their call sites and kernel
parameters to their launch values, and reads casts and dtype arguments.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal, keyword
from kanalyze.analyzer.triton.dtypes import INTEGERS, cast_target, resolve_dtypes
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.size_literals import expr_text

TL = "triton.language."

# What an expression's value is, as far as the source shows.  Ordered: a join
# keeps the strongest evidence ("float" beats "loaded" beats "unknown" beats "int").
NONE, INT, UNKNOWN, LOADED, FLOAT = -1, 0, 1, 2, 3
Kind = tuple[int, str]  # (kind, the source text that decided it)
KIND_NAMES = {FLOAT: "float", LOADED: "unknown dtype, derived from loaded data"}

INT_CALLS = {"program_id", "num_programs", "arange", "argmax", "argmin", "umulhi", "randint", "histogram"}
FLOAT_CALLS = {"exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos", "sigmoid", "softmax",
               "erf", "fdiv", "div_rn", "rand", "randn", "tanh", "log1p", "expm1", "pow"}
# Value-preserving calls: the kind of their first argument.
SAME_AS_ARG = {"sum", "cumsum", "cumprod", "xor_sum", "reduce", "max", "min", "abs", "reshape", "view",
               "trans", "permute", "broadcast_to", "expand_dims", "ravel", "multiple_of", "max_contiguous",
               "max_constancy", "zeros_like", "full_like", "flip", "associative_scan"}
JOIN_ARGS = {"maximum", "minimum", "clamp", "fma", "where"}
SHAPE_METHODS = {"sum", "reshape", "trans", "permute", "broadcast_to", "expand_dims", "ravel"}
LOOPS = {"range", TL + "range", TL + "static_range"}


class ValueKinds:
    """A small structural kind inference (int / float / loaded / unknown),
    following locals, jit helper returns, helper parameters back to their call
    sites and kernel parameters to their launch values."""

    def __init__(self, model: TritonModule) -> None:
        self.model = model
        self.active: set[tuple[int, int]] = set()
        # A name's kind, once known: (function, name, depth) -> kind.  A name met again while
        # its own kind is being worked out adds nothing (the join is a maximum), so the search
        # stops there, and a kind worked out without a cut above its own name is final:
        # linear in the definitions, where re-reading every definition of every name read
        # was exponential (a thousand `y = tl.where(.., y, ..)`, branches calling helpers).
        self.known: dict[tuple[int, str, int], Kind] = {}
        self.open: dict[tuple[int, str, int], int] = {}   # names being worked out -> their level
        self.cut = float("inf")                             # the lowest level a cut reached

    def of(self, func: Function, expr: cst.BaseExpression | None, depth: int = 6) -> Kind:
        key = (id(func.node), id(expr))
        if expr is None or key in self.active or depth < 0:
            return NONE, ""
        self.active.add(key)  # loop-carried values read themselves
        try:
            return self._of(func, expr, depth)
        finally:
            self.active.discard(key)

    def _join(self, pairs) -> Kind:
        return max(((self.of(f, e, d)) for f, e, d in pairs), key=lambda k: k[0], default=(NONE, ""))

    def _of(self, func: Function, expr: cst.BaseExpression, depth: int) -> Kind:
        text = expr_text(self.model, expr)
        if int_literal(expr) is not None or isinstance(expr, (cst.Comparison, cst.BooleanOperation)):
            return INT, ""
        if isinstance(expr, (cst.Float, cst.Imaginary)):
            return FLOAT, text
        if isinstance(expr, cst.Name):
            return (INT, "") if expr.value in ("True", "False") else self._name(func, expr.value, depth)
        if isinstance(expr, cst.Subscript) or (isinstance(expr, cst.Attribute) and expr.attr.value == "T"):
            return self.of(func, expr.value, depth)
        if isinstance(expr, cst.UnaryOperation):
            return (INT, "") if isinstance(expr.operator, cst.Not) else self.of(func, expr.expression, depth)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Divide):
                return FLOAT, text  # true division is float even on ints
            return self._join((func, e, depth) for e in (expr.left, expr.right))
        if isinstance(expr, cst.IfExp):
            return self._join((func, e, depth) for e in (expr.body, expr.orelse))
        if isinstance(expr, cst.Call):
            return self._call(func, expr, text, depth)
        return UNKNOWN, ""

    def _name(self, func: Function, name: str, depth: int) -> Kind:
        key = (id(func.node), name, depth)
        if key in self.known:
            return self.known[key]
        if key in self.open:
            self.cut = min(self.cut, self.open[key])
            return NONE, ""
        level = self.open[key] = len(self.open)
        outer, self.cut = self.cut, float("inf")
        try:
            kind = self._name_defs(func, name, depth)
        finally:
            del self.open[key]
        if self.cut >= level:   # no cut above this name: its kind does not wait on one being worked out
            self.known[key] = kind
        self.cut = min(outer, self.cut)
        return kind

    def _name_defs(self, func: Function, name: str, depth: int) -> Kind:
        kinds = []
        for d in self.model.flow(func).defs_of(name):
            if d.kind == "param":
                kinds.append(self._param(func, name, depth))
            elif d.kind == "for":
                loop = d.value.func if isinstance(d.value, cst.Call) else None
                kinds.append((INT, "") if loop is not None and self.model.qualify(loop) in LOOPS else (UNKNOWN, ""))
            else:
                kinds.append(self.of(func, d.value, depth))
        best = max(kinds, key=lambda k: k[0], default=(UNKNOWN, ""))  # no def: a global
        return best if best[0] != NONE else (UNKNOWN, "")

    def _param(self, func: Function, name: str, depth: int) -> Kind:
        jit = self.model.jit.get(func.name)
        if jit is None or jit.function is not func:
            return UNKNOWN, ""
        # A helper: what its callers pass.  A kernel: its launch values, default, configs.
        pairs = [(caller, bind_call_args(call, jit.params).get(name), depth - 1) for caller, call in jit.called_from]
        launched = [l.args[name] for l in jit.launches if name in l.args]
        pairs += [(l.wrapper, l.args[name], depth - 1) for l in jit.launches if name in l.args and l.wrapper]
        pairs += [(func, v, depth - 1) for v in jit.constexpr_values(name) if all(v is not a for a in launched)]
        best = self._join(pairs)
        return best if best[0] != NONE else (UNKNOWN, "")

    def _call(self, func: Function, call: cst.Call, text: str, depth: int) -> Kind:
        model = self.model
        target = cast_target(model, call)
        if target is not None:
            return self._dtype_kind(func, target, text)
        name = model.call_name(call) or ""
        leaf = name[len(TL):] if name.startswith(TL) else None
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if leaf in ("zeros", "full"):
            return self._dtype_kind(func, keyword(call, "dtype", 1 if leaf == "zeros" else 2), text)
        if leaf == "load":
            return LOADED, text
        if leaf == "dot":
            return (INT, "") if self._join((func, a, depth) for a in args[:2])[0] == INT else (FLOAT, text)
        if leaf in INT_CALLS or name == "int":
            return INT, ""
        if leaf in FLOAT_CALLS or name.startswith(TL + "extra.") or name == "float":
            return FLOAT, text
        if leaf in SAME_AS_ARG and args:
            return self.of(func, args[0], depth)
        if leaf is None and isinstance(call.func, cst.Attribute) and call.func.attr.value in SHAPE_METHODS:
            return self.of(func, call.func.value, depth)  # `x.sum(axis=0)`, `x.reshape(...)`
        if leaf in JOIN_ARGS:
            return self._join((func, a, depth) for a in (args[1:] if leaf == "where" else args))
        if leaf is not None and leaf.startswith("atomic_"):
            return self.of(func, keyword(call, "val", 1), depth)
        if isinstance(call.func, cst.Name) and call.func.value in model.jit:  # a jit helper's return values
            helper = model.jit[call.func.value].function
            returns = [n.value for n in walk(helper.node.body) if isinstance(n, cst.Return) and n.value is not None]
            return self._join((helper, r, depth - 1) for r in returns) if returns else (UNKNOWN, "")
        return UNKNOWN, ""

    def _dtype_kind(self, func: Function, dtype: cst.BaseExpression | None, text: str) -> Kind:
        dtypes = resolve_dtypes(self.model, func, dtype)
        if not dtypes:
            return UNKNOWN, ""
        return (INT, "") if dtypes <= INTEGERS else (FLOAT, text)
