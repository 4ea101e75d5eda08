"""How many sessions a run's gates need, so that what a session's judge holds fits.

A session's judge holds every case's arrays until the gates have judged them
(held_arrays.py): the reference's outputs, their float64 copies, and each
candidate run's outputs.  At a problem's real sizes one case is gigabytes (a
260M-element float32 output: 1 GiB, its float64 copy 2 GiB, 1 GiB a candidate
run), and every gate together plans thirty-odd cases: more than a device holds,
and what overflows the host's share goes to the disk.

So once the baseline has run, and its outputs' sizes are known, the gates are
put into sessions whose estimated arrays stay under a share of the memory the
reference's worker reported (the device's on a GPU, the worker's limit or the
machine's on the CPU).  Each session runs the baseline again, then its own gates'
cases, and its judge lets everything go once they are judged.  A later session's
baseline has no float64 reference (`later_baseline`): the first session judged the
baseline's values.  A gate is never split (it judges its cases together); one that
alone exceeds the share gets a session of its own, where the judge's host memory
takes the rest.

The estimate scales the baseline's outputs by how far each size of the case
exceeds the base size; it is an estimate of what the judge will hold, never a
limit on what a case may use.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.sandbox.transport import FLOAT_DTYPES, storage_dtype

HELD_SHARE = 0.45   # of the memory the reference's worker reported, for one session's held arrays
# Gates that go in the first session whatever they hold: they read the baseline's verdict
# (CMP001), name its cause (PRC001) or compare every case's trace with the baseline's (INT001).
FIRST = ("CMP001", "INT001", "PRC001")
FLOAT_WIDTH = 8     # bytes of an element of the float64 reference


def baseline_output(meta: dict) -> tuple[list[int], list[str], int] | None:
    """(bytes, dtypes) of the reference's outputs on the problem's own inputs, as its worker said,
    and the bytes of what else the problem holds (its inputs and its model's state)."""
    output = meta.get("output") if isinstance(meta, dict) else None
    if not isinstance(output, dict):
        return None
    nbytes, dtypes = output.get("nbytes"), output.get("dtypes")
    if not (isinstance(nbytes, list) and isinstance(dtypes, list) and len(nbytes) == len(dtypes)
            and all(type(n) is int and n >= 0 for n in nbytes)):
        return None
    problem = meta.get("problem_bytes")
    inputs = problem - sum(nbytes) if type(problem) is int and problem >= sum(nbytes) else 0
    return nbytes, [str(d) for d in dtypes], inputs


def case_bytes(case: Case, base_sizes: dict[str, int], nbytes: list[int], dtypes: list[str],
               inputs: int = 0) -> int:
    """What a case's arrays take while the judge holds them, scaled from the baseline's outputs:
    the reference's outputs and their float64 copies, and each candidate run's outputs (twice
    for a second set of inputs, INT001's); the inputs, kept and returned, where a gate compares
    them (MEM002); where it compares gradients (CMP002), a gradient per input and parameter (as
    large as `inputs`, which holds the model's state too) in the working dtype, in float64
    (counted as twice float32's) and from each run, and the upstream gradients."""
    reference = sum(nbytes)
    wide = sum(n // _itemsize(d) * FLOAT_WIDTH for n, d in zip(nbytes, dtypes) if _is_float(d)) if case.float64 else 0
    total = (reference * (1 + len(case.runs)) + wide) * (2 if case.repeat_new_values else 1)
    total += 2 * inputs if case.return_inputs else 0
    total += inputs * (3 + len(case.runs)) + reference if case.gradients else 0
    scale = math.prod(max(1.0, case.sizes.get(k, v) / v) for k, v in base_sizes.items() if v > 0)
    return int(total * scale)


def sessions(plan: dict[str, list[Case]], baseline: Case, nbytes: list[int], dtypes: list[str],
             budget: int, inputs: int = 0) -> list[list[str]]:
    """The gates of `plan` in sessions, in order: FIRST's in the first, then each gate in the
    first session with room for it, or a new one.  Every session also holds the baseline (a
    later one without its float64 reference)."""
    def estimate(cases: list[Case]) -> int:
        return sum(case_bytes(c, baseline.sizes, nbytes, dtypes, inputs) for c in cases)

    first_room, later_room = budget - estimate([baseline]), budget - estimate([later_baseline(baseline)])
    groups: list[list[str]] = [[code for code in plan if code in FIRST]]
    used = [sum(estimate(plan[code]) for code in groups[0])]
    for code in plan:
        if code in FIRST:
            continue
        need = estimate(plan[code])
        fits = next((n for n, u in enumerate(used) if u + need <= (later_room if n else first_room)), None)
        if fits is None:
            groups.append([code])
            used.append(need)
        else:
            groups[fits].append(code)
            used[fits] += need
    return [group for group in groups if group]


def later_baseline(baseline: Case) -> Case:
    """The baseline as a later session runs it: the same inputs and runs, no float64 reference
    (the first session judged its values; a later one needs its runs, ops and traces)."""
    return replace(baseline, float64=False)


def _itemsize(dtype: str) -> int:
    try:
        return storage_dtype(dtype).itemsize
    except TypeError:   # a dtype numpy does not name: as wide as float32
        return 4


def _is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES or dtype.startswith("complex")


__all__ = ["FIRST", "HELD_SHARE", "baseline_output", "case_bytes", "later_baseline", "sessions"]
