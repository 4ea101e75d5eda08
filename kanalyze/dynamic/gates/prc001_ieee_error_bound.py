"""PRC001 dtype: the output dtype and the arithmetic precision honour the reference.

The output dtypes must equal the reference's.  Where the reference computes
in IEEE fp32, the error against float64 must stay within the fp32 bound
calibrated from the reference itself (a TF32 `tl.dot` or a detour through
fp16 is ~1000× over it).  On the CPU, Triton's interpreter computes `tl.dot`
in full fp32 whatever `input_precision` says, so TF32 is emulated there (the
operands rounded to TF32's 10-bit mantissa where the kernel asks for TF32);
the witness says so.  On a GPU the tensor cores do it for real.

The inputs are the problem's own (`get_inputs` under another seed): whatever
structure they carry (a lower-triangular matrix the candidate exploits) stays,
so that an error can only come from the arithmetic.  An error larger than any
reduced precision gives (over 2^-5 of the output's largest magnitude: TF32,
fp16 and bf16 stay well below) is a wrong value, not a precision: CMP001's, and
`unconfirmed` here.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import finite_summary, fmt
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, run_problem, value_failure, \
    witness_arrays

GROSS = 2.0 ** -5   # an error this large, relative to the output's magnitude, is no precision effect


class IeeeErrorBound(Gate):
    code = "PRC001"
    name = "prc001-ieee-error-bound"
    summary = "output dtype, and error against an IEEE-fp32 bound (TF32 emulated in the interpreter)"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "given", distribution="given", seed=ctx.seed + 7, emulate_tf32=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.reference_ok:
            return self.verdict(UNCONFIRMED, result.reference_failure(), [result.case])
        if not result.candidate_ok or not result.runs or not result.runs[0].ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        run = result.runs[0]
        tf32 = run.meta.get("tf32_dots", 0)
        note = (f"TF32 emulated in the interpreter's tl.dot ({tf32} dots rounded to a 10-bit mantissa)"
                if tf32 else ("real tensor cores" if ctx.mode == "cuda" else "no tl.dot asked for TF32"))
        for i, (observed, expected) in enumerate(zip(run.outputs, result.expected)):
            if observed.dtype != expected.dtype:
                return self.confirmed(f"output {i} is {observed.dtype} where the reference returns {expected.dtype}",
                                      result, observed_dtype=observed.dtype, expected_dtype=expected.dtype)
        if result.expected64 is None:
            return self.verdict(UNCONFIRMED, "dtypes match; the reference does not run in float64, so the error "
                                "bound cannot be checked", [result.case])
        failure, details = value_failure(result)
        dtypes = sorted({leaf.dtype for leaf in result.expected})
        relative = _relative(details, result.expected64)
        if failure and relative > GROSS:
            return self.verdict(UNCONFIRMED, f"{failure}: {fmt(relative)} of the output's largest magnitude, more "
                                f"than any reduced precision gives: a wrong value (CMP001), not the arithmetic's "
                                f"precision", [result.case], relative_error=relative)
        if failure:
            return self.confirmed(f"{failure} (the {'/'.join(dtypes)} reference's own error sets the bound; {note})",
                                  result, arrays=witness_arrays(run.outputs, result.expected64),
                                  tf32_emulated=bool(tf32), tf32_dots=tf32, **details)
        return self.verdict(REFUTED, f"dtypes match and the error is within the {'/'.join(dtypes)} bound ({note})",
                            [result.case], tf32_emulated=bool(tf32))


def _relative(details: dict, expected64) -> float:
    """The largest error over the largest expected magnitude (0 when unknown)."""
    error = (details.get("metric") or {}).get("max_abs_error")
    if error is None or not expected64:
        return 0.0
    scale = max((finite_summary(leaf)[1] for leaf in expected64), default=0.0)
    return float(error) / scale if scale > 0 else 0.0
