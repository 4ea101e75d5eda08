"""What a Triton module says about tensor shapes: constant sizes, values tied to an
input's shape, and which kernel parameters are pointers or runtime sizes.

Shared by the rules that ask whether a kernel follows its input's shape (CMP003)
and whether its accesses stay in bounds (MEM003).  Everything here reads the
kernel model; nothing is imported or run.
"""

from __future__ import annotations

import itertools
import operator
import re

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
LOAD, STORE, ARANGE, PROGRAM_ID = TL + "load", TL + "store", TL + "arange", TL + "program_id"
# Attributes of a tensor that read its shape.
SHAPE_ATTRS = {"shape", "size", "numel", "stride"}
_ARITH = {cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul,
          cst.FloorDivide: operator.floordiv}


# --- values --------------------------------------------------------------------

def assigned_value(d: Def, name: str) -> cst.BaseExpression | None:
    """The value the definition `d` assigns to `name` (also for `M, N = 4096, 1024`)."""
    if d.kind != "assign" or not isinstance(d.node, cst.Assign):
        return d.value if d.kind == "assign" else None
    for t in d.node.targets:
        if isinstance(t.target, cst.Name):
            return d.value
        if isinstance(t.target, (cst.Tuple, cst.List)) and isinstance(d.value, (cst.Tuple, cst.List)) \
                and len(t.target.elements) == len(d.value.elements):
            for te, ve in zip(t.target.elements, d.value.elements):
                if isinstance(te.value, cst.Name) and te.value.value == name:
                    return ve.value
    return None


def single_value(flow: Dataflow, name: str) -> cst.BaseExpression | None:
    """The value of `name` where the function assigns it exactly once, else None."""
    defs = flow.defs_of(name)
    return assigned_value(defs[0], name) if len(defs) == 1 else None


def constant_int(flow: Dataflow, expr, depth: int = 4) -> int | None:
    """The integer an expression always has, from literals in this function (never module globals)."""
    literal = int_literal(expr)
    if literal is not None or depth <= 0:
        return literal
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _ARITH:
        a, b = constant_int(flow, expr.left, depth - 1), constant_int(flow, expr.right, depth - 1)
        return None if a is None or b is None or b == 0 else _ARITH[type(expr.operator)](a, b)
    if isinstance(expr, cst.Name) and flow.defs_of(expr.value):
        # Once per name and depth: a name assigned n times from itself (`y = y + 1`, a
        # thousand times over) would otherwise cost n to the power of `depth`.
        key = ("constant_int", expr.value, depth)
        if key not in flow.memo:
            flow.memo[key] = _one_constant(flow, expr.value, depth - 1)
        return flow.memo[key]
    return None


def _one_constant(flow: Dataflow, name: str, depth: int) -> int | None:
    """The integer every definition of `name` assigns, if they all assign the same one."""
    found = None
    for d in flow.defs_of(name):
        value = assigned_value(d, name)
        constant = constant_int(flow, value, depth) if value is not None else None
        if constant is None or (found is not None and constant != found):
            return None
        found = constant
    return found


def is_none(expr) -> bool:
    """Is `expr` the literal `None` (as in `mask=None`)?"""
    return isinstance(expr, cst.Name) and expr.value == "None"


def is_modulo(expr) -> bool:
    """Is `expr` an `a % b`?"""
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)


# --- shapes --------------------------------------------------------------------

def reaches(model: TritonModule, jit: JitFunction, expr, qualname: str) -> bool:
    """Does a call to `qualname` feed `expr` (through locals and jit helper arguments)?
    Past `expr` itself, what feeds it depends only on the names it reads: answered once per
    set of names (a thousand `y > 0` of one kernel ask once, not a thousand times)."""
    if qualname in model.called_within(expr):
        return True
    names = frozenset(names_read(expr))
    if not names:
        return False
    memo = model.flow(jit).memo
    key = ("reaches", names, qualname)
    if key not in memo:
        memo[key] = any(qualname in model.called_within(e) for _, e in itertools.islice(model.sources(jit, expr), 1, None))
    return memo[key]


def shape_kind(model: TritonModule, fn: Function, expr) -> str | None:
    """How a host value relates to the input's shape: "direct" (`x.shape[1]`, `N` from
    `M, N = x.shape`), "arith" (`K // 2`), "computed" (`triton.next_power_of_2(n)`), or None."""
    nodes = [n for _, e in model.sources(fn, expr) for n in walk(e)]
    if not any(isinstance(n, cst.Attribute) and n.attr.value in SHAPE_ATTRS for n in nodes):
        return None
    if any(isinstance(n, cst.Call) and not (isinstance(n.func, cst.Attribute) and n.func.attr.value in SHAPE_ATTRS)
           for n in nodes):
        return "computed"
    return "arith" if any(isinstance(n, cst.BinaryOperation) for n in nodes) else "direct"


def shape_kinds(model: TritonModule, jit: JitFunction, name) -> set[str | None]:
    """The `shape_kind` of what each launch binds to the constexpr `name` (None where unbound)."""
    if not isinstance(name, cst.Name) or name.value not in jit.constexpr_names:
        return set()
    kinds = set()
    for launch in jit.launches:
        value = launch.args.get(name.value)
        kinds.add(shape_kind(model, launch.wrapper, value) if value is not None and launch.wrapper else None)
    return kinds | ({None} if any(name.value in c for c in jit.autotune_configs) else set())


# --- kernel parameters ---------------------------------------------------------

def pointer_params(model: TritonModule, jit: JitFunction) -> set[str]:
    """Parameters used as the base address of a memory access, or named like one."""
    names = {p.name for p in jit.params if re.search(r"(?i)ptr|pointer", p.name)}
    flow, params = model.flow(jit), {p.name for p in jit.params}
    for site in model.calls_in(jit):
        leaf = (site.qualname or "").removeprefix(TL)
        if leaf not in ("load", "store", "make_block_ptr") and not leaf.startswith("atomic_"):
            continue
        first = keyword(site.node, "pointer", 0)
        stack, budget = [first if first is not None else keyword(site.node, "base", 0)], 8
        while stack and budget:
            e, budget = stack.pop(), budget - 1
            while isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.Add):
                e = e.left  # `x_ptr + row * stride + cols`: the base is leftmost
            if isinstance(e, cst.Name):
                names |= {e.value} & params
                stack += [v for d in flow.defs_of(e.value) if (v := assigned_value(d, e.value)) is not None]
    return names


def runtime_params(model: TritonModule, jit: JitFunction, pointers: set[str]) -> set[str]:
    """Scalar parameters holding a runtime size: non-constexpr non-pointers, and constexprs bound
    at a launch to the input's shape (`N=x.shape[1]`, not the tile `triton.next_power_of_2(n)`)."""
    return {p.name for p in jit.params if (not p.is_constexpr and p.name not in pointers and "seed" not in p.name)
            or (p.is_constexpr and shape_kinds(model, jit, cst.Name(p.name)) & {"direct", "arith"})}

