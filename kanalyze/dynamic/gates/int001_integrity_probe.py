"""INT001 integrity: the candidate computes every call's answer, and leaves the evaluation as it found it.

One case, three calls on one model: the problem's inputs; new values of the
same shapes (the problem's own `get_inputs` with another seed) written into the
very tensors of the first call; the same new values in fresh tensors.  The
second and third outputs must match the reference for the new values; one that
matches the first call's reference instead is a cached result (keyed by buffer,
shape or call count: the second call shows it; keyed by what a write into its
buffers changes, a tensor's version counter or identity: the third).  After each
call the worker reports the benchmark's functions the candidate replaced
(`time.perf_counter`, `torch.cuda.synchronize`, `torch.allclose`, ... and the
torch numerics settings), the threads it left running, and its reads of the
heap and frames since its import (`gc.get_objects`, `sys._getframe`, ...:
integrity.py).

Power: the two input sets must give different reference outputs, else a cached
answer could not show.  A second output wrong in some other way is a value
error (CMP001's business), not a cache: `unconfirmed` for this clause.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import bitwise_differences, check_values, same_shape
from kanalyze.dynamic.gates.base import (CONFIRMED, RANDOM_REFERENCE, REFUTED, UNCONFIRMED, Gate, GateContext,
                                         run_problem)
from kanalyze.dynamic.results import Result, leaves


class IntegrityProbe(Gate):
    code = "INT001"
    name = "int001-integrity-probe"
    summary = "call twice with new values in the same buffers; functions replaced, threads left running"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "repeat", repeat_new_values=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        problem = run_problem(result)
        if problem and not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [result.case])
        runs = result.runs
        replaced = sorted({name for run in runs for name in run.meta.get("replaced", [])})
        if replaced:
            return self.verdict(CONFIRMED, f"the candidate replaced what a benchmark times or compares with: "
                                f"{', '.join(replaced)}", [result.case], replaced=replaced)
        snooped = sorted({str(where) for run in runs for where in run.meta.get("snooped") or []})
        if snooped:
            return self.verdict(CONFIRMED, f"the candidate read the checker's state (the heap, the stack): "
                                f"{'; '.join(snooped[:4])}", [result.case], snooped=snooped)
        threads = sorted({name for run in runs for name in run.meta.get("threads_left", [])})
        if threads:
            return self.verdict(CONFIRMED, f"threads the candidate started were still running when its call "
                                f"returned ({', '.join(threads)}): work outside the timed call",
                                [result.case], threads=threads)
        return self._repeat(result)

    def _repeat(self, result: Result):
        if result.reference.meta.get("draws_random"):
            return self.verdict(UNCONFIRMED, f"no benchmark function replaced, no thread left running, no read of "
                                f"the heap or the stack; but {RANDOM_REFERENCE}, so a cached answer could not show",
                                [result.case])
        first = next((run for run in result.runs if not run.meta.get("repeat")), None)
        second = next((run for run in result.runs if run.meta.get("repeat") is True), None)
        fresh = next((run for run in result.runs if run.meta.get("repeat") == "fresh"), None)
        expected1 = result.expected
        expected2 = leaves(result.reference.meta.get("output2"), result.reference_arrays)
        exact2 = leaves(result.reference.meta.get("output2_64"), result.reference_arrays) or expected2
        if first is None or second is None or not expected2:
            return self.verdict(UNCONFIRMED, "the second call did not run", [result.case])
        if not second.ok:
            return self.verdict(UNCONFIRMED, f"the second call failed: {second.failure()} (CMP001's business)",
                                [result.case])
        if same_shape(second.outputs, expected2, second.structure, result.expected_structure):
            return self.verdict(UNCONFIRMED, "the second call's output has another shape (CMP001's business)",
                                [result.case])
        if not any(a.shape != b.shape or bitwise_differences(a, b)[0] for a, b in zip(expected1, expected2)):
            return self.verdict(UNCONFIRMED, "the two input sets give the same reference output, so a cached "
                                "answer could not show", [result.case])
        calls = [(second, "written into the same buffers")]
        if fresh is not None:
            calls.append((fresh, "in fresh buffers of the same shapes"))
        for run, where in calls:
            if not run.ok or same_shape(run.outputs, expected2, run.structure, result.expected_structure):
                return self.verdict(UNCONFIRMED, f"called with new values {where}, it failed or changed its "
                                    f"output's shape (CMP001's business)", [result.case])
            checks = [check_values(o, w, e, terms=result.reduction_terms)
                      for o, w, e in zip(run.outputs, expected2, exact2)]
            if all(c.ok for c in checks):
                continue
            if not all(check_values(o, w, w, terms=result.reduction_terms).ok
                       for o, w in zip(run.outputs, expected1)):
                return self.verdict(UNCONFIRMED, f"called with new values {where}, its values are wrong but are "
                                    "not the first call's answer: a value error (CMP001's business), not a cached "
                                    "result", [result.case])
            bad = next(c for c in checks if not c.ok)
            return self.verdict(CONFIRMED, f"called again with new values {where}, it returned the previous "
                                f"call's answer: {bad.summary()} against the new reference, within the bound of "
                                f"the old one", [result.case], metric=bad.metric(),
                                arrays={"repeat_observed0": run.outputs[0].array,
                                        "repeat_expected0": expected2[0].array, "first_expected0": expected1[0].array})
        return self.verdict(REFUTED, "called again with new values " + " and ".join(where for _, where in calls)
                            + ", it computed the new answer; no benchmark function replaced, no thread left running, "
                            "no read of the heap or the stack",
                            [result.case])
