"""ORD002 determinism: the same inputs give the same bits, whatever fresh memory held.

N runs on the same inputs; before each, every fresh allocation is filled with
a different byte (0xA5, 0x5A, 0x00, 0xFF), and on the CPU each run also takes
its own program order: a kernel that reads memory nobody wrote, or memory
another program of the same launch writes, gives different bits.

The clause is the cause's: a sum of float atomics also changes with program
order, and that is ORD001.  On the CPU, where runs that differ had three or
more programs adding to one address, the same runs are repeated with one
poison for all: if they still differ, the order of the atomics explains it and
ORD002 stays `unconfirmed`; if they agree, fresh memory's contents did it.
"""

from __future__ import annotations

from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem
from kanalyze.dynamic.gates.ord001_permuted_order import compare_runs

POISONS = (0xA5, 0x5A, 0x00, 0xFF)


class RepeatedRuns(Gate):
    code = "ORD002"
    name = "ord002-repeated-runs"
    summary = "repeated runs with differently poisoned fresh memory, bitwise compare"

    def plan(self, ctx: GateContext):
        cpu = ctx.mode == "cpu"
        runs = [Run(order_seed=(100 + i if cpu and i else None), poison=p) for i, p in enumerate(POISONS)]
        cases = [ctx.case(self, "poisoned-runs", runs=runs)]
        if cpu:  # the same program orders, one poison: what order alone does (float atomics)
            same = [Run(order_seed=run.order_seed, poison=POISONS[0]) for run in runs]
            cases.append(ctx.case(self, "same-poison", runs=same))
        return cases

    def judge(self, ctx: GateContext, results):
        result = next(r for r in results if r.case.id.endswith("poisoned-runs"))
        same = next((r for r in results if r.case.id.endswith("same-poison")), None)
        if not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        how = "fresh memory poisoned differently" + (", program order permuted" if ctx.mode == "cpu" else "")
        found = compare_runs([result], f"{len(result.runs)} runs ({how})")
        if not found:
            return self.verdict(REFUTED, f"{len(result.runs)} runs ({how}) gave the same bits", [result.case])
        summary, details, arrays, failing = found
        atomics = max((run.meta.get("atomic_programs", 0) for run in result.runs), default=0)
        if atomics >= 3 and same is not None and same.candidate_ok:
            if compare_runs([same], "") is not None:
                return self.verdict(UNCONFIRMED, f"{summary}; but runs with one poison for all differ as well, and "
                                    f"up to {atomics} programs add floats to one address: the order of the atomics "
                                    f"explains it (ORD001), not fresh memory", [result.case, same.case])
            summary += f"; with one poison for all, the same program orders agree: fresh memory's contents did it"
        return self.confirmed(summary, failing, arrays=arrays, **details)
