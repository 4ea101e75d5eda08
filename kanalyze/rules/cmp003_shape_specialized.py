"""CMP003 shape-specialized: the kernel only works at the benchmark's shape.

What it reports lives here; the analysis it reads lives in kanalyze.analyzer.triton:
size_literals (literal sizes and shape checks that do or do not pin a shape),
tile_extents and exact_sizes (aranges exactly as wide as a size), row_windows (columns
that stay inside a row), dispatch_facts (what the wrapper knows where it picks a kernel)
and full_blocks (loops, guards, pruners and grids that keep unmasked accesses on full
blocks).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.access_offsets import compared_bound, guarded_by_masked_branch, offsets_name, size_params
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.entities import Function, JitFunction, Launch
from kanalyze.analyzer.triton.full_blocks import guarded_block, pruned_multiples
from kanalyze.analyzer.triton.grids import grid_arithmetic, grid_dims, grid_literal_sizes
from kanalyze.analyzer.triton.grouped_order import whole_group_orderings
from kanalyze.analyzer.triton.host_sizes import division_checked
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.past_the_end import open_aranges, partial_masks
from kanalyze.analyzer.triton.shape_asserts import host_size_like
from kanalyze.analyzer.triton.shapes import (ARANGE, LOAD, PROGRAM_ID, STORE, TL, constant_int, is_none,
                                             pointer_params, reaches, runtime_params, shape_kinds)
from kanalyze.analyzer.triton.size_literals import (MACHINE, RESHAPES, SIZED, TILE_NAME, block_follows_programs,
                                                    grid_divisor_is_tile, host_tile, is_harness, kernel_tile,
                                                    rounded, shape_pins, whole_blocks_of)
from kanalyze.analyzer.triton.tail_sums import tail_sums
from kanalyze.analyzer.triton.tile_bounds import dimension_bounds
from kanalyze.analyzer.triton.tile_extents import arange_reaches, fixed_arity
from kanalyze.rules.base import Report, Rule, expr_text, source


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
    grids rounded down (`n // BLOCK`; after a check of `n % BLOCK`, here or in
    the `forward` of a `backward`, as the restriction it relies on), and
    `tl.load` / `tl.store` without a mask whose offsets run over a dimension of
    runtime size, or with a mask that leaves out the last block's tail (the
    store masked by `offsets < total`, a load by a window check alone while its
    address decodes a coordinate with `//` and no `%`:
    `analyzer/triton/past_the_end.py`), a `tl.sum` that adds the lanes its load's
    mask leaves out (`other=0.0`, then `exp(x - row_max)`: each adds `exp(-row_max)`;
    `analyzer/triton/tail_sums.py`), and a grouped program order that takes the row tiles in whole
    groups (`pid_m = first_pid_m + pid % GROUP_M`, without the tutorial's
    `min(num_pid_m - first_pid_m, GROUP_M)`: where the row tiles do not fill the
    last group, some output tiles are computed by nobody;
    `analyzer/triton/grouped_order.py`).

    It leaves alone what does not tie the kernel to a size the problem varies:
    definitional checks (`assert w.shape[0] == 3` where the kernel reads
    `w[0]`, `w[1]`, `w[2]`; `assert HQ % H == 0` between two inputs' sizes;
    `N % num_groups`), a modulus of 2 (halves), comparisons of loaded data with a
    literal (`x < 6`), lower bounds (`2 < span`), an arange as wide as an exact
    factor of its axis (`i_h * G + tl.arange(0, G)` with `G = HQ // H`; a size
    saved as `ctx.D` for backward; a block the wrapper launches only where it equals
    the size, directly or through a planning helper's flag), loops over full blocks
    whose last block is peeled and masked (`range(0, K - BLOCK, BLOCK)`,
    `range(0, n // BLOCK)`, `range(0, pid * BLOCK, BLOCK)`), accesses under
    `if start + BLOCK <= n:`, columns that stay inside their row (`o_i + 48` where
    the wrapper picks the kernel only for `BT == 64`; tiles of a configured chunk
    `i_i * BC` with `i_i = i_c % NC`), blocks that only run whole (an autotune
    pruner keeping `N % BLOCK_N == 0`, a wrapper's `assert D % BLOCK == 0`, tiles
    of a grid rounded down, which is reported once, on the grid), offsets wrapped
    on the way (`rm % M`), indices read from memory, and tests or benchmarks that
    pick a shape.

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
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def lse_kernel(q_ptr, lse_ptr, HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr):
            i_t, i_h = tl.program_id(0), tl.program_id(1)
            o_g = i_h * G + tl.arange(0, G)
            q = tl.load(q_ptr + (i_t * HQ + o_g[:, None]) * D + tl.arange(0, D)[None, :])
            tl.store(lse_ptr + i_t * HQ + o_g, tl.sum(q, axis=1))

        def lse(q, k):
            T, HQ, D = q.shape
            H = k.shape[1]
            assert HQ % H == 0
            out = torch.empty(T, HQ, device=q.device, dtype=torch.float32)
            lse_kernel[(T, H)](q, out, HQ=HQ, G=HQ // H, D=D)
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
            if launch.wrapper is not None and not is_harness(launch.wrapper):
                yield from self._launch(model, launch)
        for fn in model.forward_path:
            if not is_harness(fn):  # a test or benchmark picks the problem's shape: that is its job
                yield from self._host_sizes(model, fn)
            yield from self._host_asserts(model, fn)
        for jit in model.jit.values():
            if jit.name == jit.function.name:  # skip aliases of `k = triton.jit(_k)`
                pointers = pointer_params(model, jit)
                runtime = runtime_params(model, jit, pointers)
                yield from self._kernel_literals(model, jit)
                yield from self._kernel_asserts(model, jit, runtime)
                yield from self.unmasked_accesses(model, jit, pointers, runtime)
                yield from self.partly_masked_accesses(model, jit, runtime)
                yield from self._tail_sums(model, jit)
                yield from self._whole_groups(model, jit)

    # -- 1. literal sizes ------------------------------------------------------

    def _launch(self, model: TritonModule, launch: Launch) -> Iterator[Report]:
        jit, flow = launch.kernel, model.flow(launch.wrapper)
        pointers = pointer_params(model, jit)
        comparisons = [(n.left, n.comparisons[0].comparator) for n in walk(jit.node)
                       if isinstance(n, cst.Comparison) and len(n.comparisons) == 1]
        sizes = size_params(model, jit, runtime_params(model, jit, pointers), comparisons)
        for name, arg in launch.args.items():
            param, value = jit.param(name), constant_int(flow, arg)
            if param is None or param.is_constexpr or "seed" in name or value is None or value < 2:
                continue  # constexprs are tile sizes; literals passed to them stay silent
            if name not in sizes:
                continue  # `bits_per_pass=4`, `value=10`: a parameter of the algorithm, not a size
            text = expr_text(model, arg)
            yield self.report(arg, f"`{text}` passes the literal size {value} to `{name}` of `{jit.name}`; derive "
                                   f"it from the tensor (`x.numel()`, `x.shape[i]`, `x.stride(i)`)",
                              kernel=jit.name, expression=text, literal=value, parameter=name)
        constexpr_args = {expr_text(model, v) for k, v in launch.args.items() if k in jit.constexpr_names}
        grid_stride = bool(model.calls_in(jit, TL + "num_programs"))
        for dim in grid_dims(flow, launch.grid):
            for node, value, whole in grid_literal_sizes(model, flow, dim):
                text = expr_text(model, node)
                if whole and (grid_stride or text in constexpr_args or MACHINE.search(text)
                              or block_follows_programs(model, launch, value)):
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
            values = [constant_int(flow, arg) for arg in args]
            # A tile passed to a kernel as a constexpr (`BT=BT`, `BLOCK_M=BLOCK_M`) sizes a buffer
            # of per-chunk blocks (`torch.empty(B, T, H, BT)`): the tile, not the problem's size.
            tiles = {expr_text(model, v) for launch in model.launches if launch.wrapper is fn
                     for k, v in launch.args.items() if k in launch.kernel.constexpr_names}
            values = [None if isinstance(arg, cst.Name) and (arg.value in tiles or TILE_NAME.search(arg.value))
                      else value for arg, value in zip(args, values)]
            for arg, value in zip(args, values):
                # A small literal among runtime dims is structure (`qkv.view(B, T, 3, H, D)`), not a size;
                # so is a buffer of a few scalars (`torch.zeros(2)` for a complex pair, `torch.zeros(3)`
                # for three weights' gradients).
                if value is not None and (value > 8 or (None not in values and max(values) > 4)) and value >= 2 \
                        and not whole_blocks_of(flow, args, value):
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
                # Only an upper bound on the offsets is a size: `offs < 4096` (or `4096 > offs`);
                # `2 < span` (a tap below a span) bounds the other side from below.
                small, big = (node.left, node.comparisons[0].comparator)
                if isinstance(node.comparisons[0].operator, (cst.GreaterThan, cst.GreaterThanEqual)):
                    small, big = big, small
                for a, b in ((small, big),):
                    value = constant_int(flow, b)
                    # `x < 6` on values loaded from memory is a data threshold (relu6), not a size.
                    if value is not None and value >= 2 and arange_reaches(model, jit.function, a):
                        text = expr_text(model, node)
                        yield self.report(node, f"`{text}` bounds the offsets by the literal {value}; pass the "
                                                f"size as a kernel argument and compare against it",
                                          kernel=jit.name, expression=text, literal=value)
            elif isinstance(node, cst.Call) and len(node.args) == 3 and model.call_name(node) in (
                    "range", TL + "range", TL + "static_range"):
                value = constant_int(flow, node.args[1].value)
                if value is not None and value >= 2 and constant_int(flow, node.args[2].value) is None:
                    text = expr_text(model, node)  # `range(0, 4096, BLOCK_K)`: a size, stepped by a tile
                    yield self.report(node.args[1].value, f"`{text}` loops to the literal size {value}; pass the "
                                                          f"size as a kernel argument",
                                      kernel=jit.name, expression=text, literal=value)

    # -- 2. shape asserts ------------------------------------------------------

    def _host_asserts(self, model: TritonModule, fn: Function) -> Iterator[Report]:
        flow = model.flow(fn)
        # A block rounded from a size (`next_power_of_2(n)`) is a tile, not a size the problem sets.
        size_like = lambda e: host_size_like(model, fn, e) and not rounded(model, fn, e)  # noqa: E731
        tile = lambda m: host_tile(model, fn, m)  # noqa: E731
        for node in walk(fn.node):
            if isinstance(node, cst.Assert):
                at, test, text, form = node, node.test, f"assert {expr_text(model, node.test)}", True
            elif isinstance(node, cst.If) and any(isinstance(s, cst.SimpleStatementLine) and isinstance(
                    s.body[0], cst.Raise) for s in node.body.body):
                at, test, text, form = node.test, node.test, f"if {expr_text(model, node.test)}: raise", False
            else:
                continue
            for pin in shape_pins(flow, test, size_like, form, tile):
                if pin[0] == "equality" and fixed_arity(model, fn, pin[1], pin[2]):
                    continue  # `assert w.shape[0] == 3` where the kernel reads w[0], w[1], w[2]
                yield self._pin_report(model, at, text, pin, None, "host")
                break

    def _kernel_asserts(self, model: TritonModule, jit: JitFunction, runtime: set[str]) -> Iterator[Report]:
        flow = model.flow(jit)
        # Only runtime sizes count: `tl.static_assert(BLOCK_K % 16 == 0)` checks a tile.
        size_like = lambda e: bool((names_read(e) | {d.name for d in flow.upstream(e)}) & runtime)  # noqa: E731
        tile = lambda m: kernel_tile(model, jit, m)  # noqa: E731
        for node in walk(jit.node):
            if isinstance(node, cst.Call) and node.args and model.call_name(node) in (
                    TL + "static_assert", TL + "device_assert"):
                test, text = node.args[0].value, expr_text(model, node)
                # A static_assert refuses the size when the kernel compiles; a device_assert
                # (and a plain `assert` in a kernel, which becomes one) only under TRITON_DEBUG.
                refused = "compile" if model.call_name(node) == TL + "static_assert" else "debug"
            elif isinstance(node, cst.Assert):
                test, text, refused = node.test, f"assert {expr_text(model, node.test)}", "debug"
            else:
                continue
            for pin in shape_pins(flow, test, size_like, True, tile):
                yield self._pin_report(model, node, text, pin, jit.name, refused)
                break

    def _pin_report(self, model, node, text, pin, kernel, refused: str) -> Report:
        """`refused`: where a rejected size stops the run: "host" (an assert or raise before the launch),
        "compile" (`tl.static_assert`), "debug" (a device assert, compiled only under TRITON_DEBUG)."""
        kind, size, value = pin
        size = expr_text(model, size)
        if kind == "divisibility":
            message = (f"`{text}` rejects every `{size}` that is not a multiple of `{value}`; drop it and "
                       f"handle the remainder with a mask (`mask=offs < {size}`) instead")
        else:
            message = (f"`{text}` ties the kernel to `{size}` == {value}; read the size from the tensor and "
                       f"handle the remainder with a mask instead")
        return self.report(node, message, kernel=kernel, expression=text, assertion=kind, refused=refused)

    # -- 3. grid rounded down --------------------------------------------------

    def _floor_grid(self, model: TritonModule, flow: Dataflow, launch: Launch, dim) -> Iterator[Report]:
        for node in grid_arithmetic(flow, dim):
            if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
                continue
            left = node.left
            if isinstance(left, cst.UnaryOperation) or (isinstance(left, cst.BinaryOperation) and isinstance(
                    left.operator, (cst.Add, cst.Subtract))):
                continue  # `(n + B - 1) // B` and `-(-n // B)` round up
            if not grid_divisor_is_tile(model, flow, launch, node.right):
                continue  # `x.numel() // x.shape[-1]` is an exact row count
            text, n, b = (expr_text(model, e) for e in (node, left, node.right))
            if launch.wrapper is not None and division_checked(model, launch.wrapper, node):
                # `assert n % BLOCK == 0` (here, or in the forward of this backward): exact, because
                # every other size is refused; it is that restriction the finding is about.
                yield self.report(node, f"grid `{text}` covers `{n}` only because a check refuses every `{n}` "
                                        f"that is not a multiple of `{b}`; use `triton.cdiv({n}, {b})` and a mask "
                                        f"to take every size", kernel=launch.kernel.name, expression=text,
                                  assertion="divisibility", refused="host")
                continue
            yield self.report(node, f"grid `{text}` rounds down: the last `{n} % {b}` elements get no program; "
                                    f"use `triton.cdiv({n}, {b})`", kernel=launch.kernel.name, expression=text)

    def _whole_groups(self, model: TritonModule, jit: JitFunction) -> Iterator[Report]:
        for node, group in whole_group_orderings(model, jit):
            text = expr_text(model, node)
            yield self.report(node, f"`{text}` takes the row tiles in whole groups of `{group}`: where the row "
                                    f"tiles do not fill the last group, its programs land on rows past the end and "
                                    f"the column tiles they should cover are computed by nobody; take the last "
                                    f"group's height as `min(num_pid_m - first_pid_m, {group})` for the `%` and "
                                    f"the `//`", kernel=jit.name, expression=text, group=group)

    # -- 4. loads and stores past the end: unmasked, or masked without the tail ----

    def unmasked_accesses(self, model: TritonModule, jit: JitFunction, pointers: set[str],
                          runtime: set[str]) -> Iterator[Report]:
        comparisons = [(n.left, n.comparisons[0].comparator) for n in walk(jit.node)
                       if isinstance(n, cst.Comparison) and len(n.comparisons) == 1]
        sizes = size_params(model, jit, runtime, comparisons)
        ragged = frozenset(n for left, right in comparisons if names_read(right) & sizes for n in names_read(left))
        own_aranges = {id(site.node) for site in model.calls_in(jit, ARANGE)}
        whole = pruned_multiples(model, jit)
        one_dim = len(own_aranges) == 1
        for site in model.calls_in(jit, LOAD, STORE):
            call, is_load = site.node, site.qualname == LOAD
            mask, pointer = keyword(call, "mask", 1 if is_load else 2), keyword(call, "pointer", 0)
            if (mask is not None and not is_none(mask)) or keyword(call, "boundary_check") is not None \
                    or pointer is None or guarded_by_masked_branch(model, jit, call):
                continue
            exprs = list(model.sources(jit, pointer))
            open_ranges = open_aranges(model, jit, call, pointer, pointers, exprs, own_aranges, whole)
            if not open_ranges or guarded_block(model, jit, call, sizes):
                continue  # a scalar load, or every arange covers its dimension (or one factor of it) exactly
            offs, ids = offsets_name(model, jit, pointer, pointers, set(open_ranges), ragged=ragged)
            arange, fn, root = open_ranges[next((k for k in open_ranges if k in ids), next(iter(open_ranges)))]
            tiled = reaches(model, fn, root, PROGRAM_ID)
            extent = keyword(arange, "end", 1)
            depends = set().union(*(names_read(e) for f, e in exprs if f is jit.function)) & runtime
            if not (depends or (tiled and sizes) or shape_kinds(model, jit, extent) - {None}):
                continue
            bound = compared_bound(jit, offs, sizes, comparisons, one_dim)
            block = expr_text(model, extent) if extent is not None else "BLOCK"
            reach = f"run to pid*{block}+{block}-1" if tiled else f"span `tl.arange(0, {block})`"
            past = f"past `{bound}` when it is" if bound else "past the end of their dimension when its size is"
            fix = f"add `mask={offs} < {bound}`" if bound and offs else \
                f"add a mask on `{offs}`" if offs else "add a mask on the offsets"
            text = expr_text(model, call)
            # Each open dimension's own bound (`{"offs_m": "M", "offs_n": "N"}`), for a tile's mask.
            bounds = dimension_bounds(model, jit, pointer, pointers, open_ranges, sizes, ragged)
            yield self.report(call, f"`{text}` has no mask; offsets {reach}, {past} not a multiple of {block}; "
                                    f"{fix}" + (" (and `other=`)" if is_load else ""),
                              kernel=jit.name, expression=text, bound=bound or "",
                              access="load" if is_load else "store", **({"bounds": bounds} if bounds else {}))

    def partly_masked_accesses(self, model: TritonModule, jit: JitFunction, runtime: set[str]) -> Iterator[Report]:
        for found in partial_masks(model, jit, runtime):
            text, mask, bound, block = (expr_text(model, e) for e in (found.call, found.mask, found.bound, found.block))
            tail = found.tail_mask or f"({found.offsets} < {bound})"
            yield self.report(found.call, f"`{text}` is masked by `{mask}`, which leaves out the lanes past "
                                          f"`{bound}`: its address carries `{found.offsets}` without a `%`, so where "
                                          f"`{bound}` is not a multiple of {block} the last block's tail lanes reach "
                                          f"past the end; mask it with `{mask} & {tail}`", kernel=jit.name,
                              expression=text, bound=bound, access="load" if model.call_name(found.call) == LOAD
                              else "store")

    def _tail_sums(self, model: TritonModule, jit: JitFunction) -> Iterator[Report]:
        for found in tail_sums(model, jit):
            text, value = expr_text(model, found.call), expr_text(model, keyword(found.call, "input", 0))
            yield self.report(found.call, f"`{text}` adds the lanes `{found.mask}` leaves out: each holds "
                                          f"`{found.adds}` (the load's `other` carried through), so the sum is "
                                          f"right only where `{found.size}` is a multiple of the block; sum "
                                          f"`tl.where({found.mask}, {value}, 0.0)` instead", kernel=jit.name,
                              expression=text, bound=found.size)
