"""MEM002 input-mutation: the kernel or its wrapper writes into an input tensor.

Which parameters are destinations by contract (and which tensors a function
reads) is answered by `kanalyze.analyzer.triton.destinations`; this module
decides which names hold the caller's inputs and reports the writes into them."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, keyword
from kanalyze.analyzer.triton.destinations import (OUTPUT_NAME, destination, inplace_name, is_true,
                                                   under_inplace_flag)
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host import ALIASING, ALIASING_ATTRS, ALIASING_TORCH, candidate_functions, host_calls, host_params
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.pointers import WRITES, pointer_bases
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.rules.base import Report, Rule, expr_text, source

# `def f(x, xs: list[Tensor])`: `xs[0] = ...` replaces an element of a Python sequence, no tensor values.
SEQUENCE_ANNOTATION = re.compile(r"\b(List|Tuple|Sequence|list|tuple|Iterable|MutableSequence)\b")
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

    The tensor written is the pointer parameter the store's address is based
    on (`Y += row * stride; tl.store(Y + cols, ...)` writes `Y`; a size added
    to it is an offset), through the assignment that reaches the store
    (`p = v + o` then `p = v_new + o` stores into `v_new`).  A library API's
    destinations are not inputs: the first argument of an in-place API named
    with a trailing underscore (`def relu_(x)`, as in torch), writes under an
    `if inplace:` flag of the API, and a buffer whose values the API never
    reads that is optional (`out=None`, `Optional[Tensor]`), allocated when
    absent, returned, passed as `out=`, or written by an API that returns
    nothing.  In `forward` every tensor argument is an input.

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
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=offs < n)

        def relu_(x):
            # in place by contract, as torch.relu_
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, x, x.numel(), BLOCK=1024)
            return x

        def relu_into(x, buf):
            # buf is a destination: never read, handed back
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, buf, x.numel(), BLOCK=1024)
            return buf
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
        self._bases_cache: dict = {}  # pointer_bases' cache, shared with the destination questions
        # Each host function's inputs, once known (a file defining the same names many times over
        # made callers of callers an exponential walk); not kept where a cycle of calls was cut.
        self._inputs: dict[int, set[str]] = {}
        self._cuts = 0
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
        key = id(function.node)
        if key in self._inputs:
            return self._inputs[key]
        if key in seen:
            self._cuts += 1
            return set()
        cuts = self._cuts
        found = self._inputs_of(function, seen | {key})
        if self._cuts == cuts:
            self._inputs[key] = found
        return found

    def _inputs_of(self, function: Function, seen: frozenset) -> set[str]:
        params = host_params(function)
        if function.name == "__init__":
            return set()
        callers = list(host_calls(self.model, function))
        if function.name in ("forward", "__call__") or not callers:
            return {p for p in params
                    if not OUTPUT_NAME.match(p) and not destination(self.model, function, p, self._bases_cache)}
        found: set[str] = set()
        for caller, call in callers:
            caller_inputs = self.inputs(caller, seen)
            for param, arg in bind_call_args(call, params).items():
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
                if d.kind != "param" and under_inplace_flag(self.model, function, d.node):
                    continue  # `if inplace: y = x`: the caller asked for it
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
        bound: dict[tuple[str, str], dict[tuple[str, str], str]] = {}  # (kernel, param) → input → description
        for launch in model.launches:
            wrapper = launch.wrapper
            if wrapper is None:
                continue
            inputs = self.inputs(wrapper)
            if under_inplace_flag(model, wrapper, launch.call):
                continue
            for param, arg in launch.args.items():
                p = launch.kernel.param(param)
                if p is None or p.is_constexpr:
                    continue
                for name, how in self.aliases(wrapper, arg, launch.call, inputs):
                    via = f" (via `{how}`, which may share `{name}`'s storage)" if how else ""
                    text = f"input `{name}` of `{wrapper.qualname}`{via}"
                    texts = bound.setdefault((launch.kernel.name, param), {})
                    if (wrapper.qualname, name) not in texts or not how:  # one per input, directly if it can be
                        texts[(wrapper.qualname, name)] = text
        if not bound:
            return
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue
            for site in model.calls_in(jit, *WRITES):
                pointer = keyword(site.node, "pointer", 0)
                if pointer is None:
                    continue
                for kernel, param in sorted(pointer_bases(model, jit, pointer, cache=self._bases_cache)):
                    for text in bound.get((kernel, param), {}).values():
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
            if under_inplace_flag(model, function, node):
                return None
            for name, how in self.aliases(function, target, node, inputs):
                if tensor_only and not how and not self._is_tensor(function, name):
                    continue
                if isinstance(target, cst.Name) and not how and isinstance(node, (cst.Assign, cst.AugAssign)) \
                        and not tensor_only and self._is_sequence(function, name):
                    continue  # `xs[0] = ...` on a list replaces an element, writes no tensor
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
            if not module_function and inplace_name(func.attr.value):
                targets.append(func.value)
            elif site.qualname and site.qualname.startswith("torch.") and call.args and (
                    inplace_name(site.qualname.rpartition(".")[2]) or is_true(keyword(call, "inplace"))):
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

    def _is_sequence(self, function: Function, name: str) -> bool:
        """A parameter annotated as a list or tuple (of tensors)."""
        for p in host_params(function, with_nodes=True):
            if p.name.value == name and p.annotation is not None:
                return bool(SEQUENCE_ANNOTATION.search(self.model.module.code_for_node(p.annotation.annotation)))
        return False

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

