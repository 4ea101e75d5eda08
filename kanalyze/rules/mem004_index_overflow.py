"""MEM004 index-overflow: offset arithmetic overflows int32 for sizes in range."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.bounds.proofs import analyze, has_launched_accesses
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, Rule, expr_text, source
from kanalyze.rules.mem003_out_of_bounds import assumptions, describe_case

INT32_MAX = 2**31 - 1


class IndexOverflow(Rule):
    code = "MEM004"
    name = "index-overflow"
    summary = "Offset arithmetic overflows int32 for tensors up to max-numel elements (z3 counterexample)"
    gate = "mem004-large-tensor"
    docs = """
    ## What it does
    Triton computes `pid * BLOCK`, `row * stride` and `tl.arange` in int32
    unless an operand is int64 (an integer argument is int64 only when its
    value does not fit int32).  For every access of a launched kernel, z3
    looks for a tensor of at most `max-numel` elements (2^32 by default) for
    which an int32 operation of the offset, in a lane the mask lets through,
    or of the mask itself, leaves [-2^31, 2^31).  The finding names the
    operation, the smallest overflowing size found and the bound assumed:
    lower `max-numel` in `[tool.kanalyze]` if your tensors stay smaller.

    ## Why is this bad
    Past 2^31 elements the offset wraps to a negative number: the kernel
    faults with an illegal address, or reads and writes the wrong place.  In
    an audit of 133 accepted KernelBench kernels, 8 failed this way as soon
    as one tensor passed 2^31 elements; 16 GiB of fp32 is a common size in
    today's LLM workloads.

    ## Example
    ```python
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ```

    ## Use instead
    ```python
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ```
    """

    VALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

        def scale(x):
            out = torch.empty_like(x)
            n = x.numel()
            scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out
        """),
    ]
    INVALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

        def scale(x):
            out = torch.empty_like(x)
            n = x.numel()
            scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        if not has_launched_accesses(model):
            return
        analysis = analyze(model)
        smallest: dict[int, tuple] = {}   # id(operation) → (verdict, access): the smallest size over all uses
        for access in analysis.accesses:
            for key, verdict in access.wraps.items():
                known = smallest.get(key)
                if known is None or (verdict.objective or 0) < (known[0].objective or 0):
                    smallest[key] = (verdict, access)
        for verdict, access in smallest.values():
            node, example = verdict.node, verdict.counterexample
            text = expr_text(model, node)
            value = example.get("value")
            bound = analysis.max_numel
            exponent = bound.bit_length() - 1
            bound_text = f"2^{exponent}" if bound == 1 << exponent else str(bound)
            use = {"mask": "computes its mask from it", "loop": "runs in a loop bounded by it"}.get(
                example.get("wraps_in"), "uses the wrapped offset")
            message = (f"`{text}` overflows int32: {describe_case(example)} it is {value} (> {INT32_MAX}) and the "
                       f"{access.kind} at `{expr_text(model, access.call, 40)}` {use}; "
                       f"{_fix(model, node)}. Assumes tensors of up to {bound_text} elements (`max-numel`); "
                       f"lower it if yours stay below 2^31")
            yield self.report(node, message, kernel=access.kernel, expression=text, access=access.kind,
                              tensor=access.tensor, counterexample=example,
                              assumptions=assumptions(analysis, "overflow"))


def _fix(model: TritonModule, node) -> str:
    if isinstance(node, cst.BinaryOperation):
        left = expr_text(model, node.left, 30)
        if isinstance(node.left, cst.BinaryOperation):
            left = f"({left})"
        return f"compute it in int64 (`{left}.to(tl.int64)` first)"
    if isinstance(node, cst.Call) and node.args:
        return f"compute it in int64 (`{expr_text(model, node.args[0].value, 30)}.to(tl.int64)` first)"
    return "compute it in int64 (`.to(tl.int64)` on the program id or the row index)"
