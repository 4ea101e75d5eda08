"""The findings kanalyze makes about its own trouble with a file: KAN000 and KAN001.

Also the per-file CPU budget: a file whose analysis runs too long is reported
(KAN001, naming the stage it was in) instead of holding up the run.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from kanalyze.analyzer.sources import Nesting
from kanalyze.findings import Finding, Location

PARSE_ERROR = ("KAN000", "parse-error")
INTERNAL_ERROR = ("KAN001", "internal-error")

# CPU seconds one file's analysis may take (`--file-timeout`, `file-timeout`).
# The slowest fixture takes 0.1 s; the slowest file of the ecosystem corpora
# (bench/ecosystem.py) about 2 s.  With the opt-in MEM003/MEM004 proofs, whose
# z3 questions have resource limits of their own, a file may take longer.  A
# pathological file stops here instead of holding up a whole run.
FILE_BUDGET_S = 5.0
FILE_BUDGET_WITH_PROOFS_S = 30.0
# The share of a file's CPU budget its z3 proofs may use (their watchdog's deadline,
# analyzer/bounds/watchdog.py); the rest is for the rules after them, which take under
# 1.5 s on every file of the ecosystem corpora.  Past it the proofs stop with a
# KAN003 note instead of the file becoming one KAN001 (docs/bounds.md and KAN003's doc
# state the 80%).
PROOF_SHARE = 0.8


def error_finding(path: str, reason: str, row: int = 1, column: int = 1, code=PARSE_ERROR,
                  **evidence) -> Finding:
    return Finding(
        code=code[0], name=code[1],
        message=reason,
        location=Location(path, row, column, row, column),
        evidence={"reason": reason, **evidence},
    )


def nesting_finding(path: str, nesting: Nesting) -> Finding:
    """The file was refused before any parse (sources.measure_nesting): LibCST's
    native parser overflows its stack on such input, a signal, not an exception."""
    return error_finding(path, f"cannot parse: {nesting.problem}", nesting.row, nesting.column + 1)


# --- the per-file budget ------------------------------------------------------

class OverBudget(BaseException):
    """Raised in the analyzing thread when a file's analysis used up its CPU budget.

    A BaseException, like KeyboardInterrupt: the `except Exception` that keeps one
    rule's bug from hiding the other rules must not swallow it."""

    def __init__(self, seconds: float, stage: str) -> None:
        super().__init__(f"analysis stopped after {seconds:g} s: {stage}")
        self.seconds, self.stage = seconds, stage


class _Stage(threading.local):
    name = "reading the file"


_stage = _Stage()


def enter_stage(name: str) -> None:
    """Say what the analysis does now ("parsing", "rule EXC001", ...): what an
    over-budget finding names."""
    _stage.name = name


@contextmanager
def cpu_budget(seconds: float | None) -> Iterator[None]:
    """Raise OverBudget inside the block once this process has spent `seconds`
    of CPU time in it, and again every quarter second of CPU after that until
    the block ends.  Not where it would be lost or disguised: in a `__del__`
    or a weak reference's callback (Python ignores it), in the `from_param` that ctypes calls while converting
    arguments (ctypes turns it into an ordinary error: a rule's "failure"), in
    the constructor of a z3 object (half-built, it complains when collected).
    Those frames are short: the next signal raises it.

    Through SIGPROF, so only in the main thread of a process where nothing else
    uses the profiling timer; elsewhere (an editor's thread, a profiler) the
    block runs without a budget.  Native code (the parser, z3) is interrupted
    when it returns to Python."""
    usable = (seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
              and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0))
    if not usable:
        yield
        return
    active = [True]

    def over_budget(signum, frame) -> None:
        if active[0] and not _unsafe_to_interrupt(frame):
            raise OverBudget(seconds, _stage.name)

    previous = signal.signal(signal.SIGPROF, over_budget)
    enter_stage("reading the file")
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.25)
    try:
        yield
    finally:
        active[0] = False  # first: a signal that arrives from here on raises nothing
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous if previous is not None else signal.SIG_DFL)


WEAKREF_MODULES = ("weakref.py", "_weakrefset.py")   # whose callbacks run where an exception is ignored


def _unsafe_to_interrupt(frame, levels: int = 4) -> bool:
    """Is `frame` (or one of its callers, a few up) a `__del__`, a weak reference's callback (a
    `WeakKeyDictionary` dropping a collected key), a `from_param`, or a z3 constructor?"""
    while frame is not None and levels:
        name = frame.f_code.co_name
        if name in ("__del__", "from_param") or frame.f_code.co_filename.endswith(WEAKREF_MODULES) or (
                name == "__init__" and frame.f_globals.get("__name__", "").startswith("z3")):
            return True
        frame, levels = frame.f_back, levels - 1
    return False


def over_budget_finding(path: str, stopped: OverBudget) -> Finding:
    return error_finding(path, f"analysis stopped after {stopped.seconds:g} s: {stopped.stage} ran past the "
                               f"per-file CPU budget; this file's findings are missing (the other files are "
                               f"checked)", code=INTERNAL_ERROR, stage=stopped.stage, budget_s=stopped.seconds)


def crash_finding(path: str, how: str) -> Finding:
    """The process analysing the file died (a signal, not an exception)."""
    return error_finding(path, f"analysis crashed the process that ran it ({how}); most likely the parser "
                               f"overflowed its stack on deeply nested code.  This file's findings are missing "
                               f"(the other files are checked)", code=INTERNAL_ERROR, crashed=how)


def worth_caching(finding_dicts: list[dict]) -> bool:
    """A file that ran out of time or crashed the analysis gets another try in the next run:
    a busy machine or a fixed kanalyze may do better."""
    return not any("budget_s" in d.get("evidence", {}) or "crashed" in d.get("evidence", {}) for d in finding_dicts)
