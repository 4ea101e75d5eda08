"""Stores that the programs of a launch race on: the last one to write decides the result.

A `tl.store` whose value depends on a program axis (`tl.program_id(a)`) while its
address and mask do not: every program along that axis writes its own value to
the same elements, and which write lands last is the scheduler's choice.  The
split-K GEMM that stores each `pid_k`'s partial tile with `tl.store` instead of
adding it is the common case; a row reduction whose column-block programs each
store their block's result to the row's one output is another.

Not flagged, because one program (or one config) may be all that writes:
stores under an `if` or `while` (`if SPLIT_K == 1:`, `if pid_k == 0:`); axes
read by the test of an early `return`; axes that every launch of the kernel
gives one program (`grid = (n, 1)`, or a grid of fewer dimensions); and a value
or an address that passes through a call to another jit function, whose reads
are not followed (it may read the program id itself).

`shared_axes` answers the same question for an atomic add (ORD001's float atomics): the
axes whose programs all reach it with the same addresses, which the gate on a GPU turns
into how many programs add to each address.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import calls_within, int_literal, keyword
from kanalyze.analyzer.triton.early_exits import is_pid_call
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.launch_axes import multi_program_axes
from kanalyze.analyzer.triton.model import TritonModule

STORE = "triton.language.store"
ANY = "any"   # an axis the source does not show: a computed axis, or a helper's own reads


def racing_stores(model: TritonModule, jit: JitFunction) -> Iterator[tuple[cst.Call, dict[int, str]]]:
    """(a store, the axes its programs race along: each with the name the kernel gives its id)."""
    several = multi_program_axes(model, jit)   # None: the grid is not shown, any axis may have several
    axes = {axis: name for axis, name in _program_ids(model, jit).items() if several is None or axis in several}
    if not axes:
        return
    returns = _early_return_axes(model, jit)   # its programs may not all reach the stores
    if ANY in returns:
        return
    for call, name in calls_within(model, jit.node):
        if name != STORE or model.jit_of(call) is not jit or _guarded(model, jit, call):
            continue
        pointer, value, mask = keyword(call, "pointer", 0), keyword(call, "value", 1), keyword(call, "mask", 2)
        if pointer is None or value is None:
            continue
        where = _axes(model, jit, pointer) | (_axes(model, jit, mask) if mask is not None else set())
        read = _axes(model, jit, value)
        if ANY in where or ANY in read:
            continue
        racing = {axis: axes[axis] for axis in sorted(set(axes) - where - returns) if axis in read}
        if racing:
            yield call, racing


def shared_axes(model: TritonModule, jit: JitFunction, call: cst.Call, pointer: cst.BaseExpression,
                mask: cst.BaseExpression | None) -> list[int] | None:
    """The grid axes (0, 1, 2) whose id neither the address of `call` nor its mask reads, nor the
    test of an `if` or `while` around it, nor an early return's: every program along them reaches
    it with the same addresses.  None where the source cannot tell (a computed axis, a helper's reads)."""
    read = _axes(model, jit, pointer) | (_axes(model, jit, mask) if mask is not None else set())
    for node in model.ancestors(call):
        if node is jit.node:
            break
        if isinstance(node, (cst.If, cst.While)):
            read |= _axes(model, jit, node.test)
    read |= _early_return_axes(model, jit)
    if ANY in read:
        return None
    return [axis for axis in (0, 1, 2) if axis not in read]


def _early_return_axes(model: TritonModule, jit: JitFunction) -> set:
    """The program axes the test of an early `return` reads (ANY where the source cannot tell)."""
    found: set = set()
    for node in walk(jit.node):
        if isinstance(node, cst.If) and any(isinstance(n, cst.Return) for n in walk(node.body)):
            found |= _axes(model, jit, node.test)
    return found


def _program_ids(model: TritonModule, jit: JitFunction) -> dict[int, str]:
    """The grid axes whose id the kernel reads, each with the name it gives it (`pid_k`)."""
    found: dict[int, str] = {}
    for call, name in calls_within(model, jit.node):
        if not is_pid_call(name):
            continue
        axis = _axis(call)
        if axis is None:
            continue
        assign = next((n for n in model.ancestors(call) if isinstance(n, (cst.Assign, cst.SimpleStatementLine))), None)
        named = isinstance(assign, cst.Assign) and len(assign.targets) == 1 and \
            isinstance(assign.targets[0].target, cst.Name)   # `pid_k = tl.program_id(2)` (`.to(tl.int64)`)
        text = assign.targets[0].target.value if named else f"tl.program_id({axis})"
        if axis not in found or named:
            found[axis] = text
    return found


def _axis(call: cst.Call) -> int | None:
    argument = keyword(call, "axis", 0)
    return int_literal(argument) if argument is not None else None


def _axes(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression) -> set:
    """The program axes whose id can reach `expr` (ANY where the source cannot tell)."""
    found: set = set()
    for _, source in model.sources(jit, expr):
        for call, name in calls_within(model, source):
            if is_pid_call(name):
                axis = _axis(call)
                found.add(ANY if axis is None else axis)
            elif name in model.jit and model.jit[name].function is not jit.function:
                found.add(ANY)
    return found


def _guarded(model: TritonModule, jit: JitFunction, call: cst.Call) -> bool:
    for node in model.ancestors(call):
        if node is jit.node:
            return False
        if isinstance(node, (cst.If, cst.While)):
            return True
    return False
