"""MEM002 input-mutation: the kernel or its wrapper writes into an input tensor."""

from __future__ import annotations

import bisect
import re
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.dataflow import Def, _all_params
from kanalyze.analyzer.triton import Function, JitFunction, TritonModule, bind_call_args, keyword, walk
from kanalyze.rules.base import Report, Rule, expr_text, source

TL = "triton.language."
WRITES = {TL + "store"} | {TL + f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}
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
# In-place by name but harmless to the values: autograd flags, memory pinning.
METADATA_ONLY = {"requires_grad_", "retain_grad_", "share_memory_", "record_stream_"}
# `def add(x, y, out)`: a caller-provided destination is meant to be written.
OUTPUT_NAME = re.compile(r"^(out|output|result|res|dst|dest|o)$|^out_|_out$|_output$")
REFERENCE = re.compile(r"^(Model|Ref.*|.*Reference|_?ref(erence)?(_.*)?|.*_ref|torch_.*|_?test.*)$")
TENSOR_ATTRS = {"shape", "numel", "stride", "size", "dtype", "device", "contiguous", "is_contiguous",
                "data_ptr", "view", "reshape", "dim", "ndim", "element_size", "is_cuda", "clone"}


class InputMutation(Rule):
    code = "MEM002"
    name = "input-mutation"
    summary = "The kernel or its wrapper writes into a tensor the caller passed in"
    gate = "mem002-input-hash"
    docs = """
    ## What it does
    Flags `tl.store` / `tl.atomic_*` through a pointer parameter that the
    wrapper binds to one of its own inputs (directly, or through a view such
    as `x.contiguous()`, `x.view(-1)`, `x.reshape(...)`, which return `x`
    itself when no copy is needed), and in-place operations on inputs in the
    wrapper or `forward`: `x.add_(...)`, `x[...] = ...`, `x += ...`,
    `torch.relu_(x)`, `F.relu(x, inplace=True)`, `torch.add(a, b, out=x)`.

    ## Why is this bad
    The reference returns a new tensor and leaves its inputs alone.  A
    candidate that overwrites its input changes what the next call (and the
    reference, when it runs second on the same tensors) sees.  A one-shot
    `allclose` does not notice; hashing the inputs before and after the call does.

    ## Example
    ```python
    def forward(self, x):
        x = x.contiguous()          # the same tensor when x is contiguous
        relu_kernel[grid](x, x, n, BLOCK=1024)   # loads and stores through x
        return x
    ```

    ## Use instead
    ```python
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[grid](x, out, n, BLOCK=1024)
        return out
    ```
    Where the contract is in-place, suppress with `# noqa: MEM002`.
    """

    VALID = [
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=offs < n)

        def relu(x):
            x = x.contiguous()
            y = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            return y
        """),
        source("""
        def forward(self, x):
            out = x.clone()
            out.add_(1.0)
            return out
        """),
    ]
    INVALID = [
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(x_ptr + offs, tl.where(x < 0, 0.0, x), mask=offs < n)

        def relu(x):
            x = x.contiguous()
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)
            return x
        """),
        source("""
        def forward(self, x, y):
            x += y
            return x
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        self.model = model
        self._reaching: dict[int, Reaching] = {}
        yield from self._check_stores()
        for function in candidate_functions(model):
            yield from self._check_host(function)

    # -- which host names hold an input ---------------------------------------

    def reaching(self, function: Function) -> Reaching:
        if id(function.node) not in self._reaching:
            self._reaching[id(function.node)] = Reaching(self.model, function)
        return self._reaching[id(function.node)]

    def inputs(self, function: Function, seen: frozenset = frozenset()) -> set[str]:
        """The parameters of `function` that receive a caller's tensor: all of
        them for `forward` and for a wrapper nobody in the file calls, else
        those that some caller binds to one of *its* inputs."""
        params = host_params(function)
        if function.name == "__init__" or id(function.node) in seen:
            return set()
        callers = list(host_calls(self.model, function))
        if function.name in ("forward", "__call__") or not callers:
            return {p for p in params if not OUTPUT_NAME.match(p)}
        found: set[str] = set()
        for caller, call in callers:
            caller_inputs = self.inputs(caller, seen | {id(function.node)})
            for param, arg in bind_call_args(call, [_Named(p) for p in params]).items():
                if not OUTPUT_NAME.match(param) and self.aliases(caller, arg, call, caller_inputs):
                    found.add(param)
        return found

    def aliases(self, function: Function, expr: cst.BaseExpression, at: cst.CSTNode,
                inputs: set[str], depth: int = 8) -> list[tuple[str, str]]:
        """[(input name, how)] for every input that `expr` may be (the same storage)."""
        if depth <= 0:
            return []
        if isinstance(expr, cst.Name):
            found = []
            for d in self.reaching(function).defs(expr.value, at):
                if d.kind == "param" and d.name in inputs:
                    found.append((d.name, ""))
                elif d.kind == "augassign":  # `x += 1` keeps x's storage
                    found += self.aliases(function, cst.Name(d.name), d.node, inputs, depth - 1)
                elif d.kind in ("assign", "walrus") and d.value is not None:
                    found += self.aliases(function, d.value, d.value, inputs, depth - 1)
            return found
        base = None
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ALIASING:
            base = expr.func.value
        elif isinstance(expr, cst.Call) and self.model.call_name(expr) in ALIASING_TORCH and expr.args:
            base = expr.args[0].value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ALIASING_ATTRS:
            base = expr.value
        elif isinstance(expr, cst.Subscript):
            base = expr.value
        if base is None:
            return []
        text = expr_text(self.model, expr)
        return [(n, text) for n, _ in self.aliases(function, base, at, inputs, depth - 1)]

    # -- stores through input pointers ----------------------------------------

    def _check_stores(self) -> Iterator[Report]:
        model = self.model
        bound: dict[tuple[str, str], list[str]] = {}  # (kernel, param) → descriptions
        for launch in model.launches:
            wrapper = launch.wrapper
            if wrapper is None:
                continue
            inputs = self.inputs(wrapper)
            for param, arg in launch.args.items():
                p = launch.kernel.param(param)
                if p is None or p.is_constexpr:
                    continue
                for name, how in self.aliases(wrapper, arg, launch.call, inputs):
                    via = f" (via `{how}`, which may share `{name}`'s storage)" if how else ""
                    text = f"input `{name}` of `{wrapper.qualname}`{via}"
                    bound.setdefault((launch.kernel.name, param), [])
                    if text not in bound[(launch.kernel.name, param)]:
                        bound[(launch.kernel.name, param)].append(text)
        if not bound:
            return
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue
            for site in model.calls_in(jit, *WRITES):
                pointer = keyword(site.node, "pointer", 0)
                if pointer is None:
                    continue
                for kernel, param in sorted(pointer_roots(model, jit, pointer)):
                    for text in bound.get((kernel, param), ()):
                        op = (site.qualname or "").rpartition(".")[2]
                        call = expr_text(model, site.node)
                        owner = "" if kernel == jit.name else f" of `{kernel}`"
                        yield self.report(
                            site.node,
                            f"`{call}` writes through `{param}`{owner}, which is bound to the {text}; "
                            f"the caller's tensor is overwritten. Write into a new tensor "
                            f"(`torch.empty_like(...)`) and return that",
                            kernel=jit.name, expression=call, operation=op, parameter=param,
                            launched_kernel=kernel, input=text)

    # -- in-place operations in host code -------------------------------------

    def _check_host(self, function: Function) -> Iterator[Report]:
        model = self.model
        inputs = self.inputs(function)
        if not inputs:
            return
        where = f"`{function.qualname}`"

        def hit(node: cst.CSTNode, target: cst.BaseExpression, what: str, tensor_only: bool = False):
            for name, how in self.aliases(function, target, node, inputs):
                if tensor_only and not how and not self._is_tensor(function, name):
                    continue
                via = f" (`{how}` may share `{name}`'s storage)" if how else ""
                return self.report(node, f"`{what}` in {where} modifies the input `{name}` in place{via}; "
                                         f"compute into a new tensor (out-of-place op or `.clone()` first)",
                                   expression=what, input=name, function=function.qualname)
            return None

        for site in model.calls_in(function):
            call, text = site.node, expr_text(model, site.node)
            targets: list[cst.BaseExpression] = []
            func = call.func
            module_function = (model.qualify(func.value) or "").split(".")[0] in ("torch", "triton") \
                if isinstance(func, cst.Attribute) else True
            if not module_function and _inplace_name(func.attr.value):
                targets.append(func.value)
            elif site.qualname and site.qualname.startswith("torch.") and call.args and (
                    _inplace_name(site.qualname.rpartition(".")[2]) or _is_true(keyword(call, "inplace"))):
                targets.append(call.args[0].value)
            out = keyword(call, "out")
            if out is not None:
                targets.append(out)
            for target in targets:
                report = hit(call, target, text)
                if report is not None:
                    yield report
                    break
        for node in walk(function.node):
            if isinstance(node, (cst.Assign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                for target in targets:
                    text = model.module.code_for_node(node).strip().splitlines()[0]
                    report = None
                    if isinstance(target, cst.Subscript):
                        report = hit(node, target.value, text)
                    elif isinstance(node, cst.AugAssign) and isinstance(target, cst.Name):
                        report = hit(node, target, text, tensor_only=True)
                    if report is not None:
                        yield report

    def _is_tensor(self, function: Function, name: str) -> bool:
        """`x += y` is in place only when x is a tensor, not a Python number."""
        for p in host_params(function, with_nodes=True):
            if p.name.value == name and p.annotation is not None:
                ann = self.model.qualify(p.annotation.annotation) or ""
                return ann.endswith("Tensor")
        if function.name in ("forward", "__call__"):
            return True
        return any(isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == name
                   and n.attr.value in TENSOR_ATTRS for n in walk(function.node))


# -- helpers (shared with MEM001 / EXC001 until the analyzer offers them) --------

class Reaching:
    """Which definitions of a name can reach one place in a function.

    The shared `Dataflow` is flow-insensitive: after `x = x.clone()` it still
    says `x` may be the parameter.  This adds just enough order: a read sees
    the latest definition before it (in source order) that is not inside a
    branch the read is not in, every conditional one in between, and, inside a
    loop, the definitions later in the loop (carried to the next iteration).
    """

    def __init__(self, model: TritonModule, function: Function | JitFunction) -> None:
        self.model = model
        self.root = function.node
        self.flow = model.flow(function.function if isinstance(function, JitFunction) else function)
        self.spans: dict[int, tuple[int, int]] = {}
        clock, stack = 0, [(self.root, False)]
        while stack:  # (enter, exit) in pre-order / post-order, without recursion
            node, done = stack.pop()
            if done:
                self.spans[id(node)] = (self.spans[id(node)][0], clock)
            else:
                self.spans[id(node)] = (clock, clock)
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(node.children))
            clock += 1
        self._cache: dict[tuple[str, int], list[Def]] = {}
        self._by_time: dict[str, list[tuple[int, Def]]] = {}
        self._suite_cache: dict[int, frozenset[int]] = {}

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.spans.get(id(node), (-1, -1))

    def inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        (a, b), (c, d) = self.span(node), self.span(outer)
        return c <= a and b <= d

    def time(self, d: Def) -> int:
        """When a definition takes effect: a `for` target at the loop body."""
        if d.kind == "param":
            return -1
        if isinstance(d.node, cst.For):
            return self.span(d.node.body)[0]
        return self.span(d.node)[1]

    def _suites(self, node: cst.CSTNode) -> frozenset[int]:
        if id(node) not in self._suite_cache:
            found = []
            for a in self.model.ancestors(node):
                if a is self.root:
                    break
                if isinstance(a, cst.BaseSuite):
                    found.append(id(a))
            self._suite_cache[id(node)] = frozenset(found)
        return self._suite_cache[id(node)]

    def defs(self, name: str, at: cst.CSTNode) -> list[Def]:
        key = (name, id(at))
        if key in self._cache:
            return self._cache[key]
        if name not in self._by_time:
            self._by_time[name] = sorted(((self.time(d), d) for d in self.flow.defs_of(name)), key=lambda t: t[0])
        timed = self._by_time[name]
        start = self.span(at)[0]
        split = bisect.bisect_left([t for t, _ in timed], start)
        found: list[Def] = []
        scopes = self._suites(at)
        for _, d in reversed(timed[:split]):
            found.append(d)
            if d.kind == "param" or (not isinstance(d.node, cst.For) and self._suites(d.node) <= scopes):
                break
        loops = []
        for a in self.model.ancestors(at):
            if a is self.root:
                break
            if isinstance(a, (cst.For, cst.While)):
                loops.append(a)
        if loops:
            found += [d for _, d in timed[split:] if any(self.inside(d.node, loop) for loop in loops)]
        self._cache[key] = found
        return found


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
            stack.extend(node.children)
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


def candidate_functions(model: TritonModule) -> list[Function]:
    """The forward path, plus the host functions that call into it (a public
    `def op(x)` over a launching helper), without the reference written next
    to the candidate (`class Model`, `ref_*` / `torch_*`): what the reference
    does is the contract, not a violation of it."""
    found = list(model.forward_path)
    for callee in found:  # grows while iterating: callers of callers
        for caller, _ in host_calls(model, callee):
            if caller.name != "__init__" and not any(caller is f for f in found):
                found.append(caller)
    return [f for f in found if not REFERENCE.match(f.name) and not REFERENCE.match(f.class_name or "")]


class _Named:
    """Adapts a cst.Param to what `bind_call_args` reads (`.name`)."""

    def __init__(self, name: str) -> None:
        self.name = name


def host_params(function: Function, with_nodes: bool = False) -> list:
    params = _all_params(function.node.params)
    if function.class_name is not None and params and not any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in function.node.decorators):
        params = params[1:]  # self / cls
    return params if with_nodes else [p.name.value for p in params]


def host_calls(model: TritonModule, function: Function) -> Iterator[tuple[Function, cst.Call]]:
    """Calls of a host function from other host functions in the file: `f(...)`,
    or `self.f(...)` from a method of the same class."""
    for site in model.calls:
        caller, func = site.function, site.node.func
        if caller is None or caller.node is function.node:
            continue
        if function.class_name is None and isinstance(func, cst.Name) and func.value == function.name:
            yield caller, site.node
        elif (function.class_name is not None and caller.class_name == function.class_name
              and isinstance(func, cst.Attribute) and func.attr.value == function.name
              and isinstance(func.value, cst.Name) and func.value.value == "self"):
            yield caller, site.node


def _inplace_name(name: str) -> bool:
    return name.endswith("_") and not name.startswith("_") and name not in METADATA_ONLY


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"
