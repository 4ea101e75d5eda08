"""Ordered reaching definitions: which assignments of a name can reach one read.

The shared `Dataflow` graph is flow-insensitive, which is the right default for
"can this value ever reach that one".  Some rules need order: after
`x = x.clone()` the read of `x` is no longer the caller's tensor.
"""

from __future__ import annotations

import bisect

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule


class Reaching:
    """Which definitions of a name can reach one place in a function.

    The shared `Dataflow` is flow-insensitive: after `x = x.clone()` it still
    says `x` may be the parameter.  This adds just enough order: a read sees
    the latest definition before it (in source order) that is not inside a
    branch the read is not in, every conditional one in between, and, inside a
    loop, the definitions later in the loop (carried to the next iteration).
    """

    @classmethod
    def of(cls, model: TritonModule, function: Function | JitFunction) -> Reaching:
        """The function's one instance, kept with its dataflow (built on first use)."""
        memo = model.flow(function).memo
        if "reaching" not in memo:
            memo["reaching"] = cls(model, function)
        return memo["reaching"]

    def __init__(self, model: TritonModule, function: Function | JitFunction) -> None:
        self.model = model
        self.root = function.node
        self.flow = model.flow(function.function if isinstance(function, JitFunction) else function)
        self.spans: dict[int, tuple[int, int]] = {}
        clock, stack = 0, [(self.root, False)]
        while stack:  # (enter, exit) in pre-order / post-order, without recursion
            node, done = stack.pop()
            if done:
                self.spans[id(node)] = (self.spans[id(node)][0], clock)
            else:
                self.spans[id(node)] = (clock, clock)
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(child_nodes(node)))
            clock += 1
        self._cache: dict[tuple[str, int], list[Def]] = {}
        self._by_time: dict[str, list[tuple[int, Def]]] = {}
        self._times: dict[str, list[int]] = {}  # the times of `_by_time`, for bisect
        self._suite_cache: dict[int, frozenset[int]] = {}

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.spans.get(id(node), (-1, -1))

    def inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        (a, b), (c, d) = self.span(node), self.span(outer)
        return c <= a and b <= d

    def time(self, d: Def) -> int:
        """When a definition takes effect: a `for` target at the loop body."""
        if d.kind == "param":
            return -1
        if isinstance(d.node, cst.For):
            return self.span(d.node.body)[0]
        return self.span(d.node)[1]

    def _suites(self, node: cst.CSTNode) -> frozenset[int]:
        if id(node) not in self._suite_cache:
            found = []
            for a in self.model.ancestors(node):
                if a is self.root:
                    break
                if isinstance(a, cst.BaseSuite):
                    found.append(id(a))
            self._suite_cache[id(node)] = frozenset(found)
        return self._suite_cache[id(node)]

    def _branches_cover(self, d: Def, found: list[Def], at: cst.CSTNode, scopes: frozenset[int]) -> bool:
        """Does an `if`/`elif`/`else` that holds `d`, and that the read follows unconditionally,
        define the name on every branch (`if c: x = a` / `else: x = b`)?  Then no earlier
        definition reaches the read."""
        if isinstance(d.node, cst.For):
            return False
        for a in self.model.ancestors(d.node):
            if a is self.root:
                return False
            if isinstance(a, cst.If) and not self.inside(at, a) and self._suites(a) <= scopes:
                return self._covered(a, found)
        return False

    def _covered(self, branch: cst.If, found: list[Def]) -> bool:
        """Every branch of this `if` chain holds one of `found` directly (not in a nested block)."""
        direct = {id(next(iter(self._own_suite(d.node)), None)) for d in found if not isinstance(d.node, cst.For)}
        suites = [branch.body]
        orelse = branch.orelse
        while isinstance(orelse, cst.If):          # elif
            suites.append(orelse.body)
            orelse = orelse.orelse
        if orelse is None:
            return False                            # no else: the name may keep its earlier value
        suites.append(orelse.body)
        return all(id(suite) in direct for suite in suites)

    def _own_suite(self, node: cst.CSTNode) -> list[cst.BaseSuite]:
        """The innermost block that holds `node` (as a list: empty at the function's top)."""
        for a in self.model.ancestors(node):
            if a is self.root:
                return []
            if isinstance(a, cst.BaseSuite):
                return [a]
        return []

    def defs(self, name: str, at: cst.CSTNode) -> list[Def]:
        key = (name, id(at))
        if key in self._cache:
            return self._cache[key]
        if name not in self._by_time:
            self._by_time[name] = sorted(((self.time(d), d) for d in self.flow.defs_of(name)), key=lambda t: t[0])
            self._times[name] = [t for t, _ in self._by_time[name]]
        timed = self._by_time[name]
        start = self.span(at)[0]
        split = bisect.bisect_left(self._times[name], start)
        found: list[Def] = []
        scopes = self._suites(at)
        for _, d in reversed(timed[:split]):
            found.append(d)
            if d.kind == "param" or (not isinstance(d.node, cst.For) and self._suites(d.node) <= scopes):
                break
            if self._branches_cover(d, found, at, scopes):
                break
        loops = []
        for a in self.model.ancestors(at):
            if a is self.root:
                break
            if isinstance(a, (cst.For, cst.While)):
                loops.append(a)
        if loops:
            found += [d for _, d in timed[split:] if any(self.inside(d.node, loop) for loop in loops)]
        self._cache[key] = found
        return found

    def live_defs(self, name: str, at: cst.CSTNode) -> list[Def]:
        """`defs`, less the definitions later in a loop that an unconditional one between the
        loop's top and `at` overwrites (`p = a + ...; tl.load(p)` inside the loop)."""
        defs = self.defs(name, at)
        start = self.span(at)[0]
        before = [d for d in defs if self.time(d) < start]
        killer = before[-1] if before and before[-1].kind != "param" and not isinstance(before[-1].node, cst.For) \
            and self._suites(before[-1].node) <= self._suites(at) else None
        if killer is None:
            return defs
        loops = [a for a in self.model.ancestors(at) if isinstance(a, (cst.For, cst.While))]
        open_loops = [loop for loop in loops if not self.inside(killer.node, loop)]
        return before + [d for d in defs if self.time(d) >= start
                         and any(self.inside(d.node, loop) for loop in open_loops)]
