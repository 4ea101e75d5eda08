"""A small def-use graph per function.

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

from kanalyze.analyzer.cstwalk import child_nodes


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


def own_value(d: Def) -> cst.BaseExpression | None:
    """The part of a definition's value that lands in its own name: `b` of
    `a, b = x.to(tl.int32), y` is `y`; else the whole value."""
    value = d.value
    if isinstance(d.node, cst.Assign) and isinstance(value, (cst.Tuple, cst.List)):
        for target in d.node.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)) and len(target.target.elements) == len(value.elements):
                for element, part in zip(target.target.elements, value.elements):
                    if isinstance(element.value, cst.Name) and element.value.value == d.name:
                        return part.value
    return value


def names_read(expr: cst.CSTNode | None) -> set[str]:
    """Names an expression reads (attribute names and keyword names excluded)."""
    names: set[str] = set()
    if expr is None:
        return names
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Name:
            names.add(node.value)
        elif kind is cst.Attribute or kind is cst.Arg:
            stack.append(node.value)  # `x.shape` reads x; `dtype=v` reads v, not `dtype`
        elif kind is not cst.Lambda:
            stack.extend(child_nodes(node))
    return names


_AUG_OPS = {
    cst.AddAssign: "+=", cst.SubtractAssign: "-=", cst.MultiplyAssign: "*=",
    cst.DivideAssign: "/=", cst.FloorDivideAssign: "//=", cst.ModuloAssign: "%=",
    cst.PowerAssign: "**=", cst.BitOrAssign: "|=", cst.BitAndAssign: "&=",
    cst.BitXorAssign: "^=", cst.LeftShiftAssign: "<<=", cst.RightShiftAssign: ">>=",
    cst.MatrixMultiplyAssign: "@=",
}


def _targets(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _targets(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _targets(target.value)


def _collect_defs(root: cst.FunctionDef) -> list[Def]:
    """The definitions of one function body; nested defs, classes and lambdas
    have scopes of their own and are skipped."""
    defs = [Def(p.name.value, "param", p, None) for p in _all_params(root.params)]

    def add(name, kind, node, value, loops, operator=None, extra=()):
        reads = names_read(value) | set(extra)
        defs.append(Def(name, kind, node, value, loops, operator, frozenset(reads)))

    stack: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(root.body, ())]
    while stack:
        node, loops = stack.pop()
        kind = type(node)
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        inner = loops
        if kind is cst.For:
            for name in _targets(node.target):
                add(name, "for", node, node.iter, loops)
            inner = loops + (node,)
        elif kind is cst.While:
            inner = loops + (node,)
        elif kind is cst.Assign:
            for target in node.targets:
                for name in _targets(target.target):
                    add(name, "assign", node, node.value, loops)
        elif kind is cst.AnnAssign and node.value is not None:
            for name in _targets(node.target):
                add(name, "assign", node, node.value, loops)
        elif kind is cst.AugAssign:
            for name in _targets(node.target):
                add(name, "augassign", node, node.value, loops, _AUG_OPS.get(type(node.operator)), (name,))
        elif kind is cst.WithItem and node.asname is not None:
            for name in _targets(node.asname.name):
                add(name, "with", node, node.item, loops)
        elif kind is cst.NamedExpr:
            for name in _targets(node.target):
                add(name, "walrus", node, node.value, loops)
        stack.extend((child, inner) for child in reversed(list(child_nodes(node))))
    return defs


def _closure(start: str, neighbours) -> set[str]:
    """`start` and every name reached from it through `neighbours` (one search, linear)."""
    found = {start}
    frontier = [start]
    while frontier:
        for name in neighbours(frontier.pop()):
            if name not in found:
                found.add(name)
                frontier.append(name)
    return found


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    result = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    if isinstance(params.star_arg, cst.Param):
        result.append(params.star_arg)
    if params.star_kwarg is not None:
        result.append(params.star_kwarg)
    return result


class Dataflow:
    """The def-use graph of one function.

    An edge `a → b` joins every definition of a name to every definition that
    reads the name, so a name defined n times and read by its own redefinitions
    (`y = tl.where(y > 0, y, t)`, a thousand times over) has n² edges.  The
    graph is therefore kept by name: which names a name's value can come from
    (and flow into), computed once per name, the definitions being those of
    the names reached.  The answers are those of the def-to-def graph."""

    def __init__(self, function: cst.FunctionDef) -> None:
        self.function = function
        self.defs: list[Def] = _collect_defs(function)
        self.by_name: dict[str, list[Def]] = {}
        self._readers: dict[str, list[Def]] = {}   # name -> the definitions that read it
        for d in self.defs:
            self.by_name.setdefault(d.name, []).append(d)
            for name in d.reads:
                self._readers.setdefault(name, []).append(d)
        self._by_node: dict[int, list[Def]] = {}
        for d in self.defs:
            self._by_node.setdefault(id(d.node), []).append(d)
        self._upstream: dict[str, frozenset[Def]] = {}
        self._downstream: dict[str, frozenset[Def]] = {}
        # Answers that helpers derive from this function's definitions alone, kept
        # for the function's lifetime (shapes.constant_int): key → answer.
        self.memo: dict[tuple, object] = {}

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

    def in_order(self, defs) -> list[Def]:
        """`defs` in source order: what a message names must not depend on set iteration."""
        if not hasattr(self, "_position"):
            self._position = {d: i for i, d in enumerate(self.defs)}
        return sorted(defs, key=lambda d: self._position.get(d, len(self._position)))

    def upstream(self, expr: cst.CSTNode) -> set[Def]:
        """Every definition whose value can reach `expr`."""
        return set().union(*(self._upstream_of(name) for name in names_read(expr)))

    def downstream(self, d: Def) -> set[Def]:
        """Every definition that `d`'s value can reach (not including `d`,
        unless it feeds itself, as a loop-carried accumulator does)."""
        return set(self._downstream_of(d.name))

    def _upstream_of(self, name: str) -> frozenset[Def]:
        """The definitions whose value can reach a read of `name`: those of `name`,
        and of every name their values read, and so on."""
        found = self._upstream.get(name)
        if found is None:
            names = _closure(name, lambda n: (r for d in self.by_name.get(n, ()) for r in d.reads))
            found = self._upstream[name] = frozenset(d for n in names for d in self.by_name.get(n, ()))
        return found

    def _downstream_of(self, name: str) -> frozenset[Def]:
        """The definitions that a value of `name` can reach: those that read it,
        and those that read what they define, and so on."""
        found = self._downstream.get(name)
        if found is None:
            names = _closure(name, lambda n: (d.name for d in self._readers.get(n, ())))
            found = self._downstream[name] = frozenset(d for n in names for d in self._readers.get(n, ()))
        return found

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
