"""CMP002 grad: the backward pass matches float64 autograd of the reference.

One case on the problem's own inputs: the reference draws a seeded upstream
gradient per floating output and back-propagates it in the working dtype and in
float64; the candidate back-propagates the same upstream gradients through its
own outputs (an `autograd.Function`'s backward, or whatever autograd records).
Each input gradient is compared with float64 within the bound calibrated from
the reference's own gradient error, as CMP001 does for values, and its
non-finite elements must sit where float64's do.

Power: the candidate's outputs must carry a gradient (forward-only kernels do
not: there is no backward to check, `unconfirmed`), and so must the reference's.
"""

from __future__ import annotations

import numpy as np

from kanalyze.dynamic.compare import check_values, classes
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Gate, GateContext, run_problem
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
            if got.shape != want.shape:
                return self.verdict(CONFIRMED, f"the gradient of input {i} is {got.describe()} where the "
                                    f"reference's is {want.describe()}", [result.case])
            masks = classes(as_float64(got)) != classes(as_float64(want64))
            if masks.any():
                first = [int(x) for x in np.unravel_index(int(np.flatnonzero(masks.reshape(-1))[0]), masks.shape)]
                return self.verdict(CONFIRMED, f"the gradient of input {i} has non-finite values where float64 "
                                    f"autograd has none, or the reverse ({int(masks.sum())} elements, first at "
                                    f"{first})", [result.case], first_index=first,
                                    arrays={f"observed_grad{i}": got.array, f"expected_grad{i}": want64.array})
            check = check_values(got, want, want64, terms=result.reduction_terms)
            if not check.ok:
                return self.verdict(CONFIRMED, f"the gradient of input {i}: {check.summary()}", [result.case],
                                    metric=check.metric(), index=list(check.index or ()),
                                    arrays={f"observed_grad{i}": got.array, f"expected_grad{i}": want64.array})
        return self.verdict(REFUTED, f"the gradients of {len(observed)} inputs match float64 autograd of the "
                            f"reference within the calibrated bound", [result.case])
