"""Tail lanes in a sum: the lanes a mask leaves out still add what they hold.

    x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
    row_sum += tl.sum(tl.exp(x - row_max), axis=0)    # each lane past n_cols adds exp(-row_max)

A masked load gives its `other` on the lanes the mask leaves out, and whatever the kernel
computes from them reaches the reduction unless a `tl.where(mask, value, 0.0)` puts the
sum's identity back.  Where the mask bounds a size (`cols < n_cols`), the sum is right
only where the size is a multiple of the block: the kernel works at the benchmark's shape.

`tail_sums(model, jit)` follows each `tl.sum`'s argument back to the masked loads it is made
of, computing what a masked lane holds: the load's `other`, a value the same for every lane
of the program (a scalar load, a reduction's result, a parameter), and what the elementwise
arithmetic between them makes of those (`0.0 - row_max`, `exp(0.0 - row_max)`).  A sum is
reported where that is a constant other than 0 or a program-wide value (nonzero but for
coincidence).  Anything else on the way (a load with another mask or none, a value that
differs between lanes, an operation not modelled) leaves the sum alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.dataflow import names_read, own_value
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import ARANGE, LOAD, TL

SUM = TL + "sum"
_REDUCTIONS = {TL + n for n in ("sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum")}
_UNARY = {TL + "exp": math.exp, TL + "exp2": lambda v: 2.0 ** v, TL + "abs": abs, TL + "sqrt": math.sqrt,
          TL + "math.exp": math.exp, TL + "math.exp2": lambda v: 2.0 ** v, TL + "sigmoid": lambda v: 1 / (1 + math.exp(-v))}
_BINARY = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b}


@dataclass(frozen=True)
class TailSum:
    call: cst.Call          # the tl.sum
    load: cst.Call          # the masked load its argument is made of
    mask: str               # the load's mask, as written
    size: str               # the parameter the mask bounds the lanes by (`n_cols`)
    adds: str               # what each lane the mask leaves out adds, in words


@dataclass(frozen=True)
class _Lane:
    """What a left-out lane holds: a constant, or the same unknown value on every lane of the program."""
    value: float | None     # the constant; None for a program-wide value
    text: str

    @property
    def neutral(self) -> bool:
        return self.value == 0.0


def tail_sums(model: TritonModule, jit: JitFunction) -> list[TailSum]:
    reader = _Reader(model, jit)
    found = []
    for site in model.calls_in(jit, SUM):
        argument = keyword(site.node, "input", 0)
        if argument is None:
            continue
        reader.start()
        lane = reader.lane(argument, site.node, 0)
        size = reader.bounded_size() if lane is not None and not lane.neutral and reader.load is not None else None
        if size is not None:
            found.append(TailSum(site.node, reader.load, node_text(model.module, reader.mask), size, lane.text))
    return found


class _Reader:
    def __init__(self, model: TritonModule, jit: JitFunction) -> None:
        self.model, self.jit = model, jit
        self.flow = model.flow(jit)
        self.reaching = Reaching.of(model, jit)
        self.load: cst.Call | None = None      # the masked load the sum's lanes come from
        self.mask: cst.BaseExpression | None = None
        self._program: dict[int, bool] = {}     # definition id -> program-wide (for every sum of the kernel)
        self._lanes: dict[int, _Lane | None] = {}  # definition id -> its left-out lanes (for one sum)

    def start(self) -> None:
        """Before each sum: no load seen yet."""
        self.load, self.mask, self._lanes = None, None, {}

    def lane(self, expr: cst.CSTNode, at: cst.CSTNode, depth: int) -> _Lane | None:
        """What a lane left out by the load's mask holds at `expr`; None where not known."""
        if depth > 24:
            return None
        text = node_text(self.model.module, expr)
        if isinstance(expr, (cst.Integer, cst.Float)):
            value = _constant(expr)
            return None if value is None else _Lane(value, text)
        if self.program_wide(expr, at, depth):
            return _Lane(None, text)
        if isinstance(expr, cst.Name):
            defs = self.reaching.defs(expr.value, at)
            if len(defs) != 1 or defs[0].kind != "assign" or (value := own_value(defs[0])) is None:
                return None
            key = id(defs[0])        # once per definition: `b = a + a; c = b + b; ...` is not 2**n
            if key not in self._lanes:
                self._lanes[key] = self.lane(value, defs[0].node, depth + 1)
            return self._lanes[key]
        if isinstance(expr, cst.Subscript):
            return self.lane(expr.value, at, depth + 1)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.lane(expr.expression, at, depth + 1)
            return inner and _Lane(None if inner.value is None else -inner.value, f"-({inner.text})")
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _BINARY:
            return self._binary(expr, at, depth)
        if isinstance(expr, cst.Call):
            return self._call(expr, at, depth)
        return None

    def _binary(self, expr: cst.BinaryOperation, at, depth: int) -> _Lane | None:
        left, right = self.lane(expr.left, at, depth + 1), self.lane(expr.right, at, depth + 1)
        if left is None or right is None:
            return None
        symbol = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*"}[type(expr.operator)]
        text = f"{_grouped(left.text)} {symbol} {_grouped(right.text)}"
        if left.value is not None and right.value is not None:
            try:
                return _Lane(_BINARY[type(expr.operator)](left.value, right.value), text)
            except (OverflowError, ValueError):
                return None
        known = left.value if left.value is not None else right.value
        if isinstance(expr.operator, cst.Multiply) and known == 0.0:
            return _Lane(0.0, text)       # 0 times a finite program-wide value
        if known is not None and math.isinf(known):
            return None                   # inf against an unknown: its sign or NaN is not known
        return _Lane(None, text)

    def _call(self, call: cst.Call, at, depth: int) -> _Lane | None:
        name = self.model.call_name(call)
        if name == LOAD:
            return self._masked_load(call)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
            return self.lane(call.func.value, at, depth + 1)
        if name == TL + "where":
            test, value, otherwise = keyword(call, "condition", 0), keyword(call, "x", 1), keyword(call, "y", 2)
            if test is None or value is None or otherwise is None:
                return None
            self.lane(value, at, depth + 1)     # finds the masked load the kept lanes come from
            if self.mask is None or not self._same_mask(test, at):
                return None
            return self.lane(otherwise, at, depth + 1)   # the left-out lanes take the `else` value
        if name in _UNARY and len(call.args) == 1:
            inner = self.lane(call.args[0].value, at, depth + 1)
            if inner is None:
                return None
            text = f"{name.rsplit('.', 1)[-1]}({inner.text})"
            if inner.value is None:
                return _Lane(None, text)
            try:
                return _Lane(float(_UNARY[name](inner.value)), text)
            except (OverflowError, ValueError):
                return None
        return None

    def _masked_load(self, call: cst.Call) -> _Lane | None:
        mask, other = keyword(call, "mask", 1), keyword(call, "other", 2)
        if mask is None or other is None:
            return None
        if self.load is not None and node_text(self.model.module, mask) != node_text(self.model.module, self.mask):
            return None                        # another mask: its lanes are not these
        self.load, self.mask = self.load or call, mask
        value = _constant(other)
        return None if value is None else _Lane(value, node_text(self.model.module, other))

    def _same_mask(self, test, at) -> bool:
        """Is `test` the load's mask (or the mask ANDed with more, which leaves out at least as much)?"""
        mask = node_text(self.model.module, self.mask)
        parts = [test]
        while parts:
            part = parts.pop()
            if node_text(self.model.module, part) == mask:
                return True
            if isinstance(part, cst.BinaryOperation) and isinstance(part.operator, cst.BitAnd):
                parts += [part.left, part.right]
            elif isinstance(part, cst.Name) and len(defs := self.reaching.defs(part.value, at)) == 1 \
                    and (value := own_value(defs[0])) is not None:
                parts.append(value)
        return False

    def bounded_size(self) -> str | None:
        """The kernel parameter the load's mask compares lanes with (`cols < n_cols`: `n_cols`), if any."""
        params = {p.name for p in self.jit.params}
        seen, stack = set(), [self.mask]
        while stack:
            node = stack.pop()
            for comparison in (n for n in walk(node) if isinstance(n, cst.Comparison)):
                for target in comparison.comparisons:
                    if names_read(target.comparator) & params:
                        return node_text(self.model.module, target.comparator)
            for name in names_read(node) - seen:
                seen.add(name)
                stack += [v for d in self.flow.defs_of(name) if (v := own_value(d)) is not None]
        return None

    def program_wide(self, expr: cst.CSTNode, at: cst.CSTNode, depth: int) -> bool:
        """Is `expr` the same on every lane of a program: no `tl.arange` reaches it but through a
        reduction, and no load but of a program-wide address (`tl.load(max_ptr + row)`)?"""
        if depth > 24:
            return False
        if isinstance(expr, (cst.Integer, cst.Float)):
            return True
        if isinstance(expr, cst.Attribute):
            return _dotted_root(expr) in ("tl", "triton") or self.program_wide(expr.value, at, depth + 1)
        if isinstance(expr, cst.Call):
            name = self.model.call_name(expr)
            if name in _REDUCTIONS:
                return True
            if name in (ARANGE, LOAD):
                pointer = keyword(expr, "pointer", 0)
                return name == LOAD and pointer is not None and keyword(expr, "mask", 1) is None \
                    and self.program_wide(pointer, at, depth + 1)
            parts = [a.value for a in expr.args]
            if isinstance(expr.func, cst.Attribute) and _dotted_root(expr.func) not in ("tl", "triton"):
                parts.append(expr.func.value)              # `x.to(tl.float32)`: x
            return all(self.program_wide(part, at, depth + 1) for part in parts)
        if isinstance(expr, cst.Name):
            return self._program_wide_name(expr, at, depth)
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation, cst.Subscript, cst.Comparison,
                             cst.BooleanOperation)):
            return all(self.program_wide(child, at, depth + 1) for child in _operands(expr))
        return False

    def _program_wide_name(self, name: cst.Name, at: cst.CSTNode, depth: int) -> bool:
        if name.value in self.jit.constexpr_names or (self.flow.param(name.value) is not None
                                                       and len(self.flow.defs_of(name.value)) == 1):
            return True
        defs = self.reaching.defs(name.value, at)
        return bool(defs) and all(self._program_wide_def(d, depth) for d in defs)

    def _program_wide_def(self, d, depth: int) -> bool:
        """Once per definition (`b = a + a; c = b + b; ...` is not 2**n); a loop-carried one that
        reads itself is taken as program-wide while its value is checked."""
        if d.kind == "param":
            return True
        if id(d) not in self._program:
            self._program[id(d)] = True
            value = own_value(d)
            self._program[id(d)] = d.kind in ("assign", "augassign") and value is not None \
                and self.program_wide(value, d.node, depth + 1)
        return self._program[id(d)]


def _grouped(text: str) -> str:
    return f"({text})" if " " in text and not text.startswith("(") else text


def _dotted_root(expr: cst.BaseExpression) -> str | None:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _operands(expr: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(expr, cst.BinaryOperation):
        return [expr.left, expr.right]
    if isinstance(expr, cst.UnaryOperation):
        return [expr.expression]
    if isinstance(expr, cst.Subscript):
        return [expr.value]
    if isinstance(expr, cst.Comparison):
        return [expr.left, *(t.comparator for t in expr.comparisons)]
    return [expr.left, expr.right]      # BooleanOperation


def _constant(expr: cst.BaseExpression) -> float | None:
    """`0.0`, `-1`, `float('-inf')`, `-float("inf")` as a number."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        try:
            return float(expr.evaluated_value)
        except (OverflowError, ValueError):     # `10**400` written out: no float holds it
            return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = _constant(expr.expression)
        return None if inner is None else -inner
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "float" \
            and len(expr.args) == 1 and isinstance(expr.args[0].value, cst.SimpleString):
        try:
            return float(expr.args[0].value.evaluated_value)
        except (TypeError, ValueError):
            return None
    return None
