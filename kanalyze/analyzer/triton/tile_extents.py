"""Whether a `tl.arange` in an access's offsets stays inside its axis without a mask.

Answers: which aranges reach an expression other than through a value read from memory;
is an arange's extent an exact factor of its axis (`i_h * G + tl.arange(0, G)` over `H * G`);
does an untiled arange span one row of a wider stride (a tile inside a tile); are the offsets
wrapped (`rm % M`) before they reach the pointer; does every kernel read a tensor at the fixed
indices `0 .. n-1` (`assert w.shape[0] == 3` for three taps).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, walk
from kanalyze.analyzer.triton.access_offsets import clamps
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.dispatch_facts import references
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.exact_sizes import exact_at, exact_size
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import (ARANGE, LOAD, PROGRAM_ID, SHAPE_ATTRS, STORE, TL, assigned_value,
                                             constant_int, reaches)
from kanalyze.analyzer.triton.size_literals import expr_text


# The loops whose bounds say how far they run.
RANGES = ("range", TL + "range", TL + "static_range")


def addends(expr) -> list:
    """The terms of a sum: `a + b * c + d` gives `a`, `b * c`, `d`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return addends(expr.left) + addends(expr.right)
    return [expr]


def factors(expr) -> list:
    """The factors of a product: `i * H * BC` gives `i`, `H`, `BC`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return factors(expr.left) + factors(expr.right)
    return [expr]


def range_last(model: TritonModule, flow: Dataflow, iterable) -> int | None:
    """The last value of `range(3)`, `tl.static_range(0, 3)`, when the bounds are constants."""
    if not (isinstance(iterable, cst.Call) and model.call_name(iterable) in RANGES) or not iterable.args:
        return None
    args = [constant_int(flow, a.value) for a in iterable.args]
    if None in args or len(args) > 2:
        return None
    stop = args[-1]
    start = args[0] if len(args) == 2 else 0
    return stop - 1 if stop > start else None


def arange_reaches(model: TritonModule, fn: Function, expr) -> bool:
    """Does a `tl.arange` reach `expr` other than through a `tl.load`?  `x < 6` on loaded
    values compares data; `offs < 4096` compares offsets."""
    return bool(index_aranges(model, fn, expr, first=True))


def index_aranges(model: TritonModule, fn: Function, expr, depth: int = 4, seen: set | None = None,
                  found: set | None = None, first: bool = False) -> set[int]:
    """The ids of the `tl.arange` calls that reach `expr` other than through a value read from
    memory (`tl.load`, an atomic): `v_ptrs + tl.load(idx_ptr + offs_n)` spans none of `offs_n`."""
    seen = set() if seen is None else seen
    found = set() if found is None else found
    if id(expr) in seen:
        return found
    seen.add(id(expr))
    names: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            name = model.call_name(node)
            if name == ARANGE:
                found.add(id(node))
                if first:
                    return found
            if name == LOAD or (name or "").startswith(TL + "atomic_"):
                continue  # a value read from memory: data, whatever its address
        if isinstance(node, cst.Name):
            names.add(node.value)
        stack.extend(child_nodes(node))
    flow = model.flow(fn)
    for name in sorted(names):
        for d in flow.defs_of(name):
            if d.kind == "param":
                jit = model.jit.get(fn.name)
                if depth > 0 and jit is not None and jit.function is fn:
                    for caller, call in jit.called_from:
                        arg = bind_call_args(call, jit.params).get(name)
                        if arg is not None:
                            index_aranges(model, caller, arg, depth - 1, seen, found, first)
                continue
            value = assigned_value(d, name) if d.kind == "assign" else d.value
            if value is not None and d.kind != "for":
                index_aranges(model, fn, value, depth, seen, found, first)
            if first and found:
                return found
    return found


def exact_extent(model: TritonModule, arange: cst.Call) -> bool:
    """`tl.arange(0, G)` with `G = HQ // H` (or any size read from the input, not rounded up)
    at every launch: `i_h * G + tl.arange(0, G)` walks one factor of an axis of `H * G` elements
    and ends exactly at its end.  `HEAD_DIM // 2` of such a size is half of it.  So does a block
    the wrapper passes as a runtime size too (`group_size, ..., BLOCK=group_size`), or one it
    launches with only where it equals a size (`if block == n_cols:`, or a helper's flag)."""
    jit = model.jit_of(arange)
    extent = keyword(arange, "end", 1)
    if isinstance(extent, cst.BinaryOperation) and isinstance(extent.operator, cst.FloorDivide) \
            and int_literal(extent.right) is not None:
        extent = extent.left
    if jit is None or not isinstance(extent, cst.Name) or extent.value not in jit.constexpr_names \
            or any(extent.value in c for c in jit.autotune_configs):
        return False
    refs = references(model, jit)
    if any(launch.wrapper is None for launch in jit.launches):
        return False
    sizes = [p.name for p in jit.params if not p.is_constexpr]
    for ref in refs:
        value = ref.bindings.get(extent.value)
        if value is None:
            return False
        text = _text(model, value)
        if exact_size(model, ref.function, value) or exact_at(model, ref.function, value, ref.node) or any(
                name in ref.bindings and _text(model, ref.bindings[name]) == text for name in sizes):
            continue
        equals = {t for e in ref.facts.edges for t in e if t.isidentifier() and ref.facts.equal(t, text)}
        if not any(exact_size(model, ref.function, cst.Name(t)) for t in sorted(equals - {text})):
            return False
    return bool(refs)


def _text(model: TritonModule, expr) -> str:
    """An expression's text as `dispatch_facts` names its terms."""
    return expr_text(model, expr, 200).replace(" ", "")


def within_row(model: TritonModule, jit: JitFunction, pointer, arange: cst.Call, fn: Function, root) -> bool:
    """`Akk + (i_t + i) * H * BC + tl.arange(0, BC)`: an untiled arange beside an index whose
    stride is a multiple of its extent spans one row of that width, never past it."""
    if fn is not jit.function or reaches(model, jit, root, PROGRAM_ID):
        return False
    extent = keyword(arange, "end", 1)
    if extent is None:
        return False
    width = expr_text(model, extent)
    statement = model.parent(root)
    carried = {d.name for d in model.flow(jit).defs_at(statement)} if isinstance(statement, cst.Assign) \
        and statement.value is root else set()
    terms = addends(pointer)
    inner = [t for t in terms if (isinstance(t, cst.Name) and t.value in carried) or t is root]
    strided = [t for t in terms if isinstance(t, cst.BinaryOperation) and isinstance(t.operator, cst.Multiply)
               and width in {expr_text(model, f) for f in factors(t)}]
    return bool(inner) and bool(strided)


def wrapped_later(model: TritonModule, jit: JitFunction, pointer, fn: Function, root) -> bool:
    """`rm = pid * BLOCK + tl.arange(0, BLOCK)`, then `ram = rm % M` (inside `tl.multiple_of`):
    the offsets reach the pointer only wrapped, as in the Triton matmul tutorial."""
    if fn is not jit.function:
        return False
    statement = model.parent(root)
    if not isinstance(statement, cst.Assign) or statement.value is not root:
        return False
    flow = model.flow(jit)
    carried = {d.name for d in flow.defs_at(statement)}
    if not carried:
        return False
    seen: set[str] = set()

    def reads_open(expr, depth: int) -> bool:
        stack = [expr]
        names = set()
        while stack:
            node = stack.pop()
            if clamps(model, node):
                continue  # a wrap or a clamp: what passes through it stays in bounds
            if isinstance(node, cst.Name):
                names.add(node.value)
            stack.extend(child_nodes(node))
        if names & carried:
            return True
        for name in names - seen:
            seen.add(name)
            for d in flow.defs_of(name):
                value = assigned_value(d, name) if d.kind == "assign" else d.value
                if value is not None and d.kind != "for" and depth > 0 and reads_open(value, depth - 1):
                    return True
        return False

    return not reads_open(pointer, 6)


def fixed_arity(model: TritonModule, fn: Function, size, value) -> bool:
    """`assert w.shape[0] == 3` where every kernel that gets `w` reads exactly `w[0] .. w[value - 1]`
    at constant offsets (three weights of an RGB-to-gray, the taps of a 3-tap filter): the count
    is the layer's definition, not a size the problem varies."""
    if not isinstance(value, int):
        return False
    tensors = {n.value.value for n in walk(size) if isinstance(n, cst.Attribute) and n.attr.value in SHAPE_ATTRS
               and isinstance(n.value, cst.Name)}
    if len(tensors) != 1:
        return False
    tensor = tensors.pop()

    def bound_in(launches) -> list:
        return [(launch.kernel, param) for launch in launches for param, arg in launch.args.items()
                if isinstance(arg, cst.Name) and arg.value == tensor]

    # The asserting function's own launches of `w` when it has any (another wrapper's `w` is
    # another tensor); else every launch of the file (the assert may guard a helper's launch).
    bound = bound_in([launch for launch in model.launches if launch.wrapper is fn]) or bound_in(model.launches)
    if not bound:
        return False
    for jit, param in bound:
        indices = constant_indices(model, jit, param)
        if not indices or max(indices) != value - 1:
            return False
    return True


def constant_indices(model: TritonModule, jit: JitFunction, param: str) -> list[int] | None:
    """The element indices of every access through the pointer `param` when each is `param + c`
    (c a constant or the variable of a `range` of constant bounds); None otherwise."""
    flow, found = model.flow(jit), []
    for site in model.calls_in(jit):
        if not (site.qualname in (LOAD, STORE) or (site.qualname or "").startswith(TL + "atomic_")):
            continue
        pointer = keyword(site.node, "pointer", 0)
        if pointer is None or param not in {n for _, e in model.sources(jit, pointer) for n in names_read(e)}:
            continue
        terms = addends(pointer)
        if sum(isinstance(t, cst.Name) and t.value == param for t in terms) != 1:
            return None
        high = 0
        for t in terms:
            if isinstance(t, cst.Name) and t.value == param:
                continue
            c = constant_int(flow, t)
            if c is None and isinstance(t, cst.Name):
                loops = [d for d in flow.defs_of(t.value) if d.kind == "for"]
                c = range_last(model, flow, loops[0].value) if len(loops) == 1 and len(
                    flow.defs_of(t.value)) == 1 else None
            if c is None:
                return None
            high += c
        found.append(high)
    return found
