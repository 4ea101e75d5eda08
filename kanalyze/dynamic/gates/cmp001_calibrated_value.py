"""CMP001 value: the candidate matches the reference computed in float64.

Fresh seeds and several input distributions (the problem's own, normal,
uniform [0, 1), heavy-tailed, large magnitude, mixed sign; every dtype a
contract lists).  The tolerance is calibrated per case (compare.py): a small
multiple of the error the reference itself makes in the working dtype, with a
floor in ulps.  A distribution under which the float64 reference is not finite
(a log of negative numbers, say) is not valid for the problem and is skipped.

On the CPU, the interpreter computes as a GPU would where it can tell how: each case takes
another of every autotuned kernel's configs (autotune_cpu.py: a GPU runs whichever is
fastest there, and a kernel right only for its first config is wrong on the GPU that picks
another), and a `tl.dot` that runs in TF32 on a GPU (fp32 operands at the default precision)
has its operands rounded as TF32 rounds them.  Else the interpreter's exact fp32 products
made CMP001 refute, on the CPU, candidates whose TF32 error it confirms on a GPU.
"""

from __future__ import annotations

from kanalyze.dynamic.compare import finite_summary
from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, value_failure, witness_arrays

DISTRIBUTIONS = ("given", "normal", "uniform", "heavy_tailed", "large", "mixed_sign")


class CalibratedValue(Gate):
    code = "CMP001"
    name = "cmp001-calibrated-value"
    summary = "value against float64 over seeds and input distributions, calibrated tolerance"

    def plan(self, ctx: GateContext):
        cases = [ctx.case(self, distribution, distribution=distribution, seed=ctx.seed + 11 + i)
                 for i, distribution in enumerate(DISTRIBUTIONS)]
        for j, dtype in enumerate(ctx.harness.dtypes[1:]):
            cases.append(ctx.case(self, f"given-{dtype}", dtype=dtype, seed=ctx.seed + 31 + j))
        if ctx.mode == "cpu":
            for position, case in enumerate(cases):
                case.autotune_choice, case.emulate_tf32 = position, True
        return cases

    def judge(self, ctx: GateContext, results):
        ran, skipped = [], []
        for result in results:
            label = result.case.distribution + (f" {result.case.dtype}" if result.case.dtype else "")
            if not result.reference_ok:
                skipped.append(f"{label}: {result.reference_failure()}")
                continue
            if result.expected64 is None:
                skipped.append(f"{label}: the reference does not run in float64 "
                               f"({result.reference.meta.get('output64_error')})")
                continue
            if not all(finite_summary(leaf)[0] for leaf in result.expected64 if leaf.is_float):
                skipped.append(f"{label}: the float64 reference is not finite for these inputs")
                continue
            failure, details = value_failure(result)
            if failure:
                run = result.runs[0] if result.runs else None
                return self.confirmed(f"{result.case.distribution} inputs (seed {result.case.seed}){ctx.scaled}"
                                      f"{_config_taken(run)}: {failure}",
                                      result, arrays=witness_arrays(run.outputs if run and run.ok else None,
                                                                    result.expected64), **details)
            ran.append(label)
        if not ran:
            return self.verdict(UNCONFIRMED, "no distribution could be compared: " + "; ".join(skipped),
                                [r.case for r in results])
        note = f" ({len(skipped)} skipped: {'; '.join(skipped)})" if skipped else ""
        return self.verdict(REFUTED, f"within the calibrated bound against float64{ctx.scaled} for "
                                     f"{', '.join(ran)} inputs{_configs_ran(results)}{note}", [r.case for r in results])


def _config_taken(run) -> str:
    """Where the interpreter chose an autotuned kernel's config: which it was, in words."""
    tunings = (run.meta.get("autotune") or {}) if run else {}
    return "".join(f", {name}'s autotune config {t['config'] + 1} of {t['configs']} "
                   f"({', '.join(f'{k}={v}' for k, v in t['settings'].items())})"
                   for name, t in sorted(tunings.items()) if t.get("configs", 0) > 1)


def _configs_ran(results) -> str:
    """How many of each autotuned kernel's configs the cases ran (the CPU takes one per case)."""
    taken: dict[str, set] = {}
    counts: dict[str, int] = {}
    for result in results:
        for run in result.runs[:1]:
            for name, tuning in (run.meta.get("autotune") or {}).items():
                if tuning.get("configs", 0) > 1:
                    taken.setdefault(name, set()).add(tuning["config"])
                    counts[name] = max(counts.get(name, 0), tuning["configs"])
    return "".join(f"; {name} under {len(taken[name])} of its {counts[name]} autotune configs"
                   for name in sorted(taken))
