"""How a kernel's names get their values, for the bounds proofs (part of `Frame`).

Names are followed through the def-use graph in order (`Reaching`), with three
shapes of flow the proofs need:
  - straight-line definitions (`offs = pid * BLOCK + tl.arange(0, BLOCK)`,
    `X += row * stride`);
  - a `for v in range(a, b, s)` target: `v = a + t*s` for an iteration `t`
    with `a + t*s < b`;
  - loop-carried increments (`a_ptrs += BLOCK_K * stride_ak` in that loop):
    the value at iteration `t` is `init + t*inc` (or `(t+1)*inc` once the
    increment has run in this iteration), `init + trips*inc` after the loop.
Every other flow (a name with definitions in two branches, a while loop)
raises `Unsupported`: the access is "unknown".  Conditions an access sits
under (`if`, an earlier `if ...: return`) become path conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import z3

from kanalyze.analyzer.bounds.symbols import INT32_MAX, Unsupported, concrete, either
from kanalyze.analyzer.bounds.terms import (Opaque, Pointer, PyValue, Tile, add_pointer, binop, boolean, constant,
                                            scalar, times)
from kanalyze.analyzer.triton.dataflow import Def, names_read
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
RANGES = {"range", TL + "range", TL + "static_range"}
_AUG = {"+=": "+", "-=": "-", "*=": "*", "//=": "//", "%=": "%"}


@dataclass(eq=False)
class Loop:
    node: cst.For
    variable: Tile
    iteration: z3.ArithRef
    trips: z3.ArithRef
    checks: tuple = ()          # int32 wraps in `range(...)`'s own bounds


class Flow:
    """Name resolution, loops and path conditions of a `Frame` (kernel.py), which
    provides `model`, `flow`, `reaching`, `bindings`, `ctx`, `jit`, `loops`,
    `values`, `tag`, `parent`, `call`, `eval`, `tile`, `module` and `text`."""

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
        if any(t.kind != "int" for t in (start, stop, step)):   # `range(BLOCK)` with `BLOCK=True`
            raise Unsupported(f"`{self.text(call)}` over a boolean")
        (a, ca), (b, cb), (s, cs) = (t.at(()) for t in (start, stop, step))
        if concrete(s) is not None and concrete(s) <= 0:
            raise Unsupported(f"`{self.text(call)}` steps down")
        env = self.ctx.env
        wide = either(start.wide, stop.wide, step.wide)
        # An int32 loop variable holds an int32 value: where `range`'s own bounds wrap,
        # that is reported on the bound (a control check), not again on each use.
        def loop_facts(t):
            in_range = [t >= 0, a + t * s < b, s >= 1]
            if wide is True:
                return in_range
            bounded = a + t * s <= INT32_MAX
            return in_range + [bounded if wide is False else z3.Or(wide, bounded)]
        iteration = env.symbol(f"iter{index_of(self.model, node)}@{self.tag}", "iter",
                               f"iteration of `{self.text(call)}`", facts=loop_facts)
        trips = z3.If(b > a, (b - a + s - 1) / s, 0)
        variable = a + iteration * s
        env.shown.append((node.target.value, variable))
        return Loop(node, scalar(variable, wide=wide), iteration, trips,
                    ca + cb + cs)

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

def index_of(model: TritonModule, node: cst.CSTNode) -> int:
    """A node's position among the file's nodes of its type: a name that is the same
    in every run (ids are not), so that the solver sees the same question each time."""
    return next(i for i, other in enumerate(model.nodes(type(node))) if other is node)


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
