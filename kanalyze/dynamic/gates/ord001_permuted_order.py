"""ORD001 order: the result must not depend on the order in which programs run.

On the CPU the interpreter runs the grid once in launch order and then in
seeded permutations of it; on a GPU the same launch is repeated (the hardware
picks the order).  Every run must give the same bits (NaNs count as equal).
"""

from __future__ import annotations

from kanalyze.dynamic.compare import bitwise_differences, fmt
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem

PERMUTATIONS = 4
GPU_LAUNCHES = 10   # cheap on a GPU; the hardware's order differs from launch to launch only now and then


def compare_runs(results, describe_runs: str):
    """(summary, details, arrays, failing result) for the first case whose runs differ; None if all agree."""
    for result in results:
        runs = result.runs
        failed = [r for r in runs if not r.ok]
        if failed and len(failed) < len(runs):
            return (f"run {failed[0].index + 1} of {len(runs)} failed where the others did not: "
                    f"{failed[0].failure()}", {}, {}, result)
        ok = [r for r in runs if r.ok]
        if len(ok) < 2:
            continue
        first = ok[0]
        for other in ok[1:]:
            differing, outputs, worst, elements, at = 0, len(first.outputs), 0.0, 0, None
            for a, b in zip(first.outputs, other.outputs):
                if a.shape != b.shape:
                    return (f"runs {first.index + 1} and {other.index + 1} return different shapes "
                            f"({a.describe()} vs {b.describe()})", {}, {}, result)
                count, delta, index = bitwise_differences(a, b)
                if count:
                    differing += 1
                    elements += count
                    worst = max(worst, delta)
                    at = at or index
            if differing:
                summary = (f"{describe_runs}: runs {first.index + 1} and {other.index + 1} differ in {differing} of "
                           f"{outputs} outputs ({elements} elements), {fmt(worst)} apart")
                arrays = {f"run{first.index + 1}_output{i}": leaf.array for i, leaf in enumerate(first.outputs)}
                arrays.update({f"run{other.index + 1}_output{i}": leaf.array for i, leaf in enumerate(other.outputs)})
                details = {"runs": [first.index + 1, other.index + 1], "differing_outputs": differing,
                           "differing_elements": elements, "max_difference": worst, "first_index": list(at or ()),
                           "run_settings": [result.case.runs[first.index].__dict__,
                                            result.case.runs[other.index].__dict__]}
                return summary, details, arrays, result
    return None


class PermutedOrder(Gate):
    code = "ORD001"
    name = "ord001-permuted-order"
    summary = "permuted program order (interpreter) or repeated launches (GPU), bitwise compare"

    def plan(self, ctx: GateContext):
        if ctx.mode == "cpu":
            runs = [Run(order_seed=None)] + [Run(order_seed=s) for s in range(1, PERMUTATIONS + 1)]
        else:
            runs = [Run() for _ in range(GPU_LAUNCHES)]
        return [ctx.case(self, "runs", runs=runs)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        problem = run_problem(result) if not result.candidate_ok else None
        if problem:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [result.case])
        how = f"launch order and {PERMUTATIONS} permutations" if ctx.mode == "cpu" else "repeated launches"
        found = compare_runs(results, f"{len(result.runs)} runs ({how})")
        if found:
            summary, details, arrays, failing = found
            return self.confirmed(summary, failing, arrays=arrays, **details)
        return self.verdict(REFUTED, f"{len(result.runs)} runs ({how}) gave the same bits", [result.case])
