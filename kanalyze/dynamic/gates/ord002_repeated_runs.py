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

On a GPU a launch's programs run in nearly the same order every time, so a
program that reads what an earlier one wrote finds it written, run after run.
There the candidate with its programs in reverse order (reverse_order.py, as
ORD001 runs it) also runs twice, with two poisons: a read of another program's
output that the reversed order leaves unwritten shows as differing bits.
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
        elif ctx.reversal:   # the programs in reverse order, two poisons
            cases.append(ctx.case(self, "reversed", runs=[Run(poison=p) for p in POISONS[:2]], variant="reversed"))
        return cases

    def judge(self, ctx: GateContext, results):
        result = next(r for r in results if r.case.id.endswith("poisoned-runs"))
        same = next((r for r in results if r.case.id.endswith("same-poison")), None)
        if not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        how = "fresh memory poisoned differently" + (", program order permuted" if ctx.mode == "cpu" else "")
        found = compare_runs([result], f"{len(result.runs)} runs ({how})")
        reversed_run = next((r for r in results if r.case.variant == "reversed"), None)
        if not found and reversed_run is not None and reversed_run.candidate_ok:
            where = f"line {', '.join(str(r) for r in sorted({c['row'] for c in ctx.reversal or []}))}"
            found = compare_runs([reversed_run], f"the candidate with its programs in reverse order ({where}): "
                                                 f"{len(reversed_run.runs)} runs (fresh memory poisoned differently)")
        if not found:
            said = f"{len(result.runs)} runs ({how}) gave the same bits"
            if reversed_run is not None:
                if not reversed_run.candidate_ok:
                    return self.verdict(UNCONFIRMED, f"{said}, but a GPU runs a launch's programs in nearly the same "
                                        f"order every time, and the candidate with its programs in reverse order "
                                        f"did not run: {reversed_run.candidate_failure()}",
                                        [result.case, reversed_run.case])
                said += ", and so did the candidate with its programs in reverse order, poisoned twice"
            return self.verdict(REFUTED, said, [result.case] + ([reversed_run.case] if reversed_run else []))
        summary, details, arrays, failing = found
        atomics = max((run.meta.get("atomic_programs", 0) for run in result.runs), default=0)
        if atomics >= 3 and same is not None and same.candidate_ok:
            if compare_runs([same], "") is not None:
                return self.verdict(UNCONFIRMED, f"{summary}; but runs with one poison for all differ as well, and "
                                    f"up to {atomics} programs add floats to one address: the order of the atomics "
                                    f"explains it (ORD001), not fresh memory", [result.case, same.case])
            summary += "; with one poison for all, the same program orders agree: fresh memory's contents did it"
        return self.confirmed(summary, failing, arrays=arrays, **details)
