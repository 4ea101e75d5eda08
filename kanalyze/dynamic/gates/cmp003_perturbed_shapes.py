"""CMP003 shape: the candidate works at sizes other than the benchmark's.

Each size knob alone one past its value and twice as large, then every size
knob at once one below, at a prime, at 1 and at a non-power-of-two that is twice
an odd number (cases.perturbed_sizes).  The first size at which the candidate gives wrong
values (calibrated bound against float64), crashes, or reads or writes out of
bounds (reported by the interpreter with the program id and offset) is the
witness.  A size the
reference itself rejects (channels not divisible by groups, say) is skipped.

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

from kanalyze.dynamic.cases import perturbed_sizes
from kanalyze.dynamic.gates.base import (REFUTED, UNCONFIRMED, Gate, GateContext, run_problem, value_failure,
                                         witness_arrays)

MAX_CASES = 24


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
        return [ctx.case(self, label, sizes=sizes) for label, sizes in perturbed_sizes(ctx.sizes)[:MAX_CASES]]

    def judge(self, ctx: GateContext, results):
        ran, skipped, slow = 0, 0, []
        for result in results:
            status, detail, details = size_outcome(result)
            if status == "rejected":
                skipped += 1
                continue
            if status == "slow":
                slow.append(result.case.id.split("/", 1)[1])
                continue
            ran += 1
            if status != "ok":
                label = result.case.id.split("/", 1)[1]
                run = result.runs[0] if result.runs else None
                arrays = witness_arrays(run.outputs if run is not None and run.ok else None, result.expected64)
                return self.confirmed(f"fails at {label}: {detail}", result, arrays=arrays, failure=status,
                                      sizes=result.case.sizes, **details)
        too_slow = (f"the candidate did not finish within the case's time at {', '.join(slow)} (too slow to "
                    f"judge there: a slow kernel and a hung one look the same)") if slow else ""
        if not ran:
            why = f"the reference rejected {skipped} perturbed sizes" if skipped else ""
            return self.verdict(UNCONFIRMED, "; ".join(w for w in (why, too_slow) if w) or "no perturbed size ran",
                                [r.case for r in results])
        note = (f"; {skipped} sizes the reference rejects skipped" if skipped else "") + \
            (f"; {too_slow}" if slow else "")
        lacking = missing_power(ctx.sizes, [r.case.sizes for r in results if size_outcome(r)[0] == "ok"])
        if lacking:
            return self.verdict(UNCONFIRMED, f"correct at {ran} perturbed sizes{note}, but {lacking}, so a kernel "
                                             f"specialised to the benchmark's sizes could still pass them",
                                [r.case for r in results])
        return self.verdict(REFUTED, f"correct at {ran} perturbed sizes, among them every size knob changed and "
                                     f"none a multiple of 4{note}", [r.case for r in results])


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
