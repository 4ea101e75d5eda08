"""References computed ahead: a second reference worker on a thread of its own (parent side).

After the baseline, a session's other cases (every gate's perturbed sizes,
distributions and injected values) need their references before a
candidate's worker can run them.  Computed first and all together, the
candidate's worker waits for the slowest of them; computed here, in a second
reference worker on a thread of the parent's, the candidate's worker runs each
model group as soon as that group's references are there, while the
references of the next groups are being computed: the two sides overlap
instead of adding up.

The second worker is a reference worker like the first (the problem's code
only, never the candidate's); it withholds its outputs until `release` as the
first does.  The first stays the session's judge: it reads what a candidate's
worker shares on the device while this one computes.  Each `Worker` is used by
one thread only: the second by the thread here, every other by the session's.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from kanalyze.dynamic.reference_jobs import release
from kanalyze.dynamic.sandbox.dispatch import run_cases
from kanalyze.dynamic.sandbox.process import Limits, Outcome, Worker


class Ahead:
    """Runs `job(on_case)` on a thread; `on_case(index, outcome)` is what the job calls as each
    case ends (dispatch.run_cases' callback).  `wait(indices)` blocks until those cases have
    ended, or the job has; `result()` joins the thread and returns what the job returned."""

    def __init__(self, job: Callable[[Callable[[int, Outcome], Outcome]], tuple]) -> None:
        self._ended: dict[int, Outcome] = {}
        self._changed = threading.Condition()
        self._finished = False
        self._result: tuple | None = None
        self._error: BaseException | None = None
        self.seconds = 0.0   # how long the job ran
        self._thread = threading.Thread(target=self._run, args=(job,), name="kanalyze-references-ahead",
                                        daemon=True)
        self._thread.start()

    def _on_case(self, index: int, outcome: Outcome) -> Outcome:
        with self._changed:
            self._ended[index] = outcome
            self._changed.notify_all()
        return outcome

    def _run(self, job) -> None:
        started = time.perf_counter()
        try:
            self._result = job(self._on_case)
        except BaseException as exc:   # raised again by result(), in the session's thread
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - started
            with self._changed:
                self._finished = True
                self._changed.notify_all()

    def wait(self, indices: list[int]) -> dict[int, Outcome]:
        """Once `indices` have ended (or the job has: then `result()` has the rest), every
        outcome that has come so far."""
        with self._changed:
            self._changed.wait_for(lambda: self._finished or all(i in self._ended for i in indices))
            return dict(self._ended)

    @property
    def done(self) -> bool:
        with self._changed:
            return self._finished

    def result(self) -> tuple:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


class SecondReference:
    """A session's second reference worker, started early (its start overlaps the baseline's),
    and the references it computes ahead (`compute`, then `outcomes` as the candidate's side
    needs them); it withholds its outputs until `release`, as the first does."""

    def __init__(self, mode: str, spec: dict, limits: Limits, root: str, inputs: str) -> None:
        self.mode, self.spec, self.limits, self.root, self.inputs = mode, spec, limits, root, inputs
        self.worker: Worker | None = None
        self.ready: dict = {}     # the worker's `ready` message (versions, confinement)
        self.seconds = 0.0        # how long it computed
        self._job: Ahead | None = None
        self._indices: list[int] = []
        self._stop = threading.Event()

    def start(self) -> None:
        if self.worker is None:
            self.worker = Worker("reference", self.mode, self.spec, self.limits, self.root)

    def compute(self, cases: list[tuple[int, dict]]) -> None:
        """Start computing the references of `cases` (index, case) on the thread."""
        self.start()
        self._indices = [index for index, _ in cases]
        worker = self.worker
        self._stop.clear()
        self._job = Ahead(lambda on_case: run_cases("reference", self.mode, self.spec, cases, self.limits, self.root,
                                                    first_worker=worker, keep=True, on_case=on_case,
                                                    job_extra=lambda indices: {"inputs_out": self.inputs},
                                                    stop=self._stop))

    def outcomes(self, waiting: list[int]) -> dict[int, Outcome]:
        """Once `waiting` have ended, every outcome that has come so far; if the job ends first,
        all of its outcomes (a case it never reached says so)."""
        if self._job is None:
            return {}
        ended = self._job.wait(waiting)
        return ended if all(i in ended for i in waiting) else self.finish()

    def finish(self) -> dict[int, Outcome]:
        """Every outcome, once the job has ended; a failure of kanalyze's thread is every case's."""
        if self._job is None:
            return {}
        try:
            outcomes, self.ready, self.worker = self._job.result()
        except Exception as exc:
            why = f"kanalyze's second reference worker failed: {type(exc).__name__}: {exc}"
            outcomes = {index: Outcome("crashed", detail=why) for index in self._indices}
        self.seconds = self._job.seconds
        return outcomes

    def release(self) -> str | dict[str, str]:
        """As reference_jobs.release: the outputs it withheld that were lost, or why all were."""
        return release(self.worker, self.limits)

    def close(self) -> dict[int, Outcome]:
        """End the worker; a job still running (the session ended early: an error of kanalyze's,
        an interrupt) is stopped, its worker killed, before the thread is joined.  Returns the
        job's outcomes (the cases it had not reached: `not-started`)."""
        outcomes: dict[int, Outcome] = {}
        if self._job is not None:
            if not self._job.done:
                self._stop.set()
                if self.worker is not None:
                    self.worker.kill()   # the thread sees it end, and starts no other
            outcomes = self.finish()
            self._job = None
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        return outcomes
