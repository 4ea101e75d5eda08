"""EXC001 non-finite-swallowed: NaN/±Inf dropped or replaced where the reference keeps them."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text
from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import bind_call_args, calls_within, keyword
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.nan_tests import nan_test, shape_only, value_names
from kanalyze.analyzer.triton.pointers import WRITES
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.rules.base import Report, Rule, expr_text, source

TL = "triton.language."
# Triton 3.x: maximum/minimum/clamp default to PropagateNan.NONE (maxnumf:
# NaN loses), and tl.max/tl.min reduce with that same maximum/minimum.
ELEMENTWISE = {TL + "maximum": 2, TL + "minimum": 2, "max": 2, "min": 2}
REDUCTIONS = {TL + "max", TL + "min"}
CLAMP = TL + "clamp"
FLOAT_SOURCES = {TL + f for f in ("load", "dot", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt",
                                  "sigmoid", "fdiv", "div_rn", "erf", "cos", "sin", "softmax", "sum")}
FLIP = {cst.GreaterThan: "<=", cst.GreaterThanEqual: "<", cst.LessThan: ">=", cst.LessThanEqual: ">"}


class NonFiniteSwallowed(Rule):
    code = "EXC001"
    name = "non-finite-swallowed"
    summary = "NaN or ±Inf is dropped or replaced where the reference propagates it"
    gate = "exc001-nonfinite-injection"
    docs = """
    ## What it does
    In kernels: `tl.maximum` / `tl.minimum` / `tl.clamp` without
    `propagate_nan=tl.PropagateNan.ALL`, `tl.max` / `tl.min` reductions (they
    reduce with that same NaN-dropping maximum), comparison-based activations
    whose NaN lanes take the constant branch (`tl.where(x > 0, x, 0.0)`), and
    explicit replacement (`tl.where(x != x, 0.0, x)`, `libdevice.isnan`,
    `isinf`).  A finding needs the dropped value to reach a store (or a
    helper's return) by no other path: in a softmax, `tl.max(x)` drops NaN but
    `exp(x - m)` carries it on.  In `forward`: `torch.nan_to_num`,
    `torch.where(torch.isnan(y), ...)`, `masked_fill(y.isnan(), ...)`.
    Integer operands (program ids, offsets) are left alone.

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

    ## Use instead
    ```python
    y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
    # or, with where: NaN > 0 is False, so let NaN lanes take the x branch
    y = tl.where(x <= 0, 0.0, x)
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
    ]
    INVALID = [
        source(_HEAD + """
            y = tl.maximum(x, 0.0)
            tl.store(y_ptr + offs, y, mask=mask)
        """),
        source(_HEAD + """
            tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)
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
        for jit in model.jit.values():
            if jit.name != jit.function.name:
                continue  # an alias (`k = triton.jit(_k)`) of a function seen already
            self.jit, self.reach, self._feeds = jit, Reaching(model, jit), {}
            self._pointer_cache = self._address_cache = self._sink_cache = self._by_value = None
            self._evidence_cache: dict[int, tuple[bool, bool]] = {}
            for call, name in calls_within(model, jit.node):
                report = self._check_kernel_call(call, name)
                if report is not None:
                    yield report
        yield from self._check_host()

    # -- kernels --------------------------------------------------------------

    def _check_kernel_call(self, call: cst.Call, name: str | None) -> Report | None:
        # The call's text only where a report quotes it: generating it for every call is
        # quadratic in a chain of calls (`x.to(...).to(...)...`).
        positional = [a.value for a in call.args if a.keyword is None]
        if name in ELEMENTWISE and len(positional) == ELEMENTWISE[name]:
            if self._propagates(keyword(call, "propagate_nan", 2)):
                return None
            if not any(self._floaty(o) for o in positional) or not self._swallows(call, positional):
                return None
            what = "the other operand" if name.startswith(TL) else "the other argument"
            fix = "pass `propagate_nan=tl.PropagateNan.ALL`" if name.startswith(TL) else \
                "use `tl.maximum`/`tl.minimum` with `propagate_nan=tl.PropagateNan.ALL`"
            text = expr_text(self.model, call)
            return self._kernel_report(call, f"`{text}` returns {what} where one is NaN (torch.maximum, "
                                             f"torch.relu and torch.clamp propagate NaN); {fix}", "nan-dropping-minmax")
        if name == CLAMP and positional:
            if self._propagates(keyword(call, "propagate_nan", 3)) or not self._floaty(positional[0]) \
                    or not self._swallows(call, positional[:1]):
                return None
            text = expr_text(self.model, call)
            return self._kernel_report(call, f"`{text}` maps NaN to a bound (torch.clamp keeps NaN); pass "
                                             f"`propagate_nan=tl.PropagateNan.ALL`", "nan-dropping-clamp")
        if name in REDUCTIONS and positional:
            indices = keyword(call, "return_indices", 2)
            if (indices is not None and dotted(indices) != "False") or not self._floaty(positional[0]) \
                    or not self._swallows(call, positional[:1]):
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
            if kind == "compare" and not self._floaty(subject):
                return None
            if not self._swallows(call, [subject]):
                return None
            return self._kernel_report(call, message, kind)
        return None

    def _kernel_report(self, call: cst.Call, message: str, pattern: str) -> Report:
        text = expr_text(self.model, call)
        return self.report(call, message, kernel=self.jit.name, expression=text, pattern=pattern)

    def _propagates(self, value: cst.BaseExpression | None) -> bool:
        if value is None:
            return False
        name = dotted(value) or ""
        if name.endswith(".ALL"):
            return True
        if name.endswith(".NONE"):
            return False
        values = self.jit.constexpr_values(name) if "." not in name else []
        return not values or any((dotted(v) or "").endswith(".ALL") for v in values)

    def _floaty(self, expr: cst.BaseExpression) -> bool:
        """Can `expr` hold floating-point data?  Program ids, aranges and
        integer scalars cannot hold NaN.  A helper's parameter is as floaty as
        the arguments its callers pass."""
        if self._evidence(expr)[0]:
            return True
        for d in self._closure(self._reads(expr)):
            if d.value is not None and self._evidence(d.value)[0]:
                return True
            if d.kind == "param" and self.jit.called_from:
                for caller, call in self.jit.called_from:
                    arg = bind_call_args(call, self.jit.params).get(d.name)
                    if arg is not None and any(self._evidence(e)[0] for _, e in self.model.sources(caller, arg, depth=1)):
                        return True
        return False

    def _evidence(self, expr: cst.CSTNode) -> tuple[bool, bool]:
        """(holds a float literal or a float-producing call, holds a `tl.load`)."""
        if id(expr) not in self._evidence_cache:
            floaty = loads = False
            for node in walk(expr):
                if isinstance(node, cst.Float):
                    floaty = True
                elif isinstance(node, cst.Call):
                    name = self.model.call_name(node) or ""
                    floaty |= name in FLOAT_SOURCES or dotted(node.func) == "float"
                    loads |= name == TL + "load"
            self._evidence_cache[id(expr)] = (floaty, loads)
        return self._evidence_cache[id(expr)]

    # A NaN dropped here matters only if the value reaches the output through
    # the dropping call alone: `tl.exp(x - tl.max(x))` still carries x's NaN.
    def _swallows(self, call: cst.Call, operands: list[cst.BaseExpression]) -> bool:
        holders = self._holders(call)
        if holders & self._addressing() or any(self.reach.inside(call, p) for p in self._pointers()):
            return False  # used as a pointer offset: an integer
        data: set[Def] = set()
        for operand in operands:
            reads = self._reads(operand)
            data |= {d for defs in reads for d in defs if d.kind == "param"}
            data |= {d for d in self._closure(reads) if d.value is not None and self._evidence(d.value)[1]}
        for sink, upstream in self._sinks():
            if not (self.reach.inside(call, sink) or upstream & holders):
                continue  # this output does not see the call's result
            if not self._closure(self._reads(sink, skip=call), avoid=holders, stop=data):
                return True
        return False

    def _holders(self, call: cst.Call) -> set[Def]:
        """The definitions whose value holds `call` (`y = call`, `y = 2 * call`): those
        of the call's enclosing expressions, found up the tree rather than by asking
        every definition of the kernel (quadratic in a kernel of many statements)."""
        if self._by_value is None:
            self._by_value = {}
            for d in self.reach.flow.defs:
                if d.value is not None:
                    self._by_value.setdefault(id(d.value), []).append(d)
        found = set(self._by_value.get(id(call), ()))
        for node in self.model.ancestors(call):
            if node is self.jit.node:
                break
            found.update(self._by_value.get(id(node), ()))
        return found

    def _pointers(self) -> list[cst.BaseExpression]:
        if self._pointer_cache is None:
            self._pointer_cache = [p for site in self.model.calls_in(self.jit, TL + "load", *WRITES)
                                   if (p := keyword(site.node, "pointer", 0)) is not None]
        return self._pointer_cache

    def _addressing(self) -> set[Def]:
        """Every definition that flows into a load or store address."""
        if self._address_cache is None:
            self._address_cache = self._closure([d for p in self._pointers() for d in self._reads(p)])
        return self._address_cache

    def _sinks(self) -> list[tuple[cst.BaseExpression, set[Def]]]:
        """Stored values and a helper's returned values, with what flows into each."""
        if self._sink_cache is None:
            sinks = []
            for site in self.model.calls_in(self.jit, *WRITES):
                value = keyword(site.node, "value", 1)
                sinks.append(keyword(site.node, "val") if value is None else value)
            for node in walk(self.jit.node):
                if isinstance(node, cst.Return) and node.value is not None:
                    value = node.value
                    sinks += [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            self._sink_cache = [(s, self._closure(self._reads(s))) for s in sinks if s is not None]
        return self._sink_cache

    def _reads(self, expr: cst.CSTNode, skip: cst.CSTNode | None = None) -> list[list[Def]]:
        """For each name `expr` reads (outside `skip`, and not only for its
        shape or dtype), the definitions that can reach that read."""
        groups: list[list[Def]] = []
        stack = [expr]
        while stack:
            node = stack.pop()
            if node is skip or shape_only(self.model, node):
                continue
            if isinstance(node, cst.Name):
                groups.append(self.reach.defs(node.value, node))
            elif isinstance(node, (cst.Attribute, cst.Arg)):
                stack.append(node.value)
            else:
                stack.extend(node.children)
        return groups

    def _closure(self, groups: list[list[Def]], avoid: set[Def] = frozenset(), stop: set[Def] | None = None):
        """Every definition whose value flows into the reads `groups`.  With
        `avoid`, a read that can see an avoided definition is not followed:
        its other definitions are alternatives to it, not a second path.
        With `stop`, only whether one of those is reached (early exit)."""
        seen: set[Def] = set()
        stack: list[Def] = []
        reads = groups
        while True:
            for defs in reads:
                if avoid and any(d in avoid for d in defs):
                    continue
                for d in defs:
                    if d not in seen:
                        if stop is not None and d in stop:
                            return True
                        seen.add(d)
                        stack.append(d)
            if not stack:
                return False if stop is not None else seen
            reads = self._feeding(stack.pop())

    def _feeding(self, d: Def) -> list[list[Def]]:
        if d not in self._feeds:
            at = d.node if d.kind == "augassign" or d.value is None else d.value
            self._feeds[d] = [self.reach.defs(n, at) for n in sorted(d.reads)]
        return self._feeds[d]

    def _where(self, call: cst.Call):
        """(subject, NaN branch, pattern, message) when a `where` sends the
        NaN lanes of `subject` to a branch that does not carry it."""
        cond, a, b = keyword(call, "condition", 0), keyword(call, "x", 1), keyword(call, "y", 2)
        if isinstance(cond, cst.Name):  # `is_pos = x > 0; tl.where(is_pos, x, 0.0)`
            defs = self.reach.defs(cond.value, call)
            if len(defs) == 1 and defs[0].kind == "assign":
                cond = defs[0].value
        return _where_swallow(self.model, call, cond, a, b, self._carries)

    def _carries(self, branch: cst.BaseExpression, subject: cst.BaseExpression) -> bool:
        subject_defs = {d for defs in self._reads(subject) for d in defs}
        return bool(self._closure(self._reads(branch)) & subject_defs)

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
                    found = _where_swallow(model, call, *(a.value for a in call.args),
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


def _where_swallow(model: TritonModule, call: cst.Call, cond, a, b, carries, host: bool = False):
    """Shared by the kernel (`tl.where`) and the host (`torch.where`) checks."""
    if cond is None or a is None or b is None:
        return None
    negated = False
    while isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, (cst.BitInvert, cst.Not)):
        negated, cond = not negated, cond.expression
    text = expr_text(model, call)
    test = nan_test(model, cond)
    if test is not None:
        subject, nan_true, specials = test
        nan_branch = a if nan_true != negated else b
        if carries(nan_branch, subject):
            return None
        return subject, nan_branch, "nan-replaced", (
            f"`{text}` replaces {specials} in `{expr_text(model, subject)}` with "
            f"`{expr_text(model, nan_branch)}`; the reference propagates it: remove the replacement")
    if host or not (isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1):
        return None
    op, right = cond.comparisons[0].operator, cond.comparisons[0].comparator
    if type(op) not in FLIP and not isinstance(op, (cst.Equal, cst.NotEqual)):
        return None
    nan_true = isinstance(op, cst.NotEqual) != negated  # every ordered comparison with NaN is False
    nan_branch, kept = (a, b) if nan_true else (b, a)
    key = lambda e: node_text(model.module, e).replace(" ", "")
    subject = next((s for s in (cond.left, right) if key(s) == key(kept)), None)
    if subject is None or carries(nan_branch, subject):
        return None  # a branch that is not the tested value: a mask or a step function
    fix = "rewrite it so that NaN lanes take the value branch"
    if type(op) in FLIP and not negated:
        fix = (f"use `tl.where({expr_text(model, cond.left)} {FLIP[type(op)]} {expr_text(model, right)}, "
               f"{expr_text(model, nan_branch)}, {expr_text(model, kept)})` so that NaN lanes keep the value")
    return subject, nan_branch, "compare", (
        f"`{text}` sends NaN lanes to `{expr_text(model, nan_branch)}` (a comparison with NaN is "
        f"{'True' if nan_true else 'False'}), where the reference propagates NaN; {fix}")
