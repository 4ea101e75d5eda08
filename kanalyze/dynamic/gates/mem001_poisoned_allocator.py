"""MEM001 written: every output element is written by the kernel.

Fresh memory is filled with a sentinel byte before the candidate runs (every
`torch.empty*`, and on a GPU also the caching allocator's free blocks of the
outputs' sizes, so that a stale block from an earlier run cannot pass for a
result).  Two runs, two sentinels: an element that holds the sentinel's bit
pattern in both was never written.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import sentinel_elements
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem, witness_arrays

SENTINELS = (0xA5, 0x5A)


class PoisonedAllocator(Gate):
    code = "MEM001"
    name = "mem001-poisoned-allocator"
    summary = "fresh memory filled with a sentinel; elements left at it were never written"
    needs_float64 = False   # (compares no value with the float64 reference)

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "sentinels", runs=[Run(poison=b) for b in SENTINELS])]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok or len(result.runs) < 2 or not all(r.ok for r in result.runs):
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result) or 'a run failed'}",
                                [result.case])
        first, second = result.runs[:2]
        total = 0
        for i, (a, b) in enumerate(zip(first.outputs, second.outputs)):
            total += a.array.size
            if a.shape != b.shape:
                continue
            count, first_index = sentinel_elements(a, b, *SENTINELS)
            if count:
                first_index = list(first_index)
                numel = int(a.array.size)
                which = f"output {i}: " if len(first.outputs) > 1 else ""
                summary = (f"{which}{count} of {numel} elements ({100 * count / numel:.1f}%) "
                           f"still hold the sentinel after the run (first at index {first_index})")
                return self.confirmed(summary, result, arrays=witness_arrays(first.outputs, result.expected),
                                      unwritten=count, numel=numel, first_index=first_index,
                                      sentinels=[hex(s) for s in SENTINELS])
        return self.verdict(REFUTED, f"all {total} output elements were written (two runs, sentinels 0xa5 and 0x5a)",
                            [result.case])
