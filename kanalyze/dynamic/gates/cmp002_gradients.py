"""CMP002 grad: the backward pass matches float64 autograd of the reference.

One case on the problem's own inputs: the reference draws a seeded upstream
gradient per floating output and back-propagates it in the working dtype and in
float64; the candidate back-propagates the same upstream gradients through its
own outputs (an `autograd.Function`'s backward, or whatever autograd records).
Each input gradient, and the gradient of each parameter the candidate shares
with the reference (same name and shape), is compared with float64 within the
bound calibrated from the reference's own gradient error, as CMP001 does for
values, and its non-finite elements must sit where float64's do.  A parameter
the candidate's backward never reaches (its gradient None) where float64's is
not zero is a confirmation: that weight would never learn.

Power: the candidate's outputs must carry a gradient (forward-only kernels do
not: there is no backward to check, `unconfirmed`), and so must the reference's.
"""

from __future__ import annotations

import re

import numpy as np

from kanalyze.dynamic.compare import check_values, class_comparison
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Gate, GateContext, Verdict, run_problem
from kanalyze.dynamic.results import leaves
from kanalyze.dynamic.sandbox.transport import as_float64


class GradientCheck(Gate):
    code = "CMP002"
    name = "cmp002-gradient"
    summary = "input gradients for seeded upstream gradients against float64 autograd of the reference"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "gradients", gradients=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        meta = result.reference.meta
        if meta.get("gradients_error") or not meta.get("gradients"):
            return self.verdict(UNCONFIRMED, f"the reference has no gradient to compare with: "
                                f"{meta.get('gradients_error', 'none computed')}", [result.case])
        if not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        run = next((r for r in result.runs if r.meta.get("gradients_run")), None)
        if run is None:
            return self.verdict(UNCONFIRMED, "the candidate's gradient run did not happen", [result.case])
        if run.meta.get("status") != "ok":
            return self.verdict(CONFIRMED, f"the candidate's backward pass failed: {run.meta.get('error')}",
                                [result.case], error=run.meta.get("error"))
        if run.meta.get("no_gradient"):
            return self.verdict(UNCONFIRMED, "the candidate's outputs carry no gradient (a forward-only kernel): "
                                "there is no backward pass to check", [result.case])
        observed = leaves(run.meta.get("gradients"), run.arrays) or []
        working = leaves(meta["gradients"], result.reference_arrays) or []
        exact = leaves(meta.get("gradients64"), result.reference_arrays) or working
        if len(observed) != len(working):
            return self.verdict(CONFIRMED, f"the candidate gives gradients for {len(observed)} inputs, the "
                                f"reference for {len(working)}", [result.case])
        for i, (got, want, want64) in enumerate(zip(observed, working, exact)):
            wrong = self._compare(f"input {i}", got, want, want64, result.reduction_terms, result)
            if wrong:
                return wrong
        checked = self._parameters(run, meta, result)
        if isinstance(checked, Verdict):
            return checked
        return self.verdict(REFUTED, f"the gradients of {len(observed)} inputs{checked} match float64 autograd "
                            f"of the reference within the calibrated bound", [result.case])

    def _compare(self, label: str, got, want, want64, terms: int, result) -> Verdict | None:
        """CONFIRMED when one gradient differs from float64's: shape, non-finite mask, or value."""
        if got.shape != want.shape:
            return self.verdict(CONFIRMED, f"the gradient of {label} is {got.describe()} where the "
                                f"reference's is {want.describe()}", [result.case])
        key = _array_name(label)
        classes = class_comparison(got, want64, want64)   # non-finite classes against float64's alone
        if classes.wrong:
            first = list(classes.first)
            return self.verdict(CONFIRMED, f"the gradient of {label} has non-finite values where float64 "
                                f"autograd has none, or the reverse ({classes.wrong} elements, first at "
                                f"{first})", [result.case], first_index=first,
                                arrays={f"observed_grad_{key}": got.array, f"expected_grad_{key}": want64.array})
        check = check_values(got, want, want64, terms=terms)
        if not check.ok:
            return self.verdict(CONFIRMED, f"the gradient of {label}: {check.summary()}", [result.case],
                                metric=check.metric(), index=list(check.index or ()),
                                arrays={f"observed_grad_{key}": got.array, f"expected_grad_{key}": want64.array})
        return None

    def _parameters(self, run, meta, result) -> Verdict | str:
        """The parameters the candidate shares with the reference (same name and shape): each
        gradient against float64's; one the backward never reached while the reference's is not
        zero is a parameter that would never learn.  Returns a verdict, or words for the refutation."""
        names = meta.get("parameters") or []
        working = leaves(meta.get("parameter_gradients"), result.reference_arrays) or []
        exact = leaves(meta.get("parameter_gradients64"), result.reference_arrays) or working
        shared = run.meta.get("parameters") or []
        observed = dict(zip(shared, leaves(run.meta.get("parameter_gradients"), run.arrays) or []))
        untouched = set(run.meta.get("parameters_without_gradient") or [])
        outputs = sum(int(np.prod(leaf.shape)) for leaf in (result.expected or []))
        compared = 0
        for name, want, want64 in zip(names, working, exact):
            got = observed.get(name)
            if got is None or got.shape != want.shape:
                continue   # the candidate names or shapes its parameters its own way
            if name in untouched and np.any(as_float64(want64) != 0):
                return self.verdict(CONFIRMED, f"the parameter `{name}` gets no gradient: the candidate's backward "
                                    f"pass never reaches it, so training would never update it (float64 autograd "
                                    f"of the reference gives it a non-zero gradient)", [result.case],
                                    arrays={f"expected_grad_{_array_name(name)}": want64.array})
            # A parameter's gradient sums over every output it touched: the allowance grows with them.
            terms = max(result.reduction_terms, outputs // max(1, int(want.shape[0]) if want.shape else 1))
            wrong = self._compare(f"parameter `{name}`", got, want, want64, terms, result)
            if wrong:
                return wrong
            compared += 1
        return f" and {compared} parameter{'' if compared == 1 else 's'}" if compared else ""


def _array_name(label: str) -> str:
    """A witness array's name from a label or a parameter's name: letters, digits and _ only."""
    return re.sub(r"\W+", "_", label).strip("_")[:60]
