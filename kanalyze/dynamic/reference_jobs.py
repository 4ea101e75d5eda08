"""What a session asks of the reference worker besides its cases (parent side; stdlib and numpy).

The reference worker runs the problem, which is the benchmark's and trusted; it
is also the session's judge of what crosses from the candidate's side.  Beside
the cases (dispatch.run_cases) it answers four jobs, each with one `job-done`:

* `fill`: draw a case's inputs (or its model's initial state) again when the candidate's
  worker asks, and write them into the device buffers it sent, or into a folder it is
  shown (`Reader.deliver`; sandbox/delivery.py);
* `ingest`: read what a candidate's worker shared on the device (CUDA IPC
  descriptors) and save it for this process (`Reader`, as each case ends);
* `float64`: the float64 references the baseline's cases were run without, once
  the candidate has run there (`float64_later`);
* `release`: save the outputs it withheld while candidates ran (`release`).

A job that is not answered in a case's time, or a worker that ends, is said in
words; nothing here is ever a verdict on the candidate.
"""

from __future__ import annotations

import collections
import itertools
import os
import shutil
import time
from typing import TYPE_CHECKING

from kanalyze.dynamic.sandbox.dispatch import READ_NOW_BYTES
from kanalyze.dynamic.sandbox.process import Limits, Outcome, ProtocolViolation, Worker, WorkerGone
from kanalyze.dynamic.sandbox.transport import ArrayFolder

if TYPE_CHECKING:
    from kanalyze.dynamic.session import Session

MAX_CASE_BYTES = 256 * 2 ** 30   # what the reference worker reads of one case's device arrays, at most
_job_ids = itertools.count(1)


class Unanswered(Exception):
    """The reference worker did not answer a job: why, in words."""


def ask(worker: Worker, job: dict, seconds: float) -> dict:
    """Send `job` (its `id` is given here) and return the worker's `job-done` event for it."""
    job = {**job, "id": f"{job['kind']}-{next(_job_ids)}"}
    try:
        worker.send(job)
        while True:
            event = worker.next_event(seconds)
            if event is None:
                raise Unanswered(f"it did not answer within {seconds:.0f} s")
            if event.get("event") == "job-done" and event.get("job") == job["id"]:
                return event
    except (WorkerGone, ProtocolViolation) as exc:
        raise Unanswered(f"it ended: {exc}") from exc


def release(judge: Worker | None, limits: Limits) -> str | dict[str, str]:
    """Ask the reference worker for the outputs it withheld while candidates ran: {arrays folder:
    why it was not saved} for the cases whose outputs were lost (empty when all were saved), or
    why none were (the worker ended: they are lost with it)."""
    if judge is None:
        return "kanalyze's reference worker ended before it handed over the reference's outputs"
    try:
        lost = ask(judge, {"kind": "release"}, limits.case_seconds).get("lost") or {}
    except Unanswered as exc:
        return f"kanalyze's reference worker did not hand over the reference's outputs: {exc}"
    return {str(k): str(v) for k, v in lost.items()} if isinstance(lost, dict) else {}


def with_outputs(outcome: Outcome, released: str | dict | None) -> Outcome:
    """The reference's outcome once it handed over its withheld outputs (`released`:
    reference_jobs.release).  Where the worker ended, a crash; where it could not save this
    case's arrays (the disk ran short), the outcome says so (`arrays_lost`): the gates that
    compare values say they cannot judge, the others (the ops it recorded) still can."""
    if not released or outcome.status != "done" or not outcome.meta.get("withheld"):
        return outcome
    if not isinstance(released, dict):
        return Outcome("crashed", detail=released, output=outcome.output)
    why = released.get(outcome.arrays)
    if why is None:
        return outcome
    return Outcome("done", meta={**outcome.meta, "arrays_lost": why}, arrays=outcome.arrays, inputs=outcome.inputs,
                   output=outcome.output)


def float64_later(worker: Worker, indices: list[int], limits: Limits) -> tuple[dict, str]:
    """({case index: what to add to its outcome}, why there is nothing where nothing came) for the
    cases at `indices`, run with `float64_later`.  A worker that does not answer in time is killed."""
    try:
        answer = ask(worker, {"kind": "float64", "indices": indices, "out": worker.scratch}, limits.case_seconds)
    except Unanswered as exc:
        worker.kill()
        return {}, f"kanalyze's reference worker gave no float64 reference: {exc}"
    found = answer.get("results")
    return (found if isinstance(found, dict) else {}), "kanalyze's reference worker gave no float64 reference"


class Reader:
    """Reads a candidate's case into this process as the case ends: what its worker shared on the
    device, through the reference worker (which saves it for us); the rest from its files."""

    def __init__(self, session: "Session", judge: Worker | None) -> None:
        self.session, self.judge = session, judge
        self.count = 0
        self.seconds = 0.0
        self._delivered: dict[int, list[str]] = {}   # case index -> the folders its arrays were saved in

    def read(self, index: int, outcome: Outcome) -> Outcome:
        started = time.perf_counter()
        for folder in self._delivered.pop(index, []):   # the case is read: they are no longer needed
            shutil.rmtree(folder, ignore_errors=True)
        try:
            return self._read(outcome)
        finally:
            self.seconds += time.perf_counter() - started

    def deliver(self, index: int, reference: dict, what, handles) -> dict:
        """The reply to a candidate's worker that asks for case `index`'s inputs or its model's
        state (`what`), as its reference (`reference`, its meta) offered them: into the device
        buffers of `handles` (CUDA IPC), else into a fresh folder it is shown; `error` when
        the reference worker cannot (kanalyze's failure)."""
        offered = reference.get({"inputs": "deliver", "state": "deliver_state"}.get(what, ""))
        if not isinstance(offered, dict):
            return {"error": f"kanalyze offered no {what} for this case"}
        if handles is not None and not isinstance(handles, dict):
            return {"error": "the candidate's worker sent no buffers kanalyze can read"}
        folder = None
        if handles is None:
            self.count += 1
            folder = os.path.join(self.session.inputs, f"delivered-{self.count}")
            self._delivered.setdefault(index, []).append(folder)
        try:
            answer = self._ask_judge({"kind": "fill", "deliver": offered, "tensors": handles, "folder": folder})
        except Unanswered as exc:
            return {"error": f"kanalyze's reference worker could not hand over the case's {what}: {exc}"}
        if answer.get("error"):
            return {"error": str(answer["error"])}
        return {"folder": folder} if folder else {}

    def _ask_judge(self, job: dict) -> dict:
        """`ask` the session's judge (its first reference worker, started if it is not); Unanswered
        also where it could not start."""
        try:
            worker = self.judge or self.session.reference
            worker.wait_ready()
        except (WorkerGone, ProtocolViolation) as exc:
            raise Unanswered(f"it did not start: {exc}") from exc
        return ask(worker, job, self.session.limits.case_seconds)

    def _read(self, outcome: Outcome) -> Outcome:
        shared = outcome.meta.pop("shared", None) if outcome.status == "done" else None
        if not shared:
            return outcome
        self.count += 1
        folder = os.path.join(self.session.root, f"shared-{self.count}")
        error = self._ingest(shared, folder)
        if error:
            return Outcome("done", meta={**outcome.meta, "status": "internal", "error": error}, output=outcome.output)
        arrays = ArrayFolder(folder)
        if arrays.nbytes <= READ_NOW_BYTES:
            arrays = arrays.load()
        own = outcome.arrays if isinstance(outcome.arrays, collections.abc.Mapping) else ArrayFolder(outcome.arrays)
        return Outcome("done", meta=outcome.meta, arrays=collections.ChainMap(arrays, own), output=outcome.output)

    def _ingest(self, shared: dict, folder: str) -> str | None:
        try:
            return self._ask_judge({"kind": "ingest", "tensors": shared, "out": folder,
                                    "max_bytes": MAX_CASE_BYTES}).get("error")
        except Unanswered as exc:
            return f"kanalyze's reference worker could not read the candidate's device arrays: {exc}"
