"""PRC002 accumulator: reductions accumulate in fp32 or wider.

Long reductions with a large common mean (1 + 0.1·normal: a low-precision
running sum stalls or overflows once it is large), at the base sizes and with
each reduced size knob lengthened in turn (a knob is reduced when its value
is no dimension of the reference's output), against float64 with the
calibrated bound.  Where a
static flag points at the accumulator, the promotion differential runs too:
the same cases on the candidate rewritten with fp32 accumulators
(promote.py).  The gate confirms only when promotion removes the error; the witness shows both errors.  Where the source holds no
fp16/bf16 accumulator to promote, a long-reduction error stays `unconfirmed`:
it is not attributable to the accumulator's precision.
"""

from __future__ import annotations

from kanalyze.dynamic.cases import SCALABLE_MIN
from kanalyze.dynamic.compare import fmt
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, compare_with_float64, \
    witness_arrays

LONG = {"cpu": 65536, "cuda": 2 ** 20}
BUDGET = {"cpu": 2 ** 20, "cuda": 2 ** 26}


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


def long_sizes(sizes: dict[str, int], mode: str, output_shapes: list | None = None) -> list[tuple[str, dict[str, int]]]:
    out = []
    reduced = reduced_knobs(sizes, output_shapes)
    for name, value in sizes.items():
        if name not in reduced:
            continue
        others = 1
        for other, v in sizes.items():
            if other != name and v >= SCALABLE_MIN:
                others *= v
        longer = min(LONG[mode], BUDGET[mode] // max(others, 1))
        if longer > value:
            out.append((f"{name}={longer}", {**sizes, name: longer}))
    return out


class LongReduction(Gate):
    code = "PRC002"
    name = "prc002-long-reduction-and-promotion"
    summary = "long reductions with a large common mean vs float64; fp32-promotion differential"

    def plan(self, ctx: GateContext):
        cases = []
        for label, sizes in [("base", dict(ctx.sizes))] + long_sizes(ctx.sizes, ctx.mode, ctx.output_shapes):
            for variant in ("original", "promoted"):
                cases.append(ctx.case(self, f"{label}/{variant}", sizes=sizes, distribution="common_mean",
                                      seed=ctx.seed + 9, variant=variant))
        return cases

    def judge(self, ctx: GateContext, results):
        promotion = ctx.promotion
        by_label: dict[str, dict] = {}
        for result in results:
            label, variant = result.case.id.split("/")[1:]
            by_label.setdefault(label, {})[variant] = result
        ran, failed = [], []
        for label, pair in by_label.items():
            original, promoted = pair.get("original"), pair.get("promoted")
            if original is None or not original.reference_ok:
                continue
            problem, check, _ = compare_with_float64(original)
            if problem:  # a crash at a long size is a shape problem (CMP003), not the accumulator's
                failed.append(f"{label}: {problem}")
                continue
            ran.append(label)
            if check is None or check.ok:
                continue
            arrays = witness_arrays(original.runs[0].outputs, original.expected64)
            if promoted is None or not promotion:
                # Without an fp16/bf16 accumulator to promote, the error cannot be
                # pinned on the accumulator's precision (an fp32 sum in a poor order,
                # say): CMP001's business, not this clause's.
                return self.verdict(UNCONFIRMED, f"long reduction at {label}: {check.summary()}; but the source "
                                    "has no fp16/bf16 accumulator to promote, so the error is not attributable to "
                                    "the accumulator's precision", [original.case], metric=check.metric())
            p_problem, p_check, _ = compare_with_float64(promoted)
            if p_problem or p_check is None:   # the rewrite did not run (a CUDA promotion that does not build)
                return self.verdict(UNCONFIRMED, f"long reduction at {label}: {check.summary()}; the candidate "
                                    f"promoted to fp32 did not run: {p_problem}", [original.case, promoted.case])
            if p_check.ok:
                rows = sorted({c["row"] for c in promotion})
                summary = (f"long reduction at {label} (inputs 1 + 0.1·normal): max abs error "
                           f"{fmt(check.max_error)} > bound {fmt(check.bound)}; with the accumulator promoted "
                           f"to fp32 (line {', '.join(map(str, rows))}) it is {fmt(p_check.max_error)}")
                arrays.update({f"promoted_observed{i}": leaf.array for i, leaf in enumerate(promoted.runs[0].outputs)})
                return self.verdict("confirmed", summary, [original.case, promoted.case],
                                    arrays={**arrays, **{f"input{i}": leaf.array
                                                         for i, leaf in enumerate(original.inputs)}},
                                    metric=check.metric(), promoted_metric=p_check.metric(), promotion=promotion)
            return self.verdict(REFUTED, f"the error at {label} ({fmt(check.max_error)}) stays after promoting the "
                                f"accumulator to fp32 ({fmt(p_check.max_error)}): not the accumulator (see CMP001)",
                                [original.case, promoted.case])
        if not ran:
            reasons = "; ".join([r.reference_failure() for r in results if not r.reference_ok] + failed)
            return self.verdict(UNCONFIRMED, f"no long reduction ran: {reasons}", [r.case for r in results])
        note = f" ({len(failed)} did not run: {'; '.join(failed)})" if failed else ""
        return self.verdict(REFUTED, f"within the calibrated bound on long reductions at {', '.join(ran)}{note}",
                            [r.case for r in results if r.case.variant == "original"])
