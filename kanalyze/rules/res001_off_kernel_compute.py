"""RES001 off-kernel-compute: the work must run in the submitted kernel, on the input's device."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import body_nodes
from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.cuda.forward_paths import OnGpu
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.project_index import linked_of
from kanalyze.analyzer.triton.calls import keyword, string_literal
from kanalyze.analyzer.triton.entities import Function, REFERENCE_CLASS, REFERENCE_FUNCTION
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.host_compute import host_trips, module_attrs
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.pointers import pointer_bases
from kanalyze.analyzer.triton.unreached import is_main_guard, unreached_functions
from kanalyze.rules.base import NEVER_LAUNCHED, Report, Rule, expr_text, source

# PyTorch ops that are the computation itself, whatever their operands.
HEAVY = {f"torch.{n}" for n in (
    "matmul mm bmm addmm addbmm baddbmm addmv mv dot einsum tensordot conv1d conv2d conv3d "
    "conv_transpose1d conv_transpose2d conv_transpose3d softmax log_softmax layer_norm group_norm "
    "batch_norm instance_norm relu sigmoid tanh cdist").split()}
HEAVY_PREFIXES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
NOT_COMPUTE_F = {"torch.nn.functional.pad", "torch.nn.functional.unfold"}  # layout only
# Ops that also appear on small bookkeeping values: flagged when they read an input or weight.
LIGHT = {f"torch.{n}" for n in (
    "sum mean max min amax amin prod var std norm argmax argmin logsumexp exp log sqrt rsqrt abs pow "
    "add sub mul div where clamp clip maximum minimum erf sin cos topk sort cumsum cumprod").split()}
METHODS = set("matmul mm bmm addmm baddbmm softmax log_softmax relu sigmoid tanh exp log sqrt rsqrt sum "
              "mean amax amin max min prod var std norm cumsum logsumexp add sub mul div clamp pow abs".split())
# Calls and attributes that keep a tensor's values (a view, a copy, a cast): the result is still "the input".
LAYOUT_METHODS = set("contiguous view reshape permute transpose t to float half bfloat16 double flatten unflatten "
                     "unsqueeze squeeze expand expand_as view_as reshape_as clone detach narrow select cuda "
                     "movedim as_strided chunk split unbind type".split())
LAYOUT_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag"}
BLOCK_POINTERS = {"triton.language.make_block_ptr", "triton.language.make_tensor_descriptor"}
MEMORY_CALLS = {"triton.language.load", "triton.language.store"} | BLOCK_POINTERS


class OffKernelCompute(Rule):
    code = "RES001"
    name = "off-kernel-compute"
    summary = "Part of the work runs in PyTorch or on the host instead of the submitted kernel"
    gate = "res001-dispatch-trace"
    docs = """
    ## What it does
    In the forward path (`forward`, the wrappers that launch kernels and the
    module's functions they call) flags host round trips (`.cpu()`, `.numpy()`,
    `.item()`, `.tolist()`, `.to("cpu")`), PyTorch doing the computation
    (`torch.matmul`, `@`, `F.*`, `torch.softmax`, `torch.sum` of an input,
    `self.conv(x)` for an `nn.Conv2d` layer), `try`/`except` handlers that fall
    back to PyTorch, and jit kernels that nothing launches (a jit function that
    other jit functions call, that returns a value, or that has no pointer
    parameter is a device function, not a kernel: it is not reported; nor is a
    kernel that another checked module imports and launches or hands on as a
    value: `kanalyze check` links the modules of the paths it checks, the
    editor sees one file). Not flagged either: PyTorch in a branch taken only
    for tensors off the GPU (`if not x.is_cuda:`, the `else:` of `if
    x.is_cuda:`), where the benchmark's inputs never go (a test that mixes in
    anything else, `x.is_cuda and x.dim() == 3`, keeps its `else` flagged), nor
    in an assert's message, which runs only when the assertion fails. In a
    candidate's file (it defines `ModelNew`), the other clauses say nothing of
    a kernel nothing launches: it never runs, and this one report stands for
    it. Allocation, layout and metadata (`torch.empty_like`, `.contiguous()`,
    `x.shape[0]`, `triton.cdiv`) are not flagged.

    ## Why is this bad
    The benchmark credits the kernel with whatever the forward returns. When
    PyTorch computes the result (beside the kernel, in a fallback, or instead of
    a kernel that is never launched) the comparison passes and the timing
    measures cuBLAS or cuDNN, not the submission. A host copy synchronises the
    device on every call and moves the work off the GPU.

    ## Example
    ```python
    def forward(self, a, b):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device)
        matmul_kernel[grid](a, b, c, ...)
        return torch.matmul(a, b)
    ```

    ## Use instead
    ```python
    def forward(self, a, b):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device)
        matmul_kernel[grid](a, b, c, ...)
        return c
    ```
    """

    VALID = [
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _scale(x):
            return x * 2.0

        @triton.jit
        def _next_multiple_of(a, b):    # a device function nothing calls yet: not a dead kernel
            return tl.cdiv(a, b) * b

        @triton.jit
        def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, _scale(tl.load(x_ptr + offs, mask=mask)), mask=mask)

        def double(x):
            x = x.contiguous()
            y = torch.empty_like(x)
            n = x.numel()
            double_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
            return y

        def reference(x):
            return torch.mul(x, 2.0)
        """),
    ]
    INVALID = [
        source("""
        import torch
        import torch.nn as nn
        import triton

        class ModelNew(nn.Module):
            def forward(self, a, b):
                c = torch.empty((a.shape[0], b.shape[1]), device=a.device)
                matmul_kernel[(1,)](a, b, c)
                return torch.matmul(a, b)
        """),
        source("""
        import torch.nn as nn
        import triton
        from kernels import scale

        class ModelNew(nn.Module):
            def forward(self, x, s):
                return scale(x, s.item())
        """),
        source("""
        import torch
        import torch.nn as nn
        import triton
        import triton.language as tl

        @triton.jit
        def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.mul(x, 2.0)
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        if not model.jit and not model.imports.refers_to_triton():
            return  # a plain PyTorch file (a reference, a test): nothing claims to be a kernel
        path = candidate_functions(model)
        on_path = {id(f.node) for f in path}
        launches = [l for l in model.launches if l.wrapper is not None and id(l.wrapper.node) in on_path]
        # With nothing launched, point at a kernel the file defines (not a helper another jit calls).
        kernels = _kernel_names(model)
        unlaunched = [j.name for j in model.jit.values() if j.name == j.function.name and j.name in kernels]
        tensors, layers = module_attrs(model)
        computing = {id(f.node): list(self.torch_compute(model, f, tensors, layers)) for f in path}
        on_gpu = OnGpu(model, [])   # the branches a run with CUDA inputs takes (no extension here)
        for function in path:
            local = [l for l in launches if l.wrapper is function] or launches
            kernel = local[0].kernel.name if local else None
            handled: set[int] = set()
            for handler in (n for n in body_nodes(function.node) if isinstance(n, cst.ExceptHandler)):
                report = self.fallback(model, handler, function, computing, path)
                if report is not None:
                    handled.add(id(handler))
                    yield report
            trips = host_trips(function, model)
            off_gpu = on_gpu.dead(function)   # `if not x.is_cuda:`: never reached on the benchmark's GPU
            for node, what in computing[id(function.node)]:
                if _within(model, node, off_gpu) or _assert_message(model, node) or \
                        any(id(a) in handled or id(a) in trips for a in model.ancestors(node)):
                    continue  # off the GPU, said only when an assert fails, or reported with its handler or copy
                text = expr_text(model, node)
                if kernel is not None:
                    advice = f"move the work into `{kernel}` or drop the call"
                elif unlaunched:
                    advice = f"launch `{unlaunched[0]}` instead (nothing launches a kernel on the forward path)"
                else:
                    advice = "no Triton kernel is launched from the forward path; write this computation as a kernel"
                yield self.report(node, f"`{text}` in `{function.qualname}` computes with PyTorch ({what}) instead "
                                        f"of the kernel; {advice}",
                                  expression=text, function=function.qualname, kernel_launched=kernel or "")
            for call, effect in trips.values():
                if _within(model, call, off_gpu) or any(id(a) in trips for a in model.ancestors(call)):
                    continue  # off the GPU, or `x.cpu().numpy()`: one report for the chain
                text = expr_text(model, call)
                yield self.report(call, f"`{text}` in `{function.qualname}` {effect} and synchronises the device "
                                        f"on every call; keep the data on the GPU (sizes come from `.shape`)",
                                  expression=text, function=function.qualname, method=call.func.attr.value)
        if path and model.jit:
            yield from self._dead_kernels(model, launches, kernels)

    # -- PyTorch doing the work ---------------------------------------------

    def torch_compute(self, model: TritonModule, function: Function, tensors: set,
                      layers: dict[tuple[str | None, str], str]) -> Iterator[tuple[cst.CSTNode, str]]:
        """(node, what) for each place the function computes with PyTorch."""
        for node in body_nodes(function.node):
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
                yield node, "the `@` operator"
            if not isinstance(node, cst.Call):
                continue
            name = model.call_name(node) or ""
            func = node.func
            target = dotted(func) or ""
            if target.startswith("self.") and (function.class_name, target[5:]) in layers:
                yield node, f"the `{layers[(function.class_name, target[5:])]}` layer"
            elif name in HEAVY or (name.startswith(HEAVY_PREFIXES) and name not in NOT_COMPUTE_F):
                yield node, f"`{name.replace('torch.nn.functional.', 'F.')}`"
            elif name in LIGHT and any(_from_input(model, function, a.value, tensors) for a in node.args):
                yield node, f"`{name}` of an input"
            elif isinstance(func, cst.Attribute) and func.attr.value in METHODS \
                    and _from_input(model, function, func.value, tensors):
                yield node, f"`Tensor.{func.attr.value}` on an input"

    # -- try/except fallback ------------------------------------------------

    def fallback(self, model: TritonModule, handler: cst.ExceptHandler, function: Function,
                 computing: dict[int, list], path: list[Function]) -> Report | None:
        """A report when the handler computes with PyTorch, directly or through a helper."""
        inside = {id(n) for n in walk(handler.body)}
        found = next((node for node, _ in computing[id(function.node)] if id(node) in inside), None)
        helpers = {f.name for f in path if f is not function and computing[id(f.node)]}
        calls = (n for n in walk(handler.body) if isinstance(n, cst.Call))
        found = found or next((c for c in calls if (dotted(c.func) or "").removeprefix("self.") in helpers), None)
        if found is None:
            return None
        caught = f"except {expr_text(model, handler.type)}" if handler.type is not None else "except"
        text = expr_text(model, found)
        return self.report(handler, f"`{caught}:` in `{function.qualname}` falls back to PyTorch (`{text}`) when "
                                    f"the kernel fails, so a broken kernel still passes; let the error propagate",
                           expression=text, handler=caught, function=function.qualname)

    # -- kernels nothing launches -------------------------------------------

    def _dead_kernels(self, model: TritonModule, launches: list, kernels: set[str]) -> Iterator[Report]:
        used = _used_jit_names(model)
        candidate = any(f.class_name == "ModelNew" for f in model.host_functions)
        linked = linked_of(model)  # what the other modules of the check say: None when this file is checked alone
        for jit in {id(j): j for j in model.jit.values()}.values():
            if jit.name in used or jit.name not in kernels:
                continue  # used, or a device function (`@triton.jit def _gelu(x)`) that no grid launches
            if linked is not None and any(linked.users_of(n) for n in _names_of(model, jit)):
                continue  # another checked module launches it, or hands it on
            where = "this file's forward path" if linked is None else \
                "this file's forward path or from another checked module"
            if launches:
                tail = (f"`{launches[0].wrapper.qualname}` launches `{launches[0].kernel.name}` instead; "
                        f"launch it or delete it")
            else:
                tail = "the result comes from PyTorch"
            # A candidate (its `ModelNew`) launches from its own file: the other clauses then say
            # nothing of this kernel (check/dead_kernels.py); a library's other modules may launch it.
            yield self.report(jit.node.name, f"`{jit.name}` is never launched from {where}; {tail}",
                              kernel=jit.name, launched=sorted({l.kernel.name for l in launches}),
                              **({NEVER_LAUNCHED: True} if candidate else {}))


def _within(model: TritonModule, node: cst.CSTNode, ids: set[int]) -> bool:
    """Is `node`, or a node around it, one of `ids`?"""
    return bool(ids) and (id(node) in ids or any(id(a) in ids for a in model.ancestors(node)))


def _assert_message(model: TritonModule, node: cst.CSTNode) -> bool:
    """Is `node` in an assert's message (`assert ok, f"... {x.abs().max()}"`)?  Python
    evaluates it only when the assertion fails: it computes nothing a passing call returns."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.Assert):
            return child is ancestor.msg
        child = ancestor
    return False


def _from_input(model: TritonModule, function: Function, expr: cst.BaseExpression,
                tensors: set, seen: frozenset[str] = frozenset()) -> bool:
    """Does `expr` hold the values of an input or weight (not a size, an allocation or a kernel's output)?"""
    def again(e: cst.BaseExpression, more: frozenset[str] = frozenset()) -> bool:
        return _from_input(model, function, e, tensors, seen | more)

    if isinstance(expr, cst.Name):
        if expr.value in ("self", "cls", "ctx") or expr.value in seen:
            return False
        return any(d.kind == "param" or (d.value is not None and again(d.value, frozenset({expr.value})))
                   for d in model.flow(function).defs_of(expr.value))
    if isinstance(expr, cst.Attribute):
        if isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return (function.class_name, expr.attr.value) in tensors  # a weight or buffer
        if expr.attr.value in ("weight", "bias") and (dotted(expr.value) or "").startswith("self."):
            return True  # `self.linear.weight`
        return expr.attr.value in LAYOUT_ATTRS and again(expr.value)  # not `.shape`, `.dtype`, ...
    if isinstance(expr, cst.Subscript):
        return again(expr.value)
    if isinstance(expr, cst.Call):
        name = model.call_name(expr) or ""
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in LAYOUT_METHODS | METHODS:
            return again(expr.func.value)
        if name in HEAVY or name in LIGHT or name.startswith(HEAVY_PREFIXES):
            return any(again(a.value) for a in expr.args)
        return False  # allocations, sizes, kernel wrappers
    if isinstance(expr, cst.BinaryOperation):
        return again(expr.left) or again(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return again(expr.expression)
    if isinstance(expr, cst.IfExp):
        return again(expr.body) or again(expr.orelse)
    return False


def _kernel_names(model: TritonModule) -> set[str]:
    """The jit functions that can be kernels.  One that other jit functions call, one that
    returns a value, or one with no parameter used as a pointer (by a load, a store, an
    atomic or a block pointer) is a device function: nothing launches it with a grid, and
    it is not dead when no grid does."""
    pointers: set[str] = set()
    cache: dict = {}
    jits = {id(j): j for j in model.jit.values()}.values()
    for jit in jits:
        for site in model.calls_in(jit):
            name = site.qualname or ""
            if name in MEMORY_CALLS or name.startswith("triton.language.atomic_"):
                base = keyword(site.node, "base", 0) if name in BLOCK_POINTERS else keyword(site.node, "pointer", 0)
                pointers |= {kernel for kernel, _ in pointer_bases(model, jit, base, cache=cache)}
    return {j.name for j in jits if not j.called_from and j.name in pointers
            and not any(isinstance(n, cst.Return) and n.value is not None for n in walk(j.node.body))}


def _names_of(model: TritonModule, jit) -> list[str]:
    """Every module-level name of a jit function: its own and its aliases (`k = triton.jit(_k)`)."""
    return [name for name, other in model.jit.items() if other is jit]


def _used_jit_names(model: TritonModule) -> set[str]:
    """Jit functions referenced by live code: host code (not tests, references or a `__main__`
    block), module-level code, `__all__`, or a jit function that is itself used (helpers).
    Aliases (`k = triton.jit(_k)`) are resolved to the function's name.  In a candidate's
    file, a use inside a host function nothing runs (`ModelNew.backward`) does not count."""
    edges: dict[str, set[str]] = {}   # jit name → jit names it references
    used: set[str] = set()
    unreached = unreached_functions(model)
    for node in model.nodes(cst.SimpleString, cst.Name):
        text = string_literal(node)
        if isinstance(text, str) and text in model.jit:
            used.add(model.jit[text].name)
        if not isinstance(node, cst.Name) or node.value not in model.jit:
            continue
        parent = model.parent(node)
        if isinstance(parent, cst.FunctionDef) and parent.name is node:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            continue  # `kernel=...` names a parameter; `self.kernel` does count as a use
        target = model.jit[node.value].name
        function = model.function_of(node)
        holder = model.jit.get(function.name) if function is not None else None
        if holder is not None and holder.function is function:
            edges.setdefault(holder.name, set()).add(target)
        elif function is not None:
            if not _reference(model, function) and not any(
                    isinstance(a, cst.FunctionDef) and id(a) in unreached for a in model.ancestors(node)):
                used.add(target)
        elif not any(is_main_guard(a) for a in model.ancestors(node)):
            used.add(target)
    frontier = list(used)
    while frontier:
        for callee in edges.get(frontier.pop(), ()):
            if callee not in used:
                used.add(callee)
                frontier.append(callee)
    return used


def _reference(model: TritonModule, function: Function) -> bool:
    """A reference or test function (`ref_*`, `torch_*`, `class Model`), and not a helper nested
    in the candidate's own code (`def torch_rotary(...)` inside a wrapper is the wrapper's)."""
    if not (REFERENCE_FUNCTION.match(function.name) or REFERENCE_CLASS.match(function.class_name or "")):
        return False
    enclosing = model.function_of(function.node)
    return enclosing is None or _reference(model, enclosing)

