"""The proofs' watchdog: stops z3 once the process's CPU time reaches a deadline.

The proofs' budgets are counts of z3's work (solver.py), but inside its nonlinear
arithmetic z3 can work for a minute and count a few 1e5 units (TritonBench's
`fused_recurrent_retention.py`).  When the pipeline gives a file's proofs a deadline
(check/analyze.py: below the file's CPU budget), a thread watches the process's CPU
time, the clock that budget counts, and once the deadline has passed interrupts the
question z3 is working on; the proofs then ask nothing more (solver.Budget.exhausted).

It interrupts the solver, never the context: z3's solver-local interrupt acts only
on a check in progress, while `Context.interrupt()` landing between two questions
cancels the whole context for good (the next `model.eval` raises "canceled").  An
interrupt that comes just before a check starts is lost, so it is repeated every
50 ms until the check ends.  Not z3's own `timeout` either: that counts wall time,
and on a loaded machine it stopped a file at 5 s of CPU.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import z3

REPEAT_S = 0.05      # how often an interrupt is repeated past the deadline
LONGEST_SLEEP_S = 0.25  # the longest the thread sleeps before it looks at the clock again


class Watchdog:
    """A thread that interrupts the solver `watching` names once `time.process_time()` reaches `deadline`."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False              # the deadline has passed (the thread saw it)
        self._lock = threading.Lock()   # guards _solver: the thread never holds the last reference to it
        self._solver: z3.Solver | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kanalyze-proof-watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def watching(self, solver: z3.Solver) -> Iterator[None]:
        """Around one check of `solver`: the check the watchdog interrupts past the deadline."""
        with self._lock:
            self._solver = solver
        try:
            yield
        finally:
            with self._lock:
                self._solver = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while True:
            left = self.deadline - time.process_time()
            if left <= 0:
                self.fired = True
                with self._lock:
                    if self._solver is not None:
                        try:
                            self._solver.interrupt()
                        except z3.Z3Exception:  # an error code the main thread's work left: try again
                            pass
            # A quarter second at most between looks: z3 overshoots the deadline by about that much CPU.
            if self._stop.wait(REPEAT_S if left <= 0 else min(left, LONGEST_SLEEP_S)):
                return


__all__ = ["Watchdog"]
