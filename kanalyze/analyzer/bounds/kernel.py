"""The kernel side of the bounds proofs: a jit function's index arithmetic as tiles.

A `Frame` evaluates expressions of one jit function under one launch
configuration (its parameters bound to the launch's symbolic values): the
pointer and the mask of every load, store and atomic, also in the jit helpers
the kernel calls (inlined at each call).  How names get their values (straight
lines, loop variables, loop-carried pointers, path conditions) is in
bounds_flow.  What it does not model (a value loaded from memory, a block
pointer, a call it does not know) raises `Unsupported`: the access is "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import z3

from kanalyze.analyzer.bounds.flow import Flow, Loop, index_of
from kanalyze.analyzer.bounds.symbols import MAX_TILE, Env, Unsupported, concrete, int_term, literal_value
from kanalyze.analyzer.bounds.symbols import reaching
from kanalyze.analyzer.bounds.terms import (DType, Opaque, Pointer, PyValue, Tile, add_pointer, arange, binop, boolean,
                                            cast, constant, expand, scalar, select, unary)
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal, keyword
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
LOAD, STORE = TL + "load", TL + "store"
ATOMICS = {TL + f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}
ACCESSES = {LOAD, STORE} | ATOMICS
IDENTITY = {TL + "multiple_of", TL + "max_contiguous", TL + "max_constancy"}
DTYPES = {"int64": "int64", "uint64": "uint64", "int32": "int32", "uint32": "uint32", "int1": "int1"}

_BINARY = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//", cst.Modulo: "%",
           cst.BitAnd: "&", cst.BitOr: "|", cst.BitXor: "^", cst.LeftShift: "<<", cst.RightShift: ">>"}
_COMPARE = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">=",
            cst.Equal: "==", cst.NotEqual: "!="}


@dataclass(eq=False)
class LaunchContext:
    """What one launch configuration gives the kernel: symbols, grid, tensors."""

    model: TritonModule
    env: Env
    grid: list | None                      # z3 terms per axis; None: not read
    tensors: dict                          # kernel pointer parameter → HostTensor
    module_value: object                   # name → value of a module-level constant (or raises)
    pids: dict = field(default_factory=dict)

    def pid(self, axis: int) -> z3.ArithRef:
        if axis not in self.pids:
            if self.grid is None:
                size = self.env.free("the grid of the launch is not read")
            else:
                size = self.grid[axis] if axis < len(self.grid) else z3.IntVal(1)
            limit = 2**31 - 1 if axis == 0 else 65535  # CUDA's grid limits
            self.pids[axis] = self.env.symbol(f"pid{axis}", "pid", f"program id {axis}",
                                              facts=lambda p: [p >= 0, p < size, size <= limit])
        return self.pids[axis]

    def num_programs(self, axis: int) -> z3.ArithRef:
        self.pid(axis)  # its facts bound the grid
        if self.grid is None:
            return self.env.free("the grid of the launch is not read")
        return self.grid[axis] if axis < len(self.grid) else z3.IntVal(1)


@dataclass(eq=False)
class AccessTerms:
    """One access, evaluated: its pointer, its mask and the conditions it runs under."""

    call: cst.Call
    kind: str                   # load | store | atomic
    pointer: Pointer
    mask: Tile | None
    path: list                  # z3 booleans
    frame: "Frame"
    control_checks: tuple = ()  # wraps in the bounds of the loops around the access


class Frame(Flow):
    """One jit function under one launch configuration (a kernel, or a helper
    inlined at one of its call sites)."""

    def __init__(self, ctx: LaunchContext, jit: JitFunction, bindings: dict,
                 parent: "Frame | None" = None, call: cst.Call | None = None, depth: int = 0) -> None:
        self.ctx, self.jit, self.bindings = ctx, jit, bindings
        self.parent, self.call, self.depth = parent, call, depth
        self.model = ctx.model
        self.flow = self.model.flow(jit)
        self.reaching = reaching(self.model, jit.function)
        self.values: dict[int, object] = {}
        self.loops: dict[int, Loop] = {}
        # Names of this frame's loop iterations: the same for every launch of the kernel
        # (identical questions then read identically), distinct for each inlined call.
        self.tag = f"{jit.name}@{index_of(self.model, call) if call is not None else 'kernel'}"

    # --- accesses ------------------------------------------------------------

    def accesses(self):
        """(call, AccessTerms | Unsupported) for every load/store/atomic in this
        function and in the jit helpers it calls (inlined, a few levels deep)."""
        for site in self.model.calls_in(self.jit):
            if site.qualname in ACCESSES:
                try:
                    yield site.node, self.access(site.node, site.qualname)
                except Unsupported as exc:
                    yield site.node, exc
            elif isinstance(site.node.func, cst.Name) and site.node.func.value in self.model.jit \
                    and self.depth < 3:
                helper = self.model.jit[site.node.func.value]
                if helper.node is self.jit.node:
                    continue
                yield from self.helper(helper, site.node).accesses()

    def access(self, call: cst.Call, qualname: str) -> AccessTerms:
        if keyword(call, "boundary_check") is not None:
            raise Unsupported("a block pointer access (`boundary_check`)")
        pointer_expr = keyword(call, "pointer", 0)
        if pointer_expr is None:
            raise Unsupported("an access without a pointer argument")
        pointer = self.eval(pointer_expr)
        if isinstance(pointer, Opaque):
            raise Unsupported(pointer.reason)
        if not isinstance(pointer, Pointer):
            raise Unsupported(f"`{self.text(pointer_expr)}` is not a pointer into a tensor argument")
        kind = "load" if qualname == LOAD else "store" if qualname == STORE else "atomic"
        position = 1 if kind == "load" else None if qualname.endswith("atomic_cas") else 2
        mask_expr = keyword(call, "mask", position)
        mask = None
        if mask_expr is not None:
            value = self.eval(mask_expr)
            if isinstance(value, Opaque):
                raise Unsupported(value.reason)
            if isinstance(value, Tile):
                mask = value if value.kind == "bool" else cast(value, "int1")
            elif not (isinstance(value, PyValue) and value.value is None):
                raise Unsupported(f"the mask `{self.text(mask_expr)}`")
        path = self.path(call)
        return AccessTerms(call, kind, pointer, mask, path, self, self.control_checks(call))

    def control_checks(self, node: cst.CSTNode) -> tuple:
        checks = tuple(c for loop in self.loops.values() if self.reaching.inside(node, loop.node.body)
                       for c in loop.checks)
        if self.parent is not None and self.call is not None:
            checks += self.parent.control_checks(self.call)
        return checks

    def helper(self, helper: JitFunction, call: cst.Call) -> "Frame":
        bound = bind_call_args(call, helper.params)
        bindings = {}
        for param in helper.params:
            expr = bound.get(param.name, param.default)
            if expr is None:
                bindings[param.name] = Opaque(f"`{param.name}` of `{helper.name}` is not bound at `{self.text(call)}`")
                continue
            frame = self if param.name in bound else None
            try:
                bindings[param.name] = self.eval(expr) if frame is not None else self.module(expr)
            except Unsupported as exc:
                bindings[param.name] = Opaque(exc.reason)
        return Frame(self.ctx, helper, bindings, self, call, self.depth + 1)

    # --- expressions ---------------------------------------------------------

    def eval(self, expr: cst.BaseExpression):
        if isinstance(expr, cst.Integer):
            value = int_literal(expr)
            if value is None:  # thousands of hex digits: no size, and z3 cannot take its decimal text
                raise Unsupported("an integer literal too wide to be a size")
            return constant(value)
        if isinstance(expr, cst.Float):
            return PyValue(float(expr.evaluated_value))
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            return PyValue(literal_value(expr))
        if isinstance(expr, cst.Name):
            return self.name(expr)
        if isinstance(expr, cst.Attribute):
            qualified = self.model.qualify(expr) or ""
            leaf = qualified.rsplit(".", 1)[-1]
            if qualified.startswith(TL) and leaf.startswith(("float", "bfloat", "int", "uint")):
                return DType(leaf)
            return Opaque(f"`{self.text(expr)}`")
        if isinstance(expr, cst.Call):
            return self.call_value(expr)
        if isinstance(expr, cst.Subscript):
            return self.subscript(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self.binary(expr)
        if isinstance(expr, cst.UnaryOperation):
            value = self.tile(expr.expression)
            op = {cst.Minus: "-", cst.Plus: "+", cst.Not: "not", cst.BitInvert: "~"}[type(expr.operator)]
            return unary(op, value, expr)
        if isinstance(expr, cst.Comparison):
            left, result = self.tile(expr.left), None
            for comparison in expr.comparisons:
                op = _COMPARE.get(type(comparison.operator))
                if op is None:
                    raise Unsupported(f"`{self.text(expr)}`")
                right = self.tile(comparison.comparator)
                term = binop(op, left, right, expr)
                result = term if result is None else binop("&", result, term, expr)
                left = right
            return result
        if isinstance(expr, cst.BooleanOperation):
            op = "&" if isinstance(expr.operator, cst.And) else "|"
            return binop(op, self.tile(expr.left), self.tile(expr.right), expr)
        if isinstance(expr, cst.IfExp):
            return select(self.tile(expr.test), self.tile(expr.body), self.tile(expr.orelse))
        return Opaque(f"`{self.text(expr)}`")

    def tile(self, expr: cst.BaseExpression) -> Tile:
        value = self.eval(expr)
        if isinstance(value, Tile):
            return value
        if isinstance(value, Opaque):
            raise Unsupported(value.reason)
        if isinstance(value, PyValue) and isinstance(value.value, bool):
            return boolean(value.value)
        raise Unsupported(f"`{self.text(expr)}` is not an integer")

    def binary(self, expr: cst.BinaryOperation):
        op = _BINARY.get(type(expr.operator))
        if op is None:
            raise Unsupported(f"`{self.text(expr)}`")
        left, right = self.eval(expr.left), self.eval(expr.right)
        for side in (left, right):
            if isinstance(side, Opaque):
                raise Unsupported(side.reason)
        if isinstance(left, Pointer) and isinstance(right, Tile) and op in ("+", "-"):
            return add_pointer(left, right, 1 if op == "+" else -1)
        if isinstance(right, Pointer) and isinstance(left, Tile) and op == "+":
            return add_pointer(right, left)
        if isinstance(left, Tile) and isinstance(right, Tile):
            return binop(op, left, right, expr)
        raise Unsupported(f"`{self.text(expr)}`")

    def subscript(self, expr: cst.Subscript):
        value = self.eval(expr.value)
        layout = []
        for element in expr.slice:
            index = element.slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value == "None":
                layout.append(False)
            elif isinstance(index, cst.Slice) and index.lower is None and index.upper is None and index.step is None:
                layout.append(True)
            else:
                raise Unsupported(f"the index `{self.text(expr)}`")
        if isinstance(value, Pointer):
            return Pointer(value.base, expand(value.offset, layout))
        if isinstance(value, Tile):
            return expand(value, layout)
        if isinstance(value, Opaque):
            raise Unsupported(value.reason)
        raise Unsupported(f"`{self.text(expr)}`")

    def call_value(self, call: cst.Call):
        name = self.model.call_name(call) or ""
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if name == TL + "program_id" or name == TL + "num_programs":
            axis = concrete(self.tile(keyword(call, "axis", 0)).at(())[0]) if call.args else 0
            if axis is None or not 0 <= axis < 3:
                raise Unsupported(f"`{self.text(call)}` with a non-constant axis")
            term = self.ctx.pid(axis) if name.endswith("program_id") else self.ctx.num_programs(axis)
            return scalar(term)
        if name == TL + "arange":
            start, end = (self.tile(keyword(call, "start", 0)), self.tile(keyword(call, "end", 1)))
            if not (start.const and end.const):
                raise Unsupported(f"`{self.text(call)}` with runtime bounds")
            a, b = start.at(())[0], end.at(())[0]
            length = b - a
            if concrete(length) is None:  # a constexpr that follows a runtime size
                self.ctx.env.add_fact(z3.Or([length == 2**i for i in range(21)]))
            elif not 0 < concrete(length) <= MAX_TILE:
                raise Unsupported(f"`{self.text(call)}` has {concrete(length)} lanes")
            return arange(concrete(a) if concrete(a) is not None else a, concrete(b) if concrete(b) is not None else b)
        if name in IDENTITY and args:
            return self.eval(args[0])
        if name in (TL + "where",) and len(args) == 3:
            return select(self.tile(args[0]), self.tile(args[1]), self.tile(args[2]))
        if name in (TL + "minimum", TL + "maximum", "min", "max") and len(args) == 2:
            a, b = self.tile(args[0]), self.tile(args[1])
            op = "<" if name.endswith("minimum") or name == "min" else ">"
            return select(binop(op, a, b, call), a, b)
        if name == TL + "cdiv" and len(args) == 2:
            a, b = self.tile(args[0]), self.tile(args[1])
            return binop("//", binop("-", binop("+", a, b, call), constant(1), call), b, call)
        if name == TL + "cast" and len(args) >= 2:
            return self._cast(self.tile(args[0]), self.eval(args[1]), call)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and args:
            return self._cast(self.tile(call.func.value), self.eval(args[0]), call)
        if name == TL + "expand_dims" and len(args) == 2:
            value, axis = self.tile(args[0]), concrete(self.tile(args[1]).at(())[0])
            if axis is None:
                raise Unsupported(f"`{self.text(call)}`")
            layout = [True] * len(value.shape)
            layout.insert(axis % (len(value.shape) + 1), False)
            return expand(value, layout)
        if name == "int" and len(args) == 1:
            return self.eval(args[0])
        if name == LOAD:
            return Opaque(f"the offset depends on a value loaded from memory (`{self.text(call)}`)")
        if isinstance(call.func, cst.Name) and call.func.value in self.model.jit and self.depth < 3:
            return self.inline(self.model.jit[call.func.value], call)
        return Opaque(f"`{self.text(call)}`")

    def _cast(self, value: Tile, dtype, call) -> Tile:
        if isinstance(dtype, DType) and dtype.name in DTYPES:
            return cast(value, DTYPES[dtype.name], call)
        raise Unsupported(f"`{self.text(call)}`")

    def inline(self, helper: JitFunction, call: cst.Call):
        """A helper's value: the one `return` at the end of its body."""
        body = helper.node.body.body
        last = body[-1] if body else None
        returns = [n for n in self.model.nodes(cst.Return) if self.model.function_of(n) is helper.function]
        if len(returns) != 1 or not isinstance(last, cst.SimpleStatementLine) or last.body[-1] is not returns[0] \
                or returns[0].value is None:
            raise Unsupported(f"the jit helper `{helper.name}` does not end in its only `return`")
        return self.helper(helper, call).eval(returns[0].value)

    def module(self, expr: cst.BaseExpression):
        """A value in module scope (a constexpr default, an autotune config entry)."""
        return to_kernel_value(self.ctx.module_value(expr))

    def text(self, node) -> str:
        if not isinstance(node, cst.CSTNode):
            return "?"
        from kanalyze.analyzer.cstwalk import node_text

        text = node_text(self.model.module, node)
        return text if len(text) <= 60 else text[:59] + "…"


def to_kernel_value(value, *, runtime: bool = False):
    """A host value (from host.py) as a kernel value: constexprs are compile-time
    constants, runtime integer arguments int32 or int64 by their value."""
    from kanalyze.analyzer.bounds.host import HTuple, HValue

    if isinstance(value, bool):
        return boolean(value)
    if isinstance(value, (int, z3.ArithRef)):
        term = int_term(value)
        if runtime:
            return scalar(term, wide=z3.Or(term > 2**31 - 1, term < -(2**31)))
        return constant(term)
    if isinstance(value, z3.BoolRef):
        return boolean(value)
    if isinstance(value, HValue):
        if isinstance(value.value, str) and value.value.startswith("torch."):
            return DType(value.value.rsplit(".", 1)[-1])
        return PyValue(value.value)
    if isinstance(value, HTuple):
        return Opaque("a tuple argument")
    return Opaque("a value the wrapper does not compute from sizes")
