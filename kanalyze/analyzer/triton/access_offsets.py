"""The offsets of a `tl.load` / `tl.store`: whether a `tl.arange` in them is wrapped,
clamped or exactly as wide as its dimension, whether a masked twin guards the access,
and which runtime size they run over."""

from __future__ import annotations

import re

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import calls_within, keyword
from kanalyze.analyzer.triton.dataflow import names_read
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import (ARANGE, LOAD, STORE, TL, assigned_value, is_modulo, is_none, reaches,
                                      shape_kinds)

# Parameter names that read as sizes (`n`, `M`, `n_elements`, `seq_len`, ...).
_SIZE_NAME = re.compile(r"(?i)^[nmkbchwdlts](_|$|\d)|^[A-Z]{1,2}$|num|size|elem|len|dim|rows|cols|count|total"
                        r"|batch|seq|ctx|heads|feat|chan|width|height|depth|hidden|tokens")


def covers_dimension(model: TritonModule, arange: cst.Call) -> bool:
    """`tl.arange(0, D)` with `D=x.shape[-1]` at every launch covers its dimension exactly."""
    jit = model.jit_of(arange)
    return jit is not None and shape_kinds(model, jit, keyword(arange, "end", 1)) == {"direct"}


def clamps(model: TritonModule, node) -> bool:
    """Is `node` an `a % b`, a `tl.minimum(...)` or a `tl.where(...)`: something that keeps offsets in range?"""
    return is_modulo(node) or (isinstance(node, cst.Call) and model.call_name(node) in (TL + "minimum", TL + "where"))


def wrapped_or_clamped(model: TritonModule, arange: cst.Call, root) -> bool:
    """`(pid * B + tl.arange(0, B)) % M` wraps into bounds; `offs = tl.where(offs < M, offs, 0)`
    and `tl.minimum(offs, n - 1)` clamp."""
    for node in model.ancestors(arange):
        if clamps(model, node):
            return True
        if node is root:
            break
    fn = model.function_of(arange)
    if fn is None:
        return False
    flow = model.flow(fn)
    names = {d.name for d in flow.defs_at(model.parent(root))}
    return any(d.value is not None and any(clamps(model, n) for n in walk(d.value))
               for name in names for d in flow.defs_of(name))


def guarded_by_masked_branch(model: TritonModule, jit: JitFunction, call: cst.Call) -> bool:
    """`if EVEN_K: tl.load(p) else: tl.load(p, mask=...)`: the unmasked branch is the fast
    path for full tiles, chosen when the size allows it."""
    child = call
    for node in model.ancestors(call):
        if node is jit.node:
            return False
        if isinstance(node, cst.If):
            other = node.orelse if child is node.body else node.body
            if other is not None and any(
                    (m := keyword(c, "mask", 1 if n == LOAD else 2)) is not None and not is_none(m)
                    for c, n in calls_within(model, other) if n in (LOAD, STORE)):
                return True
        child = node
    return False


def size_params(model: TritonModule, jit: JitFunction, runtime: set[str], comparisons) -> set[str]:
    """Runtime parameters that are sizes (not strides, not `eps`): compared against
    arange-derived offsets somewhere in the kernel, or named like a size."""
    compared = set().union(*(names_read(right) for left, right in comparisons if reaches(model, jit, left, ARANGE)))
    return {p for p in runtime if "stride" not in p.lower() and (p in compared or _SIZE_NAME.search(p))}


def offsets_name(model: TritonModule, jit: JitFunction, pointer, pointers: set[str], open_ids: set[int],
                 depth: int = 3, ragged: frozenset[str] = frozenset()) -> tuple[str | None, set[int]]:
    """The name carrying an unbounded arange in a pointer (`offs` in `x_ptr + offs`), and the
    ids of the aranges it carries; of several, one the kernel compares with a size elsewhere
    (`ragged`: `offs_m` of `offs_m < Q_CTX` before `offs_k` of a head dimension)."""
    flow = model.flow(jit)
    for name in sorted(names_read(pointer) - pointers, key=lambda n: (n not in ragged, n)):
        ids = {id(c) for _, e in model.sources(jit, cst.Name(name)) for c, _ in calls_within(model, e)} & open_ids
        if not ids:
            continue
        values = [v for d in flow.defs_of(name)
                  if (v := assigned_value(d, name)) is not None and names_read(v) & pointers]
        if not values:
            return name, ids
        if depth > 0 and (found := offsets_name(model, jit, values[0], pointers, open_ids, depth - 1, ragged))[0]:
            return found  # `ptrs = x_ptr + offs`: the offsets are inside
    return None, set()


def compared_bound(jit: JitFunction, offs: str | None, sizes: set[str], comparisons,
                   one_dim: bool) -> str | None:
    """The size the offsets are compared against elsewhere in the kernel, else the only size
    (when the kernel has one arange, hence one dimension)."""
    for left, right in comparisons:
        if offs in names_read(left) and (found := sorted(names_read(right) & sizes)):
            return found[0]
    plain = {s for s in sizes if not jit.param(s).is_constexpr}
    return next(iter(plain)) if one_dim and len(plain) == 1 else None

