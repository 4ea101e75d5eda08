"""Unmasked accesses that only ever touch full blocks.

Answers: which loops around an access visit full blocks only, their last block peeled and
masked outside them (`range(0, K - BLOCK, BLOCK)`, `range(0, n // BLOCK)`,
`range(0, pid * BLOCK, BLOCK)`); is an arange the block such a loop walks; is an access under a
guard that keeps the whole block below a size (`if start + BLOCK <= n:`); which blocks run
only where they divide a size (an autotune pruner, or a wrapper's `assert n % BLOCK == 0`); is a tile indexed by a program axis the
grid rounds down (`DK // BK` programs).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.dispatch_facts import path_conditions, references
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.grids import grid_dims
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import LOAD, PROGRAM_ID, STORE, assigned_value, is_none, reaches, single_value
from kanalyze.analyzer.triton.size_literals import TILE_NAME, expr_text
from kanalyze.analyzer.triton.tile_extents import RANGES, addends, factors


def peeled_loops(model: TritonModule, jit: JitFunction, call: cst.Call, pointer,
                 pointers: set[str]) -> list[cst.For]:
    """The loops around an unmasked access that visit full blocks only, the last block peeled
    and masked outside them: `for k in range(0, K - BLOCK, BLOCK)`, `range(0, num_steps - 1)`,
    `range(0, prev_multiple_of(K, BLOCK), BLOCK)`, or a reversed sweep
    `for s in range(BLOCK, N, BLOCK): offs = last - s + ...` after a masked first step."""
    bases = pointer_bases(model, jit, pointer, pointers)
    flow, found = model.flow(jit), []
    for loop in model.ancestors(call):
        if loop is jit.node:
            break
        if not (isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call)
                and model.call_name(loop.iter) in RANGES and loop.iter.args):
            continue
        args = [a.value for a in loop.iter.args]
        start, stop = (args[0], args[1]) if len(args) > 1 else (None, args[0])
        step = args[2] if len(args) > 2 else None
        target = loop.target.value if isinstance(loop.target, cst.Name) else None
        skipped_first = start is not None and step is not None and target is not None \
            and expr_text(model, start) == expr_text(model, step) and any(
                isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Subtract)
                and target in names_read(n.right) for _, e in model.sources(jit, pointer) for n in walk(e))
        stop_value = single_value(flow, stop.value) if isinstance(stop, cst.Name) else stop
        if isinstance(stop_value, cst.BinaryOperation) and isinstance(stop_value.operator, cst.Multiply) \
                and (start is None or int_literal(start) == 0) and reaches(model, jit, stop_value, PROGRAM_ID):
            found.append(loop)  # `range(0, pid * BLOCK, BLOCK)`: the full blocks before this program's own
            continue
        if not (stops_early(model, flow, stop) or skipped_first):
            continue
        inside = {id(n) for n in walk(loop)}
        for site in model.calls_in(jit, LOAD, STORE):
            mask = keyword(site.node, "mask", 1 if site.qualname == LOAD else 2)
            other = keyword(site.node, "pointer", 0)
            if id(site.node) in inside or mask is None or is_none(mask) or other is None:
                continue
            if bases & pointer_bases(model, jit, other, pointers):
                found.append(loop)  # the tail of the same tensor, masked
                break
    return found


def stops_early(model: TritonModule, flow: Dataflow, stop, depth: int = 3) -> bool:
    """Is a loop bound one block short of the size: `K - BLOCK`, `num_steps - 1`, the count of
    full blocks `n // BLOCK`, a name assigned such a value, or a jit helper returning one
    (`prev_multiple_of(K, BLOCK)`)?"""
    if isinstance(stop, cst.Name):
        values = [assigned_value(d, stop.value) for d in flow.defs_of(stop.value)]
        return bool(values) and depth > 0 and all(
            v is not None and stops_early(model, flow, v, depth - 1) for v in values)
    if isinstance(stop, cst.BinaryOperation) and isinstance(stop.operator, (cst.Subtract, cst.FloorDivide)):
        return True  # `K - BLOCK`, `num_steps - 1`; `seq_len // BLOCK` counts the full blocks
    if isinstance(stop, cst.Call) and stop.args and (model.call_name(stop) or "").split(".")[-1] in ("min", "minimum"):
        return all(stops_early(model, flow, a.value, depth) for a in stop.args)  # `min(n_blocks - 1, ...)`
    if isinstance(stop, cst.Call) and depth > 0 and isinstance(stop.func, cst.Name):
        helper = model.jit.get(stop.func.value)
        if helper is not None:
            returns = [n.value for n in walk(helper.node) if isinstance(n, cst.Return) and n.value is not None]
            return bool(returns) and all(stops_early(model, model.flow(helper), r, depth - 1) for r in returns)
    return False


def in_loop(model: TritonModule, jit: JitFunction, open_range, loop: cst.For) -> bool:
    """Is an arange the loop's own block: written inside the loop, or assigned to a name the
    loop assigns again (the tail's `offs = last + tl.arange(...)` after it does not reach in)?"""
    arange, fn, root = open_range
    inside = {id(n) for n in walk(loop)}
    if id(arange) in inside:
        return True
    if fn is not jit.function:
        return False
    # `rk = tl.arange(0, BLOCK_K)` before the loop, `k_off = (it % n) * BLOCK_K` inside it.
    extent = expr_text(model, keyword(arange, "end", 1) or arange)
    target = loop.target.value if isinstance(loop.target, cst.Name) else None
    step = loop.iter.args[2].value if isinstance(loop.iter, cst.Call) and len(loop.iter.args) > 2 else None
    if step is not None and expr_text(model, step) == extent and not reaches(model, jit, root, PROGRAM_ID):
        return True  # `for kv in range(0, stop, BLOCK_C): o = kv + block_i` with `block_i = tl.arange(0, BLOCK_C)`
    if target is not None and not reaches(model, jit, root, PROGRAM_ID) and any(
            isinstance(n, cst.Assign) and target in names_read(n.value)
            and extent in {expr_text(model, x) for x in walk(n.value) if isinstance(x, (cst.Name, cst.Integer))}
            for n in walk(loop.body)):
        return True
    statement = model.parent(root)
    if not isinstance(statement, (cst.Assign, cst.AugAssign)) or statement.value is not root:
        return False
    flow = model.flow(jit)
    targets = {d.name for d in flow.defs_at(statement)}
    return any(id(d.node) in inside for name in targets for d in flow.defs_of(name))


def pointer_bases(model: TritonModule, jit: JitFunction, pointer, pointers: set[str]) -> set[str]:
    """The pointer parameters an access's address is built from."""
    return {n for _, e in model.sources(jit, pointer) for n in names_read(e)} & pointers


def guarded_block(model: TritonModule, jit: JitFunction, call: cst.Call, sizes: set[str]) -> bool:
    """`if block_start + BLOCK <= n:` (or `n - start >= BLOCK`) around the access: the whole
    block is in bounds there.  `if block_start < n:` checks only its first element."""
    child = call
    for node in model.ancestors(call):
        if node is jit.node:
            return False
        if isinstance(node, cst.If) and child is node.body and any(
                fits_below(jit, c, sizes) for c in walk(node.test) if isinstance(c, cst.Comparison)):
            return True
        child = node
    return False


def fits_below(jit: JitFunction, comparison: cst.Comparison, sizes: set[str]) -> bool:
    """Does `start + BLOCK <= n` (`n >= start + BLOCK`, `n - start >= BLOCK`) hold the block below a size?"""
    if len(comparison.comparisons) != 1:
        return False
    op = comparison.comparisons[0].operator
    small, big = comparison.left, comparison.comparisons[0].comparator
    if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
        small, big = big, small
    elif not isinstance(op, (cst.LessThan, cst.LessThanEqual)):
        return False
    if not names_read(big) & sizes:
        return False
    tile = lambda e: (isinstance(e, cst.Name) and (e.value in jit.constexpr_names  # noqa: E731
                                                   or TILE_NAME.search(e.value) is not None)) \
        or (int_literal(e) or 0) >= 2
    if isinstance(big, cst.BinaryOperation) and isinstance(big.operator, cst.Subtract):
        return tile(small)  # `n - start >= BLOCK`
    return len(addends(small)) > 1 and any(tile(t) for t in addends(small))


def pruned_multiples(model: TritonModule, jit: JitFunction) -> set[str]:
    """The block parameters every launch runs only where they divide a size: an autotune
    pruner keeps a config only where `n % config.kwargs["BLOCK_N"] == 0`, or the wrapper checks
    `assert D_k % BLOCK == 0` (or raises otherwise) before each launch."""
    found = set()
    for decorator in jit.node.decorators:
        call = decorator.decorator
        prune = keyword(call, "prune_configs_by") if isinstance(call, cst.Call) else None
        if not isinstance(prune, cst.Dict):
            continue
        for element in prune.elements:
            if not (isinstance(element, cst.DictElement) and isinstance(element.value, cst.Name)
                    and "early_config_prune" in expr_text(model, element.key)):
                continue
            for fn in model.host_functions:
                if fn.name == element.value.value:
                    found |= _kept_multiples(model, fn)
    checked = None
    for ref in references(model, jit):
        divisors = {expr_text(model, m.right) for test, holds in path_conditions(model, ref.function, ref.node)
                    for m in _multiples(test, holds)}
        blocks = {name for name in jit.constexpr_names
                  if name in ref.bindings and expr_text(model, ref.bindings[name]) in divisors}
        checked = blocks if checked is None else checked & blocks
    return found | (checked or set())


def _multiples(test, holds: bool) -> list:
    """The `a % b` a condition says are 0: `a % b == 0` holding, `a % b != 0` failing (an
    `if ...: raise` passed), through `and` (holding) and `or` (failing)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) == holds:
        return _multiples(test.left, holds) + _multiples(test.right, holds)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _multiples(test.expression, not holds)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and int_literal(test.comparisons[0].comparator) == 0 and isinstance(test.left, cst.BinaryOperation) \
            and isinstance(test.left.operator, cst.Modulo) \
            and isinstance(test.comparisons[0].operator, cst.Equal if holds else cst.NotEqual):
        return [test.left]
    return []


def _kept_multiples(model: TritonModule, fn) -> set[str]:
    """In a pruner, the config keys `B` of each `if size % B == 0: kept.append(config)`."""
    flow, found = model.flow(fn), set()
    for node in walk(fn.node):
        if not (isinstance(node, cst.If) and isinstance(node.test, cst.Comparison)
                and isinstance(node.test.comparisons[0].operator, cst.Equal)
                and int_literal(node.test.comparisons[0].comparator) == 0
                and isinstance(node.test.left, cst.BinaryOperation) and isinstance(node.test.left.operator, cst.Modulo)
                and any(isinstance(n, cst.Attribute) and n.attr.value == "append" for n in walk(node.body))):
            continue
        block = node.test.left.right
        value = single_value(flow, block.value) if isinstance(block, cst.Name) else block
        if isinstance(value, cst.Subscript) and isinstance(value.value, cst.Attribute) \
                and value.value.attr.value == "kwargs":
            key = value.slice[0].slice
            if isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString):
                found.add(key.value.evaluated_value)
    return found


def floor_grid_tile(model: TritonModule, jit: JitFunction, arange: cst.Call, root) -> bool:
    """`i_k * BK + tl.arange(0, BK)` with `i_k = tl.program_id(0)`, launched on a grid whose
    axis 0 is `DK // BK`: whole blocks only (the tail the grid drops is the grid's finding)."""
    extent = expr_text(model, keyword(arange, "end", 1) or arange)
    flow = model.flow(jit)
    axis = None
    for term in addends(root):
        parts = factors(term)
        if len(parts) < 2 or extent not in {expr_text(model, f) for f in parts}:
            continue  # `i_k * BK`, or `offset_d * D_V * BLOCK_K` beside `tl.arange(0, BLOCK_K)[:, None] * D_V`
        for index in parts:
            value = single_value(flow, index.value) if isinstance(index, cst.Name) else index
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
                value = value.func.value  # `tl.program_id(0).to(tl.int64)`
            if isinstance(value, cst.Call) and model.call_name(value) == PROGRAM_ID:
                axis = int_literal(keyword(value, "axis", 0)) if value.args else 0
    if axis is None or not jit.launches:
        return False
    for launch in jit.launches:
        if launch.wrapper is None:
            return False
        dims = grid_dims(model.flow(launch.wrapper), launch.grid)
        block = launch.args.get(extent)
        dim = dims[axis] if axis < len(dims) else None
        if not (isinstance(dim, cst.BinaryOperation) and isinstance(dim.operator, cst.FloorDivide)
                and block is not None and expr_text(model, dim.right) == expr_text(model, block)):
            return False
    return True
