"""ORD001 order: the result must not depend on the order in which programs run.

On the CPU the interpreter runs the grid once in launch order and then in
seeded permutations of it.  On a GPU the same launch is repeated, and the
candidate rewritten with every program's order reversed (reverse_order.py)
runs once on the same inputs, with the autotune configs the candidate chose
(autotune_pin.py): a GPU runs a launch's programs in nearly the same order
every time, so a race on which program writes last gives the same bits launch
after launch, and only another order shows it.  Every run must give the same
bits (NaNs count as equal).

The reversed run is a worker of its own, and a new process may give other bits
for reasons of its own (the algorithm cuDNN or cuBLAS picks follows the memory
free there).  So a difference is the order's doing only where the reversed run
launched one of the candidate's kernels (a Triton launch, a call into its CUDA
C++ extension: extensions.py counts them) and a control, the candidate as
written in a worker of its own, gave the launch order's bits.  The control runs
only where it can matter, once the reversed run's bits differ (`unneeded`):
where the reversed order agreed, its case is left unrun.

Power: a float sum's order shows only where at least three programs add to
one address (0+a+b equals 0+b+a).  The interpreter counts them; where float
atomics ran but no address got three, the gate could not have seen the
violation at these sizes and says so (`unconfirmed`), never `refuted`.  On a
GPU the problem's own sizes run, and the gate refutes only once the reversed
order agreed too; it says how many programs add to each address where it can
tell (`contributions`: the grid each flagged kernel ran with, along the axes its
atomic's address does not read), and where that is fewer than three it says
`unconfirmed` instead.
"""

from __future__ import annotations

import math

from kanalyze.dynamic.cases import keeping_whole, scaled_knobs
from kanalyze.dynamic.compare import bitwise_differences, fmt
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Gate, GateContext, Run, run_problem
from kanalyze.dynamic.results import Result, RunView

PERMUTATIONS = 4
MIN_CONTRIBUTIONS = 3   # programs adding to one address before their order can change a float sum
GPU_LAUNCHES = 10   # cheap on a GPU; the hardware's order differs from launch to launch only now and then
CPU_BUDGET = 2 ** 16   # the knobs' product for a case that keeps one knob at the problem's size


def differences(first: RunView, other: RunView) -> str | dict | None:
    """How two runs' outputs differ bit for bit: a sentence where their shapes differ, the
    counts where their bits do, None where they agree."""
    differing, worst, elements, at = 0, 0.0, 0, None
    for a, b in zip(first.outputs, other.outputs):
        if a.shape != b.shape:
            return f"different shapes ({a.describe()} vs {b.describe()})"
        count, delta, index = bitwise_differences(a, b)
        if count:
            differing += 1
            elements += count
            worst = max(worst, delta)
            at = at or index
    if not differing:
        return None
    return {"differing_outputs": differing, "outputs": len(first.outputs), "differing_elements": elements,
            "max_difference": worst, "first_index": list(at or ())}


def reversal_said(reversal: list[dict]) -> str:
    """The reversed-order rewrite in words: its first change, and the lines it changed."""
    rows = ", ".join(str(r) for r in sorted({c["row"] for c in reversal}))
    return f"{reversal[0]['from']} → {reversal[0]['to']}, line {rows}"


def _said(found: dict) -> str:
    return (f"differ in {found['differing_outputs']} of {found['outputs']} outputs ({found['differing_elements']} "
            f"elements), {fmt(found['max_difference'])} apart")


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
            found = differences(first, other)
            if found is None:
                continue
            pair = f"runs {first.index + 1} and {other.index + 1}"
            if isinstance(found, str):
                return f"{pair} return {found}", {}, {}, result
            arrays = {f"run{first.index + 1}_output{i}": leaf.array for i, leaf in enumerate(first.outputs)}
            arrays.update({f"run{other.index + 1}_output{i}": leaf.array for i, leaf in enumerate(other.outputs)})
            details = {"runs": [first.index + 1, other.index + 1], **found,
                       "run_settings": [result.case.runs[first.index].__dict__,
                                        result.case.runs[other.index].__dict__]}
            return f"{describe_runs}: {pair} {_said(found)}", details, arrays, result
    return None


def torch_nondeterminism(runs) -> str | None:
    """Why bits that change from run to run may be torch's own, or None: an op of torch's that
    has no deterministic implementation ran in the candidate's call.  Under the numerics policy
    (numerics.py) torch warns of such an op as it runs, and the worker names it
    (`torch_alerts`); it counts only where the sealed record of the candidate's torch calls
    names a call of that op as well: a warning alone is easy to make up."""
    alerted = set()
    for run in runs:
        called = {_op_base(name) for key in ("ops", "extension_ops") for name in (run.meta.get(key) or {})}
        for alert in run.meta.get("torch_alerts") or []:
            base = _op_base(str(alert))
            if len(base) >= 3 and any(len(c) >= 3 and (c.startswith(base) or base.startswith(c)) for c in called):
                alerted.add(str(alert))
    if not alerted:
        return None
    names = ", ".join(f"`{name}`" for name in sorted(alerted)[:3])
    return (f"torch's own {names} ran in the candidate's call, and torch has no deterministic "
            f"implementation of it: its bits may change from run to run as well, so the difference "
            f"need not be the candidate's kernels'")


def _op_base(name: str) -> str:
    """An op's name without its device and variant suffixes: `index_add_cuda_` → `index_add`."""
    base = (name.split() or [""])[0].lower().strip("_")
    suffixes = ("_template", "_cuda", "_out", "_forward", "_kernel", "_cpu")
    while any(base.endswith(suffix) for suffix in suffixes):
        base = next(base[:-len(x)] for x in suffixes if base.endswith(x)).strip("_")
    return base


class PermutedOrder(Gate):
    code = "ORD001"
    name = "ord001-permuted-order"
    summary = "permuted program order (interpreter) or repeated launches (GPU), bitwise compare"
    needs_float64 = False   # (compares no value with the float64 reference)
    deterministic_torch = True

    def plan(self, ctx: GateContext):
        if ctx.mode != "cpu":
            cases = [ctx.case(self, "runs", runs=[Run() for _ in range(GPU_LAUNCHES)])]
            if ctx.reversal:   # the same inputs, the candidate's programs in reverse order; and the
                # control: the candidate as written, in a worker of its own as the reversed one runs
                cases += [ctx.case(self, "reversed", variant="reversed"), ctx.case(self, "control", variant="control")]
            return cases
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
        reversed_run = next((r for r in results if r.case.variant == "reversed"), None)
        control = next((r for r in results if r.case.variant == "control"), None)
        results = [r for r in results if r.case.variant == "original"]
        problem = next((run_problem(r) for r in results if not r.candidate_ok), None)
        if not problem and not any(run.ok for r in results for run in r.runs):   # nothing ran to compare
            problem = run_problem(results[0])
        if problem:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {problem}", [r.case for r in results])
        how = f"launch order and {PERMUTATIONS} permutations" if ctx.mode == "cpu" else "repeated launches"
        found = compare_runs(results, f"{len(results[0].runs)} runs ({how})")
        if found:
            summary, details, arrays, failing = found
            where = f" at {_sizes(failing.case.sizes)}" if len(results) > 1 else ""
            torch_own = torch_nondeterminism(failing.runs)
            if torch_own:
                return self.verdict(UNCONFIRMED, f"{summary}{where}; but {torch_own}", [failing.case])
            return self.confirmed(summary + where, failing, arrays=arrays, **details)
        same = f"{len(results[0].runs)} runs ({how}) gave the same bits"
        cases = [r.case for r in results]
        if ctx.mode != "cpu":
            return self._against_reversed(ctx, results[0], reversed_run, same, control)
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

    def unneeded(self, ctx: GateContext, case, results: list[Result]) -> str | None:
        """The control (the candidate as written, in a worker of its own) tells apart bits that the
        reversed order changed from bits a new process changes; it needs to run only where the
        reversed run's bits differ from the launch order's.  Where the launches and the reversed
        run have run and the gate's verdict does not rest on it (they agreed: refuted; the
        launches differed among themselves: confirmed; the reversed run failed or chose other
        configs), it is not run: on a GPU its worker's case costs seconds a pair."""
        if case.variant != "control":
            return None
        mine = [r for r in results if r.case.gate == self.code and r.case.variant in ("original", "reversed")]
        if not any(r.case.variant == "reversed" for r in mine) or any(r.candidate is None for r in mine):
            return None   # what it would be held to has not all run yet
        try:
            verdict = self.judge(ctx, mine)
        except Exception:   # (a comparison the judge cannot make yet: it runs, as before)
            return None
        if verdict.details.get("control_needed"):
            return None
        return f"the gate's verdict does not rest on it: {verdict.status} without it"

    def _against_reversed(self, ctx: GateContext, original: Result, reversed_run: Result | None, same: str,
                          control: Result | None = None):
        """On a GPU, once the launches agreed: the verdict of the run in reverse program order."""
        cases = [original.case] + [r.case for r in (reversed_run, control) if r is not None]
        unsure = f"{same}, but a GPU runs a launch's programs in nearly the same order every time"
        if not ctx.reversal:
            return self.verdict(UNCONFIRMED, f"{unsure}, and the candidate has no program index (tl.program_id, "
                                f"blockIdx) that kanalyze can reverse; Triton's interpreter permutes the programs "
                                f"(--device cpu)", cases)
        how = reversal_said(ctx.reversal)
        theirs = reversed_run.runs[0] if reversed_run is not None and reversed_run.runs else None
        if theirs is None or not theirs.ok:
            why = reversed_run.candidate_failure() if reversed_run is not None and not reversed_run.candidate_ok \
                else theirs.failure() if theirs is not None else "it was not run"
            return self.verdict(UNCONFIRMED, f"{unsure}, and the candidate with its programs in reverse order "
                                f"({how}) did not run: {why}", cases, reversal=ctx.reversal)
        first = [r for r in original.runs if r.ok][-1]   # the steady state: its autotuner has chosen
        if first.meta.get("launch_settings") != theirs.meta.get("launch_settings"):
            return self.verdict(UNCONFIRMED, f"{unsure}, and the candidate with its programs in reverse order "
                                f"launched its kernels with other settings (its autotuner chose other configs), so "
                                f"their bits say nothing of order", cases, reversal=ctx.reversal,
                                launch_settings=[first.meta.get("launch_settings"), theirs.meta.get("launch_settings")])
        found = differences(first, theirs)
        if found is None and not _launched_own(theirs):
            return self.verdict(UNCONFIRMED, f"{unsure}, and the run with its programs in reverse order ({how}), "
                                f"which gave the same bits, launched none of the candidate's kernels (no Triton "
                                f"launch, no call into a CUDA C++ extension of its own): no order was reversed",
                                cases, reversal=ctx.reversal)
        if found is None:
            agreed = f"{same}, and so did a run with the candidate's programs in reverse order ({how})"
            count, where = contributions(ctx.flags, first)
            if count is None:
                return self.verdict(REFUTED, f"{agreed}; {where}", cases, launches=len(original.runs),
                                    reversal=ctx.reversal)
            if count < MIN_CONTRIBUTIONS:
                return self.verdict(UNCONFIRMED, f"{agreed}, but kanalyze can show only {count} program"
                                    f"{'s' * (count != 1)} adding to each address {where}: a float sum of fewer "
                                    f"than {MIN_CONTRIBUTIONS} terms does not depend on their order, so these runs "
                                    f"may not show the violation", cases, launches=len(original.runs),
                                    reversal=ctx.reversal, contributions=count)
            return self.verdict(REFUTED, f"{agreed}; {count} programs add to each address {where}", cases,
                                launches=len(original.runs), reversal=ctx.reversal, contributions=count)
        said = f"return {found}" if isinstance(found, str) else _said(found)
        elsewhere = _not_the_order(first, theirs, control)
        if elsewhere:
            # (without a control that ran, `unneeded` learns here that the control is needed)
            unrun = control is None or control.candidate is None
            return self.verdict(UNCONFIRMED, f"the candidate's programs run in reverse order ({how}) and in launch "
                                f"order {said}, but {elsewhere}", cases, reversal=ctx.reversal,
                                **({"control_needed": True} if unrun else {}))
        arrays = {f"run{first.index + 1}_output{i}": leaf.array for i, leaf in enumerate(first.outputs)}
        arrays.update({f"reversed_output{i}": leaf.array for i, leaf in enumerate(theirs.outputs)})
        arrays.update({f"input{i}": leaf.array for i, leaf in enumerate(original.inputs)})
        details = found if isinstance(found, dict) else {}
        return self.verdict(CONFIRMED, f"the candidate's programs run in reverse order ({how}) and in launch order "
                            f"{said}; {len(original.runs)} launches in launch order agreed with each other, and "
                            f"with the candidate as written in a worker of its own",
                            cases, arrays=arrays, runs=[first.index + 1, "reversed"], reversal=ctx.reversal,
                            **details)


def contributions(flags: list[dict], run: RunView) -> tuple[int | None, str]:
    """On a GPU, how many programs add to each address a flagged float atomic touches, at least,
    and where: the product of the grid's sizes along the axes that its address, its mask and the
    tests around it do not read (the static pass's `shared_axes`), for the grids its kernel ran
    with (the launch recorder's); the largest over its launches and the flagged atomics (one launch
    where enough programs share an address is one where the order could show).  Programs along the axes
    the address reads may share addresses too (`pid // 4`): those are not counted.  (None, why)
    where nothing could be counted."""
    best: tuple[int, str] | None = None
    for flag in flags:
        axes, kernel = flag.get("shared_axes"), flag.get("kernel")
        grids = (run.meta.get("grids") or {}).get(kernel) if axes is not None and kernel else None
        if not grids:
            continue
        count, grid = max((math.prod(int(grid[a]) if a < len(grid) else 1 for a in axes), tuple(grid))
                          for grid in grids)   # the launch that shares most
        shared = [a for a in axes if a < len(grid) and grid[a] > 1]
        detail = (f"its address does not read the program id along axis {' or '.join(map(str, shared))}" if shared
                  else "its address reads the program id of every axis with more than one program")
        where = (f"of the flagged atomic add in `{kernel}` (line {flag.get('row')}) at the problem's sizes (grid "
                 f"{'×'.join(str(g) for g in grid)}; {detail})")
        if best is None or count > best[0]:
            best = (count, where)
    if best is not None:
        return best
    return None, ("how many programs add to each address was not counted (no flagged Triton atomic add whose "
                  "launch grid kanalyze recorded)")


def _launched_own(run: RunView) -> bool:
    """Whether the run launched a kernel of the candidate's: a Triton launch (recording.py) or a
    call into a CUDA C++ extension it built (extensions.py)."""
    own = dict(run.meta.get("launches") or {}, **(run.meta.get("extension_calls") or {}))
    return any(own.values())


def _not_the_order(first: RunView, theirs: RunView, control: Result | None) -> str | None:
    """Why bits that differ between the launch order and the reversed run (another worker) may not
    be the order's doing, or None where they are: the reversed run launched none of the
    candidate's kernels (a model that calls PyTorch alone), or the control, the candidate as
    written in a worker of its own, did not run or gave bits of its own as well (a new process's
    library picked another algorithm: cuDNN's and cuBLAS's choices follow the memory free)."""
    torch_own = torch_nondeterminism([first, theirs])
    if torch_own:
        return torch_own
    if not _launched_own(theirs):
        return ("that run launched none of the candidate's kernels (no Triton launch, no call into a CUDA C++ "
                "extension of its own), so the reversal changed nothing it ran: the new process did")
    ran = control.runs[0] if control is not None and control.runs else None
    if ran is None or not ran.ok:
        why = ("it was not run" if control is None else control.candidate_failure() if not control.candidate_ok
               else ran.failure() if ran is not None else "it returned nothing")
        return (f"the control, the candidate as written in a worker of its own, did not run ({why}), so a new "
                f"process alone could explain it")
    if ran.meta.get("launch_settings") != first.meta.get("launch_settings"):
        return ("the control, the candidate as written in a worker of its own, launched its kernels with other "
                "settings, so it cannot tell the order's doing from the process's")
    found = differences(first, ran)
    if found is not None:
        said = f"return {found}" if isinstance(found, str) else _said(found)
        return (f"the candidate as written, in a worker of its own, and the launch order {said} as well: the bits "
                f"change with the process (a library's choice of algorithm), not with the order")
    return None


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "the base sizes"
