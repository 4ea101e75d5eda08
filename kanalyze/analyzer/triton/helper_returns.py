"""What a call of a `@triton.jit` helper returns, for the dtype flow (dtype_flow.py).

    @triton.jit
    def load_pair(k_ptr, v_ptr, offs):
        k = tl.load(k_ptr + offs)
        v = tl.load(v_ptr + offs)
        return k, v

    @triton.jit
    def kernel(K, V, ...):
        bk, bv = load_pair(K, V, offs)      # bv: what `v` is in load_pair, called from here
        x = scale(bk)                       # a helper that returns one value

A call's value is what the helper's `return`s give, each read in the helper (whose
parameters take what its callers pass: dtype_flow.py's `_def_value`).  A helper that
returns a tuple gives nothing to a single name (`UNKNOWN`); unpacked into as many names as
every `return` has elements (`a, b = helper(...)`), each name takes its element.  A
`return` of anything else (a name bound to a tuple, a call) is UNKNOWN for an unpacking.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.dtype_names import UNKNOWN
from kanalyze.analyzer.triton.entities import Function

Evaluate = Callable[[Function, cst.BaseExpression], frozenset]   # a value's dtypes, read in a function


def helper_returns(model, call: cst.Call, evaluate: Evaluate, unpacked: tuple[int, int] | None = None) -> set[str]:
    """The dtypes `call` gives, where it calls a jit helper of this module; `unpacked`: (the
    element's index, the names' count) where the call's value is unpacked."""
    if not (isinstance(call.func, cst.Name) and call.func.value in model.jit):
        return {UNKNOWN}
    helper = model.jit[call.func.value].function
    returns = [n.value for n in walk(helper.node.body) if isinstance(n, cst.Return) and n.value is not None]
    found: set[str] = set()
    for value in returns:
        if unpacked is None:
            found |= {UNKNOWN} if isinstance(value, cst.Tuple) else evaluate(helper, value)
            continue
        index, count = unpacked
        if isinstance(value, cst.Tuple) and len(value.elements) == count \
                and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            found |= evaluate(helper, value.elements[index].value)
        else:
            found.add(UNKNOWN)
    return found or {UNKNOWN}


def unpacked_at(node: cst.CSTNode, name: str) -> tuple[int, int] | None:
    """(index, count) where the assignment `node` unpacks its value into a tuple of plain names,
    `name` among them; None otherwise."""
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return None
    target = node.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = [e.value.value if isinstance(e, cst.Element) and isinstance(e.value, cst.Name) else None
             for e in target.elements]
    return (names.index(name), len(names)) if name in names else None
