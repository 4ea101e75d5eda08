"""Facts about the host (Python) side of a kernel file: which functions are the
candidate's, who calls whom, and which tensor methods may return an alias."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.triton.dataflow import _all_params
from kanalyze.analyzer.triton.entities import Function, REFERENCE_CLASS, REFERENCE_FUNCTION
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.unreached import unreached_functions

# Methods that can return the very tensor they are called on (`.contiguous()`
# on a contiguous tensor, `.to(dtype)` to its own dtype, every view).
ALIASING = {
    "contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
    "unsqueeze", "t", "transpose", "permute", "movedim", "swapaxes", "expand", "expand_as", "narrow",
    "select", "as_strided", "diagonal", "detach", "to", "cuda", "float", "type_as",
}
ALIASING_ATTRS = {"T", "mT", "data"}
ALIASING_TORCH = {f"torch.{f}" for f in ("reshape", "flatten", "squeeze", "unsqueeze", "transpose",
                                          "permute", "narrow", "select", "as_strided", "movedim")}

def candidate_functions(model: TritonModule) -> list[Function]:
    """The forward path, plus the host functions that call into it (a public
    `def op(x)` over a launching helper), without the reference written next
    to the candidate (`class Model`, `ref_*` / `torch_*`): what the reference
    does is the contract, not a violation of it.  Nor the functions of a candidate's
    file that nothing runs (`ModelNew.backward`, unreached.py)."""
    unreached = unreached_functions(model)
    found = [f for f in model.forward_path if id(f.node) not in unreached]
    ids = {id(f) for f in found}
    for callee in found:  # grows while iterating: callers of callers
        for caller, _ in host_calls(model, callee):
            if caller.name != "__init__" and id(caller) not in ids and id(caller.node) not in unreached:
                found.append(caller)
                ids.add(id(caller))
    return [f for f in found if not REFERENCE_FUNCTION.match(f.name) and not REFERENCE_CLASS.match(f.class_name or "")]


def host_params(function: Function, with_nodes: bool = False) -> list:
    params = _all_params(function.node.params)
    if function.class_name is not None and params and not any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in function.node.decorators):
        params = params[1:]  # self / cls
    return params if with_nodes else [p.name.value for p in params]


def host_calls(model: TritonModule, function: Function) -> Iterator[tuple[Function, cst.Call]]:
    """Calls of a host function from other host functions in the file: `f(...)`,
    or `self.f(...)` from a method of the same class."""
    for site in model.calls_by_callee.get(function.name, ()):
        caller, func = site.function, site.node.func
        if caller is None or caller.node is function.node:
            continue
        if function.class_name is None and isinstance(func, cst.Name) and func.value == function.name:
            yield caller, site.node
        elif (function.class_name is not None and caller.class_name == function.class_name
              and isinstance(func, cst.Attribute) and func.attr.value == function.name
              and isinstance(func.value, cst.Name) and func.value.value == "self"):
            yield caller, site.node
