"""MEM003 bounds: the z3 counterexample, run under Triton's interpreter, leaves its tensor.

Each flag carries the smallest sizes at which the static proof failed
(`evidence["counterexample"]`).  The gate makes that call — the file's wrapper
with tensors of those shapes, or the kernel launched on its own with the
failing configuration — under the interpreter, whose bounds checks compare
every address with the launch's tensors.  Out-of-bounds lanes are recorded and
masked off, so one run reports every access that leaves its tensor.  A flag is
confirmed when its own access (same kernel, load/store, pointer) was seen out of
bounds, refuted when the run finished and that access never was.

No problem module is needed: the counterexample is the whole input.  Always on
the CPU: a GPU does not report small overruns (allocation granularity hides
them), the interpreter does.
"""

from __future__ import annotations

from kanalyze.dynamic import counterexample
from kanalyze.dynamic.counterexample import CounterexampleGate
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Verdict


class CounterexampleBounds(CounterexampleGate):
    code = "MEM003"
    name = "mem003-bounds-run"
    summary = "run the z3 counterexample under the interpreter's bounds checks"
    device = "cpu"

    case_fields = {"collect_bounds": True}

    def judge_flag(self, flag: dict, result) -> Verdict:
        example = flag["counterexample"]
        rows = [flag["row"]]
        if not result.candidate_ok:
            return Verdict(self.code, UNCONFIRMED, f"the counterexample could not be run: {result.candidate_failure()}",
                           [result.case], gate=self.name, rows=rows)
        call = result.candidate.meta.get("call", result.case.call["function"])
        run = result.runs[0]
        seen = run.meta.get("bounds_violations") or ([run.meta["out_of_bounds"]] if run.meta.get("out_of_bounds")
                                                      else [])
        own = next((v for v in seen if counterexample.matches(v, example)), None)
        placeholders = (result.case.call or {}).get("placeholders") or []
        if own is not None and own.get("tensor") in placeholders:
            return Verdict(self.code, UNCONFIRMED, f"{call}: {own['message']}; but `{own.get('tensor')}` was a "
                           f"one-element stand-in (the counterexample gives it no shape)", [result.case],
                           {"out_of_bounds": own, "call": call}, gate=self.name, rows=rows)
        if own is not None:
            return Verdict(self.code, CONFIRMED, f"{call}: {own['message']}", [result.case],
                           {"out_of_bounds": own, "call": call, "counterexample": example}, gate=self.name, rows=rows)
        if run.meta.get("error"):  # the call stopped early: later accesses were never checked
            why = seen[0]["message"] if seen else run.meta["error"]
            return Verdict(self.code, UNCONFIRMED, f"{call} stopped before this access could be checked: {why}",
                           [result.case], gate=self.name, rows=rows)
        return Verdict(self.code, REFUTED, f"{call} ran under the interpreter's bounds checks and "
                       f"`{example.get('parameter')}`'s {example.get('access')} stayed inside its tensor",
                       [result.case], gate=self.name, rows=rows)
