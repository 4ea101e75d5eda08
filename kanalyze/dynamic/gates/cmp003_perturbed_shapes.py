"""CMP003 shape: the candidate works at sizes other than the benchmark's.

Each size knob alone one past its value and twice as large, then every size
knob at once one below, at a prime, at 1 and at a non-power-of-two that is twice
an odd number (cases.perturbed_sizes).  The first size at which the candidate gives wrong
values (calibrated bound against float64), crashes, or reads or writes out of
bounds (reported by the interpreter with the program id and offset) is the
witness.  A size the
reference itself rejects (channels not divisible by groups, say) is skipped.

Precision is not shape.  The calibrated bound depends on the size: at "every size 1"
a GEMM sums one term and the bound is a few ulps, where at the problem's own sizes it
allows for the reference's own error over thousands of terms.  A candidate that errs
the same at every size (a tanh GELU for the erf one, fast transcendentals) then fails
the tight bound of a small size without any shape defect.  So the gate also runs the
problem's own sizes (`BASE`), and a size whose values are only off is a shape failure
only where the error there is larger than the candidate's own at the problem's sizes
(by more than the bound's `FACTOR`), or no longer small against the values
(`SAME_PRECISION`): what a size specialisation leaves (unwritten or garbage tails,
rows added twice) is.  A size within both is said in the verdict, as the precision
question it is (CMP001's, at the problem's sizes).  A size off by more than at the
problem's sizes but still close is a failure (`failure: imprecise`), said as what
it is: the arithmetic erring more on the values that size gives (a tanh GELU where the
reference's is erf's, a one-pass variance cancelling), not a size the kernel assumed.

Power: a size-specialised kernel shows at a size where what it assumed no longer
holds.  A refutation needs, among the sizes that ran, one at which every size knob
changed (a literal size or a pinned shape no longer matches) and one at which no
size knob is a multiple of four (no block of four or more divides it: a grid that
rounds down or an unmasked tail shows; the sizes all odd, or all twice an odd
number for a problem that takes only even ones).  Where the reference rejected
those, the gate could not have seen the violation: `unconfirmed`, with why.

`judge_sizes` is also the entry point for sizes found elsewhere (the z3 bounds
pass hands its counterexample sizes to `runner.run_at_sizes`).
"""

from __future__ import annotations

import functools

from kanalyze.dynamic.cases import perturbed_sizes
from kanalyze.dynamic.compare import FACTOR, ValueCheck, check_values, fmt
from kanalyze.dynamic.gates.base import (REFUTED, UNCONFIRMED, Gate, GateContext, run_problem, value_failure,
                                         witness_arrays)
from kanalyze.dynamic.sandbox.transport import EPS

MAX_CASES = 24
BASE = "base"   # the case at the problem's own sizes: the candidate's error there
# An error that stays within this share of the largest value is a precision matter, never
# what a size specialisation leaves: TF32's precision, or FACTOR ulps of a half-precision dtype.
SAME_PRECISION = 2.0 ** -10


def size_outcome(result) -> tuple[str, str, dict]:
    """(status, detail, details) of one sized run: ok | rejected | slow | out_of_bounds | crashed | wrong.
    `slow`: the candidate did not finish within the case's time.  At a size kanalyze made up (a
    knob twice as large multiplies a 3-D convolution's work by eight) a slow kernel and a hung
    one look the same, and neither gave a wrong value: the size is not judged."""
    if not result.reference_ok:
        return "rejected", result.reference_failure(), {}
    if result.candidate is not None and result.candidate.status == "timeout":
        return "slow", result.candidate_failure(), {}
    if not result.candidate_ok:
        return "crashed", result.candidate_failure(), {}
    run = result.runs[0]
    if run.meta.get("out_of_bounds"):
        return "out_of_bounds", run.meta["out_of_bounds"]["message"], {"out_of_bounds": run.meta["out_of_bounds"]}
    problem = run_problem(result)
    if problem:
        return "crashed" if not run.ok else "wrong", problem, {}
    failure, details = value_failure(result)
    if failure:
        return "wrong", failure, details
    return "ok", "", details


class PerturbedShapes(Gate):
    code = "CMP003"
    name = "cmp003-perturbed-shapes"
    summary = "rerun at perturbed sizes (each knob +1 and 2×; all at once −1, prime, 1, non-power-of-two)"

    def plan(self, ctx: GateContext):
        # The problem's own sizes first: the same inputs as the baseline, which the reference computed.
        return [ctx.case(self, BASE)] + [ctx.case(self, label, sizes=sizes)
                                         for label, sizes in perturbed_sizes(ctx.sizes)[:MAX_CASES]]

    def judge(self, ctx: GateContext, results):
        base = next((r for r in results if label_of(r) == BASE), None)
        results = [r for r in results if r is not base]
        own = functools.cache(lambda: _checks(base))   # the problem's own sizes, read once where needed
        ran, skipped, slow, judged, imprecise = 0, 0, [], [], []
        for result in results:
            status, detail, details = size_outcome(result)
            if status == "rejected":
                skipped += 1
                continue
            if status == "slow":
                slow.append(label_of(result))
                continue
            ran += 1
            kind, words = precision(result, own) if status == "wrong" and "metric" in details else (None, "")
            if kind == "same":
                imprecise.append((result, words))
            if status == "ok" or kind == "same":
                judged.append(result)
                continue
            if status != "ok":
                run = result.runs[0] if result.runs else None
                arrays = witness_arrays(run.outputs if run is not None and run.ok else None, result.expected64)
                cases = [result.case] + ([base.case] if base is not None else [])
                said = f"fails at {label_of(result)}: {detail}" + (f"; {words}" if words else "")
                verdict = self.confirmed(said, result, arrays=arrays, failure="imprecise" if kind else status,
                                         sizes=result.case.sizes, **details)
                verdict.cases = cases   # the replay compares with the problem's own sizes again
                return verdict
        too_slow = (f"the candidate did not finish within the case's time at {', '.join(slow)} (too slow to "
                    f"judge there: a slow kernel and a hung one look the same)") if slow else ""
        if not ran:
            why = f"the reference rejected {skipped} perturbed sizes" if skipped else ""
            return self.verdict(UNCONFIRMED, "; ".join(w for w in (why, too_slow) if w) or "no perturbed size ran",
                                [r.case for r in results])
        note = (f"; {skipped} sizes the reference rejects skipped" if skipped else "") + \
            (f"; {too_slow}" if slow else "") + (f"; {precision_note(imprecise)}" if imprecise else "")
        lacking = missing_power(ctx.sizes, [r.case.sizes for r in judged])
        correct = len(judged) - len(imprecise)
        shown = " and ".join(part for part in (
            f"correct at {correct} perturbed sizes" if correct else "",
            f"as precise at {len(imprecise)} perturbed sizes as at the problem's own" if imprecise else "") if part)
        cases = [r.case for r in results] + ([base.case] if base is not None else [])
        if lacking:
            return self.verdict(UNCONFIRMED, f"{shown}{note}, but {lacking}, so a kernel specialised to the "
                                             f"benchmark's sizes could still pass them", cases)
        return self.verdict(REFUTED, f"{shown}, among them every size knob changed and none a multiple of 4{note}",
                            cases)


def label_of(result) -> str:
    return result.case.id.split("/", 1)[1]


def precision(result, own) -> tuple[str | None, str]:
    """How far off a run at a perturbed size is whose values only are wrong: (kind, words).

    "same": every output over its bound errs by at most FACTOR times the candidate's own error
    at the problem's sizes (`own()`: the base case's checks, which passed) and is close (below): the candidate's
    precision, the same as where it passed, held to a tighter bound; not a shape failure.
    "close": within SAME_PRECISION of the largest value (FACTOR ulps in a half-precision dtype)
    but more off than at the problem's sizes: the arithmetic errs more on the values this size
    gives (an approximation, a cancellation); a failure, said as such, not garbage.
    None: off by more than that (unwritten or garbage values, rows added twice)."""
    here = _checks(result)
    failing = [(i, check, dtype) for i, (check, dtype) in enumerate(here or []) if not check.ok]
    if not failing or not all(dtype in EPS and check.max_error <= max(SAME_PRECISION, FACTOR * EPS[dtype]) * check.scale
                              for _, check, dtype in failing):   # (integers and booleans are exact or wrong)
        return None, ""
    there = own()
    i, check, _ = max(failing, key=lambda found: found[1].max_error)
    off = f"{fmt(check.max_error / check.scale)} of the largest value"
    if there is None or len(there) != len(here):
        return "close", f"the values are close (off by {off}): the candidate's arithmetic, not a size it assumed"
    own = there[i][0]
    if all(there[j][0].ok and found.max_error <= FACTOR * there[j][0].max_error for j, found, _ in failing):
        return "same", (f"at {label_of(result)} the error {fmt(check.max_error)} exceeds that size's bound "
                        f"{fmt(check.bound)}, but not {fmt(FACTOR)} times the candidate's own at the problem's sizes "
                        f"({fmt(own.max_error)}, within its bound {fmt(own.bound)} there)")
    return "close", (f"the values are close (off by {off}) but further off than at the problem's own sizes "
                     f"({fmt(own.max_error)}): the candidate's arithmetic errs more on the values this size gives "
                     f"(an approximation, a cancellation), not garbage from a size it assumed")


def _checks(result) -> list[tuple[ValueCheck, str]] | None:
    """Each output's check against the float64 reference, with its dtype; None where the run
    cannot be compared."""
    if result is None or run_problem(result) or result.expected64 is None:
        return None
    run = result.runs[0]
    return [(check_values(observed, working, exact, terms=result.reduction_terms), working.dtype)
            for observed, working, exact in zip(run.outputs, result.expected, result.expected64)]


def precision_note(imprecise: list) -> str:
    """What the sizes off by precision alone showed, in words (the first, and how many)."""
    first = imprecise[0][1]
    more = f" ({len(imprecise) - 1} more sizes alike)" if len(imprecise) > 1 else ""
    return (f"{first}{more}: the candidate's precision, the same as at the problem's sizes, held to that "
            f"size's tighter bound; a precision question for CMP001 at the problem's sizes, not a shape defect")


def missing_power(base: dict[str, int], ran: list[dict[str, int]]) -> str | None:
    """What the sizes that ran lack to show a size specialisation (the gate's power), in words,
    or None: a size where every size knob of `base` (value 2 or more) changed, and one where
    none is a multiple of four."""
    knobs = [name for name, value in base.items() if value >= 2]
    if not knobs:
        return None
    changed = any(all(sizes.get(k) != base[k] for k in knobs) for sizes in ran)
    uneven = any(all(sizes.get(k, 0) % 4 for k in knobs) for sizes in ran)
    if changed and uneven:
        return None
    what = [w for w, lacks in (("changed every size knob", not changed),
                               ("left every size knob off a multiple of 4", not uneven)) if lacks]
    return f"none of the sizes the reference accepted {' or '.join(what)} ({', '.join(knobs)})"
