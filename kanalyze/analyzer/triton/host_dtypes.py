"""What dtype does a torch tensor have in host code?

`torch.zeros(..., dtype=torch.int32)` has its `dtype=`, `torch.empty(n)` the
default float32, `torch.empty_like(x)` and `x.view(...)` x's dtype, `self.w` what the
class's methods assign it and `q, k = ctx.saved_tensors` what the autograd Function's
forward saved (host_attributes.py), `.half()` and
`.to(torch.bfloat16)` their target; `.to("cuda")` keeps the dtype.  A parameter
takes what the function's callers in this file pass (host_callers.py) and, checked with
the rest of its project, what the other checked modules' calls of it pass
(cross_callers.py); UNKNOWN when nobody calls it, and under `@custom_fwd(cast_inputs=X)`
X as well (the cast happens only under autocast), narrowed by the function's dtype
checks and the branch tests around a read (`assert q.dtype in (torch.float16,
torch.bfloat16)`, host_checks.py).  Used through `DtypeFlow.host_tensor` (dtype_flow.py),
which also follows a kernel pointer to the tensor a launch passes: a launch in this file,
or, for a kernel this file never launches, the launches in the other checked modules
(`launched_elsewhere`, cross_launches.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kanalyze.analyzer.triton.dtype_names import UNKNOWN
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host_attributes import saved_tensor, self_attribute
from kanalyze.analyzer.triton.host_callers import host_callers
from kanalyze.analyzer.triton.host_checks import NON_FLOATS, branch_dtypes, function_checks

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow


TORCH_DEFAULT_FLOAT = {"torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.empty_strided"}
TORCH_CREATE = TORCH_DEFAULT_FLOAT | {"torch.full", "torch.arange", "torch.tensor", "torch.as_tensor",
                                      "torch.randint", "torch.linspace"}
TORCH_LIKE = {f"torch.{n}_like" for n in ("empty", "zeros", "ones", "full", "rand", "randn", "randint")}
HOST_CASTS = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16",
              "int": "int32", "long": "int64", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}
HOST_SAME = set("contiguous view reshape permute transpose t flatten unflatten unsqueeze squeeze expand expand_as "
                "view_as reshape_as clone detach narrow select cuda movedim as_strided chunk split unbind "
                "zero_ fill_ copy_ requires_grad_ pin_memory".split())
HOST_SAME |= set("normal_ uniform_ random_ bernoulli_ exponential_ cauchy_ log_normal_ geometric_ "
                 "mul_ add_ sub_ div_ clamp_ abs_ neg_".split())  # in place: the tensor keeps its dtype
HOST_NEW = {"new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"}
PARAMETER = {"torch.nn.Parameter", "torch.nn.parameter.Parameter"}


def host_tensor_dtypes(flow: DtypeFlow, func: Function | None, expr: cst.BaseExpression, depth: int) -> set[str]:
    """The dtypes of the torch tensor `expr` in host function `func`, one step: what it
    refers to (a tensor, a `dtype=` argument) is asked of `flow` again, so that its memo
    and cycle guard see every step (`DtypeFlow.host_tensor` is the entry)."""
    model = flow.model
    if isinstance(expr, cst.Name):
        if func is None:
            return {UNKNOWN}
        found: set[str] = set()
        for d in model.flow(func).defs_of(expr.value) or ():
            if d.kind == "param":
                found |= _parameter(flow, func, d.name, depth)
                continue
            value = flow.unpacked(d, d.value) if d.value is not None and d.kind in ("assign", "walrus") else None
            if value is None and d.kind == "assign" and (saved := saved_tensor(flow, func, d, depth)) is not None:
                found |= saved  # `q, k = ctx.saved_tensors` in backward: what forward saved
                continue
            found |= flow.host_tensor(func, value, depth - 1) if value is not None else {UNKNOWN}
        found = found or {UNKNOWN}
        # What the function's own checks and the tests around this read allow (host_checks.py).
        for allowed in (function_checks(model, func, flow.host_caches["checks"]).get(expr.value),
                        branch_dtypes(model, expr)):
            if allowed:
                found = set(allowed) if UNKNOWN in found or not found & allowed else found & allowed
        return found
    if isinstance(expr, cst.Subscript):
        return set(flow.host_tensor(func, expr.value, depth - 1))
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in ("T", "mT", "data", "H", "mH"):
            return set(flow.host_tensor(func, expr.value, depth - 1))
        return self_attribute(flow, func, expr, depth) or {UNKNOWN}
    if isinstance(expr, cst.IfExp):
        return set(flow.host_tensor(func, expr.body, depth - 1) | flow.host_tensor(func, expr.orelse, depth - 1))
    if not isinstance(expr, cst.Call):
        return {UNKNOWN}
    name = model.call_name(expr) or ""
    if name in PARAMETER and expr.args:  # `nn.Parameter(torch.randn(..., dtype=torch.float16))`
        return set(flow.host_tensor(func, expr.args[0].value, depth - 1))
    dtype_arg = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "dtype"), None)
    if name in TORCH_CREATE or name in TORCH_LIKE:
        if dtype_arg is not None:
            return set(flow.named(func, dtype_arg, depth - 1))
        if name in TORCH_LIKE and expr.args:
            return set(flow.host_tensor(func, expr.args[0].value, depth - 1))
        return {"float32"} if name in TORCH_DEFAULT_FLOAT else {UNKNOWN}
    func_node = expr.func
    if not isinstance(func_node, cst.Attribute):
        return {UNKNOWN}
    method, receiver = func_node.attr.value, func_node.value
    if method in HOST_CASTS and not expr.args:
        return {HOST_CASTS[method]}
    if method in ("to", "type"):
        candidates = [dtype_arg] if dtype_arg is not None else \
            [a.value for a in expr.args if a.keyword is None]
        for candidate in candidates:
            if isinstance(candidate, cst.SimpleString) or (
                    isinstance(candidate, cst.Attribute) and candidate.attr.value == "device") or (
                    isinstance(candidate, cst.Name) and "device" in candidate.value.lower()):
                continue  # `.to("cuda")`, `.to(x.device)`: the dtype stays
            return set(flow.named(func, candidate, depth - 1))
        return set(flow.host_tensor(func, receiver, depth - 1))
    if method in HOST_NEW:
        return set(flow.named(func, dtype_arg, depth - 1)) if dtype_arg is not None \
            else set(flow.host_tensor(func, receiver, depth - 1))
    if method in HOST_SAME:
        return set(flow.host_tensor(func, receiver, depth - 1))
    return {UNKNOWN}


def _parameter(flow: DtypeFlow, func: Function, name: str, depth: int) -> set[str]:
    """A host function's parameter: what its callers in this file pass (host_callers.py);
    UNKNOWN when it has none, or one passes what the file does not show.  Under
    `@custom_fwd(cast_inputs=torch.float16)` a floating tensor is also that dtype: torch
    casts it when the forward runs under autocast, and passes it as it is otherwise."""
    found = _passed(flow, func, name, depth)
    cast = autocast_inputs(flow, func, depth)
    if cast and found - NON_FLOATS:
        found |= cast  # the autocast path; the caller's own dtype stays for the other
    return found


def autocast_inputs(flow: DtypeFlow, func: Function, depth: int) -> frozenset[str]:
    """The dtypes `@torch.amp.custom_fwd(device_type=..., cast_inputs=X)` (or
    `torch.cuda.amp.custom_fwd(cast_inputs=X)`) on `func` casts floating inputs to under
    autocast; empty without one."""
    for decorator in func.node.decorators:
        call = decorator.decorator
        if not isinstance(call, cst.Call) or (flow.model.call_name(call) or "").rpartition(".")[2] != "custom_fwd":
            continue
        value = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "cast_inputs"),
                     None)
        if value is not None:
            named = flow.named(None, value, depth - 1)
            return frozenset() if UNKNOWN in named else named
    return frozenset()


def _passed_elsewhere(model, func: Function, name: str) -> frozenset[str] | None:
    """What the other checked modules' calls of top-level `func` pass as `name` (the project
    index, cross_callers.py); None when the file is checked alone or none calls it."""
    # project_index.Linked, read without importing project_index: it imports cross_callers,
    # which imports dtype_flow and so this module
    linked = model.settings.get("linked")
    if not getattr(linked, "passed", None) or func.class_name is not None or model.function_of(func.node):
        return None
    return linked.passed_to(func.name, name)


def launched_elsewhere(model, kernel: str, param: str) -> frozenset[str]:
    """What the other checked modules' launches of `kernel` (a kernel its file never launches)
    pass as its parameter `param` (the project index, cross_launches.py); UNKNOWN when the file
    is checked alone or none of them shows it."""
    linked = model.settings.get("linked")  # project_index.Linked, as in `_passed_elsewhere`
    found = linked.passed_to(kernel, param) if getattr(linked, "passed", None) else None
    return found or frozenset({UNKNOWN})


def _passed(flow: DtypeFlow, func: Function, name: str, depth: int) -> set[str]:
    callers = host_callers(flow.model, func, flow.host_caches["callers"])
    elsewhere = _passed_elsewhere(flow.model, func, name)
    if not callers and elsewhere is None:
        return {UNKNOWN}
    param = next((p for p in (*func.node.params.posonly_params, *func.node.params.params,
                              *func.node.params.kwonly_params) if p.name.value == name), None)
    found: set[str] = set(elsewhere or ())
    for caller, bound, call in callers:
        arg = bound.get(name)
        if arg is not None:
            found |= flow.host_tensor(caller, arg, depth - 1)
        elif param is None or not (isinstance(param.default, cst.Name) and param.default.value == "None") \
                or any(a.star for a in call.args):
            found.add(UNKNOWN)  # a default that is not None, or what an unpacked `*args` holds
    return found or {UNKNOWN}
