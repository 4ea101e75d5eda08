"""Which kernel parameter a pointer expression writes through."""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes
from kanalyze.analyzer.triton.calls import bind_call_args
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
