"""The bound of each dimension an unmasked load or store runs over.

For every open `tl.arange` of an access (one CMP003 reports), the name that carries it
(`offs_m` and `offs_n` of `x_ptr + offs_m[:, None] * stride + offs_n[None, :]`) and the
runtime size that name has to stay below, read from what the kernel and its launches say:

    a comparison in the kernel   `offs_m[:, None] < M`: the name alone against a size parameter
    the loop that steps it       `k + tl.arange(0, BK)` under `for k in range(0, K, BK)`, and
                                 `k * BK + tl.arange(0, BK)` under `for k in range(tl.cdiv(K, BK))`
    the grid that tiles it       `pid * BM + tl.arange(0, BM)` with `pid = tl.program_id(0)`, where
                                 every launch's grid axis 0 is `triton.cdiv(X, BM)` (or
                                 `(X + BM - 1) // BM`) and passes that same `X` to the size `M`
                                 (the latter two only where the name is assigned that sum itself)

A name that carries more than one arange (a flat 2-D offset), or that two of these bound
differently, gets "" (unknown): a mask is only mechanical where the bound is plain.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.access_offsets import offsets_name
from kanalyze.analyzer.triton.calls import calls_within, int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.grids import grid_dims
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import ARANGE, PROGRAM_ID, TL, single_value
from kanalyze.analyzer.triton.size_literals import expr_text
from kanalyze.analyzer.triton.tile_extents import RANGES, addends, factors

_CDIV = ("triton.cdiv", TL + "cdiv")


def dimension_bounds(model: TritonModule, jit: JitFunction, pointer, pointers: set[str], open_ranges: dict,
                     sizes: set[str], ragged: frozenset[str] = frozenset()) -> dict[str, str]:
    """Name carrying each open arange → the size it must stay below ("" where unknown);
    {} where an open arange has no name of the kernel's own to carry it."""
    bounds: dict[str, str] = {}
    for key, (arange, fn, root) in open_ranges.items():
        name = offsets_name(model, jit, pointer, pointers, {key}, ragged=ragged)[0] \
            if fn is jit.function else None
        if name is None:
            return {}
        found = {_compared(model, jit, name, sizes)}
        if single_value(model.flow(jit), name) is root:  # `offs = start + tl.arange(...)` itself, not `rm * 2`
            found |= {_stepped(model, jit, arange, root, sizes), _tiled(model, jit, arange, root, sizes)}
        found.discard(None)
        bound = found.pop() if len(found) == 1 and _one_arange(model, jit, name) else ""
        bounds[name] = bound if bounds.get(name, bound) == bound else ""
    return bounds


def _one_arange(model: TritonModule, jit: JitFunction, name: str) -> bool:
    """Does `name` carry exactly one arange (one dimension, not a flat offset of two)?"""
    return len({id(c) for _, e in model.sources(jit, cst.Name(name)) for c, n in calls_within(model, e)
                if n == ARANGE}) == 1


def _compared(model: TritonModule, jit: JitFunction, name: str, sizes: set[str]) -> str | None:
    """The size `name` alone is compared below in the kernel (`offs_m[:, None] < M`, `M > offs_m`)."""
    found = set()
    for node in walk(jit.node):
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            op, left, right = node.comparisons[0].operator, node.left, node.comparisons[0].comparator
            if isinstance(op, cst.GreaterThan):
                left, right = right, left
            elif not isinstance(op, cst.LessThan):
                continue
            if names_read(left) - {"None"} == {name} and isinstance(right, cst.Name) and right.value in sizes:
                found.add(right.value)
    return found.pop() if len(found) == 1 else None


def _step(model: TritonModule, arange: cst.Call, root) -> tuple[str, cst.BaseExpression] | None:
    """(the arange's width, the one other addend) of `start + tl.arange(0, WIDTH)`."""
    end = keyword(arange, "end", 1)
    terms = addends(root)
    if end is None or int_literal(keyword(arange, "start", 0)) != 0 or len(terms) != 2 \
            or not any(t is arange for t in terms):
        return None
    return expr_text(model, end), terms[0] if terms[1] is arange else terms[1]


def _stepped(model: TritonModule, jit: JitFunction, arange: cst.Call, root, sizes: set[str]) -> str | None:
    """`k + tl.arange(0, BK)` in `for k in range(0, K, BK)`; `k * BK + ...` in `for k in range(tl.cdiv(K, BK))`."""
    step = _step(model, arange, root)
    if step is None:
        return None
    width, start = step
    parts = factors(start)
    if len(parts) == 2 and width in (texts := [expr_text(model, p) for p in parts]):
        counter = parts[1 - texts.index(width)]  # `k * BK`: the counter walks the blocks
    else:
        counter = start if len(parts) == 1 else None  # `k`: the counter walks the elements
    defs = model.flow(jit).defs_of(counter.value) if isinstance(counter, cst.Name) else []
    if len(defs) != 1 or defs[0].kind != "for" or not isinstance(defs[0].value, cst.Call) \
            or model.call_name(defs[0].value) not in RANGES:
        return None
    args = [a.value for a in defs[0].value.args if a.keyword is None and not a.star]
    if len(parts) == 1:
        stop = args[1] if len(args) == 3 and expr_text(model, args[2]) == width else None
    else:
        blocks = _ceil_div(model, args[-1]) if args and len(args) <= 2 else None
        stop = blocks[0] if blocks and expr_text(model, blocks[1]) == width else None
    return stop.value if isinstance(stop, cst.Name) and stop.value in sizes else None


def _tiled(model: TritonModule, jit: JitFunction, arange: cst.Call, root, sizes: set[str]) -> str | None:
    """`pid * BM + tl.arange(0, BM)` with `pid = tl.program_id(axis)`: the size every launch's
    grid divides, rounding up, into that axis's programs."""
    step = _step(model, arange, root)
    if step is None or len(parts := factors(step[1])) != 2 or not jit.launches:
        return None
    width, flow = step[0], model.flow(jit)
    texts = [expr_text(model, p) for p in parts]
    if width not in texts or (axis := _program_axis(model, flow, parts[1 - texts.index(width)])) is None:
        return None
    found = set()
    for launch in jit.launches:
        dims = grid_dims(model.flow(launch.wrapper), launch.grid) if launch.wrapper is not None else []
        split = _ceil_div(model, dims[axis]) if axis < len(dims) else None
        block = launch.args.get(width)
        if split is None or not (_meta(split[1], width) or (
                block is not None and expr_text(model, split[1]) == expr_text(model, block))):
            return None
        found |= {p for p in sizes if p in launch.args
                  and expr_text(model, launch.args[p]) == expr_text(model, split[0])} or {None}
    return found.pop() if len(found) == 1 else None


def _program_axis(model: TritonModule, flow: Dataflow, index) -> int | None:
    """The axis of `tl.program_id(axis)` that `index` is: directly, as a local's one value, or
    widened (`pid.to(tl.int64)`, as MEM004's fix writes it)."""
    for _ in range(3):
        if isinstance(index, cst.Name):
            index = single_value(flow, index.value)
        elif isinstance(index, cst.Call) and isinstance(index.func, cst.Attribute) and index.func.attr.value == "to":
            index = index.func.value
    if isinstance(index, cst.Call) and model.call_name(index) == PROGRAM_ID:
        return int_literal(keyword(index, "axis", 0)) if index.args else 0
    return None


def _ceil_div(model: TritonModule, expr) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(n, b) of `triton.cdiv(n, b)` or `(n + b - 1) // b`."""
    if isinstance(expr, cst.Call) and model.call_name(expr) in _CDIV and len(expr.args) == 2:
        return expr.args[0].value, expr.args[1].value
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.FloorDivide):
        left = expr.left
        if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Subtract) \
                and int_literal(left.right) == 1 and isinstance(left.left, cst.BinaryOperation) \
                and isinstance(left.left.operator, cst.Add) \
                and expr_text(model, left.left.right) == expr_text(model, expr.right):
            return left.left.left, expr.right
    return None


def _meta(expr, width: str) -> bool:
    """`meta["BM"]`: an autotuned block, read from the launch's configuration."""
    return isinstance(expr, cst.Subscript) and len(expr.slice) == 1 \
        and isinstance(index := expr.slice[0].slice, cst.Index) \
        and isinstance(index.value, cst.SimpleString) and index.value.evaluated_value == width
