"""ORD002 determinism: the same inputs give the same bits, whatever fresh memory held.

N runs on the same inputs; before each, every fresh allocation is filled with
a different byte (0xA5, 0x5A, 0x00, 0xFF), and on the CPU each run also takes
its own program order: a kernel that reads memory nobody wrote, or memory
another program of the same launch writes, gives different bits.
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
        return [ctx.case(self, "poisoned-runs", runs=runs)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        how = "fresh memory poisoned differently" + (", program order permuted" if ctx.mode == "cpu" else "")
        found = compare_runs(results, f"{len(result.runs)} runs ({how})")
        if found:
            summary, details, arrays, failing = found
            return self.confirmed(summary, failing, arrays=arrays, **details)
        return self.verdict(REFUTED, f"{len(result.runs)} runs ({how}) gave the same bits", [result.case])
