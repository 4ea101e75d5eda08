"""ORD002 determinism: the same inputs give the same bits, whatever fresh memory held.

N runs on the same inputs; before each, every fresh allocation is filled with
a different byte (0xA5, 0x5A, 0x00, 0xFF), and on the CPU each run also takes
its own program order: a kernel that reads memory nobody wrote, or memory
another program of the same launch writes, gives different bits.

The clause is the cause's: bits that change with program order alone (a sum of
float atomics, the last of several programs to store) are ORD001's.  So runs
that differ are held against a control that changes the poison alone: on the
CPU the four poisons again in one permuted program order, on a GPU four runs
with one poison for all.  Where the poison alone changes the bits, fresh
memory's contents did it (`confirmed`); where order alone does, ORD002 stays
`unconfirmed` and says so.

On a GPU a launch's programs run in nearly the same order every time, so a
program that reads what an earlier one wrote finds it written, run after run.
There the candidate with its programs in reverse order (reverse_order.py, as
ORD001 runs it) runs too, with two poisons and a control with one: a read of
another program's output that the reversed order leaves unwritten shows.
"""

from __future__ import annotations

from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem
from kanalyze.dynamic.gates.ord001_permuted_order import compare_runs, reversal_said, torch_nondeterminism

POISONS = (0xA5, 0x5A, 0x00, 0xFF)
ONE_ORDER = 101   # the CPU control's program order: a permuted one, where a block may run before the one it reads


class RepeatedRuns(Gate):
    code = "ORD002"
    name = "ord002-repeated-runs"
    summary = "repeated runs with differently poisoned fresh memory, bitwise compare"
    needs_float64 = False   # (compares no value with the float64 reference)
    deterministic_torch = True

    def plan(self, ctx: GateContext):
        if ctx.mode == "cpu":
            runs = [Run(order_seed=(100 + i if i else None), poison=p) for i, p in enumerate(POISONS)]
            return [ctx.case(self, "poisoned-runs", runs=runs),   # and the control: the poisons in one order
                    ctx.case(self, "one-order", runs=[Run(order_seed=ONE_ORDER, poison=p) for p in POISONS])]
        cases = [ctx.case(self, "poisoned-runs", runs=[Run(poison=p) for p in POISONS]),
                 ctx.case(self, "same-poison", runs=[Run(poison=POISONS[0]) for _ in POISONS])]   # the control
        if ctx.reversal:   # the programs in reverse order: two poisons, and one poison twice
            cases += [ctx.case(self, "reversed", runs=[Run(poison=p) for p in POISONS[:2]], variant="reversed"),
                      ctx.case(self, "reversed/same-poison", runs=[Run(poison=POISONS[0])] * 2, variant="reversed")]
        return cases

    def judge(self, ctx: GateContext, results):
        verdict = self._judged(ctx, results)
        if verdict.status == CONFIRMED:   # its witness replays every case the judgment read
            verdict.cases = [r.case for r in results]
        return verdict

    def _judged(self, ctx: GateContext, results):
        by_id = {r.case.id.split("/", 1)[1]: r for r in results}
        result = by_id["poisoned-runs"]
        if not result.candidate_ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        how = "fresh memory poisoned differently" + (", program order permuted" if ctx.mode == "cpu" else "")
        found = compare_runs([result], f"{len(result.runs)} runs ({how})")
        if found:
            return self._attributed(ctx, found, result, by_id.get("one-order") or by_id.get("same-poison"))
        said = f"{len(result.runs)} runs ({how}) gave the same bits"
        reversed_run = by_id.get("reversed")
        if reversed_run is None:
            return self.verdict(REFUTED, said, [result.case])
        if not reversed_run.candidate_ok:
            return self.verdict(UNCONFIRMED, f"{said}, but a GPU runs a launch's programs in nearly the same order "
                                f"every time, and the candidate with its programs in reverse order did not run: "
                                f"{reversed_run.candidate_failure()}", [result.case, reversed_run.case])
        how = reversal_said(ctx.reversal) if ctx.reversal else "rewritten"
        found = compare_runs([reversed_run], f"the candidate with its programs in reverse order ({how}): "
                                             f"{len(reversed_run.runs)} runs (fresh memory poisoned differently)")
        if found:
            return self._attributed(ctx, found, reversed_run, by_id.get("reversed/same-poison"))
        return self.verdict(REFUTED, f"{said}, and so did the candidate with its programs in reverse order, "
                            f"poisoned twice", [result.case, reversed_run.case])

    def _attributed(self, ctx: GateContext, found, result, control):
        """The verdict on runs that differ: fresh memory's doing only where the control says so."""
        summary, details, arrays, failing = found
        cases = [result.case] + ([control.case] if control is not None else [])
        torch_own = torch_nondeterminism(result.runs)
        if torch_own:
            return self.verdict(UNCONFIRMED, f"{summary}; but {torch_own}", cases)
        if control is None or not control.candidate_ok:
            why = control.candidate_failure() if control is not None else "it was not run"
            return self.verdict(UNCONFIRMED, f"{summary}; but the control that changes the poison alone did not "
                                f"run ({why}), so program order could explain it (ORD001)", cases)
        atomics = max((run.meta.get("atomic_programs", 0) for run in result.runs), default=0)
        order = (f"the order of float atomics (up to {atomics} programs add to one address)" if atomics >= 3
                 else "program order")
        if ctx.mode == "cpu":   # the control: the poisons in one program order
            poisoned = compare_runs([control], f"{len(control.runs)} runs in one program order, fresh memory "
                                               f"poisoned differently")
            if poisoned is None:
                return self.verdict(UNCONFIRMED, f"{summary}; but in one program order the {len(control.runs)} "
                                    f"poisons give the same bits: {order} explains it (ORD001), not fresh memory",
                                    cases)
            summary, details, arrays, failing = poisoned
            return self.confirmed(summary + ": fresh memory's contents did it", failing, arrays=arrays, **details)
        if compare_runs([control], "") is not None:   # the control: one poison for all
            return self.verdict(UNCONFIRMED, f"{summary}; but runs with one poison for all differ as well: the "
                                f"order the device ran the programs in explains it (ORD001), not fresh memory",
                                cases)
        summary += "; with one poison for all, the runs agree: fresh memory's contents did it"
        return self.confirmed(summary, failing, arrays=arrays, **details)
