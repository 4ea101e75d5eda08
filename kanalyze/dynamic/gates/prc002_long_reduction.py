"""PRC002 accumulator: reductions accumulate in fp32 or wider.

Long reductions with a large common mean (1 + 0.1·normal: a low-precision
running sum stalls or overflows once it is large), at the base sizes and with
each reduced size knob lengthened in turn (a knob is reduced when its value
is no dimension of the reference's output), never shorter than the problem's
own length (the other knobs shrink to make room on the CPU).  Where a static
flag points at the accumulator, the promotion differential runs too: the same
cases on the candidate rewritten with fp32 accumulators (promote.py), and the
candidate's error is compared with its promoted twin's, not only with a bound.

  confirmed    promotion removes the error: over the calibrated bound and fixed
               by promotion, or at least RATIO times the promoted twin's error
               and larger than the reference's own error in its dtype;
  refuted      neither, with a case that ran the reduction at the problem's own
               length or longer (the gate's power);
  unconfirmed  otherwise, with the reason (no such case ran; an error with no
               fp16/bf16 accumulator to promote, which cannot be pinned on it).
The witness shows both errors.
"""

from __future__ import annotations

from kanalyze.dynamic.cases import SCALABLE_MIN, keeping_whole
from kanalyze.dynamic.compare import fmt
from kanalyze.dynamic.gates.base import (CONFIRMED, REFUTED, UNCONFIRMED, Gate, GateContext, compare_with_float64,
                                         witness_arrays)

LONG = {"cpu": 65536, "cuda": 2 ** 20}
BUDGET = {"cpu": 2 ** 20, "cuda": 2 ** 26}   # the knobs' product at a lengthened size
# A lengthened case's inputs hold at most this many elements (or the base case's count, where
# that is more), as the plan estimates them (planning.py): the knobs' product undercounts
# them where one knob sizes several dimensions (a square matmul's N: 2·N² elements).  On a
# GPU the base case already runs the problem's own length: a longer one is worth its cost only
# while it stays cheap (a square matmul's N doubled costs 8 times the work; at 2^29 elements
# N went to 16384, and a naive CUDA C++ kernel there ran past a pair's 200 s).
INPUTS = {"cpu": 2 ** 20, "cuda": 2 ** 27}
RATIO = 4.0   # promotion removes at least three quarters of the error: the accumulator's doing


def reduced_knobs(sizes: dict[str, int], output_shapes: list | None) -> set[str]:
    """The knobs a reduction runs over: those whose value is no dimension of any output.

    (A row mean of [batch, dim] returns [batch]: `dim` is reduced.)  All
    scalable knobs when the output shapes are unknown or every knob shows up.
    """
    scalable = {k for k, v in sizes.items() if v >= SCALABLE_MIN}
    if not output_shapes:
        return scalable
    dims = {d for shape in output_shapes for d in shape}
    reduced = {k for k in scalable if sizes[k] not in dims}
    return reduced or scalable


def long_sizes(sizes: dict[str, int], mode: str, output_shapes: list | None = None,
               original: dict[str, int] | None = None, numel_at=None) -> list[tuple[str, dict[str, int]]]:
    """Each reduced knob lengthened: to LONG where the budget allows, never below the
    problem's own value (`original`); the other knobs shrink to fit (cases.keeping_whole).
    `numel_at(sizes)`, where given, estimates the inputs' elements: a lengthening whose
    inputs would hold more than INPUTS (or the base's count) is shortened, or left out."""
    out = []
    original = original or sizes
    estimate = numel_at or (lambda _sizes: None)
    cap = max(INPUTS[mode], estimate(sizes) or 0)
    reduced = reduced_knobs(sizes, output_shapes)
    for name, value in sizes.items():
        if name not in reduced:
            continue
        others = 1
        for other, v in sizes.items():
            if other != name and v >= SCALABLE_MIN:
                others *= v
        longer = max(original.get(name, value), min(LONG[mode], BUDGET[mode] // max(others, 1)))
        lengthened = keeping_whole(sizes, {**original, name: longer}, name, BUDGET[mode])
        while (estimate(lengthened) or 0) > cap and lengthened[name] // 2 >= max(value, original.get(name, value)):
            lengthened = keeping_whole(sizes, {**original, name: lengthened[name] // 2}, name, BUDGET[mode])
        if lengthened[name] > value and (estimate(lengthened) or 0) <= cap:
            out.append((f"{name}={lengthened[name]}", lengthened))
    return out


def full_length(sizes: dict[str, int], reduced: set[str], original: dict[str, int]) -> bool:
    """Did a case run every reduced knob at the problem's own length or longer?"""
    return all(sizes.get(k, 0) >= original.get(k, 0) for k in reduced)


class LongReduction(Gate):
    code = "PRC002"
    name = "prc002-long-reduction-and-promotion"
    summary = "long reductions with a large common mean vs float64; fp32-promotion differential"
    needs_output_shapes = True   # which knobs a reduction runs over

    def plan(self, ctx: GateContext):
        cases = []
        lengthened = long_sizes(ctx.sizes, ctx.mode, ctx.output_shapes, ctx.harness.knobs, ctx.input_numel)
        for label, sizes in [("base", dict(ctx.sizes))] + lengthened:
            for variant in ("original", "promoted"):
                cases.append(ctx.case(self, f"{label}/{variant}", sizes=sizes, distribution="common_mean",
                                      seed=ctx.seed + 9, variant=variant))
        return cases

    def judge(self, ctx: GateContext, results):
        by_label: dict[str, dict] = {}
        for result in results:
            label, variant = result.case.id.split("/")[1:]
            by_label.setdefault(label, {})[variant] = result
        reduced = reduced_knobs(ctx.sizes, ctx.output_shapes)
        ran, failed, full = [], [], []
        for label, pair in by_label.items():
            original, promoted = pair.get("original"), pair.get("promoted")
            if original is None or not original.reference_ok:
                continue
            problem, check, _ = compare_with_float64(original)
            if problem:  # a crash at a long size is a shape problem (CMP003), not the accumulator's
                failed.append(f"{label}: {problem}")
                continue
            ran.append(label)
            if full_length(original.case.sizes, reduced, ctx.harness.knobs):
                full.append(label)
            if check is None:
                continue
            decided = self._differential(ctx, label, original, promoted, check)
            if decided is not None:
                return decided
        if not ran:
            reasons = "; ".join([r.reference_failure() for r in results if not r.reference_ok] + failed)
            return self.verdict(UNCONFIRMED, f"no long reduction ran: {reasons}", [r.case for r in results])
        cases = [r.case for r in results if r.case.variant == "original"]
        note = f" ({len(failed)} did not run: {'; '.join(failed)})" if failed else ""
        if not full:
            problem_sizes = ", ".join(f"{k}={ctx.harness.knobs.get(k)}" for k in sorted(reduced))
            return self.verdict(UNCONFIRMED, f"within the bound at {', '.join(ran)}, but no case ran the reduction "
                                f"at the problem's own length ({problem_sizes}): a shorter sum may hide a "
                                f"low-precision accumulator{note}", cases)
        against = " and against the fp32-promoted candidate" if ctx.promotion else ""
        return self.verdict(REFUTED, f"within the calibrated bound{against} on long reductions at "
                            f"{', '.join(ran)} (the problem's own length at {', '.join(full)}){note}", cases)

    def _differential(self, ctx: GateContext, label: str, original, promoted, check):
        """The verdict one long case decides on its own, or None (go on to the next case)."""
        if promoted is None or not ctx.promotion:
            if check.ok:
                return None
            # Without an fp16/bf16 accumulator to promote, the error cannot be pinned on the
            # accumulator's precision (an fp32 sum in a poor order, say): CMP001's business.
            return self.verdict(UNCONFIRMED, f"long reduction at {label}: {check.summary()}; but the source has "
                                "no fp16/bf16 accumulator to promote, so the error is not attributable to the "
                                "accumulator's precision", [original.case], metric=check.metric())
        p_problem, p_check, _ = compare_with_float64(promoted)
        if p_problem or p_check is None:   # the rewrite did not run (a CUDA promotion that does not build)
            if check.ok:
                return None
            return self.verdict(UNCONFIRMED, f"long reduction at {label}: {check.summary()}; the candidate "
                                f"promoted to fp32 did not run: {p_problem}", [original.case, promoted.case])
        if accumulator_error(check, p_check):
            rows = sorted({c["row"] for c in ctx.promotion})
            over = f" > bound {fmt(check.bound)}" if not check.ok else \
                f" ({fmt(check.max_error / max(p_check.max_error, 1e-300))}× the promoted candidate's)"
            summary = (f"long reduction at {label} (inputs 1 + 0.1·normal): max abs error {fmt(check.max_error)}"
                       f"{over}; with the accumulator promoted to fp32 (line {', '.join(map(str, rows))}) it is "
                       f"{fmt(p_check.max_error)}")
            arrays = witness_arrays(original.runs[0].outputs, original.expected64)
            arrays.update({f"promoted_observed{i}": leaf.array for i, leaf in enumerate(promoted.runs[0].outputs)})
            arrays.update({f"input{i}": leaf.array for i, leaf in enumerate(original.inputs)})
            return self.verdict(CONFIRMED, summary, [original.case, promoted.case], arrays=arrays,
                                metric=check.metric(), promoted_metric=p_check.metric(), promotion=ctx.promotion)
        if not check.ok:
            return self.verdict(REFUTED, f"the error at {label} ({fmt(check.max_error)}) stays after promoting the "
                                f"accumulator to fp32 ({fmt(p_check.max_error)}): not the accumulator (see CMP001)",
                                [original.case, promoted.case])
        return None


def accumulator_error(check, promoted) -> bool:
    """Does promoting the accumulator to fp32 remove the candidate's error?  Either the error
    is over the bound and promotion brings it within, or promotion cuts it by RATIO or more
    and it is larger than the reference's own error in the working dtype."""
    if not check.ok and promoted.ok:
        return True
    return check.max_error > check.reference_error and check.max_error >= RATIO * promoted.max_error \
        and check.max_error > 0
