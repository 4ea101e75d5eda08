"""Unmasked columns that stay inside one row of a width the host fixes.

`A + (i_t * BT + i) * H*BT + o_i + 48` with `o_i = tl.arange(0, 16)` reads columns 48..63 of
rows `BT` wide; the wrapper launches that kernel only where `BT == 64` (`dispatch_facts`).
`dA + (i_t*BT + i_i*BC) * H*BT + i_h*BT + i_i*BC + tl.arange(0, BC)` with `i_i = i_c % NC`
walks tiles of a row whose width `BT` is the chunk size the caller configures, never a size
read from the input.  `gk + i_t * K + tl.arange(0, BK)` under `if K == BK:` reads one row.

Answers: does an arange in an access's address stay inside the row every other term of the
address strides over, whatever the input's shape?
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, walk
from kanalyze.analyzer.triton.calls import int_literal, keyword
from kanalyze.analyzer.triton.dataflow import names_read
from kanalyze.analyzer.triton.dispatch_facts import Reference, facts_at, references
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import ARANGE, TL, assigned_value, is_modulo, shape_kind
from kanalyze.analyzer.triton.size_literals import expr_text, rounded
from kanalyze.analyzer.triton.tile_extents import addends, factors


def column_in_row(model: TritonModule, jit: JitFunction, call: cst.Call, pointer, arange: cst.Call,
                  pointers: set[str]) -> bool:
    """Does `arange` add a column inside one row of the address: every other term a multiple
    of a width `W` (or a base pointer), the column window `c + t * E + tl.arange(0, E)` below `W`?"""
    extent = keyword(arange, "end", 1)
    if extent is None or model.jit_of(arange) is not jit:
        return False
    reaching = Reaching.of(model, jit)
    terms = _flatten(model, jit, reaching, pointer, pointers, 5, set(), arange)
    if terms is None or not any(t is arange for t in terms):
        return False
    offset, tiles, rows, wrapped = 0, [], [], []
    for t in terms:
        if t is arange or (names_read(t) & pointers):
            continue
        if int_literal(t) is not None:
            offset += int_literal(t)
        elif is_modulo(t):
            wrapped.append(t)  # `(i_t * 16) % BT`: below BT, a multiple of 16
        elif _tile_of(model, jit, reaching, t, extent):
            tiles.append(t)
        elif isinstance(t, cst.BinaryOperation) and isinstance(t.operator, cst.Multiply):
            rows.append((len(factors(t)), {expr_text(model, f) for f in factors(t) if isinstance(f, cst.Name)}))
        else:
            return False  # an offset of unknown reach in the column
    # A row needs an index times a stride of two sizes (`i * H*BT`: rows of H heads of BT
    # columns); `pid * BLOCK + tl.arange(0, BLOCK)` tiles one flat axis, whose end no block knows.
    params = {p.name for p in jit.params}
    compound = any(count >= 3 and len(names & params) >= 2 for count, names in rows)
    widths = set.intersection(*(names for _, names in rows)) if rows else set()
    width_of_extent = expr_text(model, extent)
    refs = references(model, jit)
    inside = facts_at(model, jit.function, call)  # the kernel's own branches around the access
    for width in sorted(widths):
        if not tiles and not wrapped and offset == 0 and inside.le(width_of_extent, width) \
                and width != width_of_extent:
            return True  # past `if BLOCK >= HW: return`, a block of BLOCK columns fits a row of HW
        if not compound or width not in params:
            continue
        if width == width_of_extent and not tiles and not wrapped and offset == 0:
            return True  # `(i_t + i) * H * BC + tl.arange(0, BC)`: one row of BC
        if not refs:
            continue
        if tiles and not wrapped:
            # Tiles `i_i * BC` with `i_i = i_c % NC` inside a row as wide as a configured tile:
            # no size of the input moves the column.
            if all(_configured(model, ref, width) for ref in refs):
                return True
            continue
        if not tiles and all(_fits(model, ref, width, extent, offset, wrapped) for ref in refs):
            return True
    return False


def reaching_aranges(model: TritonModule, jit: JitFunction, expr) -> set[int]:
    """The ids of the kernel's own `tl.arange` calls whose value can reach `expr`, in order:
    `o = ... tl.arange(0, BC) * H*BT` reassigned before the access does not reach it."""
    reaching, found, seen = Reaching.of(model, jit), set(), set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and model.call_name(node) == ARANGE:
            found.add(id(node))
        if isinstance(node, cst.Name):
            for d in reaching.live_defs(node.value, node):
                if id(d.node) not in seen and d.value is not None and d.kind != "for":
                    seen.add(id(d.node))
                    stack.append(d.value)
                    if d.kind == "augassign":
                        stack.append(d.node.target)  # `p += s`: what `p` held before flows on
        stack.extend(child_nodes(node))
    return found


def _fits(model: TritonModule, ref: Reference, width: str, extent, offset: int, wrapped: list) -> bool:
    """At this launch, is `offset + E - 1 < W`: `W == E` with no offset, or `W >= offset + E`
    (a wrapped offset `(x * k) % M` adds at most `M - k`)?"""
    bound = ref.bindings.get(width)
    if bound is None:
        return False
    w = _text(model, bound)
    for term in wrapped:
        modulus = ref.bindings.get(term.right.value) if isinstance(term.right, cst.Name) else term.right
        m = None if modulus is None else int_literal(modulus) or ref.facts.exact(_text(model, modulus))
        steps = [int_literal(f) for f in factors(_strip(model, term.left)) if int_literal(f)]
        if m is None:
            return False
        offset += m - steps[0] if steps and m % steps[0] == 0 else m - 1
    e = int_literal(extent)
    if e is None and isinstance(extent, cst.Name) and (value := ref.bindings.get(extent.value)) is not None:
        e_text = _text(model, value)
        if offset == 0 and not wrapped and ref.facts.equal(w, e_text):
            return True  # `if K == BK:` before the launch
        e = int_literal(value)
    low = ref.facts.lower_bound(w) if int_literal(bound) is None else int_literal(bound)
    return e is not None and low is not None and offset + e <= low


def _configured(model: TritonModule, ref: Reference, width: str) -> bool:
    """Is the width bound at this launch to a tile the caller chooses (or rounds up from a
    size: `max(16, next_power_of_2(T))`), not a size read from the input?"""
    bound = ref.bindings.get(width)
    return bound is not None and (shape_kind(model, ref.function, bound) is None
                                  or rounded(model, ref.function, bound))


def _text(model: TritonModule, expr) -> str:
    """An expression's text as `dispatch_facts` names its terms."""
    return expr_text(model, expr, 200).replace(" ", "")


def _tile_of(model: TritonModule, jit: JitFunction, reaching: Reaching, term, extent) -> bool:
    """`i_i * BC` with `i_i` bounded by a compile-time count (`i_c % NC`): a tile of the extent."""
    if not (isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply)):
        return False
    parts = factors(term)
    texts = [expr_text(model, f) for f in parts]
    if texts.count(expr_text(model, extent)) != 1 or len(parts) != 2:
        return False
    index = parts[1 - texts.index(expr_text(model, extent))]
    return _bounded(model, jit, reaching, index, 3)


def _bounded(model: TritonModule, jit: JitFunction, reaching: Reaching, expr, depth: int) -> bool:
    """Is an index below a compile-time count: `x % NC`, `(x % NC) // k`, a name holding one?"""
    expr = _strip(model, expr)
    compile_time = lambda e: int_literal(e) is not None or (  # noqa: E731
        names_read(e) and names_read(e) <= jit.constexpr_names)
    if is_modulo(expr):
        return compile_time(expr.right)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.FloorDivide):
        return compile_time(expr.right) and _bounded(model, jit, reaching, expr.left, depth)
    if isinstance(expr, cst.Name) and depth > 0:
        defs = reaching.live_defs(expr.value, expr)
        values = [assigned_value(d, expr.value) for d in defs]
        return bool(values) and all(v is not None and _bounded(model, jit, reaching, v, depth - 1) for v in values)
    return False


def _flatten(model: TritonModule, jit: JitFunction, reaching: Reaching, expr, pointers: set[str], depth: int,
             seen: set[int], target: cst.Call) -> list | None:
    """The terms of an address, names assigned a sum followed to their values (and `p += s`
    to `s`); None where a term is out of reach.  Of a name's alternative values
    (`offs = tl.arange(0, HW)` in one branch, `tl.arange(0, BLOCK)` before it) the one that
    holds `target` is followed."""
    found = []
    for t in [p for a in addends(_strip(model, expr)) for p in _distribute(model, _strip(model, a), 3)]:
        if not (isinstance(t, cst.Name) and t.value not in pointers and depth > 0):
            found.append(t)
            continue
        every = reaching.live_defs(t.value, t)
        defs = [d for d in every if id(d.node) not in seen]
        if not every:
            return None
        if not defs:
            continue  # every value it can hold is already among the terms
        if any(d.kind not in ("assign", "augassign") or (d.kind == "augassign" and d.operator != "+=")
               for d in defs):
            return None
        seen |= {id(d.node) for d in defs}
        alternatives = []
        for d in defs:
            value = assigned_value(d, t.value) if d.kind == "assign" else d.value
            inner = None if value is None else _flatten(model, jit, reaching, value, pointers, depth - 1, seen,
                                                        target)
            if inner is None:
                return None
            if d.kind == "augassign":
                found += inner  # `p += H*BT`: added to whichever value `p` had before
                before = _flatten(model, jit, reaching, d.node.target, pointers, depth - 1, seen, target)
                if before is None:
                    return None
                found += before
            else:
                alternatives.append(inner)
        holding = [a for a in alternatives if any(n is target for term in a for n in walk(term))]
        if len(holding) > 1 or (not holding and len(alternatives) > 1) or not alternatives:
            return None
        found += holding[0] if holding else alternatives[0]
    return found


def _distribute(model: TritonModule, term, depth: int) -> list:
    """`((r * H) + h) * BT` → `r * H * BT`, `h * BT`: a product over a sum, as a sum of products."""
    parts = [_strip(model, f) for f in factors(term)]
    inner = next((i for i, f in enumerate(parts) if isinstance(f, cst.BinaryOperation)
                  and isinstance(f.operator, cst.Add)), None)
    if inner is None or depth <= 0 or len(parts) < 2:
        return [term]
    rest = parts[:inner] + parts[inner + 1:]
    found = []
    for addend in addends(parts[inner]):
        product = _strip(model, addend)
        for f in rest:
            product = cst.BinaryOperation(product, cst.Multiply(), f)
        found += _distribute(model, product, depth - 1)
    return found


def _strip(model: TritonModule, expr):
    """`o_i[:, None]` → `o_i`; `x.to(tl.int64)`, `tl.cast(x, ...)` → `x`."""
    while True:
        if isinstance(expr, cst.Subscript) and all(
                (isinstance(s.slice, cst.Index) and isinstance(s.slice.value, cst.Name)
                 and s.slice.value.value == "None") or isinstance(s.slice, cst.Slice) for s in expr.slice):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "to":
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and model.call_name(expr) == TL + "cast" and expr.args:
            expr = expr.args[0].value
        else:
            return expr
