"""MEM002 inputs: the candidate leaves its inputs as it found them.

The worker sends the inputs back after the run; the parent compares them,
bit for bit, with the inputs it generated.
"""

from __future__ import annotations

import numpy as np

from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, first_value, run_problem
from kanalyze.dynamic.sandbox.transport import bits


class InputHash(Gate):
    code = "MEM002"
    name = "mem002-input-hash"
    summary = "inputs compared bit for bit before and after the run"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "inputs", return_inputs=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok or not result.runs or not result.runs[0].ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        after = result.runs[0].inputs_after
        before = result.inputs
        given = sum(1 for item in result.reference.meta.get("inputs", []) if item.get("kind") == "tensor")
        if len(before) != given or len(after) != given:   # nothing to compare: it could not see a write
            return self.verdict(UNCONFIRMED, f"kanalyze kept {len(before)} of the {given} input tensors before the "
                                f"run and read {len(after)} after it: nothing to compare", [result.case])
        for i, (b, a) in enumerate(zip(before, after)):
            changed = bits(b) != bits(a)
            if changed.any():
                count = int(changed.sum())
                first = [int(x) for x in np.unravel_index(int(np.flatnonzero(changed.reshape(-1))[0]), changed.shape)] \
                    if changed.ndim else []
                index = tuple(first)
                summary = (f"input {i} ({b.describe()}) changed in {count} of {changed.size} elements "
                           f"(first at index {first}: {first_value(b, index):.4g} became {first_value(a, index):.4g})")
                return self.confirmed(summary, result, arrays={f"input{i}_before": b.array, f"input{i}_after": a.array},
                                      input=i, changed=count, first_index=first)
        return self.verdict(REFUTED, f"all {len(before)} input tensors unchanged after the run", [result.case])
