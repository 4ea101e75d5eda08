"""EXC001 non-finite-swallowed: NaN/±Inf dropped or replaced where the reference keeps them.

What EXC001 reports, and in which words.  The analysis lives in
kanalyze/analyzer/triton/: nan_carriers (which values can hold an input NaN),
nan_paths and nan_escape (does a dropped NaN reach the output by another path),
exp_overflow (NaN made where the reference is finite).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import calls_within, keyword
from kanalyze.analyzer.triton.exp_overflow import OverflowRatio, abs_cancellation, log_product_operand
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_carriers import (CLAMP, ELEMENTWISE, LANE, REDUCTIONS, TL, NanLevels,
                                                   propagates)
from kanalyze.analyzer.triton.nan_escape import NanEscape
from kanalyze.analyzer.triton.nan_selects import where_swallow
from kanalyze.analyzer.triton.nan_tests import nan_test, value_names
from kanalyze.rules.base import Report, Rule, expr_text, source


class NonFiniteSwallowed(Rule):
    code = "EXC001"
    name = "non-finite-swallowed"
    summary = "NaN or ±Inf is dropped or replaced where the reference propagates it, or NaN is made where it has none"
    gate = "exc001-nonfinite-injection"
    docs = """
    ## What it does
    In kernels: `tl.maximum` / `tl.minimum` / `tl.clamp` without
    `propagate_nan=tl.PropagateNan.ALL`, `tl.max` / `tl.min` reductions (they
    reduce with that same NaN-dropping maximum), comparison-based selects
    whose NaN lanes take the other branch (`tl.where(x > 0, x, 0.0)`, a
    running max `m = tl.where(v > m, v, m)`, also with the compare ANDed with
    a mask, `valid & (v > m)`), domain guards whose NaN lanes take the
    constant (`tl.where(norm > 0.0, 1.0 / tl.sqrt(norm + eps), 0.0)`: a
    division, square root or logarithm of the tested value guarded against
    its bad domain; piecewise functions are left alone, as torch's own
    comparison cascades send NaN to a piece too), and explicit replacement
    (`tl.where(x != x, 0.0, x)`, `libdevice.isnan`, `isinf`).  In `forward`:
    `torch.nan_to_num`, `torch.where(torch.isnan(y), ...)`,
    `masked_fill(y.isnan(), ...)`.

    A finding needs an operand that can hold the input's NaN and the dropped
    value to reach a store (or a helper's return) by no other path.  Left
    alone: integers and values computed from them only (program ids, sizes,
    `min(BLOCK, n - start)`, a count of mask lanes, even in a float), random
    draws, a value already clamped (reported where it was clamped), a `tl.max`
    of a row that a `tl.sum` made NaN in every lane; a softmax stabiliser
    (`x - tl.max(x)`, an online softmax's running max, also through a guard
    for rows with no valid lane, `tl.where(m == -inf, 0.0, m)`), whose NaN
    `exp(x - m)` carries on, also when the max is stored beside the running sum
    it scales (the two a log-sum-exp is made of) or returned by a helper whose
    callers only store it next to that sum. A variance `E[x²] - mean²` clamped
    at zero is flagged even where its mean is stored beside it: a +inf input
    makes it inf - inf = NaN, the clamp makes that 0, and `(x - mean) * rstd`
    is -inf where torch's norm is NaN.

    The other direction: a value added to its own absolute value (`(x +
    tl.abs(x)) * 0.5`, a ReLU by hand), NaN at x = -inf where torch.relu is 0;
    a ratio of exponentials that overflows float32
    (`(tl.exp(2 * x) - 1) / (tl.exp(2 * x) + 1)`, a tanh or GELU-tanh by hand)
    is inf / inf = NaN for large inputs where the function it stands for is
    finite; the finding quotes an input, found by evaluating the ratio in
    float32 and float64.  A cumulative product through logarithms
    (`tl.exp(tl.cumsum(tl.log(x)))`) is NaN from the first negative x on.

    ## Why is this bad
    The contract is that NaN and ±Inf appear exactly where the reference has
    them.  `torch.relu(nan)` is NaN; `tl.maximum(nan, 0.0)` is 0.0 (measured
    on an H200).  A kernel that swallows NaN hides upstream bugs (an overflow,
    a division by zero) and passes `allclose` on random inputs, which never
    contain NaN.

    ## Example
    ```python
    y = tl.maximum(x, 0.0)
    ```

    ```python
    t = (tl.exp(2 * x) - 1) / (tl.exp(2 * x) + 1)  # NaN from x = 45 on
    ```

    ## Use instead
    ```python
    y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
    # or, with where: NaN > 0 is False, so let NaN lanes take the x branch
    y = tl.where(x <= 0, 0.0, x)
    ```

    ```python
    t = libdevice.tanh(x)  # or from e = tl.exp(-2 * tl.abs(x)), which cannot overflow
    ```
    """

    _HEAD = """
        import triton
        import triton.language as tl

        @triton.jit
        def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
        """
    VALID = [
        source(_HEAD + """
            y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
            tl.store(y_ptr + offs, y, mask=mask)
        """),
        source(_HEAD + """
            y = tl.where(x < 0, 0.0, x)
            tl.store(y_ptr + offs, y, mask=mask)
        """),
        source(_HEAD + """
            m = tl.max(tl.where(mask, x, float("-inf")), axis=0)
            e = tl.exp(x - m)
            tl.store(y_ptr + offs, e / tl.sum(tl.where(mask, e, 0.0), axis=0), mask=mask)
        """),
        source(_HEAD + """
            e = tl.exp(x - tl.max(x, axis=0))
            n = tl.maximum(tl.sum(mask.to(tl.int32), axis=0), 1)
            tl.store(y_ptr + offs, tl.where(x < 0.0, 0.0, x) + e / n, mask=mask)
        """),
    ]
    INVALID = [
        source(_HEAD + """
            y = tl.maximum(x, 0.0)
            tl.store(y_ptr + offs, y, mask=mask)
        """),
        source(_HEAD + """
            tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)
        """),
        source(_HEAD + """
            x = x.to(tl.float32)
            tl.store(y_ptr + offs, (tl.exp(2 * x) - 1) / (tl.exp(2 * x) + 1), mask=mask)
        """),
        source("""
        import torch

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return torch.nan_to_num(torch.relu(x))
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        self.model = model
        self._nan = NanLevels(model)
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            self.jit, self.reach = jit, self._nan.reaching(jit)
            self._flow = NanEscape(model, jit, self.reach, self._nan)
            for call, name in calls_within(model, jit.node):
                report = self._check_kernel_call(call, name)
                if report is not None:
                    yield report
            yield from self._overflow_ratios()
            yield from self._log_products()
            yield from self._abs_cancellations()
        yield from self._check_host()

    # -- kernels --------------------------------------------------------------

    def _check_kernel_call(self, call: cst.Call, name: str | None) -> Report | None:
        # The call's text only where a report quotes it: generating it for every call is
        # quadratic in a chain of calls (`x.to(...).to(...)...`).
        positional = [a.value for a in call.args if a.keyword is None]
        if name in ELEMENTWISE and len(positional) == ELEMENTWISE[name]:
            if propagates(self.jit, keyword(call, "propagate_nan", 2)):
                return None
            # a float among the operands (`0.0` counts), and one that can hold the input's NaN
            if not any(self._nan.level(self.jit, o) >= LANE for o in positional) \
                    or not any(self._flow.floaty(o) for o in positional) or not self._flow.swallows(call, positional):
                return None
            what = "the other operand" if name.startswith(TL) else "the other argument"
            fix = "pass `propagate_nan=tl.PropagateNan.ALL`" if name.startswith(TL) else \
                "use `tl.maximum`/`tl.minimum` with `propagate_nan=tl.PropagateNan.ALL`"
            text = expr_text(self.model, call)
            return self._kernel_report(call, f"`{text}` returns {what} where one is NaN (torch.maximum, "
                                             f"torch.relu and torch.clamp propagate NaN); {fix}", "nan-dropping-minmax")
        if name == CLAMP and positional:
            if propagates(self.jit, keyword(call, "propagate_nan", 3)) or not self._flow.nan_data(positional[0]) \
                    or not self._flow.swallows(call, positional[:1]):
                return None
            text = expr_text(self.model, call)
            return self._kernel_report(call, f"`{text}` maps NaN to a bound (torch.clamp keeps NaN); pass "
                                             f"`propagate_nan=tl.PropagateNan.ALL`", "nan-dropping-clamp")
        if name in REDUCTIONS and positional:
            indices = keyword(call, "return_indices", 2)
            # a row NaN in every lane (after a softmax, `x - mean`) has a NaN max: nothing is dropped
            if (indices is not None and dotted(indices) != "False") or not self._flow.nan_data(positional[0], (LANE,)) \
                    or not self._flow.swallows(call, positional[:1]):
                return None
            op = name.rpartition(".")[2]
            text = expr_text(self.model, call)
            return self._kernel_report(call, f"`{text}` skips NaN lanes (Triton reduces with NaN-dropping "
                                             f"`tl.{op}imum`; torch.{op} and torch.a{op} return NaN); reduce with `tl.reduce` "
                                             f"and a combine function calling `tl.{op}imum(a, b, "
                                             f"propagate_nan=tl.PropagateNan.ALL)`", "nan-dropping-reduction")
        if name == TL + "where":
            found = self._where(call)
            if found is None:
                return None
            subject, _, kind, message = found
            if kind in ("compare", "guard") and not self._flow.nan_data(subject):
                return None
            if not self._flow.swallows(call, [subject]):
                return None
            return self._kernel_report(call, message, kind)
        return None

    def _overflow_ratios(self) -> Iterator[Report]:
        """The other direction: NaN made where the reference is finite."""
        ratio = None
        for node in walk(self.jit.node):
            if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide)):
                continue
            ratio = ratio or OverflowRatio(self.model, self.jit, self.reach)
            found = ratio.witness(node)
            if found is None or not self._flow.reaches_output(node) or self._flow.selected_away(node, found[2]):
                continue
            probe, exact, variable = found
            text = expr_text(self.model, node)
            yield self.report(node, f"`{text}` is NaN at {variable} = {probe:g}: both sides overflow float32 "
                                    f"(inf / inf) where the value it computes is {exact:.6g}, so the kernel makes "
                                    f"NaN where the reference (torch.tanh, gelu, sigmoid...) is finite; call the "
                                    f"function itself (`tl.math.tanh`, `libdevice.tanh`, `tl.sigmoid`) or rewrite "
                                    f"the ratio with exp(-|{variable}|), which cannot overflow",
                              kernel=self.jit.name, expression=text, pattern="overflow-nan")

    def _log_products(self) -> Iterator[Report]:
        """`tl.exp(tl.cumsum(tl.log(x)))`: a cumulative product through logarithms is NaN
        from the first negative x on, where torch.cumprod is finite."""
        for call, name in calls_within(self.model, self.jit.node):
            operand = log_product_operand(self.model, self.reach, call, name)
            if operand is None or not self._flow.nan_data(operand) or not self._flow.reaches_output(call):
                continue
            text = expr_text(self.model, call)
            yield self.report(call, f"`{text}` is a cumulative product taken through logarithms: the log of a "
                                    f"negative `{expr_text(self.model, operand)}` is NaN, and so is every product "
                                    f"after it, where torch.cumprod is finite; multiply instead (`tl.cumprod`, or "
                                    f"`tl.associative_scan` with a product)", kernel=self.jit.name,
                              expression=text, pattern="log-product-nan")

    def _abs_cancellations(self) -> Iterator[Report]:
        """`(x + tl.abs(x)) * 0.5`: a ReLU by hand is -inf + inf = NaN at x = -inf, where
        torch.relu gives 0 (and `tl.abs(x) - x` at +inf)."""
        for node in walk(self.jit.node):
            if not isinstance(node, cst.BinaryOperation):
                continue
            found = abs_cancellation(self.model, self.reach, node)
            if found is None or not self._flow.floaty(node.left) or not self._flow.reaches_output(node):
                continue
            variable, infinity = found
            # x + |x| is 2·max(x, 0), 0 at -inf; |x| - x and x - |x| are ±2·min(x, 0), 0 at +inf
            part, fix = ("ReLU", "tl.maximum") if infinity == "-inf" else ("negative part", "tl.minimum")
            text = expr_text(self.model, node)
            yield self.report(node, f"`{text}` is NaN at {variable} = {infinity} (inf - inf), where the {part} it "
                                    f"computes is 0 (torch.relu and torch.clamp are finite there); write "
                                    f"`{fix}({variable}, 0.0, propagate_nan=tl.PropagateNan.ALL)`",
                              kernel=self.jit.name, expression=text, pattern="abs-cancellation-nan")

    def _kernel_report(self, call: cst.Call, message: str, pattern: str) -> Report:
        text = expr_text(self.model, call)
        return self.report(call, message, kernel=self.jit.name, expression=text, pattern=pattern)

    def _where(self, call: cst.Call):
        """(subject, NaN branch, pattern, message) when a `where` sends the
        NaN lanes of `subject` to a branch that does not carry it."""
        cond, a, b = keyword(call, "condition", 0), keyword(call, "x", 1), keyword(call, "y", 2)
        if isinstance(cond, cst.Name):  # `is_pos = x > 0; tl.where(is_pos, x, 0.0)`
            defs = self.reach.defs(cond.value, call)
            if len(defs) == 1 and defs[0].kind == "assign":
                cond = defs[0].value
        return where_swallow(self.model, call, cond, a, b,
                              lambda branch, subject, nan=False: self._flow.carries(call, branch, subject, nan))

    # -- host code ------------------------------------------------------------

    def _check_host(self) -> Iterator[Report]:
        model = self.model
        for function in candidate_functions(model):
            where = f"`{function.qualname}`"
            for site in model.calls_in(function):
                call, text = site.node, expr_text(model, site.node)
                func = call.func
                attr = func.attr.value if isinstance(func, cst.Attribute) else None
                if site.qualname == "torch.nan_to_num" or attr in ("nan_to_num", "nan_to_num_"):
                    yield self.report(call, f"`{text}` in {where} replaces NaN and ±Inf in the result; the "
                                            f"output must have non-finite values exactly where the reference "
                                            f"does: remove it", expression=text, pattern="nan_to_num")
                elif site.qualname == "torch.where" and len(call.args) == 3:
                    found = where_swallow(model, call, *(a.value for a in call.args),
                                           lambda br, s: value_names(model, s) <= value_names(model, br), host=True)
                    if found is not None:
                        yield self.report(call, f"{found[3]} (in {where})", expression=text, pattern=found[2])
                elif attr in ("masked_fill", "masked_fill_") and call.args:
                    test = nan_test(model, call.args[0].value)
                    if test is not None:
                        yield self.report(call, f"`{text}` in {where} overwrites {test[2]} values; the reference "
                                                f"propagates them: remove it", expression=text, pattern="masked_fill")
            for node in walk(function.node):
                if isinstance(node, cst.Assign) and isinstance(node.targets[0].target, cst.Subscript):
                    target = node.targets[0].target
                    test = next((nan_test(model, e.slice.value) for e in target.slice
                                 if isinstance(e.slice, cst.Index)), None)
                    if test is not None:
                        text = expr_text(model, node)
                        yield self.report(node, f"`{text}` in {where} overwrites {test[2]} values; the reference "
                                                f"propagates them: remove it", expression=text, pattern="index-assign")
