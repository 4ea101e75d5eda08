"""From what a session's cases did to verdicts: each gate judges its own cases.

    judge(results, codes, contexts, gates, replay, flags_by_code)   verdicts, and the baseline's outcome

The baseline (the problem's own inputs) is judged first: a candidate that fails
there blocks every gate (said once, as CMP001), one already wrong there blocks
the value gates no static flag asked for, and a reference that draws random
numbers blocks every gate that compares values or bits.  The rest judge side by
side.  A gate whose cases kanalyze lost refutes nothing; a candidate that broke
the worker protocol is INT001, and nothing else of its run is trusted.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.compare import finite_summary
from kanalyze.dynamic.gates.base import (CONFIRMED, RANDOM_REFERENCE, REFUTED, UNCONFIRMED, CannotJudge, GateContext,
                                         Verdict, scaled_sizes, value_failure, witness_arrays)
from kanalyze.dynamic.held_arrays import HeldArray
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox.dispatch import TIME_LIMIT
from kanalyze.dynamic.sandbox.transport import Leaf
from kanalyze.dynamic.session import BASELINE
from kanalyze.dynamic.traces import value_dependent_paths

NO_CASE = "no case of this gate in the witness"   # a gate left to a later session (held_budget.py)
PROTOCOL_GATE = "worker-protocol"
PROTOCOL_BROKEN = "the candidate broke kanalyze's worker protocol (INT001), so no other result of this run is trusted"

# Gates that judge values against the reference: a candidate already wrong on the
# problem's own inputs fails them all for that one reason (reported once, as CMP001),
# unless a static flag asked for the gate.
VALUE_GATES = {"CMP003", "EXC001", "EXC002", "PRC001", "PRC002"}

# The gates a reference that draws random numbers leaves blind (gates.base.RANDOM_REFERENCE says why).
RANDOM_BLIND = VALUE_GATES | {"CMP001", "CMP002", "ORD001", "ORD002"}

# What a candidate's failure says when it asked for a GPU or its driver and the run has none.
NO_DEVICE_MARKERS = ("libcuda.so cannot found", "0 active drivers", "Found no NVIDIA driver",
                     "No CUDA GPUs are available", "Torch not compiled with CUDA enabled")


def judge(results: list[Result], codes, contexts, gates, replay: bool,
          flags_by_code: dict) -> tuple[list[Verdict], dict | None]:
    """Each gate's verdict, and what the baseline showed.  A candidate that fails on the
    problem's own inputs blocks every gate (reported once, as CMP001); one whose values are
    wrong there blocks the value gates that no static flag asked for (they would all fail for
    that one reason)."""
    violation = next((r for r in results if r.violation()), None)
    if violation is not None:
        return _protocol_violation(violation, codes, gates), None
    verdicts: list[Verdict] = []
    changed = value_dependent_paths(results)
    if changed is not None and "INT001" not in codes:   # found on the way, as CMP001 is from the baseline
        verdicts.append(changed)
    baseline = next((r for r in results if r.case.id == BASELINE), None)
    blocked, wrong, outcome, random = None, None, None, None
    if baseline is not None:
        # "the problem's own inputs", or where the run scaled them down, at which sizes.
        context = next(iter(contexts.values()), None)
        scaled = scaled_sizes(baseline.case.sizes, context.harness.knobs) if context is not None else ""
        own = f"the problem's inputs{scaled}" if scaled else "the problem's own inputs"
        outcome = {"status": "passed", "summary": f"within the calibrated bound against float64 on {own}"}
        if not baseline.reference_ok:
            blocked = f"{baseline.reference_failure()} (at the base sizes)"
        elif baseline.kanalyze_failure():
            failure = baseline.kanalyze_failure()
            blocked = (f"{failure} (the candidate on {own})" if failure.startswith(TIME_LIMIT) else
                       f"kanalyze could not run the candidate on {own}: {failure}")
        elif baseline.candidate_failed():
            found = _baseline_verdict(baseline, own)   # a failed run: no values compared, nothing to calibrate
            if found and any(marker in found.summary for marker in NO_DEVICE_MARKERS):
                # It asked for a GPU or its driver (autotuning, device queries) where the run has
                # none: the run's shortcoming, not the candidate's defect.
                blocked = f"the candidate needs a CUDA device or driver, which this run does not have: {found.summary}"
                if "CMP001" in codes:
                    verdicts.append(Verdict("CMP001", UNCONFIRMED, blocked, [baseline.case], gate=gates["CMP001"].name))
            else:
                if found:
                    verdicts.append(found)
                outcome = {"status": "failed", "summary": found.summary if found else "?"}
                blocked = f"the candidate fails on {_own_inputs(outcome['summary'], own)}"
        elif baseline.reference.meta.get("draws_random"):
            random, outcome = RANDOM_REFERENCE, {"status": "undecided", "summary": RANDOM_REFERENCE}
        else:
            try:
                found = _baseline_verdict(baseline, own)
            except CannotJudge as exc:   # the value gates say so each; the others judge what they can
                found, outcome = None, {"status": "undecided", "summary": str(exc)}
            if found:
                outcome = {"status": "failed", "summary": found.summary}
                wrong = (f"the candidate's values are already wrong on {own} (CMP001), so "
                         "this gate's property cannot be told apart from that")
                if "CMP001" not in codes:
                    verdicts.append(found)
    decided: dict[str, list[Verdict]] = {}   # per gate, said without its judge
    tasks: dict[str, tuple[list[Result], list[Result]]] = {}
    for code in codes:
        ran = [r for r in results if r.case.gate == code]
        own = [r for r in ran if not r.kanalyze_failure()]
        lost = [r for r in ran if r.kanalyze_failure()]
        if code == "CMP001" and any(v.code == "CMP001" for v in verdicts):
            decided[code] = []   # the baseline's failure is CMP001's verdict: said once
        elif blocked and (code != "CMP001" or not own):   # the cause, said once, before its effects
            decided[code] = _undecided(gates[code], blocked, own or lost)
        elif lost and not own:
            why = lost[0].kanalyze_failure()
            decided[code] = _undecided(gates[code], why if why.startswith(TIME_LIMIT) else
                                       f"kanalyze could not run this gate: {why}", lost)
        elif random and code in RANDOM_BLIND:
            decided[code] = _undecided(gates[code], random, own)
        elif wrong and code in VALUE_GATES and not flags_by_code.get(code):
            decided[code] = _undecided(gates[code], wrong, own)
        elif not own:
            decided[code] = _undecided(gates[code], NO_CASE, [])
        else:
            tasks[code] = (own, lost)
    # Each gate judges its own cases, apart from the others: side by side (numpy leaves the GIL
    # on large arrays, and a problem's outputs reach 2^31 elements).
    workers = max(1, min(len(tasks), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {code: pool.submit(_judge_gate, gates[code], contexts[code], own, lost)
                   for code, (own, lost) in tasks.items()}
        judged = {code: future.result() for code, future in futures.items()}
    for code in codes:
        verdicts.extend(decided[code] if code in decided else judged[code])
    if changed is not None and "INT001" in codes:   # the probe's own cases may not have shown it
        verdicts = [changed if v.code == "INT001" and v.status != CONFIRMED else v for v in verdicts]
    if blocked and "CMP001" in codes and not any(v.code == "CMP001" for v in verdicts):
        verdicts.append(Verdict("CMP001", UNCONFIRMED, blocked, gate=gates["CMP001"].name))
    if blocked and outcome["status"] != "failed":
        outcome = {"status": "undecided", "summary": blocked}
    return name_the_cause(verdicts), outcome


def decided_by_baseline(baseline_results: list[Result], codes, flags_by_code: dict) -> list[str]:
    """The gates of `codes` that `judge` will decide from the baseline alone: those that compare values
    or bits where the reference draws random numbers, and the value gates where the candidate's
    values are already wrong on the problem's own inputs and no static flag asked for them, so
    their cases would be run only to be set aside (at a problem's real sizes, CMP003's new sizes
    alone take seconds each).  The runner leaves their cases out; `judge` says why."""
    baseline = next((r for r in baseline_results if r.case.id == BASELINE), None)
    if (baseline is None or not baseline.reference_ok or baseline.kanalyze_failure()
            or baseline.candidate_failed()):
        return []
    if baseline.reference.meta.get("draws_random"):
        return [code for code in codes if code in RANDOM_BLIND]
    try:
        if _baseline_verdict(baseline) is None:
            return []
    except Exception:   # (CannotJudge, or a comparison that cannot be made yet: every case runs, as before)
        return []
    return [code for code in codes if code in VALUE_GATES and not flags_by_code.get(code)]


def _baseline_verdict(result: Result, own: str = "the problem's own inputs") -> Verdict | None:
    """CMP001 from the baseline (the problem's own inputs, or `own`: them at scaled sizes), when it
    fails there."""
    failure, details = value_failure(result)
    if not failure:
        return None
    run = result.runs[0] if result.runs else None
    arrays = witness_arrays(run.outputs if run is not None and run.ok else None, result.expected64)
    arrays.update({f"input{i}": leaf.array for i, leaf in enumerate(result.inputs)})
    case = Case.from_dict({**result.case.to_dict(), "id": "CMP001/baseline", "gate": "CMP001"})
    return Verdict("CMP001", CONFIRMED, f"on {own}: {failure}", [case], details, arrays,
                   "cmp001-calibrated-value")


def held_windows(verdict) -> dict:
    """The verdict's arrays, each one the judge holds cut to the window a witness keeps around the
    failing element (witness.failing_slices); one it cannot give is left out of the witness."""
    from kanalyze.dynamic.gates.base import MAX_WITNESS_ELEMENTS, first_index
    from kanalyze.dynamic.held_arrays import HeldArray, windows

    try:
        return windows(verdict.arrays, first_index(verdict.details), MAX_WITNESS_ELEMENTS)
    except CannotJudge as exc:
        verdict.details["arrays_left_out"] = str(exc)
        return {k: v for k, v in verdict.arrays.items() if not isinstance(v, HeldArray)}


def _undecided(gate, why: str, results: list[Result]) -> list[Verdict]:
    return [Verdict(gate.code, UNCONFIRMED, why, [r.case for r in results], gate=gate.name)]


def _judge_gate(gate, ctx: GateContext, own: list[Result], lost: list[Result]) -> list[Verdict]:
    """One gate's verdicts on the cases it ran; a refutation that lost cases to kanalyze is not one."""
    try:
        judged = gate.judge(ctx, own)
        return [_without_lost_power(v, lost) for v in (judged if isinstance(judged, list) else [judged])]
    except CannotJudge as exc:
        return _undecided(gate, str(exc), own)
    except Exception as exc:  # a bug in one gate must not hide the others
        return _undecided(gate, f"kanalyze's gate failed: {type(exc).__name__}: {exc}", own)


def _own_inputs(summary: str, own: str = "the problem's own inputs") -> str:
    """"the problem's own inputs: ..." (or `own`) for a blocked gate's reason, the phrase said once."""
    prefix = f"on {own}: "
    return f"{own}: " + (summary[len(prefix):] if summary.startswith(prefix) else summary)


def name_the_cause(verdicts: list[Verdict]) -> list[Verdict]:
    """A value error of a reduced-precision size beside a confirmed PRC001 is that precision.
    CMP001's verdict says so (both stand: the values are off, and why).  CMP003's is no shape
    specialisation: the same TF32 error at another size shows nothing about sizes, and it is
    `unconfirmed` with why (a gross error there still confirms: unwritten tiles, a wrong tail)."""
    if not any(v.code == "PRC001" and v.status == CONFIRMED for v in verdicts):
        return verdicts
    out = []
    for v in verdicts:
        if v.code == "CMP001" and v.status == CONFIRMED and _of_reduced_precision(v):
            v = replace(v, summary=v.summary + " (the size of the reduced precision PRC001 confirms: its cause)")
        elif v.code == "CMP003" and v.status == CONFIRMED and _of_reduced_precision(v):
            v = replace(v, status=UNCONFIRMED,
                        summary=f"{v.summary}: an error of the size of the reduced precision PRC001 confirms, which "
                                f"says nothing of the sizes; a shape defect at the sizes after this one was not looked "
                                f"for")
        out.append(v)
    return out


def _of_reduced_precision(verdict: Verdict) -> bool:
    """A value failure no larger, relative to the output's magnitude, than a reduced precision gives."""
    from kanalyze.dynamic.gates.prc001_ieee_error_bound import GROSS

    if "metric" not in verdict.details:
        return False
    try:
        scale = expected_scale(verdict)
    except CannotJudge:   # (the judge could not say: the verdict says no more than it found)
        return False
    error = verdict.details["metric"].get("max_abs_error")
    return bool(scale) and error is not None and error / scale <= GROSS


def expected_scale(verdict: Verdict) -> float:
    """The largest finite magnitude of a verdict's expected arrays: a summary of the judge's where
    it holds them (a problem's outputs reach 2^31 elements), else numpy's."""
    scale = 0.0
    for key, array in verdict.arrays.items():
        if not key.startswith("expected"):
            continue
        if isinstance(array, HeldArray):
            if array.torch_dtype.startswith(("float", "bfloat")):
                scale = max(scale, finite_summary(Leaf(array, array.torch_dtype))[1])
        elif isinstance(array, np.ndarray) and array.dtype.kind == "f":
            scale = max(scale, float(np.max(np.abs(array[np.isfinite(array)]), initial=0.0)))
    return scale


def _without_lost_power(verdict: Verdict, lost: list[Result]) -> Verdict:
    """A refutation needs every case its gate planned: with some lost to kanalyze's own
    failures, it becomes unconfirmed.  A confirmation stands (the candidate did it)."""
    if not lost or verdict.status != REFUTED:
        return verdict
    failure = lost[0].kanalyze_failure()
    if failure.startswith(TIME_LIMIT):   # (a case its session's time limit left unrun: streaming.py)
        why = f"{failure} ({len(lost)} of the gate's cases); the rest: {verdict.summary}"
    else:
        why = f"{len(lost)} of the gate's cases did not run ({failure}); the rest: {verdict.summary}"
    return replace(verdict, status=UNCONFIRMED, summary=why)


def _protocol_violation(result: Result, codes: list[str], gates: dict) -> list[Verdict]:
    """The candidate wrote on kanalyze's status channel: INT001, with what it sent; no
    other verdict of the run can be trusted."""
    sent = result.violation()
    verdicts = [Verdict("INT001", CONFIRMED, sent, [result.case], {"sent": sent}, gate=PROTOCOL_GATE)]
    verdicts += [Verdict(code, UNCONFIRMED, PROTOCOL_BROKEN, gate=gates[code].name) for code in codes if code != "INT001"]
    return verdicts


def distrusted(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts of a run in several sessions, one of which the candidate broke the worker
    protocol in: its INT001, and every other verdict of the run unconfirmed, as in one session."""
    broke = next((v for v in verdicts if v.gate == PROTOCOL_GATE), None)
    if broke is None:
        return verdicts
    return [broke] + [v if v.status == UNCONFIRMED and v.summary == PROTOCOL_BROKEN else
                      replace(v, status=UNCONFIRMED, summary=PROTOCOL_BROKEN, arrays={})
                      for v in verdicts if v.code != "INT001"]


__all__ = ["NO_CASE", "NO_DEVICE_MARKERS", "PROTOCOL_BROKEN", "RANDOM_BLIND", "VALUE_GATES", "decided_by_baseline",
           "distrusted", "held_windows", "judge", "name_the_cause"]
