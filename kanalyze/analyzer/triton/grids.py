"""The grid of a launch, read as arithmetic: its dimensions, the terms of each,
and the literal sizes in it (`(4096 // BLOCK,)`, `triton.cdiv(4096, BLOCK)`)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes
from kanalyze.analyzer.triton.dataflow import Dataflow
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import TL, constant_int, single_value


def grid_dims(flow: Dataflow, grid) -> list:
    """The dimensions of a launch grid: the elements of its tuple (a local name and a
    `lambda meta: (...)` are looked through), or the grid itself when it is one expression."""
    for _ in range(3):
        if isinstance(grid, cst.Name) and single_value(flow, grid.value) is not None:
            grid = single_value(flow, grid.value)
    grid = grid.body if isinstance(grid, cst.Lambda) else grid
    if isinstance(grid, (cst.Tuple, cst.List)):
        return [e.value for e in grid.elements if isinstance(e, cst.Element)]
    return [grid]


def grid_arithmetic(flow: Dataflow, expr, depth: int = 3) -> Iterator[cst.CSTNode]:
    """The arithmetic of a grid dimension, local names replaced by their one value; calls
    (`triton.cdiv(...)`, `min(NUM_SMS, ...)`) are not looked into."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Call, cst.Lambda)):
            continue
        yield node
        stack.extend(child_nodes(node))
        if isinstance(node, cst.Name) and depth > 0 and (value := single_value(flow, node.value)) is not None:
            yield from grid_arithmetic(flow, value, depth - 1)


def grid_literal_sizes(model: TritonModule, flow: Dataflow, expr, whole: bool = True, depth: int = 3):
    """(node, literal, is_whole_dimension) for each literal size in a grid dimension: the
    dimension itself, a factor of it, or the numerator of a (ceil) division."""
    name = model.call_name(expr) if isinstance(expr, cst.Call) else None
    if depth < 0 or name in ("min", "max"):
        return
    if name in ("triton.cdiv", TL + "cdiv", "math.ceil") and expr.args:
        numerator = expr.args[0].value
        if isinstance(numerator, cst.BinaryOperation) and isinstance(numerator.operator, cst.Divide):
            numerator = numerator.left  # math.ceil(n / BLOCK)
        yield from grid_literal_sizes(model, flow, numerator, False, depth - 1)
    elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.FloorDivide):
        numerator = expr.left
        while isinstance(numerator, cst.BinaryOperation) and isinstance(numerator.operator, (cst.Add, cst.Subtract)):
            numerator = numerator.left  # (n + BLOCK - 1) // BLOCK
        yield from grid_literal_sizes(model, flow, numerator, False, depth - 1)
    elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        yield from grid_literal_sizes(model, flow, expr.left, whole, depth - 1)
        yield from grid_literal_sizes(model, flow, expr.right, whole, depth - 1)
    elif (value := constant_int(flow, expr)) is not None:
        yield from [(expr, value, whole)] if value >= 2 else ()
    elif isinstance(expr, cst.Name) and (resolved := single_value(flow, expr.value)) is not None:
        yield from grid_literal_sizes(model, flow, resolved, whole, depth - 1)

