"""EXC001 non-finite: NaN, +Inf and −Inf appear exactly where the reference has them.

One class per case: NaN, +Inf or −Inf goes into about one element in 64 of
every floating input, at seeded positions.  The candidate's output must be in
the same class as the reference's (computed in the working dtype), element by
element: NaN where NaN, +Inf where +Inf, −Inf where −Inf, finite where finite.
A kernel that propagates NaN correctly passes; one that drops it (a
`tl.maximum` without `propagate_nan`) or turns an Inf into NaN (a tanh
written as a ratio of exponentials) fails.  Tolerance-free.

The reference is judged too: where its working-dtype output and its float64
output disagree on the class (torch's own fp32 `gelu(+inf)` is NaN on the CPU,
while float64 gives +Inf), the element is left out and the verdict says how
many were.  Where the reference's class comes through a product with zero
(`torch.triu(A @ B)` over triangular inputs: a NaN or Inf meets the zero triangle
in the dense sum, and NaN · 0 is NaN), the class the product itself has is
accepted too (sandbox/dependence.py): a kernel that skips the zeros computes
what the problem defines.  Power: a class can only be refuted where the injected
values reach the reference's output; when none does, the verdict is `unconfirmed`.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import class_comparison
from kanalyze.dynamic.gates.base import (REFUTED, UNCONFIRMED, Gate, GateContext, first_value, run_problem,
                                         witness_arrays)

SPECIALS = ("nan", "+inf", "-inf")


class NonfiniteInjection(Gate):
    code = "EXC001"
    name = "exc001-nonfinite-injection"
    summary = "inject NaN / +Inf / -Inf, compare non-finite classes exactly"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, special, special=special, seed=ctx.seed + 3) for special in SPECIALS]

    def judge(self, ctx: GateContext, results):
        ran, unreached, left_out, through_zero = [], [], {}, {}
        for result in results:
            special = result.case.special
            if not result.reference_ok:
                continue
            problem = run_problem(result)
            if problem:
                if not result.candidate_ok:
                    return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [result.case])
                return self.confirmed(f"with {special} injected: {problem}", result)
            run = result.runs[0]
            exact = result.expected64 or result.expected
            marks = result.through_zero or [None] * len(result.expected)
            reached = False
            for i, (observed, expected, expected64, zero) in enumerate(zip(run.outputs, result.expected, exact,
                                                                           marks)):
                if not expected.is_float:
                    continue
                found = class_comparison(observed, expected, expected64, zero)
                left_out[special] = left_out.get(special, 0) + found.left_out
                through_zero[special] = through_zero.get(special, 0) + found.through_zero
                reached = reached or found.reached
                if not found.wrong:
                    continue
                pairs, first = found.pairs, found.first
                worst = max(pairs, key=pairs.get)
                expected_name, observed_name = worst.split(" -> ")
                which = f"output {i}, " if len(run.outputs) > 1 else ""
                summary = (f"with {special} injected: {which}{found.wrong} of {observed.array.size} elements in the "
                           f"wrong class, e.g. {observed_name} where the reference has {expected_name} "
                           f"(first at index {list(first)})")
                if left_out[special]:
                    summary += (f"; {left_out[special]} elements where the reference's working dtype and float64 "
                                f"disagree were left out")
                summary += _through_zero(through_zero[special], result.reference.meta.get("through_zero_error"))
                return self.confirmed(summary, result, arrays=witness_arrays(run.outputs, result.expected),
                                      special=special, mismatches=pairs, first_index=list(first),
                                      observed=first_value(observed, first),
                                      expected=first_value(expected, first),
                                      reference_disagreements=left_out[special],
                                      through_zero=through_zero[special])
            (ran if reached else unreached).append(special)
        cases = [r.case for r in results]
        if not ran:
            reasons = "; ".join(r.reference_failure() for r in results if not r.reference_ok)
            if unreached:
                reasons = (f"the injected {', '.join(unreached)} never reach the reference's output (where float64 "
                           f"agrees), so a swallowed value could not show")
            return self.verdict(UNCONFIRMED, f"no case could show the violation: {reasons}", cases)
        note = "".join(f"; with {s} injected, {n} elements where the reference's working dtype and float64 disagree "
                       f"were left out" for s, n in left_out.items() if n)
        counted = [f"{n} with {s}" for s, n in through_zero.items() if n]
        if counted:
            note += (f"; where the reference's class comes through a product with zero (NaN · 0 in a dense "
                     f"formulation), elements had the class of the product itself and were not counted: "
                     f"{', '.join(counted)} injected")
        if unreached:
            note += f"; {', '.join(unreached)} never reached the output"
        return self.verdict(REFUTED, f"non-finite classes match the reference with {', '.join(ran)} injected{note}",
                            cases, reference_disagreements=left_out, through_zero=through_zero)


def _through_zero(count: int, error: str | None) -> str:
    """What was not counted because the reference's class there comes through a product with
    zero; or, where the stand-in runs that tell it failed (`error`), that nothing was."""
    if error:
        return (f"; the reference's runs with finite stand-ins failed ({str(error)[:160]}), so no element's "
                f"class through a product with zero was accepted")
    if not count:
        return ""
    return (f"; {count} elements where the reference's class comes through a product with zero "
            f"(NaN · 0 in a dense formulation) had the class of the product itself, and were not counted")
