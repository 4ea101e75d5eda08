"""Symbolic integer tiles for the bounds proofs (MEM003, MEM004), as z3 terms.

A Triton value that matters for an address is an integer or boolean *tile*: a
scalar, or a block of lanes built from `tl.arange` and broadcast with
`[:, None]` / `[None, :]`.  A `Tile` holds its shape and a function from lane
indices to a z3 term, so that the offset and the mask of one access are
evaluated at the same symbolic lane (`lane0`, `lane1`, ...).

Two arithmetics meet here.  Compile-time constants (constexprs, literals) are
Python integers: unbounded, floor division.  Runtime values (program ids,
aranges, integer arguments) are int32 or int64 tensors: C division, and an
int32 result outside [-2^31, 2^31) wraps.  Terms are exact integers (z3 `Int`);
every int32 operation also records the condition under which it wraps, which
is what MEM004 asks the solver for.  Checking "the first wrap" on exact values
is the same question as bit-vector wrap-around, and it stays valid when a
value is int32 for small sizes and int64 for large ones (Triton passes an
integer argument as int64 only when it does not fit int32).

The symbols the terms are made of (`Env`) are in bounds_symbols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3

from kanalyze.analyzer.bounds.symbols import (INT32_MAX, INT32_MIN, Env, Unsupported, concrete, either, fits32,
                                              int_term, negate)

# --- tiles -------------------------------------------------------------------

# An overflow check: (condition that the operation wraps, CST node, exact value).
Check = tuple


@dataclass(eq=False)
class Tile:
    """An integer or boolean block of lanes (a scalar has shape `()`).

    `shape` holds 1 for a broadcast dimension, else the size (int or z3 term).
    `at(idx)` gives (term, checks) at the lane `idx` (one index per dimension).
    `wide` says whether the value is int64 (a bool or a z3 condition on sizes).
    `const` marks compile-time values, computed by Python, never wrapping."""

    shape: tuple
    at: Callable[[tuple], tuple]
    kind: str = "int"
    wide: object = False
    const: bool = False


def _memo(fn: Callable[[tuple], tuple]) -> Callable[[tuple], tuple]:
    cache: dict[tuple, tuple] = {}

    def at(idx: tuple) -> tuple:
        key = tuple(i.get_id() for i in idx)
        if key not in cache:
            cache[key] = fn(idx)
        return cache[key]
    return at


def scalar(term, *, kind: str = "int", wide=False, const: bool = False) -> Tile:
    term = int_term(term) if kind == "int" else term
    return Tile((), lambda idx: (term, ()), kind, wide, const)


def constant(term) -> Tile:
    """A compile-time integer: int32 when it fits, as Triton materialises it."""
    term = int_term(term)
    fits = fits32(term)
    return scalar(term, wide=negate(fits), const=True)


def boolean(term) -> Tile:
    return scalar(z3.BoolVal(term) if isinstance(term, bool) else term, kind="bool", const=True)


def is_one(dim) -> bool:
    return isinstance(dim, int) and dim == 1


def broadcast(*shapes: tuple) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        sized = [d for d in dims if not is_one(d)]
        out.append(sized[0] if sized else 1)
    return tuple(out)


def project(shape: tuple, rank: int, idx: tuple) -> tuple:
    """The lane of an operand of `shape` inside a broadcast result of `rank` dims."""
    offset = rank - len(shape)
    return tuple(z3.IntVal(0) if is_one(d) else idx[offset + j] for j, d in enumerate(shape))


def _wrap_check(value, wide, node, inner: tuple = ()) -> tuple:
    """(the operation wraps first, node, exact value): it wraps while none of the
    operations it is computed from did, so a wrap is reported where it starts,
    not again on every sum built on it."""
    if wide is True:
        return ()
    wraps = z3.Or(value > INT32_MAX, value < INT32_MIN)
    if wide is not False:
        wraps = z3.And(z3.Not(wide), wraps)
    if inner:
        wraps = z3.And(wraps, z3.Not(z3.Or([c[0] for c in inner])))
    return ((wraps, node, value),)


def _cdiv_trunc(a, b):
    """C (and Triton) integer division truncates toward zero; z3's floors for b > 0."""
    return z3.If(a >= 0, a / b, -((-a) / b))


def _cmod_trunc(a, b):
    return z3.If(a >= 0, a % b, -((-a) % b))


ARITH = {"+", "-", "*", "//", "%", "<<", ">>"}
COMPARE = {"<", "<=", ">", ">=", "==", "!="}
LOGIC = {"&", "|", "^"}


def _apply(op: str, a, b, const: bool):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return a / b if const else _cdiv_trunc(a, b)
    if op == "%":
        return a % b if const else _cmod_trunc(a, b)
    if op in ("<<", ">>"):
        shift = concrete(b)
        if shift is None or not 0 <= shift < 63:
            raise Unsupported("a shift by a non-constant amount")
        return a * (2**shift) if op == "<<" else (a / (2**shift) if const else _cdiv_trunc(a, 2**shift))
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "&":
        return z3.And(a, b)
    if op == "|":
        return z3.Or(a, b)
    if op == "^":
        return z3.Xor(a, b)
    raise Unsupported(f"the operator `{op}`")


def binop(op: str, a: Tile, b: Tile, node=None) -> Tile:
    if op in LOGIC:
        if a.kind != "bool" or b.kind != "bool":
            raise Unsupported(f"bitwise `{op}` on integers")
    elif a.kind != "int" or b.kind != "int":
        if op in ("==", "!=") and a.kind == b.kind == "bool":
            pass
        else:
            raise Unsupported(f"`{op}` on a boolean")
    shape = broadcast(a.shape, b.shape)
    rank = len(shape)
    const = a.const and b.const
    kind = "int" if op in ARITH else "bool"
    wide = either(a.wide, b.wide) if kind == "int" else False
    wraps = kind == "int" and op in ("+", "-", "*", "<<") and not const

    def at(idx):
        va, ca = a.at(project(a.shape, rank, idx))
        vb, cb = b.at(project(b.shape, rank, idx))
        value = _apply(op, va, vb, const)
        checks = ca + cb + (_wrap_check(value, wide, node, ca + cb) if wraps else ())
        return value, checks

    if const and kind == "int":
        # A Python-level result: its width is decided when it meets a tensor.
        probe, _ = at(tuple(z3.IntVal(0) for _ in shape))
        wide = negate(fits32(probe)) if not shape else wide
    return Tile(shape, _memo(at), kind, wide, const)


def select(cond: Tile, a: Tile, b: Tile) -> Tile:
    """`tl.where(cond, a, b)` (also `tl.minimum` / `tl.maximum`)."""
    if cond.kind != "bool" or a.kind != b.kind:
        raise Unsupported("`tl.where` over values of different kinds")
    shape = broadcast(cond.shape, a.shape, b.shape)
    rank = len(shape)

    def at(idx):
        vc, cc = cond.at(project(cond.shape, rank, idx))
        va, ca = a.at(project(a.shape, rank, idx))
        vb, cb = b.at(project(b.shape, rank, idx))
        return z3.If(vc, va, vb), cc + ca + cb
    return Tile(shape, _memo(at), a.kind, either(a.wide, b.wide), cond.const and a.const and b.const)


def unary(op: str, a: Tile, node=None) -> Tile:
    if op == "-" and a.kind == "int":
        def at(idx):
            value, checks = a.at(idx)
            out = -value
            return out, checks + (() if a.const else _wrap_check(out, a.wide, node, checks))
        return Tile(a.shape, _memo(at), "int", a.wide, a.const)
    if op in ("not", "~") and a.kind == "bool":
        return Tile(a.shape, _memo(lambda idx: (z3.Not(a.at(idx)[0]), a.at(idx)[1])), "bool", False, a.const)
    if op == "+":
        return a
    raise Unsupported(f"unary `{op}` on {a.kind}")


def cast(a: Tile, dtype: str, node=None) -> Tile:
    """`x.to(tl.int64)` widens; `.to(tl.int32)` narrows (and wraps if it does not fit)."""
    if dtype in ("int64", "uint64"):
        return Tile(a.shape, a.at, a.kind, True, a.const) if a.kind == "int" else _bool_to_int(a, True)
    if dtype in ("int32", "uint32"):
        if a.kind == "bool":
            return _bool_to_int(a, False)

        def at(idx):
            value, checks = a.at(idx)
            return value, checks + (() if a.const else _wrap_check(value, False, node, checks))
        return Tile(a.shape, _memo(at), "int", False, a.const)
    if dtype == "int1":
        if a.kind == "bool":
            return a
        return Tile(a.shape, _memo(lambda idx: (a.at(idx)[0] != 0, a.at(idx)[1])), "bool", False, a.const)
    raise Unsupported(f"a cast to {dtype}")


def _bool_to_int(a: Tile, wide: bool) -> Tile:
    return Tile(a.shape, _memo(lambda idx: (z3.If(a.at(idx)[0], 1, 0), a.at(idx)[1])), "int", wide, a.const)


def expand(a: Tile, layout: list[bool]) -> Tile:
    """`x[:, None]`: `layout` has True for a kept dimension, False for a new one."""
    if sum(layout) != len(a.shape):
        raise Unsupported("an index other than `:` and `None`")
    dims = iter(a.shape)
    shape = tuple(next(dims) if keep else 1 for keep in layout)
    keep = [i for i, k in enumerate(layout) if k]
    return Tile(shape, _memo(lambda idx: a.at(tuple(idx[i] for i in keep))), a.kind, a.wide, a.const)


def arange(start, end, node=None) -> Tile:
    """`tl.arange(start, end)`: int32 lanes start, start+1, ..., end-1."""
    length = end - start if isinstance(start, int) and isinstance(end, int) else int_term(end) - int_term(start)
    size = concrete(length)
    dim = size if size is not None else length
    base = int_term(start)
    return Tile((dim,), _memo(lambda idx: (base + idx[0], ())), "int", False, False)


def times(count, a: Tile, *, wraps: bool, node=None) -> Tile:
    """`count` increments of `a` (a loop-carried `p += a`); int accumulators wrap in int32."""
    def at(idx):
        value, checks = a.at(idx)
        out = count * value
        return out, checks + (_wrap_check(out, a.wide, node, checks) if wraps else ())
    return Tile(a.shape, _memo(at), "int", a.wide, False)


# --- pointers and other values -----------------------------------------------

@dataclass(eq=False)
class Pointer:
    """A pointer tile: a kernel parameter's base address plus an element offset."""

    base: str
    offset: Tile


@dataclass(eq=False)
class Opaque:
    """A value the extraction does not model (a float, a loaded value, ...)."""

    reason: str


@dataclass(eq=False)
class DType:
    name: str


@dataclass(eq=False)
class PyValue:
    """A compile-time Python value that is not an integer: None, a string, a float."""

    value: object


def add_pointer(p: Pointer, offset: Tile, sign: int = 1) -> Pointer:
    """Pointer arithmetic is 64-bit: `ptr + a + b` adds twice and never wraps, but
    the integer operands themselves were computed in their own width."""
    if offset.kind != "int":
        raise Unsupported("a pointer plus a boolean")
    shape = broadcast(p.offset.shape, offset.shape)
    rank = len(shape)
    base = p.offset

    def at(idx):
        vp, cp = base.at(project(base.shape, rank, idx))
        vo, co = offset.at(project(offset.shape, rank, idx))
        return (vp + vo if sign > 0 else vp - vo), cp + co
    return Pointer(p.base, Tile(shape, _memo(at), "int", True, False))


def lane_vars(env: Env, shape: tuple) -> tuple:
    """One lane variable per dimension of an access, bounded by the dimension's size."""
    lanes = []
    for k, dim in enumerate(shape):
        if is_one(dim):
            lanes.append(z3.IntVal(0))
            continue
        size = int_term(dim)
        # Named by position and size: accesses over the same tile share their lanes.
        lanes.append(env.symbol(f"lane{k}<{z3.simplify(size)}>", "lane", f"lane {k}",
                                facts=lambda v, size=size: [v >= 0, v < size]))
    return tuple(lanes)
