"""The kernel side of the bounds proofs: a jit function's index arithmetic as tiles.

A `Frame` evaluates expressions of one jit function under one launch
configuration (its parameters bound to the launch's symbolic values).  Names
are followed through the def-use graph in order (`Reaching`), with three
shapes of flow the proofs need:
  - straight-line definitions (`offs = pid * BLOCK + tl.arange(0, BLOCK)`,
    `X += row * stride`);
  - a `for v in range(a, b, s)` target: `v = a + t*s` for an iteration `t`
    with `a + t*s < b`;
  - loop-carried increments (`a_ptrs += BLOCK_K * stride_ak` in that loop):
    the value at iteration `t` is `init + t*inc` (or `(t+1)*inc` once the
    increment has run in this iteration), `init + trips*inc` after the loop.
Every other flow (a name with definitions in two branches, a while loop, a
value loaded from memory) raises `Unsupported`: the access is "unknown".
Conditions the access sits under (`if`, early `return`) become path conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import z3

from kanalyze.analyzer.bounds_terms import (MAX_TILE, DType, Env, Opaque, Pointer, PyValue, Tile, Unsupported,
                                            add_pointer, arange, binop, boolean, cast, concrete, constant, either,
                                            expand, int_term, scalar, select, times, unary)
from kanalyze.analyzer.dataflow import Def, names_read
from kanalyze.analyzer.reaching import Reaching
from kanalyze.analyzer.triton import JitFunction, TritonModule, bind_call_args, keyword

TL = "triton.language."
LOAD, STORE = TL + "load", TL + "store"
ATOMICS = {TL + f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}
ACCESSES = {LOAD, STORE} | ATOMICS
RANGES = {"range", TL + "range", TL + "static_range"}
IDENTITY = {TL + "multiple_of", TL + "max_contiguous", TL + "max_constancy"}
DTYPES = {"int64": "int64", "uint64": "uint64", "int32": "int32", "uint32": "uint32", "int1": "int1"}

_BINARY = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//", cst.Modulo: "%",
           cst.BitAnd: "&", cst.BitOr: "|", cst.BitXor: "^", cst.LeftShift: "<<", cst.RightShift: ">>"}
_COMPARE = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">=",
            cst.Equal: "==", cst.NotEqual: "!="}
_AUG = {"+=": "+", "-=": "-", "*=": "*", "//=": "//", "%=": "%"}


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
class Loop:
    variable: Tile
    iteration: z3.ArithRef
    trips: z3.ArithRef


@dataclass(eq=False)
class AccessTerms:
    """One access, evaluated: its pointer, its mask and the conditions it runs under."""

    call: cst.Call
    kind: str                   # load | store | atomic
    pointer: Pointer
    mask: Tile | None
    path: list                  # z3 booleans
    frame: "Frame"


class Frame:
    """One jit function under one launch configuration (a kernel, or a helper
    inlined at one of its call sites)."""

    def __init__(self, ctx: LaunchContext, jit: JitFunction, bindings: dict,
                 parent: "Frame | None" = None, call: cst.Call | None = None, depth: int = 0) -> None:
        self.ctx, self.jit, self.bindings = ctx, jit, bindings
        self.parent, self.call, self.depth = parent, call, depth
        self.model = ctx.model
        self.flow = self.model.flow(jit)
        self.reaching = Reaching(self.model, jit)
        self.values: dict[int, object] = {}
        self.loops: dict[int, Loop] = {}
        self.tag = f"{jit.name}#{id(self) % 100000}"

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
        return AccessTerms(call, kind, pointer, mask, self.path(call), self)

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
            return constant(int(expr.evaluated_value))
        if isinstance(expr, cst.Float):
            return PyValue(float(expr.evaluated_value))
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            return PyValue(expr.evaluated_value)
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

    # --- names ---------------------------------------------------------------

    def name(self, node: cst.Name):
        name = node.value
        if name in ("True", "False"):
            return boolean(name == "True")
        if name == "None":
            return PyValue(None)
        if not self.flow.defs_of(name):
            try:
                return self.module(node)
            except Unsupported as exc:
                return Opaque(exc.reason)
        return self.value_at(name, node)

    def value_at(self, name: str, at: cst.CSTNode):
        reaching = self.reaching.defs(name, at)
        loop_targets = [d for d in reaching if d.kind == "for" and self.reaching.inside(at, d.node.body)]
        if loop_targets:  # inside `for name in ...`: that loop's variable, whatever came before
            return self.def_value(max(loop_targets, key=lambda d: self.reaching.span(d.node)[0]), name, at)
        carried = [d for d in self.flow.defs_of(name) if d.loops and self._increment(d) is not None]
        if any(d in carried for d in reaching):
            return self.carried(name, at, carried)
        if len(reaching) != 1:
            raise Unsupported(f"`{name}` has {len(reaching) or 'no'} definitions that reach `{self.text(at)}`")
        return self.def_value(reaching[0], name, at)

    def def_value(self, d: Def, name: str, at: cst.CSTNode):
        if d.kind == "for":
            return self.loop(d.node, at).variable
        key = id(d)
        if key in self.values:
            return self.values[key]
        if d.kind == "param":
            value = self.bindings.get(name, Opaque(f"the parameter `{name}` is not bound at the launch"))
        elif d.kind in ("assign", "walrus"):
            value = self.eval(_assigned_value(d, name))
        elif d.kind == "augassign" and d.operator in _AUG:
            before = self.value_at(name, d.node)
            increment = self.eval(d.value)
            value = self._combine(_AUG[d.operator], before, increment, d.node)
        else:
            raise Unsupported(f"`{name}` is bound by `{self.text(d.node)}`")
        self.values[key] = value
        return value

    def _combine(self, op: str, a, b, node):
        for side in (a, b):
            if isinstance(side, Opaque):
                raise Unsupported(side.reason)
        if isinstance(a, Pointer) and isinstance(b, Tile) and op in ("+", "-"):
            return add_pointer(a, b, 1 if op == "+" else -1)
        if isinstance(a, Tile) and isinstance(b, Tile):
            return binop(op, a, b, node)
        raise Unsupported(f"`{self.text(node)}`")

    def _increment(self, d: Def):
        """The added expression of `x += e` / `x -= e` / `x = x + e`, with its sign."""
        if d.kind == "augassign" and d.operator in ("+=", "-="):
            return d.value, 1 if d.operator == "+=" else -1
        value = d.value
        if d.kind == "assign" and isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            for own, other in ((value.left, value.right), (value.right, value.left)):
                if isinstance(own, cst.Name) and own.value == d.name and d.name not in names_read(other):
                    return other, 1
        return None

    def carried(self, name: str, at: cst.CSTNode, increments: list[Def]):
        loops = {id(d.loops[-1]): d.loops[-1] for d in increments}
        if len(loops) != 1:
            raise Unsupported(f"`{name}` is advanced in more than one loop")
        loop_node = next(iter(loops.values()))
        inside = [d for d in self.flow.defs_of(name) if d.loops and any(l is loop_node for l in d.loops)]
        if len(inside) != len(increments):
            raise Unsupported(f"`{name}` is both reset and advanced in a loop")
        entry = [d for d in self.reaching.defs(name, loop_node) if not any(d is i for i in increments)]
        if len(entry) != 1:
            raise Unsupported(f"`{name}` has several values when the loop starts")
        value = self.def_value(entry[0], name, loop_node)
        loop = self.loop(loop_node, at, after_ok=True)
        in_loop = self.reaching.inside(at, loop_node)
        start = self.reaching.span(at)[0]
        for d in increments:
            expr, sign = self._increment(d)
            for read in names_read(expr):
                if any(self.reaching.inside(x.node, loop_node) for x in self.flow.defs_of(read) if x.kind != "param"):
                    raise Unsupported(f"the step of `{name}` changes inside the loop")
            step = self.tile(expr)
            count = loop.trips if not in_loop else (
                loop.iteration if self.reaching.time(d) > start else loop.iteration + 1)
            total = times(count, step, wraps=False, node=d.node)
            if isinstance(value, Pointer):
                value = add_pointer(value, total, sign)
            elif isinstance(value, Tile):
                value = binop("+" if sign > 0 else "-", value, total, d.node)
            else:
                raise Unsupported(f"`{name}` is not an integer or a pointer")
        return value

    def loop(self, node: cst.CSTNode, at: cst.CSTNode, after_ok: bool = False) -> Loop:
        inside = self.reaching.inside(at, node.body) if isinstance(node, cst.For) else False
        if not isinstance(node, cst.For):
            raise Unsupported("a `while` loop")
        if not inside and not after_ok:
            raise Unsupported(f"the loop variable of `{self.text(node.iter)}` read after the loop")
        if id(node) not in self.loops:
            self.loops[id(node)] = self._make_loop(node)
        return self.loops[id(node)]

    def _make_loop(self, node: cst.For) -> Loop:
        call = node.iter
        if not isinstance(call, cst.Call) or self.model.call_name(call) not in RANGES or not isinstance(
                node.target, cst.Name):
            raise Unsupported(f"the loop `for ... in {self.text(call)}`")
        args = [self.tile(a.value) for a in call.args if a.keyword is None][:3]
        if not 1 <= len(args) <= 3:
            raise Unsupported(f"`{self.text(call)}`")
        start, stop, step = (constant(0), args[0], constant(1)) if len(args) == 1 else (
            args[0], args[1], args[2] if len(args) == 3 else constant(1))
        a, b, s = (t.at(())[0] for t in (start, stop, step))
        if concrete(s) is not None and concrete(s) <= 0:
            raise Unsupported(f"`{self.text(call)}` steps down")
        env = self.ctx.env
        iteration = env.symbol(f"iter{len(self.loops)}@{self.tag}", "iter", f"iteration of `{self.text(call)}`",
                               facts=lambda t: [t >= 0, a + t * s < b, s >= 1])
        trips = z3.If(b > a, (b - a + s - 1) / s, 0)
        variable = a + iteration * s
        env.shown.append((node.target.value, variable))
        return Loop(scalar(variable, wide=either(start.wide, stop.wide, step.wide)), iteration, trips)

    # --- path conditions -----------------------------------------------------

    def path(self, node: cst.CSTNode) -> list:
        """Conditions under which `node` runs: enclosing `if`s, earlier `if ...:
        return/break/continue`, and the same at the helper's call site.  A condition
        the extraction cannot read becomes a free boolean (an approximation)."""
        conditions = []
        child = node
        for ancestor in self.model.ancestors(node):
            if ancestor is self.jit.node:
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                taken = child is ancestor.body
                conditions.append(self._condition(ancestor.test, taken))
            if isinstance(ancestor, cst.IndentedBlock):
                for statement in ancestor.body:
                    if statement is child:
                        break
                    if isinstance(statement, cst.If) and _exits(statement.body):
                        conditions.append(self._condition(statement.test, False))
            child = ancestor
        if self.parent is not None and self.call is not None:
            conditions += self.parent.path(self.call)
        return conditions

    def _condition(self, test: cst.BaseExpression, taken: bool):
        try:
            value = self.tile(test)
            if value.shape != ():
                raise Unsupported("a tile condition")
            term = value.at(())[0]
            term = term if value.kind == "bool" else term != 0
        except Unsupported:
            term = self.ctx.env.free(f"the condition `{self.text(test)}` is not modeled", boolean=True)
        return term if taken else z3.Not(term)

    def text(self, node) -> str:
        if not isinstance(node, cst.CSTNode):
            return "?"
        from kanalyze.analyzer.cstwalk import node_text

        text = node_text(self.model.module, node)
        return text if len(text) <= 60 else text[:59] + "…"


def _exits(body: cst.BaseSuite) -> bool:
    statements = list(body.body)
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], (cst.Return, cst.Break, cst.Continue))
    return isinstance(last, (cst.Return, cst.Break, cst.Continue))


def _assigned_value(d: Def, name: str) -> cst.BaseExpression:
    """The value `d` gives `name`, also for `a, b = x, y`."""
    statement = d.node
    if isinstance(statement, cst.Assign):
        for t in statement.targets:
            if isinstance(t.target, cst.Name):
                return statement.value
            if isinstance(t.target, (cst.Tuple, cst.List)) and isinstance(statement.value, (cst.Tuple, cst.List)) \
                    and len(t.target.elements) == len(statement.value.elements):
                for te, ve in zip(t.target.elements, statement.value.elements):
                    if isinstance(te.value, cst.Name) and te.value.value == name:
                        return ve.value
            raise Unsupported(f"the unpacking `{name}` = ...")
    if d.value is None:
        raise Unsupported(f"`{name}` has no value")
    return d.value


def to_kernel_value(value, *, runtime: bool = False):
    """A host value (from bounds_host) as a kernel value: constexprs are compile-time
    constants, runtime integer arguments int32 or int64 by their value."""
    from kanalyze.analyzer.bounds_host import HTuple, HValue

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
