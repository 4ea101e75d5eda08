"""INT001 from what ran: a candidate whose work changes with the values of its inputs (parent side).

Every run of the candidate records the Triton kernels it launched, the calls
into a CUDA C++ extension it built (extensions.py) and the torch calls its
Python code made (recording.py).  Runs at the same sizes and
dtype differ only in their input values (another seed, another distribution,
injected NaN or Inf, the same call repeated): an honest kernel launches the
same kernels and makes the same library calls whatever the values.  One that
takes another path for some values (PyTorch when the inputs hold a NaN or
look unlike the benchmark's, nothing at all when it recognises inputs it has
seen) is checked by a verifier on some inputs and scored on others; its trace
says so, and this is an INT001 confirmation naming both paths.

A trace is the set of kernels launched and of the calls that do work (the
library families RES001 knows, and host transfers), never counts, never glue
(views, copies, allocations).  The variant with fp32 accumulators (PRC002) is
another program and is left out; runs that failed are too, and the first call
in each worker (a candidate may set itself up lazily: the baseline calls twice).
"""

from __future__ import annotations

from kanalyze.dynamic.gates.base import CONFIRMED, Verdict
from kanalyze.dynamic.gates.res001_dispatch_trace import HOST_CALLS, family
from kanalyze.dynamic.results import Result

GATE = "dispatch-trace-consistency"


def trace(meta: dict) -> tuple[frozenset, frozenset]:
    """(kernels launched, work calls) of one run's record."""
    launched = frozenset(name for record in ("launches", "extension_calls")   # Triton's, a CUDA C++ extension's
                         for name, count in (meta.get(record) or {}).items() if count)
    calls = frozenset(name for name, count in (meta.get("ops") or {}).items()
                      if count and (family(name) or name in HOST_CALLS))
    return launched, calls


def describe(case, run: int) -> str:
    what = case.distribution + (f" with {case.special} injected" if case.special else "")
    return f"{what} inputs (seed {case.seed}{', run ' + str(run + 1) if run else ''})"


def _words(found: tuple[frozenset, frozenset]) -> str:
    launched, calls = found
    parts = [f"launched {', '.join(sorted(launched))}" if launched else "launched no kernel"]
    if calls:
        parts.append(f"called {', '.join(sorted(calls))}")
    return " and ".join(parts)


def value_dependent_paths(results: list[Result]) -> Verdict | None:
    """INT001 confirmed when two runs at the same sizes and dtype ran different work, else None."""
    seen: dict[tuple, tuple] = {}
    for result in results:
        if result.case.variant != "original" or result.case.call is not None or not result.candidate_ok:
            continue
        key = (tuple(sorted(result.case.sizes.items())), result.case.dtype)
        for i, run in enumerate(result.runs):
            if run.status != "ok" or "launches" not in run.meta or run.meta.get("call") == 0:
                continue   # a failed run, or the worker's first call (lazy set-up is not a path)
            found = trace(run.meta)
            first = seen.setdefault(key, (found, result, i))
            if found != first[0]:
                before, other, j = first
                summary = (f"the candidate's work depends on its input values: on {describe(other.case, j)} it "
                           f"{_words(before)}; on {describe(result.case, i)} it {_words(found)}")
                return Verdict("INT001", CONFIRMED, summary, [other.case, result.case],
                               {"traces": [{"case": other.case.id, "launched": sorted(before[0]),
                                            "calls": sorted(before[1])},
                                           {"case": result.case.id, "launched": sorted(found[0]),
                                            "calls": sorted(found[1])}]},
                               gate=GATE)
    return None
