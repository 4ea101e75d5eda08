"""EXC002 subnormal-flush: subnormal values are flushed to zero where the reference keeps them.

In Triton source: `exp(x) - 1` where the reference has `expm1` (ELU, SELU, CELU, a tanh
written with exponentials).  Its CUDA C++ detectors are in exc002_subnormal_flush_cuda.py.
"""

from __future__ import annotations

from typing import Iterator

from kanalyze.analyzer.triton.exp_minus_one import exp_minus_ones
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import NanLevels
from kanalyze.analyzer.triton.nan_paths import NanPaths
from kanalyze.rules.base import Report, Rule, expr_text, source


class SubnormalFlush(Rule):
    code = "EXC002"
    name = "subnormal-flush"
    summary = "Subnormal values are flushed to zero where the reference keeps them"
    gate = "exc002-subnormal-inputs"
    docs = """
    ## What it does
    Feeds subnormal-magnitude inputs and compares against the reference. In
    Triton kernels the static pass flags `tl.exp(x) - 1` (and `1 - tl.exp(x)`,
    `tl.exp2`) on loaded data where it stands for `expm1`: an ELU's negative
    branch (a `tl.where` testing x itself, `tl.minimum` with 0) or a tanh's
    numerator `(e - 1) / (e + 1)`. The exponential of any |x| below 2^-24 rounds
    to exactly 1, so the difference is 0 for every tiny input, subnormal ones
    among them, where torch's ELU, SELU, CELU and tanh return about x. Left
    alone: the difference added to a constant before the output (GELU's
    `0.5 * x * (1 + t)`), and `exp(x) - 1` as the formula itself (a
    cross-entropy gradient `p - 1` at the target column). In CUDA C++ it flags
    the same shape, and `--use_fast_math`, `-ftz=true`, fast-math intrinsics and
    PTX `.ftz` on fp32 arithmetic (below).

    ## Why is this bad
    Flushing subnormals to zero changes results near zero (and divisions by
    them) where the IEEE reference does not. `exp(x) - 1` loses every digit of
    a small x, not only subnormal ones: its relative error is 100% below 2^-24.

    ## Example
    ```python
    y = tl.where(x > 0, x, alpha * (tl.exp(x) - 1.0))
    ```
    A CUDA kernel built with `--use_fast_math`.

    ## Use instead
    ```python
    from triton.language.extra import libdevice
    y = tl.where(x > 0, x, alpha * libdevice.expm1(x))
    ```
    Build without fast math, or document the flush in the contract.
    """

    _HEAD = """
        import triton
        import triton.language as tl

        @triton.jit
        def elu_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
        """
    VALID = [
        source(_HEAD + """
            from triton.language.extra import libdevice
            tl.store(y_ptr + offs, tl.where(x > 0, x, alpha * libdevice.expm1(x)), mask=mask)
        """),
        source(_HEAD + """
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(y_ptr + offs, e / tl.sum(e, axis=0), mask=mask)
        """),
        source(_HEAD + """
            scale = tl.exp(alpha) - 1.0       # a parameter's, not the data's
            tl.store(y_ptr + offs, x * scale, mask=mask)
        """),
    ]
    INVALID = [
        source(_HEAD + """
            tl.store(y_ptr + offs, tl.where(x > 0, x, alpha * (tl.exp(x) - 1.0)), mask=mask)
        """),
        source(_HEAD + """
            e = tl.exp(x.to(tl.float32))
            tl.store(y_ptr + offs, tl.where(x > 0, x, alpha * (e - 1)), mask=mask)
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        levels: list[NanLevels] = []     # built for the first kernel that has an `exp(x) - 1`

        def paths_of(jit):
            if not levels:
                levels.append(NanLevels(model))
            return NanPaths(model, jit, levels[0].reaching(jit), levels[0])

        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            for found in exp_minus_ones(model, jit, lambda jit=jit: paths_of(jit)):
                argument = expr_text(model, found.exp.args[0].value)
                exp2 = (model.call_name(found.exp) or "").endswith("exp2")
                fixed = f"{argument} * 0.6931471805599453" if exp2 else argument
                fix = f"{'-' if found.negated else ''}libdevice.expm1({fixed})"
                text = expr_text(model, found.node)
                yield self.report(found.node, f"`{text}` is 0 wherever |{argument}| is below about 2^-24 (its "
                                              f"exponential rounds to 1), so tiny and subnormal inputs come back as 0 "
                                              f"where torch (expm1, ELU, SELU, CELU, tanh) keeps them; use `{fix}` "
                                              f"(`from triton.language.extra import libdevice`)",
                                  kernel=jit.name, expression=text, pattern="exp-minus-one")
