"""ORD001 order: the result must not depend on the order in which programs run.

On the CPU the interpreter runs the grid once in launch order and then in
seeded permutations of it; on a GPU the same launch is repeated (the hardware
picks the order).  Every run must give the same bits (NaNs count as equal).

Power: a float sum's order shows only where at least three programs add to
one address (0+a+b equals 0+b+a).  The interpreter counts them; where float
atomics ran but no address got three, the gate could not have seen the
violation at these sizes and says so (`unconfirmed`), never `refuted`.
"""

from __future__ import annotations

from kanalyze.dynamic.cases import keeping_whole, scaled_knobs
from kanalyze.dynamic.compare import bitwise_differences, fmt
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem

PERMUTATIONS = 4
MIN_CONTRIBUTIONS = 3   # programs adding to one address before their order can change a float sum
GPU_LAUNCHES = 10   # cheap on a GPU; the hardware's order differs from launch to launch only now and then
CPU_BUDGET = 2 ** 16   # the knobs' product for a case that keeps one knob at the problem's size


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
        if ctx.mode != "cpu":
            return [ctx.case(self, "runs", runs=[Run() for _ in range(GPU_LAUNCHES)])]
        # Scaled down, a row may keep too few blocks for order to matter: each scaled knob
        # is also tried at the problem's own size, the others shrunk to make room.
        runs = [Run(order_seed=None)] + [Run(order_seed=s) for s in range(1, PERMUTATIONS + 1)]
        cases = [ctx.case(self, "runs", runs=runs)]
        original = ctx.harness.knobs
        for name in scaled_knobs(ctx.sizes, original):
            sizes = keeping_whole(ctx.sizes, original, name, CPU_BUDGET)
            cases.append(ctx.case(self, f"runs/{name}={sizes[name]}", sizes=sizes, runs=runs))
        return cases

    def judge(self, ctx: GateContext, results):
        problem = next((run_problem(r) for r in results if not r.candidate_ok), None)
        if problem:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [r.case for r in results])
        how = f"launch order and {PERMUTATIONS} permutations" if ctx.mode == "cpu" else "repeated launches"
        found = compare_runs(results, f"{len(results[0].runs)} runs ({how})")
        if found:
            summary, details, arrays, failing = found
            where = f" at {_sizes(failing.case.sizes)}" if len(results) > 1 else ""
            return self.confirmed(summary + where, failing, arrays=arrays, **details)
        same = f"{len(results[0].runs)} runs ({how}) gave the same bits"
        cases = [r.case for r in results]
        if ctx.mode != "cpu":
            return self.verdict(REFUTED, same, cases)
        counts = {r.case.id: max((run.meta.get("atomic_programs", 0) for run in r.runs), default=0) for r in results}
        most = max(counts.values(), default=0)
        if 0 < most < MIN_CONTRIBUTIONS:
            tried = "; ".join(_sizes(r.case.sizes) for r in results)
            return self.verdict(UNCONFIRMED, f"{same}, but at most {most} programs add to any one address at the "
                                f"sizes run ({tried}): a float sum of two terms does not depend on their order, so "
                                f"these runs could not show the violation; run at the problem's sizes on a GPU",
                                cases, atomic_programs=most)
        power = f"; up to {most} programs add to one address" if most else "; no float atomics ran"
        return self.verdict(REFUTED, same + power, cases, atomic_programs=most)


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "the base sizes"
