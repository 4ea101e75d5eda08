"""Which kernel parameter a pointer expression writes through."""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, walk
from kanalyze.analyzer.triton.calls import bind_call_args, keyword
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
# Calls that write memory through their first argument.
WRITES = {TL + "store"} | {TL + f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}


def pointer_roots(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression | None,
                  depth: int = 4) -> set[tuple[str, str]]:
    """(jit function, parameter) pairs whose pointer `expr` is derived from,
    following helper parameters back to their callers' arguments.  A value
    read with `tl.load` is an offset, not a base: `out_ptr + tl.load(idx_ptr)`
    writes through `out_ptr` only."""
    roots: set[tuple[str, str]] = set()
    if expr is None:
        return roots
    flow = model.flow(jit.function)
    seen: set[int] = set()
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and model.call_name(node) == TL + "load":
            continue
        if isinstance(node, (cst.Attribute, cst.Arg)):
            stack.append(node.value)
            continue
        if not isinstance(node, cst.Name):
            stack.extend(child_nodes(node))
            continue
        for d in flow.defs_of(node.value):
            if id(d) in seen:
                continue
            seen.add(id(d))
            if d.kind != "param":
                if d.value is not None:
                    stack.append(d.value)
                continue
            roots.add((jit.name, d.name))
            for caller, call in jit.called_from if depth > 0 else ():
                arg = bind_call_args(call, jit.params).get(d.name)
                caller_jit = model.jit.get(caller.name)
                if arg is not None and caller_jit is not None:
                    roots |= pointer_roots(model, caller_jit, arg, depth - 1)
    return roots



# tl functions whose result is the pointer (block) handed to them: (keyword, position).
_INT_OPS = (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power, cst.LeftShift,
            cst.RightShift, cst.BitAnd, cst.BitOr, cst.BitXor)
_KEEPS_POINTER = {
    "multiple_of": ("input", 0), "max_contiguous": ("input", 0), "max_constancy": ("input", 0),
    "broadcast_to": ("input", 0), "reshape": ("input", 0), "view": ("input", 0),
    "expand_dims": ("input", 0), "permute": ("input", 0), "trans": ("input", 0), "cast": ("input", 0),
    "advance": ("base", 0), "make_block_ptr": ("base", 0), "make_tensor_descriptor": ("base", 0),
}


def pointer_bases(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression | None,
                  depth: int = 4, cache: dict | None = None) -> set[tuple[str, str]]:
    """(jit function, parameter) pairs that the pointer `expr` is based on.

    Like `pointer_roots`, but only the pointer operand of the arithmetic is
    followed: in `Y + row * stride` the base is `Y` (a product, a quotient, a
    load, `tl.arange`, a program id or a comparison is an offset or a value,
    never a base; `p - off` is based on `p`), and each name is resolved to the
    assignments that reach its read in order (`p = a + o` then, in the same
    block, `p = b + o; tl.store(p, ...)` stores through `b`; `Y += off` keeps
    the base `Y` had before)."""
    from kanalyze.analyzer.triton.reaching import Reaching  # reaching imports the model

    roots: set[tuple[str, str]] = set()
    if expr is None:
        return roots
    cache = {} if cache is None else cache  # jit function node → its Reaching, for repeated questions
    if id(jit.node) not in cache:
        cache[id(jit.node)] = Reaching(model, jit)
    reaching = cache[id(jit.node)]
    seen: set[int] = set()
    stack: list = [expr]  # expressions to read, and definitions (Def) to follow

    while stack:
        node = stack.pop()
        if isinstance(node, Def):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.kind == "param":
                if node.name in _integer_params(jit, cache):
                    continue
                roots.add((jit.name, node.name))
                for caller, call in jit.called_from if depth > 0 else ():
                    arg = bind_call_args(call, jit.params).get(node.name)
                    caller_jit = model.jit.get(caller.name)
                    if arg is not None and caller_jit is not None:
                        roots |= pointer_bases(model, caller_jit, arg, depth - 1, cache)
            elif node.kind == "augassign":
                if node.operator in ("+=", "-=") and isinstance(node.node.target, cst.Name):
                    stack.extend(reaching.defs(node.name, node.node.target))  # the base before
                    if node.operator == "+=" and node.value is not None:
                        stack.append(node.value)
            elif node.kind in ("assign", "walrus", "with") and node.value is not None:
                stack.append(node.value)
        elif isinstance(node, cst.Name):
            stack.extend(reaching.defs(node.value, node))
        elif isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Add):
                stack += [node.left, node.right]
            elif isinstance(node.operator, cst.Subtract):
                stack.append(node.left)  # ptr - int; int - ptr is no pointer
        elif isinstance(node, (cst.UnaryOperation, cst.Comparison, cst.BooleanOperation,
                               cst.BaseNumber, cst.BaseString, cst.Lambda)):
            continue
        elif isinstance(node, cst.IfExp):
            stack += [node.body, node.orelse]
        elif isinstance(node, (cst.Subscript, cst.Attribute, cst.Arg)):
            stack.append(node.value)
        elif isinstance(node, cst.Call):
            name = model.call_name(node) or ""
            if name.startswith(TL):
                short = name[len(TL):]
                if short == "where":
                    stack += [a.value for a in node.args[1:3]]
                elif short in _KEEPS_POINTER:
                    base = keyword(node, *_KEEPS_POINTER[short])
                    if base is not None:
                        stack.append(base)
            elif isinstance(node.func, cst.Attribute) and _local(node.func.value):
                stack.append(node.func.value)  # `ptrs.to(...)`, `ptrs.reshape(...)`
            else:
                stack.extend(a.value for a in node.args)  # an unknown helper: any argument may be the base
        else:
            stack.extend(child_nodes(node))
    return roots


_ORDER = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _integer_params(jit: JitFunction, cache: dict) -> frozenset[str]:
    """Parameters the function uses as numbers: an operand of a product, a
    quotient, a shift or a bit mask, or of an ordering comparison (`offs < N`).
    A pointer is never one, so `p + N` is based on `p` alone."""
    key = ("integer params", id(jit.node))
    if key not in cache:
        params = {p.name for p in jit.params}
        found = set()
        for node in walk(jit.node):
            operands: list = []
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _INT_OPS):
                operands = [node.left, node.right]
            elif isinstance(node, cst.Comparison) and any(isinstance(c.operator, _ORDER) for c in node.comparisons):
                operands = [node.left] + [c.comparator for c in node.comparisons]
            found |= {o.value for o in operands if isinstance(o, cst.Name) and o.value in params}
        cache[key] = frozenset(found)
    return cache[key]


def _local(expr: cst.BaseExpression) -> bool:
    """`p`, `p[...]`, `p.x`: a value of the function, not a module."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return isinstance(expr, cst.Name)
