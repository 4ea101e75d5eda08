"""Which tensors a host function writes by contract, and which it reads.

Answers "is `out` a destination of `add(x, y, out=None)`?": a parameter the
function's contract says it writes (an out-parameter by name or by use, an
optional buffer allocated when absent, the first argument of a trailing-underscore
in-place API such as `relu_(x)`), "does this statement run only under an
`if inplace:` flag?", and "does the function (or a kernel it launches) ever
read the values of this tensor, or only its metadata?".  A rule about writes
into inputs asks these to tell the caller's inputs from the caller's destinations.

Functions that follow pointers take `cache`, the dictionary `pointer_bases`
takes; the (kernel, parameter) pairs loads read through are kept there too.
"""

from __future__ import annotations

import re

import libcst as cst

from kanalyze.analyzer.cstwalk import walk_scope
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host import ALIASING, host_params
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.pointers import pointer_bases
from kanalyze.analyzer.triton.shapes import is_none

TL = "triton.language."
# In-place by name but harmless to the values: autograd flags, memory pinning.
METADATA_ONLY = {"requires_grad_", "retain_grad_", "share_memory_", "record_stream_"}
# `def add(x, y, out)`: a caller-provided destination is meant to be written.
OUTPUT_NAME = re.compile(r"^(out|output|result|res|dst|dest|o)$|^out_|_out$|_output$")
# Reading these does not read the tensor's values.
METADATA = {"shape", "numel", "stride", "size", "dtype", "device", "dim", "ndim", "element_size", "is_contiguous",
            "data_ptr", "is_cuda", "nelement", "get_device", "layout", "requires_grad", "storage_offset"}
# Calls that return a fresh tensor: a parameter assigned one is a buffer the function allocates when absent.
ALLOCATING = {f"torch.{f}" for f in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                                      "full_like", "empty_strided", "rand", "randn", "rand_like", "randn_like",
                                      "tensor", "arange")}
ALLOCATING_METHODS = {"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided", "clone"}
_LOADED = "loaded parameters"  # the key of `loaded_params`' answer in `cache`


def inplace_name(name: str) -> bool:
    """`relu_`, `add_`: named in place, as torch names them (not `_private`, not metadata-only)."""
    return name.endswith("_") and not name.startswith("_") and name not in METADATA_ONLY


def is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def destination(model: TritonModule, function: Function, param: str, cache: dict | None = None) -> bool:
    """A parameter the function's contract says it writes: the tensor of
    an in-place API (`def relu_(x)`, as in torch: the first argument), or a
    buffer whose values the function never reads and that is optional
    (`buf=None`) or allocated when absent (`if buf is None: buf =
    torch.empty(...)`), and, outside
    `forward`, one that it returns, passes as `out=` or to a kernel's
    output pointer, or writes from a function that returns nothing."""
    params = host_params(function)
    if inplace_name(function.name) and params and params[0] == param:
        return True
    if not write_only(model, function, param, cache=cache):
        return False
    if allocated(model, function, param) or any(
            p.name.value == param and optional_param(model, p) for p in host_params(function, with_nodes=True)):
        return True  # an optional buffer: `out=None`, allocated or skipped when absent
    if function.name in ("forward", "__call__"):
        return False
    returns = [n for n in walk_scope(function.node) if isinstance(n, cst.Return) and n.value is not None]
    return (not returns or any(refers_to(r.value, param) for r in returns)
            or passed_as_output(model, function, param))


def optional_param(model: TritonModule, param: cst.Param) -> bool:
    """`buf=None`, `buf: Optional[Tensor]`, `buf: Tensor | None`."""
    if is_none(param.default):
        return True
    if param.annotation is None:
        return False
    text = model.module.code_for_node(param.annotation.annotation)
    return bool(re.search(r"\bOptional\[|\|\s*None\b|\bNone\s*\|", text))


def passed_as_output(model: TritonModule, function: Function, name: str) -> bool:
    """`name` is handed over as a destination: `f(..., out=name)`, or a
    kernel parameter named as an output (`out_ptr=name`)."""
    for site in model.calls_in(function):
        out = keyword(site.node, "out")
        if out is not None and refers_to(out, name):
            return True
    for launch in model.launches:
        if launch.wrapper is None or launch.wrapper.node is not function.node:
            continue
        for param, expr in launch.args.items():
            if refers_to(expr, name) and OUTPUT_NAME.match(re.sub(r"_?ptrs?$", "", param)):
                return True
    return False


def write_only(model: TritonModule, function: Function, name: str, depth: int = 3, cache: dict | None = None) -> bool:
    """Every read of `name` in `function` leaves its values unread: its
    metadata (`.shape`, `.stride(0)`), `is None`, `isinstance`, returning
    it, `out=`, a kernel pointer that is only stored through; a view of it
    (`out.view(-1)`) used the same way."""
    for node in walk_scope(function.node):
        if not (isinstance(node, cst.Name) and node.value == name):
            continue
        use, parent = node, model.parent(node)
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
                isinstance(parent, cst.Arg) and parent.keyword is node):
            continue  # `a.out`, `f(out=...)`: a name, not the variable
        while True:  # a view of the tensor is the tensor
            if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in ALIASING:
                call = model.parent(parent)
                if isinstance(call, cst.Call) and call.func is parent:
                    use, parent = call, model.parent(call)
                    continue
            if isinstance(parent, cst.Subscript) and parent.value is use:
                use, parent = parent, model.parent(parent)
                continue
            break
        if isinstance(parent, cst.Attribute) and parent.value is use:
            if parent.attr.value in METADATA:
                continue
            return False
        if isinstance(parent, (cst.AssignTarget, cst.Param)) or (
                isinstance(parent, cst.AnnAssign) and parent.target is use):
            continue  # bound, not read
        if isinstance(parent, cst.ComparisonTarget) and isinstance(parent.operator, (cst.Is, cst.IsNot)):
            continue
        if isinstance(parent, cst.Comparison) and parent.left is use and all(
                isinstance(c.operator, (cst.Is, cst.IsNot)) for c in parent.comparisons):
            continue
        if isinstance(parent, cst.Return) or (isinstance(parent, cst.Element)
                                               and isinstance(model.parent(parent), cst.Tuple)
                                               and isinstance(model.parent(model.parent(parent)), cst.Return)):
            continue
        if isinstance(parent, cst.Assign) and parent.value is use and depth > 0 and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            if write_only(model, function, parent.targets[0].target.value, depth - 1, cache):
                continue
            return False
        if isinstance(parent, cst.Arg) and parent.value is use:
            call = model.parent(parent)
            if parent.keyword is not None and parent.keyword.value == "out":
                continue
            if isinstance(call, cst.Call) and model.call_name(call) == "isinstance":
                continue
            kernel_param = _launch_param(model, call, use)
            if kernel_param is not None and kernel_param not in loaded_params(model, cache):
                continue
        return False
    return True


def _launch_param(model: TritonModule, call: cst.CSTNode, arg: cst.CSTNode) -> tuple[str, str] | None:
    for launch in model.launches:
        if launch.call is call:
            for param, expr in launch.args.items():
                if expr is arg:
                    return launch.kernel.name, param
    return None


def loaded_params(model: TritonModule, cache: dict | None = None) -> set[tuple[str, str]]:
    """(kernel, parameter) pairs some load reads through (`tl.load`, a
    block pointer's or a tensor descriptor's load)."""
    cache = {} if cache is None else cache
    if cache.get(_LOADED) is None:
        found: set[tuple[str, str]] = set()
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue
            for site in model.calls_in(jit):
                call, name = site.node, (site.qualname or "")
                if name.startswith(TL) and "load" in name[len(TL):]:  # tl.load, descriptor loads
                    pointer = keyword(call, "pointer", 0) or keyword(call, "desc", 0)
                elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "load" \
                        and not name.startswith("triton."):
                    pointer = call.func.value  # `desc.load([...])` on a tensor descriptor
                else:
                    continue
                found |= pointer_bases(model, jit, pointer, cache=cache)
        cache[_LOADED] = found
    return cache[_LOADED]


def allocated(model: TritonModule, function: Function, name: str) -> bool:
    """`name = torch.empty(...)` / `name = x.new_zeros(...)` somewhere in the function."""
    for node in walk_scope(function.node):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
            func = node.value.func
            if model.call_name(node.value) in ALLOCATING or (
                    isinstance(func, cst.Attribute) and func.attr.value in ALLOCATING_METHODS):
                return True
    return False


def refers_to(expr: cst.BaseExpression, name: str) -> bool:
    """`expr` is `name`, a view of it, or a tuple holding one."""
    if isinstance(expr, cst.Tuple):
        return any(refers_to(e.value, name) for e in expr.elements)
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ALIASING:
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return isinstance(expr, cst.Name) and expr.value == name


def under_inplace_flag(model: TritonModule, function: Function, node: cst.CSTNode) -> bool:
    """`node` runs only when the caller asked for in-place work: it sits in
    the body of `if inplace:` (a parameter of a library API, not of
    `forward`, whose name says in-place)."""
    flags = {p for p in host_params(function) if "inplace" in p.lower().replace("_", "")}
    if not flags or function.name in ("forward", "__call__"):  # forward's arguments are the harness's
        return False
    child = node
    for ancestor in model.ancestors(node):
        if ancestor is function.node:
            break
        if isinstance(ancestor, cst.If) and child is ancestor.body:
            tests = [ancestor.test]
            if isinstance(ancestor.test, cst.BooleanOperation) and isinstance(ancestor.test.operator, cst.And):
                tests = [ancestor.test.left, ancestor.test.right]
            for test in tests:
                if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
                        test.comparisons[0].operator, (cst.Is, cst.Equal)) and is_true(test.comparisons[0].comparator):
                    test = test.left  # `if inplace is True:`
                if isinstance(test, cst.Name) and test.value in flags:
                    return True
        child = ancestor
    return False
