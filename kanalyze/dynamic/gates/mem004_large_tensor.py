"""MEM004 overflow: the z3 counterexample, run on a GPU, faults where the int32 offset wraps.

The counterexample names tensors of 2^31 elements and more (16 GiB in fp32 at
the default `max-numel` of 2^32), so it runs only on a device with that memory
(an H200 has about 139 GiB); on a machine without one the flag stays `flagged`,
with the proof.  The gate calls the file's wrapper (or launches the kernel) at
those sizes; an offset that wrapped to a negative value points gigabytes before
its tensor, and the device reports an illegal address: that fault confirms the
flag.  A run that finishes proves nothing either way (a wrapped offset can land
inside memory the process owns), so the flag is then `unconfirmed`, never
refuted.
"""

from __future__ import annotations

from kanalyze.dynamic.counterexample import CounterexampleGate
from kanalyze.dynamic.gates.base import CONFIRMED, UNCONFIRMED, Verdict
from kanalyze.dynamic.results import FATAL_MARKERS


class CounterexampleOverflow(CounterexampleGate):
    code = "MEM004"
    name = "mem004-large-tensor"
    summary = "run the z3 counterexample's sizes on a GPU; a device fault confirms the wrap"
    device = "cuda"

    def judge_flag(self, flag: dict, result) -> Verdict:
        rows = [flag["row"]]
        call = (result.candidate.meta.get("call") if result.candidate else None) or result.case.call["function"]
        if not result.candidate_ok:
            failure = result.candidate_failure()
            if any(marker in failure for marker in FATAL_MARKERS):
                return self._fault(flag, result, call, failure)
            return Verdict(self.code, UNCONFIRMED, f"the counterexample could not be run: {failure}",
                           [result.case], gate=self.name, rows=rows)
        error = result.runs[0].meta.get("error") or ""
        if any(marker in error for marker in FATAL_MARKERS):
            return self._fault(flag, result, call, error)
        if error:
            return Verdict(self.code, UNCONFIRMED, f"{call} failed without a device fault: {error}",
                           [result.case], gate=self.name, rows=rows)
        return Verdict(self.code, UNCONFIRMED, f"{call} ran on the GPU without a fault: a wrapped offset can land "
                       "inside memory the process owns, so the run cannot tell; the proof stands",
                       [result.case], gate=self.name, rows=rows)

    def _fault(self, flag: dict, result, call: str, error: str) -> Verdict:
        # CUDA's messages go on with advice about asynchronous errors: the first sentence says it.
        first = error.split(" Search for ")[0].split(" CUDA kernel errors might ")[0]
        placeholders = (result.case.call or {}).get("placeholders") or []
        if placeholders:
            return Verdict(self.code, UNCONFIRMED, f"{call} on the GPU: {first}; but the kernel was launched with "
                           f"one-element stand-ins for {', '.join(placeholders)} (the counterexample gives them no "
                           f"shape), so the fault cannot be pinned on the wrapped offset", [result.case],
                           {"error": error, "call": call, "placeholders": placeholders}, gate=self.name,
                           rows=[flag["row"]])
        return Verdict(self.code, CONFIRMED, f"{call} on the GPU: {first}", [result.case],
                       {"error": error, "call": call, "counterexample": flag["counterexample"]},
                       gate=self.name, rows=[flag["row"]])
