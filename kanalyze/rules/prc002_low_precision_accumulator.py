"""PRC002 low-precision-accumulator: a reduction that keeps its running sum in fp16/bf16."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.dataflow import Dataflow, Def
from kanalyze.analyzer.triton.dtypes import LOW_PRECISION_FLOATS, cast_operand, cast_target, resolve_dtypes
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, Rule, expr_text, source

ZEROS = "triton.language.zeros"
FULL = "triton.language.full"
DOT = "triton.language.dot"
FMA = "triton.language.fma"
MANTISSA = {"float16": 11, "bfloat16": 8, "float8": 4}


class LowPrecisionAccumulator(Rule):
    code = "PRC002"
    name = "low-precision-accumulator"
    summary = "A reduction accumulates in fp16/bf16 instead of fp32"
    gate = "prc002-long-reduction-and-promotion"
    docs = """
    ## What it does
    Flags accumulators kept in half precision: a `tl.zeros(...)` / `tl.full(...)`
    of dtype float16, bfloat16 or fp8 that a loop adds into (`acc += ...`,
    `acc = acc + ...`, `acc = tl.dot(a, b, acc)`), also when the dtype arrives
    through a constexpr (default, launch value or autotune config) or a local
    variable; `tl.dot(..., out_dtype=tl.float16)`; and a loop that rounds its
    running sum to half precision every iteration
    (`acc = (acc + x).to(tl.float16)`).

    ## Why is this bad
    Every partial sum is rounded to the accumulator's 11-bit (fp16) or 8-bit
    (bf16) mantissa, so the error grows with the reduction length and small
    addends are lost once the sum is large.  Measured on an H200 on a
    256×4096×256 fp16 product: relative error 1.7e-3 with an fp16 accumulator
    against 2.3e-4 with an fp32 accumulator.  That passes
    `allclose(atol=rtol=1e-2)` at the benchmark's size and fails at longer ones.

    ## Example
    ```python
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc)
    ```

    ## Use instead
    ```python
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc.to(tl.float16))   # round once, at the end
    ```
    """

    VALID = [
        # fp32 accumulator, fp16 result stored once.
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def row_sum(x_ptr, y_ptr, N, BLOCK: tl.constexpr, ACC: tl.constexpr = tl.float32):
            row = tl.program_id(0)
            acc = tl.zeros((BLOCK,), dtype=ACC)
            for start in range(0, N, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
            tl.store(y_ptr + row, tl.sum(acc, axis=0).to(tl.float16))
        """),
        # An fp16 buffer that is only selected into and stored, never summed;
        # a running max is exact in any precision.
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, y_ptr, m_ptr, N, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            out = tl.zeros((BLOCK,), dtype=tl.float16)
            m = tl.full((BLOCK,), float("-inf"), dtype=tl.float16)
            for start in range(0, N, BLOCK):
                x = tl.load(x_ptr + start + offs, mask=start + offs < N, other=0.0)
                out = tl.where(x > 0, x, out)
                m = tl.maximum(m, x)
            tl.store(y_ptr + offs, out)
            tl.store(m_ptr + offs, m)
        """),
    ]
    INVALID = [
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def row_sum(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            acc = tl.zeros((BLOCK,), dtype=tl.float16)
            for start in range(0, N, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
            tl.store(y_ptr + row, tl.sum(acc, axis=0))
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr, ACC_DTYPE: tl.constexpr = tl.bfloat16):
            offs = tl.arange(0, BLOCK)
            acc = tl.zeros((BLOCK, BLOCK), dtype=ACC_DTYPE)
            for k in range(4):
                a = tl.load(a_ptr + k * BLOCK + offs[:, None] * BLOCK + offs[None, :])
                b = tl.load(b_ptr + k * BLOCK + offs[:, None] * BLOCK + offs[None, :])
                acc = acc + tl.dot(a, b, input_precision="ieee")
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc)
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
            c = tl.dot(a, b, out_dtype=tl.float16, input_precision="ieee")
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            flow = model.flow(jit)
            # Statements already explained by a reported accumulator: one root
            # cause, one finding.
            covered: set[int] = set()
            for site in model.calls_in(jit, ZEROS, FULL):
                yield from self._check_init(model, jit, flow, site.node, covered)
            for site in model.calls_in(jit, DOT):
                yield from self._check_dot(model, jit, flow, site.node, covered)
            yield from self._check_running_cast(model, jit, flow, covered)

    # -- tl.zeros / tl.full of a half dtype that a loop adds into ------------

    def _check_init(self, model: TritonModule, jit: JitFunction, flow: Dataflow,
                    call: cst.Call, covered: set[int]) -> Iterator[Report]:
        position = 1 if model.call_name(call) == ZEROS else 2
        dtype_expr = keyword(call, "dtype", position)
        narrow = resolve_dtypes(model, jit, dtype_expr) & LOW_PRECISION_FLOATS
        if not narrow:
            return
        names = _aliases(flow, [d.name for d in _defs_holding(flow, call)])
        accumulations = [d for name in sorted(names) for d in flow.defs_of(name) if _accumulates(model, d)]
        if not accumulations:
            return  # a store buffer or a running max: nothing is summed in it
        covered.update(id(d.node) for d in accumulations)
        dtype = sorted(narrow)[0]
        text = expr_text(model, call)
        step = expr_text(model, accumulations[0].node)
        via = _via(dtype_expr)
        how = f" (`{via}` can be tl.{dtype})" if via else ""
        # `tl.dot(a, b, acc, out_dtype=tl.float16)` must lose its out_dtype too.
        dots = [c for d in accumulations for c in walk(d.value) if isinstance(c, cst.Call)
                and model.call_name(c) == DOT and keyword(c, "out_dtype") is not None]
        also = " (and drop `out_dtype` from its `tl.dot`)" if dots else ""
        yield self.report(
            call,
            f"`{text}` is a {dtype} accumulator{how}: `{step}` adds into it in a loop, so every partial "
            f"sum is rounded to {MANTISSA[dtype]} bits of mantissa; accumulate in `tl.float32`{also} and "
            f"cast once when storing",
            kernel=jit.name, expression=text, dtype=dtype, accumulation=step,
            dtype_from=via or "literal",
        )

    # -- tl.dot(..., out_dtype=fp16) ----------------------------------------

    def _check_dot(self, model: TritonModule, jit: JitFunction, flow: Dataflow,
                   call: cst.Call, covered: set[int]) -> Iterator[Report]:
        dtype_expr = keyword(call, "out_dtype")
        narrow = resolve_dtypes(model, jit, dtype_expr) & LOW_PRECISION_FLOATS
        if not narrow or any(id(d.node) in covered for d in _defs_holding(flow, call)):
            return
        dtype = sorted(narrow)[0]
        text = expr_text(model, call)
        via = _via(dtype_expr)
        how = f" (`{via}` can be tl.{dtype})" if via else ""
        yield self.report(
            call,
            f"`{text}` accumulates its K reduction in {dtype}{how}; drop `out_dtype` (the default "
            f"accumulates in float32) and cast the result once when storing",
            kernel=jit.name, expression=text, dtype=dtype, dtype_from=via or "literal", requested="out_dtype",
        )

    # -- acc = (acc + x).to(tl.float16) inside a loop -------------------------

    def _check_running_cast(self, model: TritonModule, jit: JitFunction, flow: Dataflow,
                            covered: set[int]) -> Iterator[Report]:
        for d in flow.defs:
            if d.kind != "assign" or not flow.is_accumulation(d) or \
                    any(id(other.node) in covered for other in flow.defs_of(d.name)):
                continue  # not a loop step, or its accumulator is reported already
            for node in walk(d.value):
                if not isinstance(node, cst.Call):
                    continue
                target = cast_target(model, node)
                operand = cast_operand(node)
                if target is None or operand is None or d.name not in _reads(operand):
                    continue
                narrow = resolve_dtypes(model, jit, target) & LOW_PRECISION_FLOATS
                summed = _accumulates(model, d) or any(
                    _accumulates(model, other) and other.loops[-1:] == d.loops[-1:]
                    for other in flow.defs_of(d.name) if other is not d)
                if not narrow or not summed:
                    continue
                covered.add(id(d.node))
                dtype = sorted(narrow)[0]
                text = expr_text(model, node)
                yield self.report(
                    node,
                    f"`{text}` rounds the running sum `{d.name}` to {dtype} on every iteration; keep "
                    f"`{d.name}` in float32 across the loop and cast once after it",
                    kernel=jit.name, expression=text, dtype=dtype, accumulator=d.name,
                )
                break


def _defs_holding(flow: Dataflow, node: cst.CSTNode) -> list[Def]:
    """The definitions whose right-hand side contains `node`."""
    return [d for d in flow.defs if d.value is not None and any(n is node for n in walk(d.value))]


def _aliases(flow: Dataflow, names: list[str]) -> set[str]:
    """`names` plus every name that is a plain copy of one (`acc = init`)."""
    found = set(names)
    changed = True
    while changed:
        changed = False
        for d in flow.defs:
            if d.kind == "assign" and isinstance(d.value, cst.Name) and d.value.value in found \
                    and d.name not in found:
                found.add(d.name)
                changed = True
    return found


def _accumulates(model: TritonModule, d: Def) -> bool:
    """Is `d` a loop step that *adds* into its own running value?  A running
    max/min or a `tl.where` selection rounds nothing, so it does not count."""
    if not d.loops:
        return False
    if d.kind == "augassign":
        return d.operator in ("+=", "-=")
    if d.kind != "assign" or d.name not in d.reads or d.value is None:
        return False
    return any(_feeds_sum(model, n, d.value) for n in _name_nodes(model, d.value, d.name))


def _feeds_sum(model: TritonModule, node: cst.CSTNode, root: cst.CSTNode) -> bool:
    """Does the value read at `node` end up as an addend on its way to `root`?"""
    while node is not root:
        parent = model.parent(node)
        if parent is None:
            return False
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Add, cst.Subtract)):
            return True
        if isinstance(parent, cst.Arg):
            call = model.parent(parent)
            if isinstance(call, cst.Call):
                name = model.call_name(call)
                if name == DOT and keyword(call, "acc", 2) is node:
                    return True
                if name == FMA or (isinstance(call.func, cst.Name) and call.func.value in model.jit):
                    return True  # fma(a, b, acc); a jit helper handed the accumulator
        node = parent
    return False


def _name_nodes(model: TritonModule, expr: cst.CSTNode, name: str) -> list[cst.Name]:
    """Reads of `name` inside `expr` (not attribute names or keyword names)."""
    found = []
    for node in walk(expr):
        if isinstance(node, cst.Name) and node.value == name:
            parent = model.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is node:
                continue
            found.append(node)
    return found


def _reads(expr: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(expr) if isinstance(n, cst.Name)}


def _via(dtype_expr: cst.BaseExpression | None) -> str | None:
    """The constexpr or local name a dtype came through, when it is not a literal."""
    name = dotted(dtype_expr) if dtype_expr is not None else None
    return name if name is not None and "." not in name else None
