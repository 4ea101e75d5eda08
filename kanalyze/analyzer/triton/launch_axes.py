"""The grid axes on which a kernel's launches can run more than one program.

Read from every launch's grid as the wrapper writes it: a tuple, a `lambda meta:
(...)`, or a local name assigned such a tuple in one or several branches.  An axis
whose every value is the literal 1 has one program; a helper takes the axes of the
kernels that call it.  A grid the source does not show gives no answer (None).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.dataflow import own_value
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule


def multi_program_axes(model: TritonModule, jit: JitFunction, depth: int = 3) -> set[int] | None:
    """The axes on which a launch can run more than one program (a helper: its callers'
    launches); None where a grid is not readable or no launch is visible."""
    if depth < 0 or not (jit.launches or jit.called_from):
        return None
    found: set[int] = set()
    for launch in jit.launches:
        grids = _grid_values(model, launch.wrapper, launch.grid)
        if grids is None:
            return None
        found |= {axis for dims in grids for axis, dim in enumerate(dims) if int_literal(dim) != 1}
    for caller, _ in jit.called_from:
        outer = model.jit.get(caller.name)
        axes = multi_program_axes(model, outer, depth - 1) if outer is not None and outer.function is caller else None
        if axes is None:
            return None
        found |= axes
    return found


def _grid_values(model: TritonModule, wrapper: Function | None, grid) -> list[list] | None:
    """The dimensions of every value a grid can have: a local name assigned in several
    branches gives each of its tuples, `lambda meta: (...)` its body."""
    grids = [grid]
    for _ in range(3):
        if wrapper is None or not any(isinstance(g, cst.Name) for g in grids):
            break
        if not all(isinstance(g, cst.Name) for g in grids):
            return None
        defs = [d for g in grids for d in model.flow(wrapper).defs_of(g.value)]
        if not defs or any(d.kind != "assign" for d in defs):
            return None
        grids = [own_value(d) for d in defs]
    values = []
    for g in grids:
        g = g.body if isinstance(g, cst.Lambda) else g
        if not isinstance(g, (cst.Tuple, cst.List)) or any(not isinstance(e, cst.Element) for e in g.elements):
            return None
        values.append([e.value for e in g.elements])
    return values
