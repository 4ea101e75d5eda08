"""EXC002 subnormal: subnormal inputs are not flushed to zero where the reference keeps them.

Every floating input gets magnitudes below its dtype's smallest normal
number.  Flush-to-zero shows as zeros in the output where the reference
(working dtype) is finite and not zero.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import flushed_to_zero
from kanalyze.dynamic.gates.base import (REFUTED, UNCONFIRMED, Gate, GateContext, first_value, run_problem,
                                         witness_arrays)


class SubnormalInputs(Gate):
    code = "EXC002"
    name = "exc002-subnormal-inputs"
    summary = "subnormal-magnitude inputs; zeros where the reference is not zero"
    needs_float64 = False   # (compares no value with the float64 reference)

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "subnormal", distribution="subnormal", seed=ctx.seed + 5)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.reference_ok:
            return self.verdict(UNCONFIRMED, result.reference_failure(), [result.case])
        problem = run_problem(result)
        if problem:
            if not result.candidate_ok:
                return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [result.case])
            return self.confirmed(f"with subnormal inputs: {problem}", result)
        run = result.runs[0]
        nonzero_total = 0
        for i, (observed, expected) in enumerate(zip(run.outputs, result.expected)):
            if not expected.is_float:
                continue
            nonzero, flushed, first = flushed_to_zero(observed, expected)
            nonzero_total += nonzero
            if flushed:
                which = f"output {i}: " if len(run.outputs) > 1 else ""
                want = first_value(expected, first)
                summary = (f"with subnormal inputs: {which}{flushed} of {nonzero} nonzero "
                           f"reference elements came back as 0 (first at index {list(first)}: expected "
                           f"{want:.4g}) — flushed to zero")
                return self.confirmed(summary, result, arrays=witness_arrays(run.outputs, result.expected),
                                      flushed=flushed, first_index=list(first),
                                      observed=first_value(observed, first), expected=want)
        if nonzero_total == 0:
            return self.verdict(UNCONFIRMED, "the reference itself returns only zeros for subnormal inputs",
                                [result.case])
        return self.verdict(REFUTED, f"no flush to zero in {nonzero_total} nonzero reference elements "
                                     "with subnormal inputs", [result.case])
