"""MEM001 unwritten-output: a `torch.empty*` output the kernel does not fully write.

What the rule reports lives here; the analysis it asks lives in the analyzer:
`early_exits` (which programs return before their store) and `host_sizes`
(whether a grid's division is exact, whose size a mask compares with).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.early_exits import early_return, grid_stride
from kanalyze.analyzer.triton.entities import Function, JitFunction, Launch
from kanalyze.analyzer.triton.host import ALIASING, host_calls, host_params
from kanalyze.analyzer.triton.host_sizes import (
    allocated_size_keys, block_follows_size, divisibility_checked, exact_division, floor_division, grid_elements,
    inside_ceiling, size_keys,
)
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.pointers import WRITES, pointer_roots
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import TL
from kanalyze.rules.base import Report, Rule, expr_text, source

EMPTY = {"torch.empty", "torch.empty_like", "torch.empty_strided"}
EMPTY_METHODS = {"new_empty", "new_empty_strided"}
RMW = {TL + f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor")}


@dataclass
class Allocation:
    call: cst.Call              # the torch.empty* call (where the finding goes)
    function: Function          # the host function that allocates
    variable: Def | None        # `out = torch.empty(...)`, when bound to a name
    passed: list[cst.Call]      # the calls that hand it on to the launch


class UnwrittenOutput(Rule):
    code = "MEM001"
    name = "unwritten-output"
    summary = "An output allocated with torch.empty* is not fully written by the kernel"
    gate = "mem001-poisoned-allocator"
    docs = """
    ## What it does
    Follows each `torch.empty`, `torch.empty_like`, `torch.empty_strided` and
    `x.new_empty` tensor into the kernel launch that should fill it, and flags
    it when that kernel can leave part of it unwritten: no store through the
    pointer at all, only atomic read-modify-writes (`tl.atomic_add` into
    garbage), an early `return` under a data- or program-dependent condition,
    a store mask stricter than the tensor (`offs < n - 1` where `n` is its
    numel), or a grid that does not cover it (`n // BLOCK` programs, a literal
    grid). The finding is reported at the allocation.

    Not flagged, because nothing is left unwritten: a `return` for a tile that
    starts past the end (`if pid * BLOCK >= n`, `if i_t * BT >= T` with `T`
    loaded for varlen), a branch that stores its part (zeros) before it
    returns, a `return` when the loop around every store would run zero times
    (`if count == 0` over `range(count)`), grid quotients that are exact
    (`x.numel() // x.shape[-1]`, `inp.numel() // M // N` with `M`, `N` sizes
    of the same tensor, `16 // 8`, `n // 1`, a quotient inside `triton.cdiv`,
    `rows = x.numel() // N` with `x.view(rows, N)`, a quotient whose divisibility
    the wrapper checks, or in a `backward` the `forward` of its autograd Function),
    persistent kernels whose loop steps by `tl.num_programs(0)` or
    `range(pid, num_tiles, NUM_SMS)`, and a constant grid whose block is sized
    from the runtime size (`BLOCK=triton.next_power_of_2(n)` on a `(1,)` grid).

    ## Why is this bad
    `torch.empty` returns whatever the caching allocator last kept in that
    block.  In a benchmark loop that is often the previous call's correct
    result, so the unwritten elements look right; on a fresh process, or after
    another tensor reused the block, they are garbage.  Poisoning the
    allocator's free blocks with a sentinel before the call makes the gap visible.

    ## Example
    ```python
    out = torch.empty_like(x)
    grid = (n // BLOCK,)            # the last partial block never runs
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)
    ```

    ## Use instead
    ```python
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, BLOCK),)  # with `mask = offs < n` in the kernel
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)
    ```
    Or allocate with `torch.zeros` when the kernel accumulates or writes sparsely.
    """

    _KERNEL = """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
        """
    VALID = [
        source(_KERNEL + """
        def copy(x):
            y = torch.empty_like(x)
            n = x.numel()
            copy_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
            return y
        """),
        source(_KERNEL + """
        def copy(x):
            y = torch.zeros_like(x)
            n = x.numel()
            copy_kernel[(n // 1024,)](x, y, n, BLOCK=1024)
            return y
        """),
        source(_KERNEL + """
        def copy(x):
            y = torch.empty_like(x)
            n = x.numel()
            copy_kernel[(1,)](x, y, n, BLOCK=triton.next_power_of_2(n))
            return y
        """),
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def row_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
            tl.store(y_ptr + row * n_cols + cols, v, mask=cols < n_cols)

        def rows(x):
            y = torch.empty_like(x)
            n_rows = x.numel() // x.shape[-1]
            row_kernel[(n_rows,)](x, y, x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
            return y
        """),
    ]
    INVALID = [
        source(_KERNEL + """
        def copy(x):
            y = torch.empty_like(x)
            n = x.numel()
            copy_kernel[(n // 1024,)](x, y, n, BLOCK=1024)
            return y
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        self.model = model
        self._reaching: dict[int, Reaching] = {}
        seen: set[tuple[int, str]] = set()
        for launch in model.launches:
            wrapper = launch.wrapper
            if wrapper is None or self._in_loop(launch.call, wrapper):
                continue  # repeated launches may cover the tensor piecewise
            for param, arg in launch.args.items():
                p = launch.kernel.param(param)
                if p is None or p.is_constexpr:
                    continue
                for alloc in self._allocations(wrapper, arg, launch.call, [launch.call]):
                    key = (id(alloc.call), launch.kernel.name)
                    if key in seen or self._written_elsewhere(alloc, launch):
                        continue
                    reason = self._gap(launch, param, alloc)
                    if reason is None:
                        continue
                    seen.add(key)
                    kind, detail, fix = reason
                    text = expr_text(model, alloc.call)
                    yield self.report(
                        alloc.call,
                        f"`{text}` is passed to `{launch.kernel.name}` as `{param}`, but {detail}: the "
                        f"unwritten elements keep whatever the allocator left there; {fix}",
                        kernel=launch.kernel.name, expression=text, parameter=param, reason=kind)

    # -- the allocation behind a launch argument ------------------------------

    def reaching(self, function: Function) -> Reaching:
        if id(function.node) not in self._reaching:
            self._reaching[id(function.node)] = Reaching(self.model, function)
        return self._reaching[id(function.node)]

    def _allocations(self, function: Function, expr: cst.BaseExpression, at: cst.CSTNode,
                     passed: list[cst.Call], depth: int = 6) -> list[Allocation]:
        if depth <= 0:
            return []
        if isinstance(expr, cst.Name):
            defs = self.reaching(function).defs(expr.value, at)
            if len(defs) != 1:
                return []  # several candidates (branches): stay silent
            d = defs[0]
            if d.kind == "param":  # a wrapper's parameter: look at its callers
                found = []
                for caller, call in host_calls(self.model, function):
                    arg = bind_call_args(call, host_params(function)).get(d.name)
                    if arg is not None:
                        found += self._allocations(caller, arg, call, passed + [call], depth - 1)
                return found
            if d.kind == "assign" and d.value is not None:
                found = self._allocations(function, d.value, d.value, passed, depth - 1)
                return [Allocation(a.call, a.function, a.variable or d, a.passed) for a in found]
            return []
        if isinstance(expr, cst.Call):
            func = expr.func
            if self.model.call_name(expr) in EMPTY or (isinstance(func, cst.Attribute) and func.attr.value in EMPTY_METHODS):
                return [Allocation(expr, function, None, passed)]
            if isinstance(func, cst.Attribute) and func.attr.value in ALIASING:
                return self._allocations(function, func.value, at, passed, depth - 1)
        return []

    def _written_elsewhere(self, alloc: Allocation, launch: Launch) -> bool:
        """Does the host code write the tensor itself, or hand it to anything
        but this launch (which might fill it)?"""
        if alloc.variable is None:
            return False
        name, reaching = alloc.variable.name, self.reaching(alloc.function)
        for node in walk(alloc.function.node):
            if not (isinstance(node, cst.Name) and node.value == name):
                continue
            if alloc.variable not in reaching.defs(name, node):
                continue
            parent = self.model.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                call = self.model.parent(parent)
                if isinstance(call, cst.Call) and call.func is parent and parent.attr.value.endswith("_"):
                    return True  # out.zero_(), out.copy_(...)
            elif isinstance(parent, cst.Subscript) and parent.value is node:
                target = self.model.parent(parent)
                if isinstance(target, (cst.AssignTarget, cst.AugAssign)):
                    return True  # out[...] = ...
            elif isinstance(parent, cst.Arg) and parent.value is node:
                call = self.model.parent(parent)
                if not isinstance(call, cst.Call) or any(call is p for p in alloc.passed):
                    continue
                qualname = self.model.call_name(call) or ""
                reads_only = qualname.startswith("torch.") and not qualname.endswith("_") and \
                    not (parent.keyword is not None and parent.keyword.value == "out")
                if not reads_only:
                    return True  # some other function or kernel may fill it
        return False

    # -- how the kernel can miss part of it -----------------------------------

    def _gap(self, launch: Launch, param: str, alloc: Allocation) -> tuple[str, str, str] | None:
        model, kernel = self.model, launch.kernel
        writes = [(jit, site.node, site.qualname) for jit in model.jit.values() if jit.name == jit.function.name
                  for site in model.calls_in(jit, *WRITES)
                  if (kernel.name, param) in pointer_roots(model, jit, keyword(site.node, "pointer", 0))]
        if not writes:
            if self._other_uses(kernel, param):
                return None  # handed to something we cannot follow (block pointer, descriptor)
            return ("no-store", f"`{kernel.name}` never stores through `{param}`",
                    "store every element in the kernel, or allocate with `torch.zeros`")
        if all(q in RMW for _, _, q in writes):
            op = writes[0][2].rpartition(".")[2]
            return ("atomic-into-empty", f"`{kernel.name}` only accumulates into it with `tl.{op}`, "
                    f"starting from uninitialized memory", "allocate it with `torch.zeros`")
        own = [call for jit, call, _ in writes if jit is kernel]
        early = early_return(self.reaching(kernel.function), kernel, own)
        if early is not None:
            return ("early-return", f"`{kernel.name}` returns before its store under `if {expr_text(model, early)}:`, "
                    f"so those programs write nothing", "write the output before returning, or allocate with `torch.zeros`")
        for call in own:
            strict = self._strict_mask(launch, call, alloc)
            if strict is not None:
                return ("mask", strict, "mask with the tensor's full size, or allocate exactly what is written")
        return self._grid_gap(launch, own)

    def _other_uses(self, kernel: JitFunction, param: str) -> bool:
        flow = self.model.flow(kernel.function)
        for site in self.model.calls_in(kernel):
            if site.qualname == TL + "load":
                continue
            if any(d.kind == "param" and d.name == param for a in site.node.args for d in flow.upstream(a.value)):
                return True
        return False

    def _strict_mask(self, launch: Launch, store: cst.Call, alloc: Allocation) -> str | None:
        """`offs < n - 1` / `offs < n // 2` where `n` is the output's own size."""
        kernel, model = launch.kernel, self.model
        mask = keyword(store, "mask", 2)
        if mask is None:
            return None
        exprs = [mask] + [d.value for d in model.flow(kernel.function).upstream(mask) if d.value is not None]
        for comparison in (n for e in exprs for n in walk(e) if isinstance(n, cst.Comparison)):
            if len(comparison.comparisons) != 1:
                continue
            op, right = comparison.comparisons[0].operator, comparison.comparisons[0].comparator
            if isinstance(op, (cst.LessThan, cst.LessThanEqual)):
                bound, strict_lt = right, isinstance(op, cst.LessThan)
            elif isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
                bound, strict_lt = comparison.left, isinstance(op, cst.GreaterThan)
            else:
                continue
            if not isinstance(bound, cst.BinaryOperation) or not isinstance(bound.left, cst.Name):
                continue
            amount = int_literal(bound.right)
            short = isinstance(bound.operator, cst.FloorDivide) and amount is not None and amount >= 2 or \
                isinstance(bound.operator, cst.Subtract) and amount is not None and amount >= (1 if strict_lt else 2)
            size = launch.args.get(bound.left.value)
            if not short or size is None or not self._same_size(launch, size, alloc):
                continue
            size_text = expr_text(model, size)
            own = f"`{size_text}`" if size_text == bound.left.value else f"`{bound.left.value}` = `{size_text}`"
            return (f"its store mask `{expr_text(model, comparison)}` never writes its last elements "
                    f"({own} is the tensor's own size)")
        return None

    def _same_size(self, launch: Launch, size: cst.BaseExpression, alloc: Allocation) -> bool:
        assert launch.wrapper is not None
        return bool(size_keys(self.reaching(launch.wrapper), size, launch.call) &
                    allocated_size_keys(self.reaching(alloc.function), alloc.call))

    def _grid_gap(self, launch: Launch, writes: list[cst.Call]) -> tuple[str, str, str] | None:
        wrapper, model = launch.wrapper, self.model
        assert wrapper is not None
        if grid_stride(model, launch.kernel):
            return None  # a persistent kernel: its loop steps over every tile, whatever the grid
        host = self.reaching(wrapper)
        elements = grid_elements(host, launch.grid, launch.call)
        for element in elements:
            for node in walk(element):
                if floor_division(model, node, element) and not divisibility_checked(wrapper, model) and \
                        not inside_ceiling(model, node, element) and not exact_division(host, node):
                    return ("grid", f"its grid rounds `{expr_text(model, node)}` down, so the last "
                            f"partial block is never launched",
                            "size the grid with `triton.cdiv`")
        if elements and all(int_literal(e) is not None for e in elements) and writes and \
                not any(self._in_loop(w, launch.kernel.function) for w in writes) and \
                any(self._runtime_mask(launch.kernel, w) for w in writes) and \
                not any(block_follows_size(host, launch, w) for w in writes):
            return ("grid", f"the grid `{expr_text(model, launch.grid)}` is a constant while the store mask "
                    f"depends on a runtime size, so larger tensors are only partly written",
                    "size the grid with `triton.cdiv`")
        return None

    def _runtime_mask(self, kernel: JitFunction, store: cst.Call) -> bool:
        mask = keyword(store, "mask", 2)
        if mask is None:
            return False
        return any(d.kind == "param" and not (kernel.param(d.name) and kernel.param(d.name).is_constexpr)
                   for d in self.model.flow(kernel.function).upstream(mask))

    def _in_loop(self, node: cst.CSTNode, function: Function) -> bool:
        for a in self.model.ancestors(node):
            if a is function.node:
                return False
            if isinstance(a, (cst.For, cst.While)):
                return True
        return False
