"""CMP003 shape-specialized: the kernel only works at the benchmark's shape."""

from __future__ import annotations

import operator
import re
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, node_text
from kanalyze.analyzer.triton import (Dataflow, Function, JitFunction, Launch, TritonModule, calls_within,
                                      int_literal, keyword, names_read, walk)
from kanalyze.rules.base import Report, Rule, expr_text, source

TL = "triton.language."
LOAD, STORE, ARANGE, PROGRAM_ID = TL + "load", TL + "store", TL + "arange", TL + "program_id"
# Host calls whose positional arguments are sizes (None: all of them; n: only the n-th).
SIZED = {"torch.empty": None, "torch.zeros": None, "torch.ones": None, "torch.full": 0, "torch.rand": None,
         "torch.randn": None, "torch.empty_strided": 0, "torch.reshape": 1}
RESHAPES = {"view": None, "reshape": None, "expand": None, "new_empty": None, "new_zeros": None,
            "new_ones": None, "new_full": 0}
NOT_SIZES = {"dim", "ndim", "ndimension", "element_size", "itemsize", "dtype", "device"}
SHAPE_ATTRS = {"shape", "size", "numel", "stride"}
_ARITH = {cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul,
          cst.FloorDivide: operator.floordiv}
_SIZE_NAME = re.compile(r"(?i)^[nmkbchwdlts](_|$|\d)|^[A-Z]{1,2}$|num|size|elem|len|dim|rows|cols|count|total"
                        r"|batch|seq|ctx|heads|feat|chan|width|height|depth|hidden|tokens")
# A grid sized by the machine (persistent kernels), not by the input.
_MACHINE = re.compile(r"(?i)(^|_)(num_)?sms?($|_)|sm_count|multi_processor")


class ShapeSpecialized(Rule):
    code = "CMP003"
    name = "shape-specialized"
    summary = ("Literal sizes in the wrapper or kernel where the tensor's own shape should be used, shape "
               "asserts tying the kernel to one shape, grid by floor division instead of triton.cdiv, "
               "unmasked tl.load/tl.store whose offsets depend on a runtime size")
    gate = "cmp003-perturbed-shapes"
    docs = """
    ## What it does
    Flags what ties a kernel to the benchmark's shape: literal sizes in the
    forward path (`n = 4096` passed as a runtime size, `x.view(128, -1)`,
    `torch.empty(4096, ...)`, a grid of `triton.cdiv(4096, BLOCK)`, a mask
    `offs < 4096` in the kernel), shape asserts (`assert x.shape[0] == 4096`,
    `assert K % 64 == 0`, `tl.static_assert(N % BLOCK == 0)` on a runtime size),
    grids rounded down (`n // BLOCK`), and `tl.load` / `tl.store` without a mask
    whose offsets run over a dimension of runtime size.

    ## Why is this bad
    KernelBench checks five inputs of one fixed shape.  A kernel that hard-codes
    that shape, or only works when every size is a multiple of its block, passes
    and then reads or writes out of bounds, skips the tail, or refuses to run at
    the next shape it meets.

    ## Example
    ```python
    n = 4096
    add_kernel[(n // 1024,)](x, out, n, BLOCK=1024)
    x = tl.load(x_ptr + offs)            # in the kernel
    ```

    ## Use instead
    ```python
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    ```
    """

    VALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

        def add(x):
            out = torch.empty_like(x)
            n = x.numel()
            add_kernel[((n + 1024 - 1) // 1024,)](x, out, n, BLOCK=1024)
            return out
        """),
    ]
    INVALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)

        def add(x):
            assert x.numel() % 1024 == 0
            out = torch.empty_like(x)
            n = 4096
            add_kernel[(n // 1024,)](x, out, n, BLOCK=1024)
            return out
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        for launch in model.launches:
            if launch.wrapper is not None:
                yield from self._launch(model, launch)
        for fn in model.forward_path:
            yield from self._host_sizes(model, fn)
            yield from self._host_asserts(model, fn)
        for jit in model.jit.values():
            if jit.name == jit.function.name:  # skip aliases of `k = triton.jit(_k)`
                pointers = _pointer_params(model, jit)
                runtime = _runtime_params(model, jit, pointers)
                yield from self._kernel_literals(model, jit)
                yield from self._kernel_asserts(model, jit, runtime)
                yield from self._unmasked(model, jit, pointers, runtime)

    # -- 1. literal sizes ------------------------------------------------------

    def _launch(self, model: TritonModule, launch: Launch) -> Iterator[Report]:
        jit, flow = launch.kernel, model.flow(launch.wrapper)
        for name, arg in launch.args.items():
            param, value = jit.param(name), _const(flow, arg)
            if param is None or param.is_constexpr or "seed" in name or value is None or value < 2:
                continue  # constexprs are tile sizes; literals passed to them stay silent
            text = expr_text(model, arg)
            yield self.report(arg, f"`{text}` passes the literal size {value} to `{name}` of `{jit.name}`; derive "
                                   f"it from the tensor (`x.numel()`, `x.shape[i]`, `x.stride(i)`)",
                              kernel=jit.name, expression=text, literal=value, parameter=name)
        constexpr_args = {expr_text(model, v) for k, v in launch.args.items() if k in jit.constexpr_names}
        grid_stride = bool(model.calls_in(jit, TL + "num_programs"))
        for dim in _grid_dims(flow, launch.grid):
            for node, value, whole in _grid_sizes(model, flow, dim):
                text = expr_text(model, node)
                if whole and (grid_stride or text in constexpr_args or _MACHINE.search(text)):
                    continue  # a split-K factor, a persistent or a grid-stride launch
                yield self.report(node, f"grid size `{text}` is the literal {value}; compute it from the tensor "
                                        f"(`triton.cdiv(x.shape[i], BLOCK)`) so the grid follows the input",
                                  kernel=jit.name, expression=text, literal=value)
            yield from self._floor_grid(model, flow, launch, dim)

    def _host_sizes(self, model: TritonModule, fn: Function) -> Iterator[Report]:
        flow = model.flow(fn)
        for site in model.calls_in(fn):
            func = site.node.func
            if site.qualname in SIZED:
                which = SIZED[site.qualname]
            elif isinstance(func, cst.Attribute) and func.attr.value in RESHAPES:
                which = RESHAPES[func.attr.value]
            else:
                continue
            args = [a.value for a in site.node.args if a.keyword is None and not a.star]
            args = args[which:which + 1] if which is not None else args
            if len(args) == 1 and isinstance(args[0], (cst.Tuple, cst.List)):
                args = [e.value for e in args[0].elements]
            values = [_const(flow, arg) for arg in args]
            for arg, value in zip(args, values):
                # A small literal among runtime dims is structure (`qkv.view(B, T, 3, H, D)`), not a size.
                if value is not None and (value > 8 or None not in values) and value >= 2:
                    call = expr_text(model, site.node)
                    yield self.report(arg, f"`{call}` hard-codes the size {value}; use the tensor's own shape "
                                           f"(`x.shape[i]`, or `-1` for one inferred dimension)",
                                      expression=call, literal=value)

    def _kernel_literals(self, model: TritonModule, jit: JitFunction) -> Iterator[Report]:
        flow = model.flow(jit)
        for node in walk(jit.node):
            if isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and isinstance(
                    node.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
                                                   cst.GreaterThanEqual)):
                sides = (node.left, node.comparisons[0].comparator)
                for a, b in (sides, sides[::-1]):
                    value = _const(flow, b)
                    if value is not None and value >= 2 and _reaches(model, jit, a, ARANGE):
                        text = expr_text(model, node)
                        yield self.report(node, f"`{text}` bounds the offsets by the literal {value}; pass the "
                                                f"size as a kernel argument and compare against it",
                                          kernel=jit.name, expression=text, literal=value)
            elif isinstance(node, cst.Call) and len(node.args) == 3 and model.call_name(node) in (
                    "range", TL + "range", TL + "static_range"):
                value = _const(flow, node.args[1].value)
                if value is not None and value >= 2 and _const(flow, node.args[2].value) is None:
                    text = expr_text(model, node)  # `range(0, 4096, BLOCK_K)`: a size, stepped by a tile
                    yield self.report(node.args[1].value, f"`{text}` loops to the literal size {value}; pass the "
                                                          f"size as a kernel argument",
                                      kernel=jit.name, expression=text, literal=value)

    # -- 2. shape asserts ------------------------------------------------------

    def _host_asserts(self, model: TritonModule, fn: Function) -> Iterator[Report]:
        flow = model.flow(fn)
        size_like = lambda e: _host_size_like(model, fn, e)  # noqa: E731
        for node in walk(fn.node):
            if isinstance(node, cst.Assert):
                at, test, text, form = node, node.test, f"assert {expr_text(model, node.test)}", True
            elif isinstance(node, cst.If) and any(isinstance(s, cst.SimpleStatementLine) and isinstance(
                    s.body[0], cst.Raise) for s in node.body.body):
                at, test, text, form = node.test, node.test, f"if {expr_text(model, node.test)}: raise", False
            else:
                continue
            pin = _pin(flow, test, size_like, form)
            if pin is not None:
                yield self._pin_report(model, at, text, pin, None)

    def _kernel_asserts(self, model: TritonModule, jit: JitFunction, runtime: set[str]) -> Iterator[Report]:
        flow = model.flow(jit)
        # Only runtime sizes count: `tl.static_assert(BLOCK_K % 16 == 0)` checks a tile.
        size_like = lambda e: bool((names_read(e) | {d.name for d in flow.upstream(e)}) & runtime)  # noqa: E731
        for node in walk(jit.node):
            if isinstance(node, cst.Call) and node.args and model.call_name(node) in (
                    TL + "static_assert", TL + "device_assert"):
                test, text = node.args[0].value, expr_text(model, node)
            elif isinstance(node, cst.Assert):
                test, text = node.test, f"assert {expr_text(model, node.test)}"
            else:
                continue
            pin = _pin(flow, test, size_like, True)
            if pin is not None:
                yield self._pin_report(model, node, text, pin, jit.name)

    def _pin_report(self, model, node, text, pin, kernel) -> Report:
        kind, size, value = pin
        size = expr_text(model, size)
        if kind == "divisibility":
            message = (f"`{text}` rejects every `{size}` that is not a multiple of `{value}`; drop it and "
                       f"handle the remainder with a mask (`mask=offs < {size}`) instead")
        else:
            message = (f"`{text}` ties the kernel to `{size}` == {value}; read the size from the tensor and "
                       f"handle the remainder with a mask instead")
        return self.report(node, message, kernel=kernel, expression=text, assertion=kind)

    # -- 3. grid rounded down --------------------------------------------------

    def _floor_grid(self, model: TritonModule, flow: Dataflow, launch: Launch, dim) -> Iterator[Report]:
        for node in _expand(flow, dim):
            if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
                continue
            left = node.left
            if isinstance(left, cst.UnaryOperation) or (isinstance(left, cst.BinaryOperation) and isinstance(
                    left.operator, (cst.Add, cst.Subtract))):
                continue  # `(n + B - 1) // B` and `-(-n // B)` round up
            if not _is_tile(model, flow, launch, node.right):
                continue  # `x.numel() // x.shape[-1]` is an exact row count
            text, n, b = (expr_text(model, e) for e in (node, left, node.right))
            yield self.report(node, f"grid `{text}` rounds down: the last `{n} % {b}` elements get no program; "
                                    f"use `triton.cdiv({n}, {b})`", kernel=launch.kernel.name, expression=text)

    # -- 4. unmasked loads and stores ------------------------------------------

    def _unmasked(self, model: TritonModule, jit: JitFunction, pointers: set[str],
                  runtime: set[str]) -> Iterator[Report]:
        comparisons = [(n.left, n.comparisons[0].comparator) for n in walk(jit.node)
                       if isinstance(n, cst.Comparison) and len(n.comparisons) == 1]
        sizes = _sizes(model, jit, runtime, comparisons)
        one_dim = len(model.calls_in(jit, ARANGE)) == 1
        for site in model.calls_in(jit, LOAD, STORE):
            call, is_load = site.node, site.qualname == LOAD
            mask, pointer = keyword(call, "mask", 1 if is_load else 2), keyword(call, "pointer", 0)
            if (mask is not None and not _is_none(mask)) or keyword(call, "boundary_check") is not None \
                    or pointer is None or _guarded(model, jit, call):
                continue
            exprs = list(model.sources(jit, pointer))
            calls = {id(c): (c, n, f, e) for f, e in exprs for c, n in calls_within(model, e)}
            if any(n in (TL + "make_block_ptr", TL + "advance") for _, n, _, _ in calls.values()):
                continue
            open_ranges = {id(c): (c, f, e) for c, n, f, e in calls.values()
                           if n == ARANGE and not _bounded(model, c, e) and not _exact(model, c)}
            if not open_ranges:
                continue  # a scalar load, or every arange covers its dimension exactly
            offs, ids = _offsets(model, jit, pointer, pointers, set(open_ranges))
            arange, fn, root = open_ranges[next((k for k in open_ranges if k in ids), next(iter(open_ranges)))]
            tiled = _reaches(model, fn, root, PROGRAM_ID)
            extent = keyword(arange, "end", 1)
            depends = set().union(*(names_read(e) for f, e in exprs if f is jit.function)) & runtime
            if not (depends or (tiled and sizes) or _shape_kinds(model, jit, extent) - {None}):
                continue
            bound = _bound(jit, offs, sizes, comparisons, one_dim)
            block = expr_text(model, extent) if extent is not None else "BLOCK"
            reach = f"run to pid*{block}+{block}-1" if tiled else f"span `tl.arange(0, {block})`"
            past = f"past `{bound}` when it is" if bound else "past the end of their dimension when its size is"
            fix = f"add `mask={offs} < {bound}`" if bound and offs else \
                f"add a mask on `{offs}`" if offs else "add a mask on the offsets"
            text = expr_text(model, call)
            yield self.report(call, f"`{text}` has no mask; offsets {reach}, {past} not a multiple of {block}; "
                                    f"{fix}" + (" (and `other=`)" if is_load else ""),
                              kernel=jit.name, expression=text, bound=bound or "",
                              access="load" if is_load else "store")


# --- values and names ----------------------------------------------------------

def _def_value(d, name: str) -> cst.BaseExpression | None:
    """The value `d` assigns to `name` (also for `M, N = 4096, 1024`)."""
    if d.kind != "assign" or not isinstance(d.node, cst.Assign):
        return d.value if d.kind == "assign" else None
    for t in d.node.targets:
        if isinstance(t.target, cst.Name):
            return d.value
        if isinstance(t.target, (cst.Tuple, cst.List)) and isinstance(d.value, (cst.Tuple, cst.List)) \
                and len(t.target.elements) == len(d.value.elements):
            for te, ve in zip(t.target.elements, d.value.elements):
                if isinstance(te.value, cst.Name) and te.value.value == name:
                    return ve.value
    return None


def _single(flow: Dataflow, name: str) -> cst.BaseExpression | None:
    defs = flow.defs_of(name)
    return _def_value(defs[0], name) if len(defs) == 1 else None


def _const(flow: Dataflow, expr, depth: int = 4) -> int | None:
    """The integer an expression always has, from literals in this function (never module globals)."""
    literal = int_literal(expr)
    if literal is not None or depth <= 0:
        return literal
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _ARITH:
        a, b = _const(flow, expr.left, depth - 1), _const(flow, expr.right, depth - 1)
        return None if a is None or b is None or b == 0 else _ARITH[type(expr.operator)](a, b)
    if isinstance(expr, cst.Name) and flow.defs_of(expr.value):
        values = {_const(flow, v, depth - 1) if (v := _def_value(d, expr.value)) is not None else None
                  for d in flow.defs_of(expr.value)}
        return values.pop() if len(values) == 1 and None not in values else None
    return None


def _is_none(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _is_mod(expr) -> bool:
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)


def _reaches(model: TritonModule, jit: JitFunction, expr, qualname: str) -> bool:
    """Does a call to `qualname` feed `expr` (through locals and jit helper arguments)?"""
    return any(n == qualname for _, e in model.sources(jit, expr) for _, n in calls_within(model, e))


def _shape_kind(model: TritonModule, fn: Function, expr) -> str | None:
    """How a host value relates to the input's shape: "direct" (`x.shape[1]`, `N` from
    `M, N = x.shape`), "arith" (`K // 2`), "computed" (`triton.next_power_of_2(n)`), or None."""
    nodes = [n for _, e in model.sources(fn, expr) for n in walk(e)]
    if not any(isinstance(n, cst.Attribute) and n.attr.value in SHAPE_ATTRS for n in nodes):
        return None
    if any(isinstance(n, cst.Call) and not (isinstance(n.func, cst.Attribute) and n.func.attr.value in SHAPE_ATTRS)
           for n in nodes):
        return "computed"
    return "arith" if any(isinstance(n, cst.BinaryOperation) for n in nodes) else "direct"


def _shape_kinds(model: TritonModule, jit: JitFunction, name) -> set[str | None]:
    """The `_shape_kind` of what each launch binds to the constexpr `name` (None where unbound)."""
    if not isinstance(name, cst.Name) or name.value not in jit.constexpr_names:
        return set()
    kinds = set()
    for launch in jit.launches:
        value = launch.args.get(name.value)
        kinds.add(_shape_kind(model, launch.wrapper, value) if value is not None and launch.wrapper else None)
    return kinds | ({None} if any(name.value in c for c in jit.autotune_configs) else set())


# --- grids -----------------------------------------------------------------------

def _grid_dims(flow: Dataflow, grid) -> list:
    for _ in range(3):
        if isinstance(grid, cst.Name) and _single(flow, grid.value) is not None:
            grid = _single(flow, grid.value)
    grid = grid.body if isinstance(grid, cst.Lambda) else grid
    if isinstance(grid, (cst.Tuple, cst.List)):
        return [e.value for e in grid.elements if isinstance(e, cst.Element)]
    return [grid]


def _expand(flow: Dataflow, expr, depth: int = 3) -> Iterator[cst.CSTNode]:
    """The arithmetic of a grid dimension, local names replaced by their one value; calls
    (`triton.cdiv(...)`, `min(NUM_SMS, ...)`) are not looked into."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Call, cst.Lambda)):
            continue
        yield node
        stack.extend(child_nodes(node))
        if isinstance(node, cst.Name) and depth > 0 and (value := _single(flow, node.value)) is not None:
            yield from _expand(flow, value, depth - 1)


def _grid_sizes(model: TritonModule, flow: Dataflow, expr, whole: bool = True, depth: int = 3):
    """(node, literal, is_whole_dimension) for each literal size in a grid dimension: the
    dimension itself, a factor of it, or the numerator of a (ceil) division."""
    name = model.call_name(expr) if isinstance(expr, cst.Call) else None
    if depth < 0 or name in ("min", "max"):
        return
    if name in ("triton.cdiv", TL + "cdiv", "math.ceil") and expr.args:
        numerator = expr.args[0].value
        if isinstance(numerator, cst.BinaryOperation) and isinstance(numerator.operator, cst.Divide):
            numerator = numerator.left  # math.ceil(n / BLOCK)
        yield from _grid_sizes(model, flow, numerator, False, depth - 1)
    elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.FloorDivide):
        numerator = expr.left
        while isinstance(numerator, cst.BinaryOperation) and isinstance(numerator.operator, (cst.Add, cst.Subtract)):
            numerator = numerator.left  # (n + BLOCK - 1) // BLOCK
        yield from _grid_sizes(model, flow, numerator, False, depth - 1)
    elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        yield from _grid_sizes(model, flow, expr.left, whole, depth - 1)
        yield from _grid_sizes(model, flow, expr.right, whole, depth - 1)
    elif (value := _const(flow, expr)) is not None:
        yield from [(expr, value, whole)] if value >= 2 else ()
    elif isinstance(expr, cst.Name) and (resolved := _single(flow, expr.value)) is not None:
        yield from _grid_sizes(model, flow, resolved, whole, depth - 1)


def _is_tile(model: TritonModule, flow: Dataflow, launch: Launch, expr) -> bool:
    """Is a grid divisor a block size: a literal, `meta['BLOCK']`, a constexpr argument?"""
    if _const(flow, expr) is not None or (isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name)):
        return True
    text = expr_text(model, expr)
    if any(text == expr_text(model, launch.args[p]) for p in launch.kernel.constexpr_names if p in launch.args):
        return True
    if isinstance(expr, cst.Name):
        param, value = flow.param(expr.value), _single(flow, expr.value)
        if param is not None and int_literal(param.node.default) is not None:
            return True
        if isinstance(value, cst.Call) and (model.call_name(value) or "").endswith("next_power_of_2"):
            return True
    return "BLOCK" in text


# --- asserts ---------------------------------------------------------------------

def _host_size_like(model: TritonModule, fn: Function, expr) -> bool:
    nodes = [n for _, e in model.sources(fn, expr) for n in walk(e)]
    attrs = {n.attr.value for n in nodes if isinstance(n, cst.Attribute)}
    if attrs & NOT_SIZES or any(isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len"
                                for n in nodes):
        return False  # rank, dtype or element-size checks do not pin a shape
    if attrs & SHAPE_ATTRS:
        return True
    param = model.flow(fn).param(expr.value) if isinstance(expr, cst.Name) else None
    return param is not None and expr.value != "self" and "BLOCK" not in expr.value.upper() and \
        int_literal(param.node.default) is None  # `BLOCK_SIZE=1024`: a tile, not a size


def _pin(flow: Dataflow, test, size_like, assert_form: bool):
    """("equality" | "divisibility", size, value) when a condition pins a shape.  `assert_form`:
    the condition must hold (`assert`); otherwise it is the failure (`if ...: raise`)."""
    if isinstance(test, cst.BooleanOperation):
        return _pin(flow, test.left, size_like, assert_form) or _pin(flow, test.right, size_like, assert_form)
    if not assert_form and _is_mod(test) and size_like(test.left):
        return "divisibility", test.left, _plain_text(test.right)  # `if n % BLOCK: raise`
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(
            test.comparisons[0].operator, cst.Equal if assert_form else cst.NotEqual):
        return None
    sides = (test.left, test.comparisons[0].comparator)
    for a, b in (sides, sides[::-1]):
        if _is_mod(a) and _const(flow, b) == 0 and size_like(a.left):
            return "divisibility", a.left, _plain_text(a.right)
        value = _const(flow, b)
        if isinstance(b, (cst.Tuple, cst.List)):  # `x.shape == (16, 1024)`
            values = [_const(flow, e.value) for e in b.elements]
            value = max(values) if values and None not in values else None
            value = _plain_text(b) if value is not None and value >= 2 else None
        if value is not None and (isinstance(value, str) or value >= 2) and size_like(a):
            return "equality", a, value
    return None


_EMPTY_MODULE = cst.Module([])


def _plain_text(node) -> str:
    return node_text(_EMPTY_MODULE, node)


# --- kernel parameters and offsets -------------------------------------------

def _pointer_params(model: TritonModule, jit: JitFunction) -> set[str]:
    """Parameters used as the base address of a memory access, or named like one."""
    names = {p.name for p in jit.params if re.search(r"(?i)ptr|pointer", p.name)}
    flow, params = model.flow(jit), {p.name for p in jit.params}
    for site in model.calls_in(jit):
        leaf = (site.qualname or "").removeprefix(TL)
        if leaf not in ("load", "store", "make_block_ptr") and not leaf.startswith("atomic_"):
            continue
        first = keyword(site.node, "pointer", 0)
        stack, budget = [first if first is not None else keyword(site.node, "base", 0)], 8
        while stack and budget:
            e, budget = stack.pop(), budget - 1
            while isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.Add):
                e = e.left  # `x_ptr + row * stride + cols`: the base is leftmost
            if isinstance(e, cst.Name):
                names |= {e.value} & params
                stack += [v for d in flow.defs_of(e.value) if (v := _def_value(d, e.value)) is not None]
    return names


def _runtime_params(model: TritonModule, jit: JitFunction, pointers: set[str]) -> set[str]:
    """Scalar parameters holding a runtime size: non-constexpr non-pointers, and constexprs bound
    at a launch to the input's shape (`N=x.shape[1]`, not the tile `triton.next_power_of_2(n)`)."""
    return {p.name for p in jit.params if (not p.is_constexpr and p.name not in pointers and "seed" not in p.name)
            or (p.is_constexpr and _shape_kinds(model, jit, cst.Name(p.name)) & {"direct", "arith"})}


def _exact(model: TritonModule, arange: cst.Call) -> bool:
    """`tl.arange(0, D)` with `D=x.shape[-1]` at every launch covers its dimension exactly."""
    jit = model.jit_of(arange)
    return jit is not None and _shape_kinds(model, jit, keyword(arange, "end", 1)) == {"direct"}


def _clamps(model: TritonModule, node) -> bool:
    return _is_mod(node) or (isinstance(node, cst.Call) and model.call_name(node) in (TL + "minimum", TL + "where"))


def _bounded(model: TritonModule, arange: cst.Call, root) -> bool:
    """`(pid * B + tl.arange(0, B)) % M` wraps into bounds; `offs = tl.where(offs < M, offs, 0)`
    and `tl.minimum(offs, n - 1)` clamp."""
    for node in model.ancestors(arange):
        if _clamps(model, node):
            return True
        if node is root:
            break
    fn = model.function_of(arange)
    if fn is None:
        return False
    flow = model.flow(fn)
    names = {d.name for d in flow.defs_at(model.parent(root))}
    return any(d.value is not None and any(_clamps(model, n) for n in walk(d.value))
               for name in names for d in flow.defs_of(name))


def _guarded(model: TritonModule, jit: JitFunction, call: cst.Call) -> bool:
    """`if EVEN_K: tl.load(p) else: tl.load(p, mask=...)`: the unmasked branch is the fast
    path for full tiles, chosen when the size allows it."""
    child = call
    for node in model.ancestors(call):
        if node is jit.node:
            return False
        if isinstance(node, cst.If):
            other = node.orelse if child is node.body else node.body
            if other is not None and any(
                    (m := keyword(c, "mask", 1 if n == LOAD else 2)) is not None and not _is_none(m)
                    for c, n in calls_within(model, other) if n in (LOAD, STORE)):
                return True
        child = node
    return False


def _sizes(model: TritonModule, jit: JitFunction, runtime: set[str], comparisons) -> set[str]:
    """Runtime parameters that are sizes (not strides, not `eps`): compared against
    arange-derived offsets somewhere in the kernel, or named like a size."""
    compared = set().union(*(names_read(right) for left, right in comparisons if _reaches(model, jit, left, ARANGE)))
    return {p for p in runtime if "stride" not in p.lower() and (p in compared or _SIZE_NAME.search(p))}


def _offsets(model: TritonModule, jit: JitFunction, pointer, pointers: set[str], open_ids: set[int],
             depth: int = 3) -> tuple[str | None, set[int]]:
    """The name carrying an unbounded arange in a pointer (`offs` in `x_ptr + offs`), and the
    ids of the aranges it carries."""
    flow = model.flow(jit)
    for name in sorted(names_read(pointer) - pointers):
        ids = {id(c) for _, e in model.sources(jit, cst.Name(name)) for c, _ in calls_within(model, e)} & open_ids
        if not ids:
            continue
        values = [v for d in flow.defs_of(name) if (v := _def_value(d, name)) is not None and names_read(v) & pointers]
        if not values:
            return name, ids
        if depth > 0 and (found := _offsets(model, jit, values[0], pointers, open_ids, depth - 1))[0]:
            return found  # `ptrs = x_ptr + offs`: the offsets are inside
    return None, set()


def _bound(jit: JitFunction, offs: str | None, sizes: set[str], comparisons, one_dim: bool) -> str | None:
    """The size the offsets are compared against elsewhere in the kernel, else the only size
    (when the kernel has one arange, hence one dimension)."""
    for left, right in comparisons:
        if offs in names_read(left) and (found := sorted(names_read(right) & sizes)):
            return found[0]
    plain = {s for s in sizes if not jit.param(s).is_constexpr}
    return next(iter(plain)) if one_dim and len(plain) == 1 else None
