"""What one `tl.dot` says about the data of another.

Triton compiles `tl.dot(a, b)` only when both operands have one dtype (fp8 pairs
excepted), and checks it when the kernel is compiled, whether or not the dot runs at
run time.  So in

    qk = tl.dot(b_q, tl.trans(b_k))        b_q is fp16 (the wrapper asserts q's dtype)
    rk = tl.dot(b_r, tl.trans(b_k))        b_k, loaded from k, is fp16 too: so is b_r

the first dot makes the elements of `k` fp16 for every launch that compiles the kernel,
and the second dot, on data loaded from `k`, is on fp16 operands.  `learned_pointers`
gives (kernel, pointer parameter) → dtypes, learned from dots whose other operand's dtype
is known, repeated until nothing new is learned; `operand_sources` the pointer
parameters an operand is loaded from (through the assignments that reach it, `tl.trans`,
reshapes and views;
None when some path leads to anything else: a cast, arithmetic, a call).  A dot under
an `if` is left out: a branch on a constexpr is not compiled at all when not taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.dtype_names import UNKNOWN
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow

DOT = "triton.language.dot"
LOAD = "triton.language.load"
RESHAPES = {"trans", "permute", "reshape", "view", "broadcast_to", "expand_dims"}
Sources = frozenset[tuple[str, str]]


def operand_sources(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression | None,
                    depth: int = 8, cache: dict | None = None) -> Sources | None:
    """The (kernel, pointer parameter) pairs `expr`'s data is loaded from; None unless every
    path leads to a `tl.load` (`cache`: the caller's, one per model)."""
    if expr is None or depth < 0:
        return None
    cache = {} if cache is None else cache
    key = ("sources", id(jit.node), id(expr))
    if key not in cache:
        cache[key] = _sources(model, jit, expr, depth, cache)
    return cache[key]


def _sources(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression, depth: int,
             cache: dict) -> Sources | None:
    from kanalyze.analyzer.triton.pointers import pointer_bases  # pointers imports the model
    from kanalyze.analyzer.triton.reaching import Reaching  # reaching imports the model

    if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
        return operand_sources(model, jit, expr.value, depth - 1, cache)
    if isinstance(expr, cst.Name):
        # the assignments that reach this read (another branch's load from another pointer is not pinned)
        pointers = cache.setdefault("pointers", {})  # pointer_bases' cache: jit node → its Reaching
        if id(jit.node) not in pointers:
            pointers[id(jit.node)] = Reaching(model, jit)
        defs = pointers[id(jit.node)].defs(expr.value, expr)
        if not defs or any(d.kind != "assign" or d.value is None for d in defs):
            return None
        found: set[tuple[str, str]] = set()
        for d in defs:
            sources = operand_sources(model, jit, _single_value(d), depth - 1, cache)
            if sources is None:
                return None
            found |= sources
        return frozenset(found)
    if not isinstance(expr, cst.Call):
        return None
    name = model.call_name(expr) or ""
    if name == LOAD:
        bases = pointer_bases(model, jit, keyword(expr, "pointer", 0), cache=cache.setdefault("pointers", {}))
        return frozenset(bases) if bases else None
    leaf = name.rpartition(".")[2]
    if name.startswith("triton.language.") and leaf in RESHAPES and expr.args:
        return operand_sources(model, jit, expr.args[0].value, depth - 1, cache)
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in RESHAPES and not name.startswith("triton."):
        return operand_sources(model, jit, expr.func.value, depth - 1, cache)  # `b.trans()`, `b.reshape(...)`
    return None


def learned_pointers(model: TritonModule, flow: DtypeFlow, jit: JitFunction,
                     cache: dict) -> dict[tuple[str, str], frozenset[str]]:
    """(kernel, pointer parameter) → the dtypes the dots of `jit` (outside any `if`) make
    its elements, from each dot's other operand (kept in `cache`, the caller's)."""
    key = ("learned", id(jit.node))
    if key in cache:
        return cache[key]
    cache[key] = learned = {}
    dots = []
    for site in model.calls_in(jit, DOT):
        if _under_if(model, site.node, jit.node):
            continue
        operands = [keyword(site.node, n, i) for i, n in enumerate(("input", "other"))]
        dots.append([(flow.value(jit.function, o), operand_sources(model, jit, o, cache=cache)) for o in operands])
    changed = True
    while changed:
        changed = False
        for pair in dots:
            types = [_with_learned(t, s, learned) for t, s in pair]
            for (own, sources), other in ((pair[0], types[1]), (pair[1], types[0])):
                if sources is None or UNKNOWN in other or not other or any("float8" in t for t in other):
                    continue
                for source in sources:
                    narrowed = learned[source] & other if source in learned else other
                    if narrowed and narrowed != learned.get(source):
                        learned[source] = narrowed
                        changed = True
    return learned


def with_partners(model: TritonModule, flow: DtypeFlow, jit: JitFunction, expr: cst.BaseExpression | None,
                  types: frozenset[str], cache: dict) -> frozenset[str]:
    """`types` (an operand's dtypes as DtypeFlow reads them), or, where they are unknown and
    the operand is loaded from pointers the kernel's other dots pin, those dtypes."""
    if UNKNOWN not in types:
        return types
    return _with_learned(types, operand_sources(model, jit, expr, cache=cache),
                         learned_pointers(model, flow, jit, cache))


def _with_learned(types: frozenset[str], sources: Sources | None,
                  learned: dict[tuple[str, str], frozenset[str]]) -> frozenset[str]:
    if UNKNOWN not in types or not sources or not all(s in learned for s in sources):
        return types
    return frozenset().union(*(learned[s] for s in sources))


def _single_value(d) -> cst.BaseExpression | None:
    """The value a plain `name = value` assigns; None for tuple unpacking."""
    node = d.node
    if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
        return node.value
    return None


def _under_if(model: TritonModule, node: cst.CSTNode, top: cst.CSTNode) -> bool:
    for ancestor in model.ancestors(node):
        if ancestor is top:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            return True
    return False
