"""Along which def-use paths a kernel value's NaN travels, and where a kernel's values end up.

Answers, for one Triton function: which definitions flow into an expression (all
of them, or only along paths that carry NaN: not through a NaN-dropping call, a
comparison, a `where`'s condition or an integer cast); which definitions hold a
call's result; which values reach a store or a helper's return (and at which
position of a returned tuple); which feed a load or store address; and whether a
value can hold floating-point data at all (not a program id, an arange, an integer
scalar).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import bind_call_args, keyword
from kanalyze.analyzer.triton.dataflow import Def, own_value
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import LANE, ROW, TL, NanLevels
from kanalyze.analyzer.triton.nan_tests import shape_only
from kanalyze.analyzer.triton.pointers import WRITES
from kanalyze.analyzer.triton.reaching import Reaching

FLOAT_SOURCES = {TL + f for f in ("load", "dot", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt",
                                  "sigmoid", "fdiv", "div_rn", "erf", "cos", "sin", "softmax", "sum")}


class NanPaths:
    """The path queries of one jit function, cached for it."""

    def __init__(self, model: TritonModule, jit: JitFunction, reach: Reaching, nan: NanLevels) -> None:
        self.model, self.jit, self.reach, self.nan = model, jit, reach, nan
        self._feeds: dict[tuple[Def, bool | str], list[list[Def]]] = {}
        self._pointer_cache = self._address_cache = self._sink_cache = self._by_value = None
        self._evidence_cache: dict[int, tuple[bool, bool]] = {}
        self._floaty: set[Def] | None = None
        self._into: dict[Def, list[Def]] | None = None          # definition -> those it flows into
        self._load_bits: tuple[list[Def], dict[Def, int]] | None = None

    def nan_data(self, expr: cst.BaseExpression, levels: tuple[int, ...] = (LANE, ROW)) -> bool:
        """Can `expr` hold a NaN of the input (a float from memory, not an index,
        a count of mask lanes, a random draw or a value already clamped)?"""
        return self.nan.level(self.jit, expr) in levels and self.floaty(expr)

    def floaty(self, expr: cst.BaseExpression) -> bool:
        """Can `expr` hold floating-point data?  Program ids, aranges and
        integer scalars cannot hold NaN.  A helper's parameter is as floaty as
        the arguments its callers pass."""
        if self.evidence(expr)[0]:
            return True
        floaty = self._floaty_defs()
        return any(d in floaty for defs in self.reads(expr) for d in defs)

    def _floaty_defs(self) -> set[Def]:
        """The definitions whose value can hold floating-point data: those with a float of
        their own (a literal, a float-producing call, a helper parameter whose callers pass
        one) and every definition they flow into.  Worked out once per function, forward
        from those: asking each expression for the whole of what flows into it was
        quadratic in a kernel of many statements."""
        if self._floaty is None:
            self._floaty = self._downstream({d for d in self.reach.flow.defs if (
                d.value is not None and self.evidence(d.value)[0]) or self._floaty_param(d)})
        return self._floaty

    def loaded_upstream(self, reads: list[list[Def]]) -> set[Def]:
        """The definitions holding a `tl.load` whose value flows into `reads` (those reads'
        own included): what `closure(reads)` holds of them, from each load's downstream
        worked out once per function."""
        if self._load_bits is None:
            loads = [d for d in self.reach.flow.defs if d.value is not None and self.evidence(d.value)[1]]
            bits: dict[Def, int] = {}
            for i, load in enumerate(loads):
                for d in self._downstream({load}):
                    bits[d] = bits.get(d, 0) | 1 << i
            self._load_bits = (loads, bits)
        loads, bits = self._load_bits
        mask = 0
        for defs in reads:
            for d in defs:
                mask |= bits.get(d, 0)
        return {load for i, load in enumerate(loads) if mask >> i & 1}

    def _downstream(self, sources: set[Def]) -> set[Def]:
        """`sources` and every definition their values flow into (the reverse of `closure`)."""
        if self._into is None:
            self._into = {}
            for d in self.reach.flow.defs:
                for defs in self.feeding(d):
                    for source in defs:
                        self._into.setdefault(source, []).append(d)
        found = set(sources)
        stack = list(found)
        while stack:
            for d in self._into.get(stack.pop(), ()):
                if d not in found:
                    found.add(d)
                    stack.append(d)
        return found

    def _floaty_param(self, d: Def) -> bool:
        if d.kind != "param" or not self.jit.called_from:
            return False
        for caller, call in self.jit.called_from:
            arg = bind_call_args(call, self.jit.params).get(d.name)
            if arg is not None and any(self.evidence(e)[0] for _, e in self.model.sources(caller, arg, depth=1)):
                return True
        return False

    def evidence(self, expr: cst.CSTNode) -> tuple[bool, bool]:
        """(holds a float literal or a float-producing call, holds a `tl.load`)."""
        if id(expr) not in self._evidence_cache:
            floaty = loads = False
            for node in walk(expr):
                if isinstance(node, cst.Float):
                    floaty = True
                elif isinstance(node, cst.Call):
                    name = self.model.call_name(node) or ""
                    floaty |= name in FLOAT_SOURCES or dotted(node.func) == "float"
                    loads |= name == TL + "load"
            self._evidence_cache[id(expr)] = (floaty, loads)
        return self._evidence_cache[id(expr)]

    def holders(self, call: cst.Call) -> set[Def]:
        """The definitions whose value holds `call` (`y = call`, `y = 2 * call`): those
        of the call's enclosing expressions, found up the tree rather than by asking
        every definition of the kernel (quadratic in a kernel of many statements)."""
        if self._by_value is None:
            self._by_value = {}
            for d in self.reach.flow.defs:
                if d.value is not None:
                    self._by_value.setdefault(id(d.value), []).append(d)
        found = set(self._by_value.get(id(call), ()))
        for node in self.model.ancestors(call):
            if node is self.jit.node:
                break
            found.update(self._by_value.get(id(node), ()))
        return found

    def pointers(self) -> list[cst.BaseExpression]:
        if self._pointer_cache is None:
            self._pointer_cache = [p for site in self.model.calls_in(self.jit, TL + "load", *WRITES)
                                   if (p := keyword(site.node, "pointer", 0)) is not None]
        return self._pointer_cache

    def addressing(self) -> set[Def]:
        """Every definition that flows into a load or store address."""
        if self._address_cache is None:
            self._address_cache = self.closure([d for p in self.pointers() for d in self.reads(p)])
        return self._address_cache

    def sinks(self) -> list[tuple[cst.BaseExpression, set[Def], int | None | bool]]:
        """Stored values and a helper's returned values, with what flows into each and,
        for a returned one, its position in the returned tuple (None: the whole value;
        False: a store)."""
        if self._sink_cache is None:
            sinks = []
            for site in self.model.calls_in(self.jit, *WRITES):
                value = keyword(site.node, "value", 1)
                sinks.append((keyword(site.node, "val") if value is None else value, False))
            for node in walk(self.jit.node):
                if isinstance(node, cst.Return) and node.value is not None:
                    value = node.value
                    sinks += list((e.value, i) for i, e in enumerate(value.elements)) \
                        if isinstance(value, cst.Tuple) else [(value, None)]
            # what flows into each along paths that carry NaN: not an index computed by comparisons
            self._sink_cache = [(s, self.closure(self.reads(s, nan="value"), nan="value"), at) for s, at in sinks
                                if s is not None]
        return self._sink_cache

    def reads(self, expr: cst.CSTNode, skip: cst.CSTNode | None = None, nan: bool | str = False) -> list[list[Def]]:
        """For each name `expr` reads (outside `skip`, and not only for its
        shape or dtype), the definitions that can reach that read.  With `nan`,
        only the reads whose NaN reaches `expr`: not those under a NaN-dropping
        call (`scale = 1 / tl.maximum(tl.max(tl.abs(y)), eps)` holds none of y's
        NaN), though a `tl.max` of a row that is NaN in every lane (after a
        softmax) is followed: it is NaN; nor those of a comparison, a `where`'s
        condition or an integer cast (an argmax index holds no NaN).  With
        `nan="value"`, the reads whose value (NaN or not) reaches `expr`: all but
        the last three."""
        groups: list[list[Def]] = []
        stack = [expr]
        while stack:
            node = stack.pop()
            if node is skip or shape_only(self.model, node):
                continue
            if nan and isinstance(node, cst.Call):
                if (nan != "value" and self.nan.drops(self.jit, node)) or self.nan.to_integer(self.jit, node):
                    continue
                if self.model.call_name(node) == TL + "where":
                    a, b = keyword(node, "x", 1), keyword(node, "y", 2)
                    # `tl.where(v > m, v, m)`: v's NaN lanes take m
                    kept = [b] if nan != "value" and self.nan.select_drops(self.jit, node, a) else [a, b]
                    stack += [e for e in kept if e is not None]
                    continue
            if nan and isinstance(node, cst.Comparison):
                continue
            if isinstance(node, cst.Name):
                groups.append(self.reach.defs(node.value, node))
            elif isinstance(node, (cst.Attribute, cst.Arg)):
                stack.append(node.value)
            else:
                stack.extend(node.children)
        return groups

    def closure(self, groups: list[list[Def]], avoid: set[Def] = frozenset(), stop: set[Def] | None = None,
                nan: bool | str = False):
        """Every definition whose value flows into the reads `groups`.  With
        `avoid`, a read that can see an avoided definition is not followed:
        its other definitions are alternatives to it, not a second path.
        With `stop`, only whether one of those is reached (early exit).  With
        `nan`, only along paths that carry NaN (see `reads`)."""
        seen: set[Def] = set()
        stack: list[Def] = []
        reads = groups
        while True:
            for defs in reads:
                if avoid and not avoid.isdisjoint(defs):
                    continue
                for d in defs:
                    if d not in seen:
                        if stop is not None and d in stop:
                            return True
                        seen.add(d)
                        stack.append(d)
            if not stack:
                return False if stop is not None else seen
            reads = self.feeding(stack.pop(), nan)

    def feeding(self, d: Def, nan: bool | str = False) -> list[list[Def]]:
        """What flows into `d`'s value: its reads, less those of metadata only (the
        `x` of `y.to(x.dtype)` or `tl.zeros_like(x)` carries none of x's values)."""
        key = (d, nan)
        if key not in self._feeds:
            feeds = self.reads(own_value(d), nan=nan) if d.value is not None else []
            if d.kind == "augassign":
                feeds.append(self.reach.defs(d.name, d.node))
            self._feeds[key] = feeds
        return self._feeds[key]
