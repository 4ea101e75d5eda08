"""PRC001 precision-downgrade: TF32 or half precision where the reference is IEEE fp32."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import calls_within, keyword, string_literal
from kanalyze.analyzer.triton.dtypes import LOW_PRECISION_FLOATS, cast_operand, cast_target, literal_dtype, resolve_dtypes
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, Rule, expr_text, source

DOT = "triton.language.dot"
LOAD = "triton.language.load"
STORE = "triton.language.store"
TF32_SWITCHES = {
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
}
HOST_DOWNCASTS = {"half": "float16", "bfloat16": "bfloat16"}


class PrecisionDowngrade(Rule):
    code = "PRC001"
    name = "precision-downgrade"
    summary = "Arithmetic runs in TF32 or half precision where the reference is IEEE fp32"
    gate = "prc001-ieee-error-bound"
    docs = """
    ## What it does
    Flags `tl.dot` on float32 operands without `input_precision="ieee"`,
    `allow_tf32=True` or `input_precision="tf32"`, fp32 values narrowed to
    fp16/bf16 before they are computed with (`.to(tl.float16)` in the kernel,
    `.half()` in the wrapper), and switching TF32 on for the whole process
    (`torch.backends.cuda.matmul.allow_tf32 = True`,
    `torch.set_float32_matmul_precision("high")`).

    ## Why is this bad
    Triton's default for `tl.dot` on fp32 operands is TF32, which keeps 10 bits
    of mantissa.  Measured on an H200 on a 256×4096×256 product: relative error
    7.8e-4 with the default against 1.2e-6 with `input_precision="ieee"` (torch's
    own fp32 matmul: 3.0e-7).  That passes `allclose(atol=rtol=1e-2)` and still
    makes the kernel 100-1000× less accurate than the reference it replaces.

    ## Example
    ```python
    acc += tl.dot(a, b)            # a, b are float32 tiles
    ```

    ## Use instead
    ```python
    acc += tl.dot(a, b, input_precision="ieee")
    ```
    If reduced precision is part of the contract, say so and suppress with
    `# noqa: PRC001`.
    """

    VALID = [
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
            c = tl.dot(a, b, input_precision="ieee")
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
            acc += a
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc.to(tl.float16))
        """),
    ]
    INVALID = [
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
            c = tl.dot(a, b)
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
        """),
        source("""
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            for site in model.calls_in(jit, DOT):
                yield from self._check_dot(model, jit, site.node)
            for call, _ in calls_within(model, jit.node):
                yield from self._check_kernel_downcast(model, jit, call)
        yield from self._check_host(model)

    # -- tl.dot -------------------------------------------------------------

    def _check_dot(self, model: TritonModule, jit: JitFunction, call: cst.Call) -> Iterator[Report]:
        text = expr_text(model, call)
        precision = keyword(call, "input_precision")
        allow_tf32 = keyword(call, "allow_tf32")
        if allow_tf32 is not None and dotted(allow_tf32) == "True":
            yield self.report(call, f"`{text}` sets `allow_tf32=True`: fp32 operands are multiplied in TF32 "
                                    f"(10-bit mantissa); use `input_precision=\"ieee\"`",
                              kernel=jit.name, expression=text, precision="tf32")
            return
        if precision is not None or allow_tf32 is not None:
            values = resolve_dtypes_or_strings(model, jit, precision)
            if values & {"tf32"}:
                yield self.report(call, f"`{text}` asks for `input_precision=\"tf32\"` (10-bit mantissa); "
                                        f"use `input_precision=\"ieee\"` to match an IEEE fp32 reference",
                                  kernel=jit.name, expression=text, precision="tf32")
            return
        operand_types = [self._operand_dtype(model, jit, keyword(call, n, i)) for i, n in enumerate(("input", "other"))]
        if any(t in LOW_PRECISION_FLOATS or t == "int8" for t in operand_types):
            return  # TF32 only applies to fp32 operands
        what = "float32 operands" if "float32" in operand_types else "operands of unknown dtype (float32 in most references)"
        yield self.report(
            call,
            f"`{text}` on {what} runs in TF32 by default (10-bit mantissa, ~1e-3 relative error); "
            f"pass `input_precision=\"ieee\"` to match an IEEE fp32 reference",
            kernel=jit.name, expression=text, precision="tf32 (default)",
            operand_dtypes=[t or "unknown" for t in operand_types],
        )

    def _operand_dtype(self, model: TritonModule, jit: JitFunction, operand: cst.BaseExpression | None) -> str | None:
        """The dtype an operand is cast to or created with, where the kernel says."""
        if operand is None:
            return None
        found: set[str] = set()
        for _, expr in model.sources(jit, operand):
            for call, name in calls_within(model, expr):
                target = cast_target(model, call)
                if target is not None:
                    found |= resolve_dtypes(model, jit, target)
                elif name in ("triton.language.zeros", "triton.language.full"):
                    found |= resolve_dtypes(model, jit, keyword(call, "dtype", 1 if name.endswith("zeros") else 2))
        if len(found) == 1:
            return found.pop()
        return None

    # -- downcasts ----------------------------------------------------------

    def _check_kernel_downcast(self, model: TritonModule, jit: JitFunction, call: cst.Call) -> Iterator[Report]:
        target = cast_target(model, call)
        if target is None:
            return
        dtypes = resolve_dtypes(model, jit, target)
        if not dtypes & LOW_PRECISION_FLOATS:
            return
        operand = cast_operand(call)
        if operand is None or not self._is_loaded_or_fp32(model, jit, operand):
            return
        if self._only_stored(model, call):
            return  # narrowing the final result to the output's dtype is the wrapper's contract
        text = expr_text(model, call)
        narrow = sorted(dtypes & LOW_PRECISION_FLOATS)[0]
        yield self.report(
            call,
            f"`{text}` narrows a value to {narrow} before computing with it; on float32 data this "
            f"loses 13+ bits of mantissa. Compute in float32 and cast only the stored result",
            kernel=jit.name, expression=text, to_dtype=narrow,
        )

    def _is_loaded_or_fp32(self, model: TritonModule, jit: JitFunction, operand: cst.BaseExpression) -> bool:
        for _, expr in model.sources(jit, operand):
            for call, name in calls_within(model, expr):
                if name in (LOAD, DOT, "triton.language.sum"):
                    return True
                if name in ("triton.language.zeros", "triton.language.full") and \
                        resolve_dtypes(model, jit, keyword(call, "dtype", 1)) == {"float32"}:
                    return True
        return False

    def _only_stored(self, model: TritonModule, cast: cst.Call) -> bool:
        """Is the cast's value only ever written out (`tl.store(p, x.to(...))`)?"""
        parent = model.parent(cast)
        if isinstance(parent, cst.Arg):
            call = model.parent(parent)
            return isinstance(call, cst.Call) and model.call_name(call) == STORE
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            function = model.function_of(cast)
            if function is None:
                return False
            name = parent.targets[0].target.value
            uses = [c for c in model.calls_in(function) if name in _arg_names(c.node)]
            return bool(uses) and all(c.qualname == STORE for c in uses) and \
                not any(name in d.reads for d in model.flow(function).defs)
        return False

    # -- host code ----------------------------------------------------------

    def _check_host(self, model: TritonModule) -> Iterator[Report]:
        for node in model.nodes(cst.Assign):
            for target in node.targets:
                name = model.qualify(target.target)
                if name in TF32_SWITCHES and dotted(node.value) == "True":
                    yield self.report(node, f"`{name} = True` turns on TF32 for every fp32 matmul and "
                                            f"convolution in the process; leave it False for an fp32 reference",
                                      expression=name)
        for site in model.calls_to("torch.set_float32_matmul_precision"):
            value = keyword(site.node, "precision", 0)
            if string_literal(value) in ("high", "medium"):
                yield self.report(site.node, f"`torch.set_float32_matmul_precision({value.value})` lets fp32 "
                                             f"matmuls run in TF32/bf16; use \"highest\" for an fp32 reference",
                                  expression=expr_text(model, site.node))
        forward = {id(f.node) for f in model.forward_path}
        for site in model.calls:
            if site.function is None or id(site.function.node) not in forward:
                continue
            func = site.node.func
            if isinstance(func, cst.Attribute) and func.attr.value in HOST_DOWNCASTS and not site.node.args:
                narrow = HOST_DOWNCASTS[func.attr.value]
            elif isinstance(func, cst.Attribute) and func.attr.value == "to":
                dtype = next((literal_dtype(model, a.value) for a in site.node.args
                              if a.keyword is None or a.keyword.value == "dtype"), None)
                if dtype not in LOW_PRECISION_FLOATS:
                    continue
                narrow = dtype
            else:
                continue
            text = expr_text(model, site.node)
            yield self.report(site.node, f"`{text}` narrows a tensor to {narrow} in `{site.function.qualname}`; "
                                         f"an fp32 problem must be computed in fp32",
                              expression=text, to_dtype=narrow)


def resolve_dtypes_or_strings(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression | None) -> set[str]:
    """`"tf32"` / `"ieee"` / a constexpr holding one of them."""
    if expr is None:
        return set()
    if isinstance(expr, cst.SimpleString):
        text = string_literal(expr)
        return {text} if text is not None else set()
    values: set[str] = set()
    name = dotted(expr)
    if name is not None and "." not in name:
        for value in jit.constexpr_values(name):
            if (text := string_literal(value)) is not None:
                values.add(text)
    return values


def _arg_names(call: cst.Call) -> set[str]:
    return {a.value.value for a in call.args if isinstance(a.value, cst.Name)}


