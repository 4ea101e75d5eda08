"""Running a list of cases through workers of one role (parent side; stdlib and numpy).

`run_cases` sends the cases to a worker as one job and reads their outcomes as
they come.  A case that outlives its time limit, a worker that dies, or a line
on the status channel that kanalyze's worker code never writes ends that
worker: the case gets its outcome (with whose code was running: `blame`) and
the remaining cases go on in a fresh worker.  Where the limits set a time by
which every case ends (`Limits.until`: the audit's pair limit), no worker starts
after it, and a candidate's case still running then is stopped: it and the cases
after it are not run, kanalyze's time limit, which no verdict rests on, never the
candidate's timeout.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import replace

from kanalyze.dynamic.cases import describe_inputs
from kanalyze.dynamic.sandbox import stacks
from kanalyze.dynamic.sandbox.process import Limits, OutOfTime, Outcome, ProtocolViolation, Worker, WorkerGone
from kanalyze.dynamic.sandbox.transport import ArrayFolder

_job_ids = itertools.count(1)
# How a case or gate that the time limit left unrun is worded (here, streaming.py, runner.out_of_time):
# not kanalyze's failure, not the candidate's (the audit counts them apart: audit/summary.py).
TIME_LIMIT = "not run: the time limit"


def run_cases(role: str, mode: str, spec: dict, cases: list[tuple[int, dict]], limits: Limits,
              scratch_root: str, job_extra=None, first_worker: Worker | None = None,
              keep: bool = False, on_case=None, on_inputs=None,
              stop=None, walls: dict | None = None) -> tuple[dict[int, Outcome], dict, Worker | None]:
    """Run every case through workers of `role`; one `Outcome` per case index.

    `job_extra(indices)` adds fields to the job (the candidate side's references).
    A candidate's worker waits after each case until its arrays are read into
    this process (`ack`), so that nothing it leaves running can change them later;
    `on_case(index, outcome)` reads what the worker shared on the device (runner.py);
    `on_inputs(index, what, handles)` answers a candidate's worker that asks for a case's
    inputs or its model's state (delivery.py), with the reply to send it.
    `stop` (a threading.Event, for a caller on another thread: ahead.py) ends the run before
    its next worker: the cases left are `not-started`.  `walls`, where given, gets each case's
    seconds from this side: from the end of the case before it (or the call) to its own end, a
    worker's start included, `on_case`'s reading left out.
    Returns the outcomes, the first worker's `ready` message (versions,
    confinement), and with `keep` the last worker if it is still alive (the
    caller closes it), else None.
    """
    outcomes: dict[int, Outcome] = {}
    pending = [index for index, _ in cases]
    by_index = dict(cases)
    ready: dict = {}
    worker = first_worker
    done_here: list[int] = []   # the cases the current worker ran: what it withheld ends with it
    clock = [time.perf_counter()]
    walls = {} if walls is None else walls

    def ended(index: int) -> None:   # (its wall: the next case's begins now)
        now = time.perf_counter()
        walls[index], clock[0] = round(now - clock[0], 3), now
    while pending:
        if stop is not None and stop.is_set():
            if worker is not None:
                worker.close()
            return _fill(outcomes, pending), ready, None
        if _left(limits) == 0.0:   # (nothing more starts; a worker the caller keeps is handed back)
            if worker is not None and not keep:
                worker.close()
            return _out_of_time(outcomes, pending), ready, worker if keep else None
        if worker is None:
            worker, done_here = Worker(role, mode, spec, limits, scratch_root), []
        try:
            message = worker.wait_ready()
        except OutOfTime:
            worker.close()
            return _out_of_time(outcomes, pending), ready, None
        except (WorkerGone, ProtocolViolation) as exc:
            status = "violation" if isinstance(exc, ProtocolViolation) else "not-started"
            blame = "candidate" if status == "violation" else worker.phase
            detail = f"{exc} while starting"
            for index in pending:
                outcomes[index] = Outcome(status, detail=detail, output=worker.output(), blame=blame)
            worker.close()
            break
        ready = ready or message
        if message.get("error"):
            for index in pending:
                outcomes[index] = Outcome("not-started", detail=message["error"], output=worker.output())
            worker.close()
            break
        job_id = next(_job_ids)
        job = {"kind": "cases", "id": job_id, "indices": pending, "cases": [by_index[i] for i in pending],
               "out": worker.scratch, "ack": role == "candidate"}
        if job_extra:
            job.update(job_extra(pending))
        restart = False
        try:
            worker.send(job)
            while pending:
                # Only a candidate's case is cut: a reference worker may hold the judge's arrays of
                # every case so far, which a cut would lose (the pair's own limit still ends it).
                left = _left(limits) if role == "candidate" else None
                event = worker.next_event(limits.case_seconds if left is None else min(limits.case_seconds, left))
                if event is None and left is not None and left < limits.case_seconds:
                    worker.kill()
                    lose_what_it_held(outcomes, done_here, role, f"{TIME_LIMIT} ended its worker", first=True)
                    return _out_of_time(outcomes, pending), ready, None
                if event is None:
                    index = pending.pop(0)
                    ended(index)
                    blame, at = worker.phase, stacks.where(worker)   # (where a reference worker was)
                    worker.kill()
                    # (which reference: cases of several gates may share one)
                    which = f" on {describe_inputs(by_index[index])}" if role == "reference" else ""
                    outcomes[index] = Outcome("timeout", detail=f"did not finish within {limits.case_seconds:.0f} s"
                                                                f"{which}{at}", output=worker.output(), blame=blame)
                    lose_what_it_held(outcomes, done_here, role, f"it was stopped when case {index} did not "
                                                                  f"finish within {limits.case_seconds:.0f} s")
                    restart = True
                    break
                if event.get("job", job_id) != job_id:
                    continue  # the end of an earlier job on the same worker
                if event.get("event") == "case":
                    index = event.get("index")
                    if index not in pending:
                        raise ProtocolViolation(f"a result for case {index!r}, which was not asked for")
                    ended(index)
                    outcomes[index] = _read_case(worker.scratch, index, now=role == "candidate")
                    if on_case is not None:
                        outcomes[index] = on_case(index, outcomes[index])
                    clock[0] = time.perf_counter()
                    pending.remove(index)
                    done_here.append(index)
                    if stop is not None and stop.is_set() and pending:   # the caller is gone
                        worker.kill()
                        lose_what_it_held(outcomes, done_here, role, "the session ended early")
                        restart = True
                        break
                    if role == "candidate":
                        try:
                            worker.send({"kind": "ack", "index": index})
                        except WorkerGone:
                            pass   # it ended after this case (a device fault): the next read says how
                elif event.get("event") == "inputs":
                    index = event.get("index")
                    if role != "candidate" or on_inputs is None or index not in pending:
                        raise ProtocolViolation(f"inputs asked for case {index!r}, which was not asked for")
                    reply = on_inputs(index, event.get("what"), event.get("tensors"))
                    worker.send({"kind": "filled", "index": index, **reply})
                elif event.get("event") == "fatal":
                    lose_what_it_held(outcomes, done_here, role, f"it ended after case {event.get('index')}'s fatal error")
                    restart = True
                    break
                elif event.get("event") == "job-done":
                    break
        except WorkerGone as exc:
            lose_what_it_held(outcomes, done_here, role, f"it ended: {exc}")
            if not pending:   # every case has its outcome; the worker ended after the last
                worker.close()
                return _fill(outcomes, pending), ready, None
            index = pending.pop(0)
            ended(index)
            outcomes[index] = Outcome("crashed", detail=str(exc), output=worker.output(), blame=worker.phase)
            restart = True
        except ProtocolViolation as exc:
            index = pending.pop(0)
            ended(index)
            worker.kill()
            lose_what_it_held(outcomes, done_here, role, f"it was stopped: {exc}")
            outcomes[index] = Outcome("violation", detail=str(exc), output=worker.output(), blame="candidate")
            restart = True
        if not restart and keep:
            return _fill(outcomes, pending), ready, worker
        worker.close()
        worker = None
        if not restart:
            break
    return _fill(outcomes, pending), ready, None


def lose_what_it_held(outcomes: dict, indices: list, role: str, why: str, first: bool = False) -> None:
    """The cases a worker ran before it ended: the outputs it withheld or held for the judge
    (the reference side's, until `release`) ended with it.  Each such outcome says so, and why
    (`arrays_lost`: the gates that compare values say they cannot judge), where the hand-over
    would only learn that the worker is gone; with `first`, the why comes first."""
    for index in indices:
        outcome = outcomes.get(index)
        if outcome is None or outcome.status != "done" or not (outcome.meta.get("withheld") or outcome.meta.get("held")):
            continue
        kept = replace(outcome, meta={k: v for k, v in outcome.meta.items() if k not in ("withheld", "held")})
        outcomes[index] = lost_arrays(kept, f"{why}, which held this case's outputs" if first else
                                      f"kanalyze's {role} worker held this case's outputs, and {why}")
    indices.clear()


def lost_arrays(outcome: Outcome, why: str) -> Outcome:
    """The outcome, its arrays said lost (`arrays_lost`: results.Result raises CannotJudge)."""
    return Outcome("done", meta={**outcome.meta, "arrays_lost": why}, arrays=outcome.arrays, inputs=outcome.inputs,
                   output=outcome.output)


def _left(limits: Limits) -> float | None:
    """The seconds left until every case must have ended (`Limits.until`), 0.0 once past it; None with no such time."""
    return None if limits.until is None else max(0.0, limits.until - time.perf_counter())


def _out_of_time(outcomes: dict[int, Outcome], pending: list[int]) -> dict[int, Outcome]:
    """The cases left, each said unrun by the time limit: kanalyze's, not the candidate's (results.py)."""
    for index in pending:
        outcomes[index] = Outcome("done", meta={"status": "internal", "error": f"{TIME_LIMIT} of the gates ran out "
                                                "before this case ended; a longer time limit runs it"})
    return outcomes


def _fill(outcomes: dict[int, Outcome], pending: list[int]) -> dict[int, Outcome]:
    for index in pending:
        outcomes.setdefault(index, Outcome("not-started", detail="the worker ended before this case"))
    return outcomes


# A candidate's arrays up to this size are read into memory when its case ends; larger ones are
# read from their files when a gate looks (a known gap: docs/worker-protocol.md).
READ_NOW_BYTES = 512 * 2 ** 20


def _read_case(scratch: str, index: int, now: bool = False) -> Outcome:
    base = os.path.join(scratch, f"case-{index}")
    try:
        with open(base + ".json", encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as exc:
        return Outcome("crashed", detail=f"the worker's result for this case is unreadable: {exc}")
    arrays = base + ".arrays"
    if now:
        try:
            folder = ArrayFolder(arrays)
            if folder.nbytes <= READ_NOW_BYTES:
                arrays = folder.load()
        except (OSError, ValueError) as exc:  # written in the candidate's process: never its verdict
            meta = {**meta, "status": "internal", "error": f"kanalyze could not read the case's arrays: {exc}"}
    return Outcome("done", meta=meta, arrays=arrays, inputs=meta.get("inputs_folder") or base + ".inputs")


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
                raise Unanswered(f"it did not answer within {seconds:.0f} s{stacks.where(worker)}")
            if event.get("event") == "job-done" and event.get("job") == job["id"]:
                return event
    except (WorkerGone, ProtocolViolation) as exc:
        raise Unanswered(f"it ended: {exc}") from exc
