"""A small def-use graph per function, in networkx.

Nodes are `Def`s: one per place a local name gets a value (a parameter, an
assignment, an augmented assignment, a `for` target, a `with ... as`, a walrus).
An edge `a → b` means the value defined at `a` flows into the value defined at
`b` (b's right-hand side reads a's name).  The analysis is flow-insensitive: a
read of `acc` reaches every definition of `acc` in the function, which is what
makes loop-carried values (`acc += tl.dot(a, b)` inside a `for`) and augmented
assignments fall out without a fixpoint.  For a linter this over-approximation
is the right side to err on: the dynamic gate decides.

Rules ask three kinds of questions:
  - `sources(expr)`: every expression whose value can reach `expr`;
  - `downstream(d)`: every definition that `d`'s value can reach;
  - `is_accumulation(d)`: `d` is `x += ...` / `x = f(x, ...)` inside a loop.
Calls between jit functions are followed by `Program` (in `triton.py`), which
links a helper's parameters to the arguments at its call sites.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst
import networkx as nx


@dataclass(eq=False)
class Def:
    """One definition of a local name."""

    name: str
    kind: str                      # param | assign | augassign | for | with | walrus
    node: cst.CSTNode              # the statement (or Param) that defines it
    value: cst.BaseExpression | None  # the expression assigned; None for params
    loops: tuple[cst.CSTNode, ...] = ()  # enclosing For/While nodes, outermost first
    operator: str | None = None    # for augassign: "+=", "*=", ...
    reads: frozenset[str] = field(default_factory=frozenset)

    def __repr__(self) -> str:
        return f"Def({self.name!r}, {self.kind})"


def names_read(expr: cst.CSTNode | None) -> set[str]:
    """Names an expression reads (attribute names and keyword names excluded)."""
    if expr is None:
        return set()
    collector = _NameCollector()
    expr.visit(collector)
    return collector.names


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `x.shape`: read x, not `shape`
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # `dtype=...`: not a read of `dtype`
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


_AUG_OPS = {
    cst.AddAssign: "+=", cst.SubtractAssign: "-=", cst.MultiplyAssign: "*=",
    cst.DivideAssign: "/=", cst.FloorDivideAssign: "//=", cst.ModuloAssign: "%=",
    cst.PowerAssign: "**=", cst.BitOrAssign: "|=", cst.BitAndAssign: "&=",
    cst.BitXorAssign: "^=", cst.LeftShiftAssign: "<<=", cst.RightShiftAssign: ">>=",
    cst.MatrixMultiplyAssign: "@=",
}


class _DefCollector(cst.CSTVisitor):
    """Collects the definitions of one function body (nested defs are skipped)."""

    def __init__(self, root: cst.FunctionDef) -> None:
        self.root = root
        self.defs: list[Def] = []
        self.loops: list[cst.CSTNode] = []

    def _add(self, name: str, kind: str, node: cst.CSTNode, value, operator=None, extra_reads=()) -> None:
        reads = names_read(value) | set(extra_reads)
        self.defs.append(Def(name, kind, node, value, tuple(self.loops), operator, frozenset(reads)))

    def _targets(self, target: cst.BaseExpression) -> Iterator[str]:
        if isinstance(target, cst.Name):
            yield target.value
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                yield from self._targets(element.value)
        elif isinstance(target, cst.StarredElement):
            yield from self._targets(target.value)

    # Nested functions and classes have scopes of their own.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node is self.root:
            for param in _all_params(node.params):
                self.defs.append(Def(param.name.value, "param", param, None))
            return True
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_For(self, node: cst.For) -> None:
        for name in self._targets(node.target):
            self._add(name, "for", node, node.iter)
        self.loops.append(node)

    def leave_For(self, node: cst.For) -> None:
        self.loops.pop()

    def visit_While(self, node: cst.While) -> None:
        self.loops.append(node)

    def leave_While(self, node: cst.While) -> None:
        self.loops.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            for name in self._targets(target.target):
                self._add(name, "assign", node, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            for name in self._targets(node.target):
                self._add(name, "assign", node, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for name in self._targets(node.target):
            self._add(name, "augassign", node, node.value, _AUG_OPS.get(type(node.operator)), extra_reads=(name,))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            for name in self._targets(node.asname.name):
                self._add(name, "with", node, node.item)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        for name in self._targets(node.target):
            self._add(name, "walrus", node, node.value)


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    result = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    if isinstance(params.star_arg, cst.Param):
        result.append(params.star_arg)
    if params.star_kwarg is not None:
        result.append(params.star_kwarg)
    return result


class Dataflow:
    """The def-use graph of one function."""

    def __init__(self, function: cst.FunctionDef) -> None:
        self.function = function
        collector = _DefCollector(function)
        function.visit(collector)
        self.defs: list[Def] = collector.defs
        self.by_name: dict[str, list[Def]] = {}
        for d in self.defs:
            self.by_name.setdefault(d.name, []).append(d)
        self.graph = nx.DiGraph()
        self.graph.add_nodes_from(self.defs)
        for d in self.defs:
            for name in d.reads:
                for source in self.by_name.get(name, ()):
                    self.graph.add_edge(source, d)
        self._by_node: dict[int, list[Def]] = {}
        for d in self.defs:
            self._by_node.setdefault(id(d.node), []).append(d)

    def defs_of(self, name: str) -> list[Def]:
        return self.by_name.get(name, [])

    def defs_at(self, node: cst.CSTNode) -> list[Def]:
        """The definitions made by one statement."""
        return self._by_node.get(id(node), [])

    def param(self, name: str) -> Def | None:
        for d in self.by_name.get(name, ()):
            if d.kind == "param":
                return d
        return None

    def upstream(self, expr: cst.CSTNode) -> set[Def]:
        """Every definition whose value can reach `expr`."""
        start = {d for name in names_read(expr) for d in self.by_name.get(name, ())}
        found = set(start)
        for d in start:
            found |= nx.ancestors(self.graph, d)
        return found

    def downstream(self, d: Def) -> set[Def]:
        """Every definition that `d`'s value can reach (not including `d`)."""
        return nx.descendants(self.graph, d)

    def sources(self, expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """`expr` and every right-hand side that can flow into it."""
        yield expr
        for d in self.upstream(expr):
            if d.value is not None:
                yield d.value

    def single_value(self, name: str) -> cst.BaseExpression | None:
        """The value of `name` when it is assigned exactly once (and not a parameter)."""
        defs = self.by_name.get(name, [])
        if len(defs) == 1 and defs[0].kind == "assign":
            return defs[0].value
        return None

    @staticmethod
    def is_accumulation(d: Def) -> bool:
        """`x += ...` or `x = f(x, ...)` inside a loop: a running reduction."""
        if not d.loops:
            return False
        return d.kind == "augassign" or (d.kind == "assign" and d.name in d.reads)
