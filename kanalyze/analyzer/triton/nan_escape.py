"""Does a NaN that a call drops reach the kernel's output by another path?

A NaN-dropping call (`tl.maximum(x, 0.0)`, `tl.max(x)`, a `where` on `x > 0`)
matters only where the value it drops reaches a store (or a helper's return)
through that call alone.  Excused: a value that still holds the data beside the
call (`x - tl.max(x)`), a softmax stabiliser stored beside the running sum it
scales (the two a log-sum-exp is made of; also through a guard for empty rows,
`tl.where(m == -inf, 0.0, m)`), a helper's result that its callers only store next to
a value holding the NaN.  Not excused: a variance `E[x²] - mean²` clamped at zero beside
its stored mean.  For a NaN input the mean holds the NaN, but a +inf makes the variance
inf - inf = NaN, the clamp makes it 0, and the mean is inf: `(x - mean) * rstd` is -inf
where the reference (torch's norms, torch.clamp) is NaN.  Also: whether an expression reaches
the output at all, and whether a `where` downstream selects its lanes away.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.dataflow import Def, names_read
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import LANE, TL, NanLevels
from kanalyze.analyzer.triton.nan_paths import NanPaths
from kanalyze.analyzer.triton.pointers import WRITES
from kanalyze.analyzer.triton.reaching import Reaching


class NanEscape(NanPaths):
    """The escape queries of one jit function, on top of its path queries."""

    def __init__(self, model: TritonModule, jit: JitFunction, reach: Reaching, nan: NanLevels) -> None:
        super().__init__(model, jit, reach, nan)
        self._subtractions: list[cst.BinaryOperation] | None = None

    # A NaN dropped here matters only if the value reaches the output through
    # the dropping call alone: `tl.exp(x - tl.max(x))` still carries x's NaN.
    def swallows(self, call: cst.Call, operands: list[cst.BaseExpression]) -> bool:
        holders = self.holders(call)
        if holders & self.addressing() or any(self.reach.inside(call, p) for p in self.pointers()):
            return False  # used as a pointer offset: an integer
        data: set[Def] = set()
        for operand in operands:
            reads = self.reads(operand)
            data |= {d for defs in reads for d in defs if d.kind == "param"}
            data |= self.loaded_upstream(reads)
        for holder in holders:
            # `shifted = x - tl.max(x)`, `x -= tl.max(x)`: the value that holds the call
            # also holds x itself, and so does everything downstream of it.
            reads = self.reads(holder.value, skip=call, nan=True) if holder.value is not None else []
            if holder.kind == "augassign":
                reads.append(self.reach.defs(holder.name, holder.node))
            if self.closure(reads, avoid=holders, stop=data, nan=True):
                return False
        returned: set[int | None] = set()
        stored = partner = False
        for sink, upstream, position in self.sinks():
            if not (self.reach.inside(call, sink) or upstream & holders):
                continue  # this output does not see the call's result
            carries = self.closure(self.reads(sink, skip=call, nan=True), avoid=holders, stop=data, nan=True)
            if not carries and position is False:
                stored = True
            elif not carries:
                returned.add(position)
            elif position is False:
                partner = True
        if stored and not (partner and self.stabilizes(holders)):
            return True
        if not returned:
            return False
        carrying = {position for sink, _, position in self.sinks() if position is not False
                    and self.closure(self.reads(sink, skip=call, nan=True), avoid=holders, stop=data, nan=True)}
        return self.callers_keep(returned, carrying)

    def stabilizes(self, holders: set[Def]) -> bool:
        """Is the call's result a softmax stabiliser, subtracted from the data (`x - m`,
        `m_i - m_new`)?  Then a kernel that stores it (`m`) beside a statistic that is
        computed from it and holds the NaN (`l = sum(exp(x - m))`) stores the pair a
        log-sum-exp is made of: `m + log(l)` is NaN where the reference's is."""
        names = {h.name for h in holders}
        for d in self.reach.flow.defs:  # copies: `m_i = m_new`, `safe_m = tl.where(m == -inf, 0.0, m)`
            if d.kind == "assign" and d.value is not None and _copy_of(self.model, d.value) in names:
                names.add(d.name)
        if self._subtractions is None:
            self._subtractions = [n for n in walk(self.jit.node)
                                  if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Subtract)]
        for node in self._subtractions:
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if names_read(side) & names and self.nan.level(self.jit, other) >= LANE:
                    return True
        return False

    def callers_keep(self, clean: set[int | None], carrying: set[int | None]) -> bool:
        """A helper returns the call's result (its positions `clean` of the returned
        tuple) with no other path from the data, and the data at `carrying`: does some
        caller store (or return) a clean result without a carrying one beside it?  An
        online softmax returns its running max, but its callers only ever store it
        next to the running sum (`m_i + tl.log(l_i)`), which holds the NaN."""
        if not self.jit.called_from or None in clean:
            return True
        for caller, site in self.jit.called_from:
            assign = self.model.parent(site)
            if not (isinstance(assign, cst.Assign) and assign.value is site and len(assign.targets) == 1
                    and isinstance(assign.targets[0].target, cst.Tuple)):
                return True
            names = [e.value.value if isinstance(e.value, cst.Name) else None
                     for e in assign.targets[0].target.elements]
            flow = self.model.flow(caller)
            bound = {d.name: d for d in flow.defs_at(assign)}
            kept = {bound[names[i]] for i in clean if i < len(names) and names[i] in bound}
            beside = {bound[names[i]] for i in carrying if i is not None and i < len(names) and names[i] in bound}
            sinks = [keyword(s.node, "value", 1) or keyword(s.node, "val")
                     for s in self.model.calls_in(caller, *WRITES)]
            sinks += [n.value for n in walk(caller.node) if isinstance(n, cst.Return) and n.value is not None]
            for sink in sinks:
                seen = _bound_upstream(flow, sink, kept | beside) if sink is not None else set()
                if seen & kept and not seen & beside:
                    return True
        return False


    def carries(self, call: cst.Call, branch: cst.BaseExpression, subject: cst.BaseExpression,
                nan: bool = False) -> bool:
        """Does `branch` hold `subject`'s value by a path of its own?  Not through the
        `where` itself: in a running max `m = tl.where(v > m, v, m)` the m of the next
        iteration holds an earlier v only where that v was not NaN.  With `nan`, its NaN:
        not through a comparison (`tl.sum(x > 0)` counts lanes) or a NaN-dropping call."""
        subject_defs = {d for defs in self.reads(subject) for d in defs}
        return self.closure(self.reads(branch, nan=nan), avoid=self.holders(call), stop=subject_defs, nan=nan)

    def reaches_output(self, node: cst.CSTNode) -> bool:
        holders = self.holders(node)
        return any(self.reach.inside(node, sink) or upstream & holders for sink, upstream, _ in self.sinks())

    def selected_away(self, node: cst.CSTNode, variable: str) -> bool:
        """A `where` downstream that tests the input (`tl.where(x > 20, 1.0, ratio)`)
        may keep the overflowing lanes out of the output."""
        holders = self.holders(node)
        names = {variable} | {h.name for h in holders}
        region = [a for a in self.model.ancestors(node) if isinstance(a, cst.Call)]
        for h in holders:
            region += [d.value for d in self.reach.flow.downstream(h) | {h} if d.value is not None]
        for expr in region:
            for call in walk(expr):
                if isinstance(call, cst.Call) and self.model.call_name(call) == TL + "where":
                    cond = keyword(call, "condition", 0)
                    if cond is not None and names_read(cond) & names:
                        return True
        return False


def _copy_of(model: TritonModule, value: cst.BaseExpression) -> str | None:
    """The name `value` copies: `m` itself, or `tl.where(cond, literal, m)` (either way
    round), which is `m` in every lane the test does not single out."""
    if isinstance(value, cst.Name):
        return value.value
    if isinstance(value, cst.Call) and model.call_name(value) == TL + "where" and len(value.args) == 3:
        a, b = value.args[1].value, value.args[2].value
        for name, other in ((a, b), (b, a)):
            if isinstance(name, cst.Name) and _constant(other):
                return name.value
    return None


def _constant(expr: cst.BaseExpression) -> bool:
    """A number literal, possibly negated, or `float("inf")`-style."""
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "float"


def _bound_upstream(flow, expr: cst.BaseExpression, bound: set[Def]) -> set[Def]:
    """The definitions among `bound` whose value reaches `expr`, not looking through
    them (flow-insensitive, by name: a loop-carried value reaches every later read)."""
    found: set[Def] = set()
    seen: set[str] = set()
    stack = list(names_read(expr))
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for d in flow.defs_of(name):
            if d in bound:
                found.add(d)
            else:
                stack.extend(d.reads)
    return found
