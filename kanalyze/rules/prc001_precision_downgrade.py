"""PRC001 precision-downgrade: TF32 or half precision where the reference is IEEE fp32."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.project_index import linked_of
from kanalyze.analyzer.triton.backends import module_backend
from kanalyze.analyzer.triton.calls import calls_within, keyword, string_literal
from kanalyze.analyzer.triton.dot_partners import with_partners
from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
from kanalyze.analyzer.triton.dtype_names import (LOW_PRECISION_FLOATS, UNKNOWN, cast_operand, cast_target, describe,
                                                  literal_dtype)
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.narrowing import (bitcast, exact_round_trip, follows_tensor_dtype, is_loaded_or_fp32,
                                                matches_dot_partner, only_stored, precision_flag,
                                                under_dtype_test)
from kanalyze.rules.base import Report, Rule, expr_text, source

DOT = "triton.language.dot"
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

    The dtype of an operand is read from the source: a cast's target (a
    constexpr is followed to the wrapper's launch value, a helper's table of
    dtypes to its values), `x.to(y.dtype)`, `x.to(p.type.element_ty)`, a
    jit helper's returns (`bk, bv = load_pair(...)`: each its element), a
    descriptor load's dtype, and for
    `tl.load` the element type of the tensor the wrapper passes
    (`torch.zeros(..., dtype=torch.int8)`, `.half()`, `torch.empty(n)` is
    float32, `self.w` what the class's methods assign or append to it,
    `ctx.saved_tensors` in `backward` what `forward` saved).  A wrapper's parameter takes what the callers in the file pass
    (a test that feeds fp16, `Function.apply`) and, when the file is checked
    with the rest of its project, what every call of it in the other checked
    modules passes (`from .kernels import fwd`, imports followed within the
    checked tree; one caller whose dtype is not shown keeps it unknown), and a
    kernel that another checked module launches itself takes what those launches
    pass (`k[grid](q, ...)`, `kernel = k[grid]; kernel(...)`, a params object whose
    `__slots__` unpack at the launch: `kernel(*params.args())`),
    narrowed by the wrapper's own
    checks (`assert q.dtype in (torch.float16, torch.bfloat16)`, `if ...: raise`,
    also as `a or b`, an `elif` chain of raises, inside a `with`, in a loop or an
    `all(...)` over the tensors) and by the branch it is read in
    (`if x.dtype == torch.float32:`).  `@custom_fwd(cast_inputs=torch.float16)`
    adds fp16 to what a forward's callers pass without replacing it: torch casts
    only under autocast, and passes the inputs as they are outside it.  Triton
    requires both operands of a dot to have one dtype, so one known operand
    tells the other's, and the dtype of the data it is loaded from: another dot
    (outside any `if`) on data loaded from the same pointer is on that dtype.  Dots on fp16, bf16, fp8, int8 or fp64 operands are not
    flagged (they have no TF32), nor default dots in a module written for
    another accelerator than NVIDIA's (it imports `torch_npu` or lives in an
    `_ascend/`, `_kunlunxin/` or `backends/rocm/` folder: backends.py), where
    TF32 is not the default (triton-ascend and Triton's AMD backend multiply fp32
    in IEEE unless asked; other vendors' Triton forks choose their own), nor
    kernels that never run (nothing launches, calls or names them, in a
    `ModelNew` file, or in a module that launches its other kernels and that no
    other checked module takes this one from; or, checked with the rest of the
    project, only code that never runs launches them: a class whose `__init__`
    raises first and the private names only it uses).  Where no operand's dtype is
    visible (both come from tensors handed in from outside the file) the
    message says so and the finding's evidence carries `"dtype_known": false`.
    A narrowing whose target follows an input's dtype (`x.to(y.dtype)`, a
    constexpr the wrapper sets from `q.dtype`), a bitcast, a cast whose value
    is only stored, a float32 value widened from data the target holds exactly
    (fp8 → fp32 → fp16), and a host `.to(torch.bfloat16)` taken only when an
    input is bf16 are not flagged.

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
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
            c = tl.dot(a, b)            # int8 operands: an integer product, no TF32
            tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)

        def int8_mm(n, device):
            a = torch.zeros((n, n), device=device, dtype=torch.int8)
            b = torch.zeros((n, n), device=device, dtype=torch.int8)
            c = torch.empty((n, n), device=device, dtype=torch.int32)
            k[(1,)](a, b, c, BLOCK=n)
            return c
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
        # another vendor's accelerator: TF32 is not its Triton's default (IEEE, or the vendor's own)
        not_nvidia = module_backend(model) is not None
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            if never_runs(model, jit):
                continue  # dead code next to the kernels its file does launch: it never computes
            for site in model.calls_in(jit, DOT):
                yield from self._check_dot(model, jit, site.node, not_nvidia)
            for call, _ in calls_within(model, jit.node):
                yield from self._check_kernel_downcast(model, jit, call)
        yield from self._check_host(model)

    # -- tl.dot -------------------------------------------------------------

    def _check_dot(self, model: TritonModule, jit: JitFunction, call: cst.Call,
                   not_nvidia: bool) -> Iterator[Report]:
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
        if not_nvidia:
            return  # another accelerator's module: TF32 is NVIDIA's default only (backends.py)
        operands = [keyword(call, n, i) for i, n in enumerate(("input", "other"))]
        flow = self._flow(model)
        types = [flow.value(jit.function, o) if o is not None else frozenset({UNKNOWN}) for o in operands]
        # an operand loaded from a pointer another dot of the kernel pins (dot_partners.py)
        types = [with_partners(model, flow, jit, o, t, self._partners) for o, t in zip(operands, types)]
        dtypes = _dot_dtypes(types)
        if "float32" not in dtypes and UNKNOWN not in dtypes:
            return  # TF32 only applies to fp32 operands: fp16, bf16, fp8, int8, fp64 have no TF32
        known = UNKNOWN not in dtypes
        evidence = dict(kernel=jit.name, expression=text, precision="tf32 (default)",
                        operand_dtypes=[describe(dtypes)] * 2 if known else [describe(t) for t in types],
                        dtype_known=known)
        if known:
            what = "float32 operands" if dtypes == {"float32"} else \
                f"operands that are float32 in some launches ({describe(dtypes)})"
            yield self.report(call, f"`{text}` on {what} runs in TF32 by default (10-bit mantissa, ~1e-3 "
                                    f"relative error); pass `input_precision=\"ieee\"` to match an IEEE fp32 "
                                    f"reference", **evidence)
            return
        yield self.report(
            call,
            f"`{text}` on operands whose dtype this file does not show: if they are float32, the product "
            f"runs in TF32 by default (10-bit mantissa, ~1e-3 relative error); pass "
            f"`input_precision=\"ieee\"` to match an IEEE fp32 reference",
            **evidence,
        )

    def _flow(self, model: TritonModule) -> DtypeFlow:
        if getattr(self, "_flow_model", None) is not model:
            self._flow_model, self._flow_cache = model, DtypeFlow(model)
            self._partners = {}  # dot_partners' cache, one per model
        return self._flow_cache

    # -- downcasts ----------------------------------------------------------

    def _check_kernel_downcast(self, model: TritonModule, jit: JitFunction, call: cst.Call) -> Iterator[Report]:
        target = cast_target(model, call)
        if target is None or bitcast(call):
            return  # `x.to(tl.float8e5, bitcast=True)` reinterprets bits: nothing is rounded
        flow = self._flow(model)
        dtypes = flow.named(jit.function, target)
        narrow_to = dtypes & LOW_PRECISION_FLOATS
        if not narrow_to or follows_tensor_dtype(model, jit.function, target):
            return  # `x.to(y.dtype)`, a constexpr the wrapper picks from the input's dtype: the problem's own dtype
        operand = cast_operand(call)
        if operand is None:
            return
        values = flow.value(jit.function, operand)
        known = UNKNOWN not in values
        if known and not values & {"float32", "float64"}:
            return  # already half precision, or an integer converted: no float32 value is rounded
        if not known and not is_loaded_or_fp32(model, jit, operand):
            return
        if only_stored(model, call, self._reachings(model)):
            return  # narrowing the final result to the output's dtype is the wrapper's contract
        if matches_dot_partner(model, flow, jit, call, narrow_to):
            return  # the other operand of the product is visibly that dtype: the problem's data is
        if len(narrow_to) == 1 and under_dtype_test(model, call, next(iter(narrow_to))):
            return  # `if fp8_v: p = p.to(tl.float8e5)` with `fp8_v = V.dtype.element_ty == tl.float8e5`
        if all(exact_round_trip(model, flow, jit, operand, narrow, self._reachings(model)) for narrow in narrow_to):
            return  # fp8 data widened to fp32 and narrowed to fp16: the same numbers come back
        text = expr_text(model, call)
        narrow = sorted(narrow_to)[0]
        if known:
            message = (f"`{text}` narrows a {describe(values & {'float32', 'float64'})} value to {narrow} before "
                       f"computing with it, losing 13+ bits of mantissa. Compute in float32 and cast only the "
                       f"stored result")
        else:
            message = (f"`{text}` converts a value whose dtype this file does not show to {narrow} before "
                       f"computing with it; if it is float32 data this loses 13+ bits of mantissa. Compute in "
                       f"float32 and cast only the stored result")
        flag = precision_flag(model, jit, call)
        yield self.report(call, message, kernel=jit.name, expression=text, to_dtype=narrow,
                          from_dtype=describe(values), dtype_known=known, **({"opt_in": flag} if flag else {}))

    def _reachings(self, model: TritonModule) -> dict:
        """`only_stored`'s cache of `Reaching`s, one per model."""
        cache = getattr(self, "_reaching_cache", None)
        if cache is None or cache[0] is not model:
            cache = self._reaching_cache = (model, {})
        return cache[1]

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
            receiver = func.value
            held = self._flow(model).host_tensor(site.function, receiver)
            if UNKNOWN not in held and not held & {"float32", "float64"}:
                continue  # already half precision (or an integer tensor converted): nothing is rounded
            if under_dtype_test(model, site.node, narrow):
                continue  # `x.to(torch.bfloat16) if inp.dtype is torch.bfloat16 else x`: the problem is bf16 there
            text = expr_text(model, site.node)
            yield self.report(site.node, f"`{text}` narrows a tensor to {narrow} in `{site.function.qualname}`; "
                                         f"an fp32 problem must be computed in fp32",
                              expression=text, to_dtype=narrow)


def never_runs(model: TritonModule, jit: JitFunction) -> bool:
    """A kernel nothing launches, calls or names, in a file known whole: a candidate that
    defines `ModelNew`, or a module checked with the rest of its project (the project
    index) that launches its other kernels itself and that no other checked module uses
    this one from.  A module that launches none of its kernels is a kernel library whose
    callers may lie outside the check: its kernels are kept."""
    names = {name for name, other in model.jit.items() if other.function is jit.function}
    if any(other.launches or other.called_from for other in model.jit.values() if other.function is jit.function):
        return False
    for node in model.nodes(cst.Name, cst.SimpleString):
        text = node.value if isinstance(node, cst.Name) else string_literal(node)
        if text in names and not (isinstance(node, cst.Name) and model.parent(node) is jit.node):
            return False  # `kernels = {"fwd": k}`, `getattr(mod, "k")`, an alias: it may run
    if any(c.name.value == "ModelNew" for c in model.nodes(cst.ClassDef)):
        return True
    linked = linked_of(model)
    if linked is None or any(linked.users_of(name) for name in names):
        return False  # checked alone, or another checked module launches it
    return any(other.launches for other in model.jit.values())


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


def _dot_dtypes(types: list[frozenset[str]]) -> frozenset[str]:
    """The dtypes a `tl.dot` multiplies in.  Triton requires both operands to have one
    dtype (fp8 pairs excepted), so an operand whose dtype is known tells the other's."""
    a, b = types
    if UNKNOWN not in a and UNKNOWN not in b:
        return (a & b) or (a | b)
    if UNKNOWN not in a:
        return a
    if UNKNOWN not in b:
        return b
    return a | b
