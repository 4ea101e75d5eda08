"""Lanes past the end: the aranges of an unmasked access that can run past their dimension,
and a masked access whose mask leaves out the last block's tail.

`open_aranges(...)` answers the first, for CMP003's unmasked loads and stores: an arange
that is not wrapped or clamped, not exactly as wide as its dimension, and not kept on
full blocks (a peeled loop, an autotune pruner, a grid rounded down, a column inside its row).

For the second: a flat kernel numbers its lanes `offsets = pid * BLOCK + tl.arange(0, BLOCK)`
and keeps the last block's tail out with `mask = offsets < total`.  When it decodes the offsets
into coordinates, the ones taken with `%` stay in range for every lane; the leading one,
taken with `//` alone, does not:

    b = offsets // (C * D)          # past the last batch for the tail lanes
    c = (offsets // D) % C          # in range for every lane
    valid = (d >= 0) & (d < D)      # bounds the window, not the lanes
    x = tl.load(x_ptr + b * C * D + c * D + d, mask=valid)   # the tail lanes read past the end

`partial_masks(model, jit, sizes)` gives each load or store whose mask leaves out the tail
of flat offsets its address carries unreduced, where the kernel tests those offsets
against a bound elsewhere (the author wrote the tail mask, and left it off this access).
What a value "carries unreduced" is followed through the reaching definitions
(reaching.py; a later definition in the same branch replaces an earlier one): a `%`, a
clamp (`tl.minimum`, `tl.where`) or a value loaded from memory ends the chain.  A mask
bounds the lanes it compares from above, by name or spelled out again
(`(i_k * BK + tl.arange(0, BK)) < K` for `o_k`).
Under a branch that admits whole blocks only, and for aranges as wide as their
dimension or launched on a grid rounded down, there is no tail.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, node_text, walk
from kanalyze.analyzer.triton.access_offsets import covers_dimension, guarded_by_masked_branch, wrapped_or_clamped
from kanalyze.analyzer.triton.calls import calls_within, keyword
from kanalyze.analyzer.triton.dataflow import Def, own_value
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.full_blocks import (floor_grid_tile, guarded_block, in_loop, peeled_loops,
                                                   pruned_multiples)
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.row_windows import column_in_row, reaching_aranges
from kanalyze.analyzer.triton.shapes import ARANGE, LOAD, PROGRAM_ID, STORE, TL, is_modulo, is_none, reaches
from kanalyze.analyzer.triton.tile_extents import exact_extent, index_aranges, within_row, wrapped_later

_ENDS = {TL + "minimum", TL + "maximum", TL + "where", TL + "clamp", LOAD}  # what a lane's value stops at
_UPPER = (cst.LessThan, cst.LessThanEqual)
_LOWER = (cst.GreaterThan, cst.GreaterThanEqual)


def open_aranges(model: TritonModule, jit: JitFunction, call: cst.Call, pointer: cst.BaseExpression,
                 pointers: set[str], exprs: list, own_aranges: set[int], whole: set[str]) -> dict:
    """The aranges of an unmasked access's offsets that can run past their dimension:
    {id: (arange, function, expression it sits in)}.  `exprs`: `model.sources(jit, pointer)`;
    `own_aranges`: ids of the kernel's own aranges; `whole`: blocks every launch runs whole
    (full_blocks.pruned_multiples).  Empty for a block pointer and for an index read from data."""
    calls = {id(c): (c, n, f, e) for f, e in exprs for c, n in calls_within(model, e)}
    if any(n in (TL + "make_block_ptr", TL + "advance") for _, n, _, _ in calls.values()):
        return {}
    # In order: an arange whose name is reassigned before the access does not reach it.
    reachable = index_aranges(model, jit.function, pointer)
    reachable -= own_aranges - reaching_aranges(model, jit, pointer)
    if not reachable:
        return {}  # `mid_index + tl.argmax(tl.load(...))`: one index read from data, not a span
    found = {id(c): (c, f, e) for c, n, f, e in calls.values()
             if n == ARANGE and not wrapped_or_clamped(model, c, e) and not covers_dimension(model, c)
             and not exact_extent(model, c) and not wrapped_later(model, jit, pointer, f, e)
             and (f is not jit.function or id(c) in reachable)}
    # Full blocks only: a loop that stops a block early (its tail peeled and masked) runs
    # its aranges in bounds, and so does a block the autotune pruner keeps only where it
    # divides a size, and a column that stays inside the row the rest of the address strides over.
    loops = peeled_loops(model, jit, call, pointer, pointers)
    return {k: v for k, v in found.items()
            if not any(in_loop(model, jit, v, loop) for loop in loops)
            and node_text(model.module, keyword(v[0], "end", 1) or v[0]) not in whole
            and not floor_grid_tile(model, jit, v[0], v[2])
            and not within_row(model, jit, pointer, *v)
            and not column_in_row(model, jit, call, pointer, v[0], pointers)}


@dataclass(frozen=True)
class PartialMask:
    call: cst.Call          # the load or store
    mask: cst.BaseExpression
    offsets: str            # the flat offsets' name
    bound: cst.BaseExpression  # what the kernel's tail mask compares them with
    block: cst.BaseExpression  # the arange's width
    tail_mask: str | None   # the name the kernel gives its tail mask (`mask = offsets < total`), if any


def partial_masks(model: TritonModule, jit: JitFunction, sizes: set[str]) -> list[PartialMask]:
    """`sizes`: the kernel's parameters that hold a runtime size (for `if start + BLOCK <= n:`)."""
    lanes = _Lanes(model, jit)
    if not lanes.tail_bounds:
        return []
    found = []
    for site in model.calls_in(jit, LOAD, STORE):
        call = site.node
        mask, pointer = keyword(call, "mask", 1 if site.qualname == LOAD else 2), keyword(call, "pointer", 0)
        if mask is None or is_none(mask) or pointer is None or keyword(call, "boundary_check") is not None \
                or guarded_by_masked_branch(model, jit, call) or guarded_block(model, jit, call, sizes):
            continue
        open_lanes = (lanes.unreduced(pointer, call) & lanes.tail_bounds.keys()) - lanes.bounded_by(mask, call)
        if open_lanes:
            d = lanes.flow.in_order(open_lanes)[0]
            bound, arange, name = lanes.tail_bounds[d]
            found.append(PartialMask(call, mask, d.name, bound, keyword(arange, "end", 1) or arange, name))
    return found


class _Lanes:
    """One kernel's flat offsets, where it bounds them, and what carries them unreduced."""

    def __init__(self, model: TritonModule, jit: JitFunction) -> None:
        self.model, self.jit, self.flow = model, jit, model.flow(jit)
        self.reaching = Reaching.of(model, jit)
        self.flat = self._flat_offsets()
        # The flat offsets the kernel tests against an upper bound somewhere:
        # {def: (bound, arange, the name the test is assigned to)}.
        self.tail_bounds: dict[Def, tuple[cst.BaseExpression, cst.Call, str | None]] = {}
        if self.flat:
            for node in walk(jit.node):
                for small, big in _upper_bounds(node):
                    assign = model.parent(node)
                    name = assign.targets[0].target.value if isinstance(assign, cst.Assign) and len(
                        assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) else None
                    for d in self.unreduced(small, node):
                        # The size, rather than a literal a shifted window is compared with (`o_t + i < 0`).
                        if d not in self.tail_bounds or isinstance(self.tail_bounds[d][0], cst.Integer):
                            self.tail_bounds[d] = (big, self.flat[d], name)

    def _flat_offsets(self) -> dict[Def, cst.Call]:
        """`offs = pid * BLOCK + tl.arange(0, BLOCK)`: one-dimensional lanes past a program's start,
        of a block that can leave a tail (not wrapped with `% M`, not as wide as its dimension, not
        on whole blocks)."""
        found = {}
        whole = pruned_multiples(self.model, self.jit)
        for d in self.flow.defs:
            value = own_value(d) if d.kind == "assign" else None
            if value is None or any(isinstance(n, (cst.Subscript, cst.Comparison)) for n in walk(value)):
                continue
            aranges = [n for n in walk(value) if isinstance(n, cst.Call) and self.model.call_name(n) == ARANGE]
            if len(aranges) != 1 or not reaches(self.model, self.jit, value, PROGRAM_ID):
                continue
            arange = aranges[0]
            end = keyword(arange, "end", 1)
            if wrapped_or_clamped(self.model, arange, value) or covers_dimension(self.model, arange) \
                    or exact_extent(self.model, arange) \
                    or (end is not None and node_text(self.model.module, end) in whole) \
                    or floor_grid_tile(self.model, self.jit, arange, value):
                continue
            found[d] = arange
        # Lanes spelled alike are the same lanes: written again inline (`m_k = (i_k * BK +
        # tl.arange(0, BK)) < K`), or defined alike in both arms of an `if`.  One definition stands for them.
        self.spelled: dict[str, Def] = {}
        self.same: dict[Def, Def] = {d: self.spelled.setdefault(_spelling(self.model, own_value(d)), d) for d in found}
        return {d: arange for d, arange in found.items() if self.same[d] is d}

    def defs(self, name: str, at: cst.CSTNode) -> list[Def]:
        """The definitions of `name` that reach `at` (`Reaching.live_defs`), less those that a later
        one in the same block, which `at` is not in, replaces (`o = a + r; o = tl.load(perm + o)`
        under an `if`)."""
        found = self.reaching.live_defs(name, at)
        if len(found) < 2:
            return found
        reaching = self.reaching
        latest: dict[int, tuple[int, cst.CSTNode]] = {}
        for d in found:
            block = next((a for a in self.model.ancestors(d.node) if isinstance(a, cst.BaseSuite)), None)
            if d.kind != "param" and block is not None and not reaching.inside(at, block) \
                    and (id(block) not in latest or latest[id(block)][0] < reaching.time(d)):
                latest[id(block)] = (reaching.time(d), block)
        return [d for d in found if not any(reaching.inside(d.node, block) and reaching.time(d) < time
                                            for time, block in latest.values())]

    def unreduced(self, expr: cst.CSTNode, at: cst.CSTNode) -> set[Def]:
        """The flat offsets `expr` (read at `at`) carries with no `%`, clamp or load on the way."""
        found: set[Def] = set()
        seen: set[int] = set()
        stack = [(expr, at)]
        while stack:
            node, at = stack.pop()
            if is_modulo(node) or (isinstance(node, cst.Call) and self.model.call_name(node) in _ENDS):
                continue
            if isinstance(node, cst.Name):
                for d in self.defs(node.value, at):
                    if d in self.same:
                        found.add(self.same[d])
                    elif id(d) not in seen and d.kind in ("assign", "augassign", "walrus"):
                        seen.add(id(d))
                        if (value := own_value(d)) is not None:
                            stack.append((value, d.node))
                        if d.kind == "augassign":
                            stack.append((cst.Name(d.name), d.node))
                continue
            if isinstance(node, cst.Arg) and node.keyword is not None:
                stack.append((node.value, at))
                continue
            stack.extend((child, at) for child in child_nodes(node))
        return found

    def bounded_by(self, mask: cst.BaseExpression, at: cst.CSTNode) -> set[Def]:
        """The flat offsets whose lanes `mask` (or a name it reads) bounds from above."""
        found: set[Def] = set()
        seen: set[int] = set()
        stack = [(mask, at)]
        while stack:
            node, at = stack.pop()
            for small, _ in _upper_bounds(node):
                found |= self.unreduced(small, at)
                if (inline := self.spelled.get(_spelling(self.model, small))) is not None:
                    found.add(inline)
            if isinstance(node, cst.Name):
                for d in self.defs(node.value, at):
                    if id(d) not in seen and (value := own_value(d)) is not None:
                        seen.add(id(d))
                        stack.append((value, d.node))
                continue
            stack.extend((child, at) for child in child_nodes(node))
        return found


def _spelling(model: TritonModule, expr: cst.BaseExpression) -> str:
    """An expression's text without spaces, outer brackets or a broadcast (`(a + b)[:, None]` → `a+b`)."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    text = "".join(node_text(model.module, expr).split())
    for _ in expr.lpar:
        text = text[1:-1]
    return text


def _upper_bounds(node: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(small, big) of each `small < big` a comparison states (`big > small` too)."""
    if not isinstance(node, cst.Comparison):
        return []
    found, left = [], node.left
    for target in node.comparisons:
        if isinstance(target.operator, _UPPER):
            found.append((left, target.comparator))
        elif isinstance(target.operator, _LOWER):
            found.append((target.comparator, left))
        left = target.comparator
    return found
