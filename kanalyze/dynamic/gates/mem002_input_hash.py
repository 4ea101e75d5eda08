"""MEM002 inputs: the candidate leaves its inputs as it found them.

The worker sends the inputs back after the run; they are compared, bit for bit
(every NaN the same), with the inputs the reference drew: by the judge where it
holds both (a GPU run: sandbox/held.py), else in kanalyze.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import bitwise_differences
from kanalyze.dynamic.gates.base import (REFUTED, UNCONFIRMED, CannotJudge, Gate, GateContext, first_value,
                                         run_problem)


class InputHash(Gate):
    code = "MEM002"
    name = "mem002-input-hash"
    summary = "inputs compared bit for bit before and after the run"
    needs_float64 = False   # (compares no value with the float64 reference)

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "inputs", return_inputs=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok or not result.runs or not result.runs[0].ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        after = result.runs[0].inputs_after
        before = result.inputs
        given = sum(1 for item in result.reference.meta.get("inputs", []) if item.get("kind") == "tensor")
        if len(before) != given or len(after) != given:
            # Nothing to compare yet: the copy kept before the run can still sit in the reference
            # worker (withheld until the candidate's workers end, where the judge had no room to hold
            # it).  A gate judged while the session runs is asked again at its end; there, this is
            # the verdict: `unconfirmed` with this reason (judging._judge_gate).
            raise CannotJudge(f"kanalyze kept {len(before)} of the {given} input tensors before the run and "
                              f"read {len(after)} after it: nothing to compare")
        for i, (b, a) in enumerate(zip(before, after)):
            if b.shape != a.shape:
                return self.confirmed(f"input {i} ({b.describe()}) came back as {a.describe()}", result, input=i)
            count, _, index = bitwise_differences(b, a)
            if count:
                first = list(index)
                summary = (f"input {i} ({b.describe()}) changed in {count} of {b.array.size} elements "
                           f"(first at index {first}: {first_value(b, index):.4g} became {first_value(a, index):.4g})")
                return self.confirmed(summary, result, arrays={f"input{i}_before": b.array, f"input{i}_after": a.array},
                                      input=i, changed=count, first_index=first)
        return self.verdict(REFUTED, f"all {len(before)} input tensors unchanged after the run", [result.case])
