"""Whether an atomic's address is injective over the launch's programs: each program
adds into a slice of the tensor that no other program touches.

The address is read as a sum of terms, each a product of at most one varying factor
(a program id, a part of one decoded by `//` or `%`, a `tl.arange` lane, a loop
variable) and of invariant factors (kernel parameters, constexprs, literals): the
stride.  Terms with the same stride form one dimension of the tensor; `pid * E +
tl.arange(0, E)` is a tile of the dimension the arange is in.  The address is taken
to be injective when

  - every grid axis that can have more than one program enters it whole: the id
    itself, or both `pid // D` and `pid % D` (the same `D`);
  - each dimension that holds a program part holds that part alone (with its tile's
    lanes), so distinct parts give distinct indices;
  - a dimension whose stride divides another's (`cols` under `row * N + cols`) is
    kept below the ratio to the next coarser dimension, as a mixed-radix digit is: by
    the atomic's mask (`cols < N`, also scaled: `rows < T` bounds `rows * H` below
    `T * H`) or by `% N` (a bound among the ratio's factors is enough: `h % H` under
    `b * T * H`);
  - no other atomic of the kernel writes through the same base pointer.

A kernel whose constexpr switches its coordinates to a table (fla's `if IS_VARLEN:`
reading (sequence, chunk) from `chunk_indices` and `cu_seqlens`, `else:` computing them
from the program ids) is read on its dense path (`dense_path.py`): the table lists the
pairs the dense grid enumerates, each once.

Dimensions with unrelated strides (`b * stride_b`, `h * stride_h`) are taken to be
distinct dimensions of a tensor whose layout does not overlap itself.  Anything else
is not decided: a loaded value in the address (a scatter, or a sequence/chunk index
read from a table with no dense path beside it: which rows a table holds, and whether
it repeats one, is data), a product of two varying values, a swizzle such as
`(pid % W) // G`, a grid the source does not show.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal, keyword
from kanalyze.analyzer.triton.dataflow import own_value
from kanalyze.analyzer.triton.dense_path import in_arm, table_arms
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.launch_axes import multi_program_axes
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
PROGRAM_ID = TL + "program_id"
ATOMICS = {TL + name for name in ("atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
                                  "atomic_and", "atomic_or", "atomic_xor")}
PASS_THROUGH = {TL + "multiple_of", TL + "max_contiguous", TL + "max_constancy"}
LOOPS = {"range", TL + "range", TL + "static_range"}
MAX_ALTERNATIVES = 32
AXES = (0, 1, 2)


@dataclass(frozen=True)
class Term:
    """One additive term: `var` times the product of `stride` (invariant factors, as text)."""

    stride: tuple[str, ...]
    var: tuple | None = None  # ("pid", axis, part) | ("lane", extent) | ("loop", id); None: invariant


Sum = tuple[Term, ...]


class _Undecided(Exception):
    """The address holds something this reading does not decide."""


def programs_own_disjoint_addresses(model: TritonModule, jit: JitFunction, call: cst.Call,
                                    pointer: cst.BaseExpression) -> bool:
    """True when each address the atomic `call` writes gets adds from one program only."""
    axes = multi_program_axes(model, jit)
    if axes is None:
        return False
    reader = _Reader(model)
    if in_arm(model, call, reader.table_arms(jit.function)):
        return False  # an add only the table-coordinates path makes: its addresses are data
    try:
        sums = reader.expand(jit.function, pointer)
        mask = keyword(call, "mask", 2)
        bounds = _bounds(reader, jit.function, mask) if mask is not None else []
        if _shares_base(model, reader, jit, call, sums):
            return False  # another atomic through the same base: its adds may meet these
    except _Undecided:
        return False
    return bool(sums) and all(_injective(s, axes, bounds) for s in sums)


def _shares_base(model: TritonModule, reader: _Reader, jit: JitFunction, call: cst.Call, sums: list[Sum]) -> bool:
    """Does another atomic of the kernel (or of a kernel calling this helper) write through
    one of this address's base pointers (its lone invariant terms)?"""
    def bases(found: list[Sum]) -> set[tuple[str, ...]]:
        return {t.stride for s in found for t in s if t.var is None and len(t.stride) == 1}

    mine = bases(sums)
    functions = [jit.function] + [caller for caller, _ in jit.called_from]
    for other in (c for f in functions for c in model.calls_in(f, *ATOMICS)):
        if other.node is call:
            continue
        target = keyword(other.node, "pointer", 0)
        if target is None:
            return True
        try:
            if mine & bases(reader.expand(other.function, target)):
                return True
        except _Undecided:  # an address this reading does not decide: does it start from one of ours?
            reached = _names_reached(model, other.function, target) if other.function is jit.function else None
            if reached is None or not all(len(b) == 1 and b[0].isidentifier() for b in mine) or \
                    {b[0] for b in mine} & reached:
                return True  # (in a helper or its caller, names differ: taken to share)
    return False


def _names_reached(model: TritonModule, func: Function, expr: cst.BaseExpression) -> set[str] | None:
    """Every name `expr` reads, and every name their definitions read, transitively; None
    where a value on the way is made a pointer (`.to(tl.pointer_type(...))` of an address
    read from a table: it may point anywhere)."""
    seen: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if any(isinstance(n, cst.Call) and model.call_name(n) == TL + "pointer_type" for n in walk(node)):
            return None
        for name in {n.value for n in walk(node) if isinstance(n, cst.Name)} - seen:
            seen.add(name)
            stack += [d.value for d in model.flow(func).defs_of(name) if d.value is not None]
    return seen


# -- reading the address -------------------------------------------------------------

class _Reader:
    """The address as every sum of terms it can be (one per combination of definitions)."""

    def __init__(self, model: TritonModule) -> None:
        self.model = model
        self._arms: dict[int, set[int]] = {}

    def table_arms(self, func: Function) -> set[int]:
        """The arms a dense reading of `func` sets aside (`dense_path.py`)."""
        if id(func.node) not in self._arms:
            jit = self.model.jit.get(func.name)
            self._arms[id(func.node)] = table_arms(self.model, jit) if jit is not None and jit.function is func \
                else set()
        return self._arms[id(func.node)]

    def defs_of(self, func: Function, name: str) -> list:
        """`name`'s definitions on the kernel's dense path: those in a table arm set aside."""
        defs = self.model.flow(func).defs_of(name)
        arms = self.table_arms(func)
        return [d for d in defs if not in_arm(self.model, d.node, arms)] or defs

    def expand(self, func: Function, expr: cst.BaseExpression, depth: int = 8) -> list[Sum]:
        if depth < 0:
            raise _Undecided
        sums = self._expand(func, expr, depth)
        if len(sums) > MAX_ALTERNATIVES:
            raise _Undecided
        if all(t.var is None for s in sums for t in s):  # invariant: one stride factor, its text
            return [(Term((_text(expr),)),)]
        return sums

    def _expand(self, func: Function, expr: cst.BaseExpression, depth: int) -> list[Sum]:
        if isinstance(expr, (cst.Integer, cst.SimpleString)):
            return [(Term((_text(expr),)),)]
        if isinstance(expr, cst.Name):
            return self._name(func, expr.value, depth)
        if isinstance(expr, cst.Subscript):  # `x[:, None]`: the same values, broadcast
            if all(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and
                   e.slice.value.value == "None" or isinstance(e.slice, cst.Slice) for e in expr.slice):
                return self.expand(func, expr.value, depth)
            raise _Undecided
        if isinstance(expr, cst.BinaryOperation):
            return self._binary(func, expr, depth)
        if isinstance(expr, cst.Call):
            return self._call(func, expr, depth)
        raise _Undecided

    def _binary(self, func: Function, expr: cst.BinaryOperation, depth: int) -> list[Sum]:
        left, right = self.expand(func, expr.left, depth), self.expand(func, expr.right, depth)
        op = expr.operator
        if isinstance(op, cst.Add):
            return [a + b for a, b in product(left, right)]
        if isinstance(op, cst.Subtract):
            if any(t.var is not None for s in right for t in s):
                raise _Undecided
            return [a + b for a, b in product(left, right)]  # an invariant shift: the same for every program
        if isinstance(op, cst.Multiply):
            return [tuple(_times(x, y) for x in a for y in b) for a, b in product(left, right)]
        if isinstance(op, (cst.FloorDivide, cst.Modulo)):
            kind = "div" if isinstance(op, cst.FloorDivide) else "mod"
            divisor = [t for s in right for t in s]
            if any(t.var is not None for t in divisor) or len(right) != 1 or len(divisor) != 1:
                raise _Undecided
            parts = []
            for s in left:
                if len(s) != 1 or s[0].stride or s[0].var is None or s[0].var[0] != "pid" or s[0].var[2] != "all":
                    raise _Undecided  # only a program id itself is decoded
                parts.append((Term((), ("pid", s[0].var[1], (kind, divisor[0].stride))),))
            return parts
        raise _Undecided

    def _call(self, func: Function, call: cst.Call, depth: int) -> list[Sum]:
        name = self.model.call_name(call)
        if name == PROGRAM_ID:
            axis = int_literal(keyword(call, "axis", 0))
            if axis is None:
                raise _Undecided
            return [(Term((), ("pid", axis, "all")),)]
        if name == TL + "arange":
            start, end = keyword(call, "start", 0), keyword(call, "end", 1)
            if int_literal(start) != 0 or end is None:
                raise _Undecided
            return [(Term((), ("lane", _text(end))),)]
        if name in PASS_THROUGH and call.args:
            return self.expand(func, call.args[0].value, depth)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
            return self.expand(func, call.func.value, depth)  # a cast keeps the integer
        if all(not isinstance(n, cst.Call) or self.model.call_name(n) in (TL + "cdiv", "triton.cdiv")
               for n in walk(call)) and not any(self._varies(func, n, depth) for n in walk(call)
                                                if isinstance(n, cst.Name)):
            return [(Term((_text(call),)),)]
        raise _Undecided  # a load (scatter, index table), an unknown helper

    def _varies(self, func: Function, name: cst.Name, depth: int) -> bool:
        try:
            return any(t.var is not None for s in self._name(func, name.value, depth) for t in s)
        except _Undecided:
            return True

    def _name(self, func: Function, name: str, depth: int) -> list[Sum]:
        defs = self.defs_of(func, name)
        if not defs:
            return [(Term((name,)),)]  # a global: the same for every program
        starts: list[Sum] = []
        steps: list[Sum] = [()]
        for d in defs:
            if d.kind == "param":
                starts += self._param(func, name, depth)
            elif d.kind == "assign":
                starts += self.expand(func, own_value(d), depth - 1)
            elif d.kind == "augassign" and d.operator == "+=":
                step = self.expand(func, d.value, depth - 1)
                if d.loops:  # advanced each iteration: the iteration count times the step
                    if len(step) != 1 or any(t.var is not None for t in step[0]):
                        raise _Undecided
                    step = [tuple(Term(t.stride, ("loop", id(d.node))) for t in step[0])]
                steps = [a + b for a, b in product(steps, step)]
            elif d.kind == "for" and isinstance(d.value, cst.Call) and self.model.call_name(d.value) in LOOPS:
                starts.append((Term((), ("loop", id(d.node))),))
            else:
                raise _Undecided
        return [a + b for a, b in product(starts, steps)]

    def _param(self, func: Function, name: str, depth: int) -> list[Sum]:
        """A kernel parameter is invariant; a helper's is what its callers pass."""
        jit = self.model.jit.get(func.name)
        if jit is None or jit.function is not func or not jit.called_from:
            return [(Term((name,)),)]
        sums: list[Sum] = []
        for caller, call in jit.called_from:
            arg = bind_call_args(call, jit.params).get(name)
            if arg is None:
                raise _Undecided
            sums += self.expand(caller, arg, depth - 1)
        return sums


def _times(a: Term, b: Term) -> Term:
    if a.var is not None and b.var is not None:
        raise _Undecided  # a product of two varying values
    return Term(tuple(sorted(a.stride + b.stride)), a.var or b.var)


def _text(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).replace(" ", "")


# -- deciding ----------------------------------------------------------------------

def _bounds(reader: _Reader, func: Function, mask: cst.BaseExpression) -> list[tuple[frozenset, tuple[str, ...]]]:
    """(varying terms, bound) for each `index < bound` the mask ANDs in."""
    found = []
    stack = [mask]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Subscript):
            stack.append(node.value)
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.BitAnd, cst.Multiply)):
            stack += [node.left, node.right]
        elif isinstance(node, cst.Name):
            defs = reader.defs_of(func, node.value)
            if len(defs) == 1 and defs[0].kind == "assign":
                stack.append(own_value(defs[0]))
        elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and \
                isinstance(node.comparisons[0].operator, cst.LessThan):
            try:
                sums = reader.expand(func, node.left)
            except _Undecided:
                continue
            if len(sums) == 1:
                bound = (_text(node.comparisons[0].comparator),)
                found.append((frozenset(t for t in sums[0] if t.var is not None), bound))
    return found


def _injective(terms: Sum, axes: set[int], bounds) -> bool:
    dims: dict[tuple[str, ...], list[Term]] = {}
    for t in terms:
        if t.var is not None:
            dims.setdefault(t.stride, []).append(t)
    # `pid * E + tl.arange(0, E)` (or a loop's `k * E + ...`): a tile of the lanes' dimension.
    tiled: dict[int, Term] = {}  # id of the tiling term -> the lanes it tiles
    for stride in list(dims):
        for t in [m for m in dims[stride] if m.var[0] in ("pid", "loop")]:
            for i, factor in enumerate(stride):
                inner, lanes = stride[:i] + stride[i + 1:], Term(stride[:i] + stride[i + 1:], ("lane", factor))
                if lanes in dims.get(inner, ()) and lanes not in tiled.values():
                    dims[stride].remove(t)
                    dims[inner].append(t)
                    tiled[id(t)] = lanes
                    break
        if not dims[stride]:
            del dims[stride]
    covered: set[tuple] = set()
    for members in dims.values():
        parts = [t for t in members if t.var[0] == "pid"]
        if not parts:
            continue  # lanes and loop iterations: the same for every program
        part = parts[0]
        own_lanes = [tiled[id(part)]] if id(part) in tiled else []
        if len(parts) > 1 or [t for t in members if t is not part] != own_lanes:
            return False  # two parts in one dimension, or lanes or a loop that are not the part's own tile
        covered.add(part.var[1:])
    for stride, members in dims.items():  # a finer dimension stays below its ratio to the next coarser one
        index = frozenset(_within(t, stride) for t in members)  # `(i * BT + lanes)` of `(i * BT + lanes) * HQ`
        for coarser in _next_coarser(stride, dims):
            ratio = _ratio(stride, coarser)
            part = members[0].var if len(members) == 1 and members[0].var[0] == "pid" else None
            modulo = part is not None and part[2] != "all" and part[2][0] == "mod" and _at_most(part[2][1], ratio)
            if not modulo and not any(terms == index and _at_most(bound, ratio) for terms, bound in bounds):
                return False
    for axis in axes:  # every axis with several programs enters whole, or as `// D` and `% D`
        divisors = {part[1] for a, part in covered if a == axis and part != "all" and part[0] == "div"}
        if (axis, "all") not in covered and not any((axis, ("mod", d)) in covered for d in divisors):
            return False
    return True


def _next_coarser(stride: tuple[str, ...], dims) -> list[tuple[str, ...]]:
    """The dimensions just above `stride`: coarser, with no other dimension between them.
    Each finer index kept below its ratio to these keeps the whole address injective, as
    the digits of a mixed-radix number do."""
    coarser = [c for c in dims if _ratio(stride, c) is not None]
    return [c for c in coarser if not any(_ratio(m, c) is not None for m in coarser if m != c)]


def _within(term: Term, stride: tuple[str, ...]) -> Term:
    """`term` with its dimension's stride factors taken out: its part of the index."""
    rest = list(term.stride)
    for factor in stride:
        rest.remove(factor)
    return Term(tuple(rest), term.var)


def _at_most(bound: tuple[str, ...], ratio: tuple[str, ...]) -> bool:
    """Is a product of `bound`'s factors at most the product of `ratio`'s?  Yes when they
    are among them: every factor is a size, a stride or a literal, at least 1."""
    return bound == ratio or _ratio(bound, ratio) is not None


def _ratio(finer: tuple[str, ...], coarser: tuple[str, ...]) -> tuple[str, ...] | None:
    """The factors of `coarser` not in `finer`, when `finer`'s are a proper part of them."""
    if finer == coarser or len(finer) >= len(coarser):
        return None
    rest = list(coarser)
    for factor in finer:
        if factor not in rest:
            return None
        rest.remove(factor)
    return tuple(rest)
