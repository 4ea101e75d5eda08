"""What a session asks of the reference worker besides its cases (parent side; stdlib and numpy).

The reference worker runs the problem, which is the benchmark's and trusted; it
is also the session's judge of what crosses from the candidate's side.  Beside
the cases (dispatch.run_cases) it answers these jobs, each with one `job-done`:

* `fill`: draw a case's inputs (or its model's initial state) again when the candidate's
  worker asks, and write them into the device buffers it sent, or into a folder it is
  shown (`Reader.deliver`; sandbox/delivery.py);
* `adopt`: hold what a candidate's worker shared on the device (CUDA IPC descriptors)
  or saved (on the CPU), as each case ends (`Reader`), and what the second reference
  worker held, once every candidate worker has ended (`hand_back`; sandbox/held.py);
* `judge`: a summary of arrays it holds (a value check, bitwise differences, ...), or a
  window of their values (held_arrays.py, asked by compare.py);
* `ingest`: where workers hold no arrays (KANALYZE_JUDGE_HELD=0), read what a
  candidate's worker shared on the device and save it for this process;
* `float64`: the float64 references the baseline's cases were run without, once
  the candidate has run there (`float64_later`);
* `release`: save the outputs it withheld while candidates ran (`release`), and hand
  over what it held (the second reference worker's, `export`).

`judged_now` lets the judge compare a case while the session still runs (the
baseline, to leave out the cases of gates it decides: runner.py).

A job that is not answered in a case's time, or a worker that ends, is said in
words; nothing here is ever a verdict on the candidate.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

from kanalyze.dynamic.held_arrays import with_held
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox import rundir
from kanalyze.dynamic.sandbox.dispatch import READ_NOW_BYTES, Unanswered, ask, lost_arrays
from kanalyze.dynamic.sandbox.process import Limits, Outcome, ProtocolViolation, Worker, WorkerGone
from kanalyze.dynamic.sandbox.transport import ArrayFolder

if TYPE_CHECKING:
    from kanalyze.dynamic.session import Session

MAX_CASE_BYTES = 256 * 2 ** 30   # what the reference worker reads of one case's device arrays, at most


def release(judge: Worker | None, limits: Limits, export: bool = False,
            memory: str | None = None, gone: str | None = None) -> tuple[str | dict[str, str], dict]:
    """Ask the reference worker for the outputs it withheld while candidates ran: ({arrays folder:
    why it was not saved} for the cases whose outputs were lost (empty when all were saved), or
    why none were (the worker ended, how: `gone`; they are lost with it); with `export`, what it
    held for the judge, handed over (held.hand_over: `exported`, and `saved`, through `memory`
    where given)."""
    if judge is None:
        return ("kanalyze's reference worker ended before it handed over the reference's outputs"
                + (f": {gone}" if gone else "")), {}
    try:
        answer = ask(judge, {"kind": "release", "export": export, "memory": memory}, limits.case_seconds)
    except Unanswered as exc:
        return f"kanalyze's reference worker did not hand over the reference's outputs: {exc}", {}
    lost = answer.get("lost") or {}
    handed = {k: answer[k] for k in ("exported", "saved") if isinstance(answer.get(k), dict)}
    return ({str(k): str(v) for k, v in lost.items()} if isinstance(lost, dict) else {}), handed


def handover_folder() -> str | None:
    """A new folder in shared memory for one hand-over (rundir.memory_directory), or None."""
    root = rundir.memory_directory()
    return tempfile.mkdtemp(prefix="handover-", dir=root) if root else None


def adopt(judge: Worker, handed: dict, limits: Limits) -> dict[str, dict] | str:
    """Have the judge hold what another reference worker handed over (`release` with `export`),
    mapped from that worker's memory on the device (it lives until the session closes):
    {name: dtype and shape} of what it holds (the rest it saved into the cases' folders), or why
    it could not."""
    try:
        judge.wait_ready()
        answer = ask(judge, {"kind": "adopt", **handed, "max_bytes": MAX_CASE_BYTES, "map": True},
                     limits.case_seconds)
    except (Unanswered, WorkerGone, ProtocolViolation) as exc:
        return f"kanalyze's judge could not take the references computed ahead: {exc}"
    if answer.get("error"):
        return str(answer["error"])
    found = answer.get("held")
    return found if isinstance(found, dict) else {}


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
    return outcome if why is None else lost_arrays(outcome, why)


def float64_later(worker: Worker, indices: list[int], limits: Limits) -> tuple[dict, str]:
    """({case index: what to add to its outcome}, why there is nothing where nothing came) for the
    cases at `indices`, run with `float64_later`.  A worker that does not answer in time is killed."""
    logging.getLogger("kanalyze.progress").info("the baseline's float64 reference")
    try:
        answer = ask(worker, {"kind": "float64", "indices": indices, "out": worker.scratch}, limits.case_seconds)
    except Unanswered as exc:
        worker.kill()
        return {}, f"kanalyze's reference worker gave no float64 reference: {exc}"
    found = answer.get("results")
    return (found if isinstance(found, dict) else {}), "kanalyze's reference worker gave no float64 reference"


def add_float64(outcome: Outcome, part, why: str) -> dict:
    """Add to `outcome` the float64 reference its worker gave later (`part`: `float64_later`'s
    for its case), or `why` there is none; returns the seconds of its steps."""
    meta = {k: v for k, v in outcome.meta.items() if k != "output64_later"}
    steps = {}
    if isinstance(part, dict):
        meta.update({k: v for k, v in part.items() if k in ("output64", "output64_error")})
        if isinstance(part.get("held"), dict):   # the float64 outputs the judge holds (held.py)
            meta["held"] = {**(meta.get("held") or {}), **part["held"]}
        steps = part.get("seconds") if isinstance(part.get("seconds"), dict) else {}
        meta["seconds"] = {**(meta.get("seconds") or {}), **steps}
    else:
        meta["output64_error"] = why
    outcome.meta = meta
    return steps


def hand_back(session: "Session", computed: list[str], ahead_keys: set[str], by_key: dict) -> dict[str, Outcome]:
    """The reference outcomes of `computed` once every candidate worker has ended: each reference
    worker hands over the outputs it withheld (the judge those of the baseline, the second worker
    those it computed ahead).  Where workers hold arrays (held.py), the second worker's go to the
    judge (the worker that read the candidate's side: the first reference worker, started now
    where a replay's cases needed none), and each outcome's arrays are the judge's held ones,
    then its files.  Held arrays that cannot reach the judge are said lost, with why."""
    judge, held = session._judge or session._reference, session.spec["judge_held"]
    released: dict[bool, str | dict | None] = {False: None, True: None}
    if any(k not in ahead_keys for k in computed):
        released[False] = release(session._judge, session.limits, gone=session.judge_gone)[0]
    adopted, not_adopted = {}, None
    if any(k in ahead_keys for k in computed):
        # What it holds in host memory goes through shared memory on a GPU (at a problem's real
        # size, gigabytes that were written to the disk), and is gone once the judge has it.
        memory = handover_folder() if held and session.mode == "cuda" else None
        released[True], handed = release(session.ahead.worker, session.limits, export=held, memory=memory)
        if held and any(handed.values()):
            judge = judge or session.reference
            found = adopt(judge, handed, session.limits)
            adopted, not_adopted = (found, None) if isinstance(found, dict) else ({}, found)
        if memory:
            shutil.rmtree(memory, ignore_errors=True)
    if judge is not None and not held and judge is not session._reference:
        judge.close()
    outcomes = {}
    for key in computed:
        outcome = with_outputs(by_key[key], released[key in ahead_keys])
        if held and outcome.status == "done" and isinstance(outcome.arrays, str):
            folder = outcome.arrays
            if key in ahead_keys:   # what the judge holds now, the rest saved into the case's folder
                had = outcome.meta.get("held") or {}
                outcome.meta["held"] = {name.rsplit("/", 1)[1]: spec for name, spec in adopted.items()
                                        if name.rsplit("/", 1)[0] == folder}
                saved = set(ArrayFolder(folder)) if had else set()
                gone = [name for name in had if name not in outcome.meta["held"] and name not in saved]
                if gone:
                    outcome = lost_arrays(outcome, not_adopted or _not_handed(released[True], gone))
            if outcome.meta.get("held") and judge is None:
                outcome = lost_arrays(outcome, "kanalyze's judge ended, and the outputs it held with it")
            elif outcome.meta.get("held"):
                outcome = Outcome("done", meta=outcome.meta, arrays=with_held(folder, session.judges.of(judge), folder,
                                                                               outcome.meta["held"]),
                                  inputs=outcome.inputs, output=outcome.output)
        outcomes[key] = outcome
    return outcomes


def _not_handed(released: str | dict | None, names: list[str]) -> str:
    """Why arrays the second reference worker held reached neither the judge nor their folder."""
    if isinstance(released, str):   # it ended or did not answer: what it held went with it
        return released
    return f"the second reference worker did not hand over {', '.join(f'`{n}`' for n in sorted(names))}"


def judged_now(session: "Session", result: Result) -> Result | None:
    """`result` as its judge can compare it while the session runs: the reference's outputs,
    float64 ones included, read from what the judge holds (sandbox/held.py).  None where
    some are not held (withheld in a reference worker until `release`, or saved): those are
    read only once the session hands them back."""
    meta, judge = result.reference.meta, session._judge
    held = meta.get("held") or {}
    # (a case of the gates that compare no value with float64 has none: Gate.needs_float64)
    outputs = [meta.get("output")] + ([meta.get("output64")] if result.case.float64 else [])
    if (judge is None or not session.spec["judge_held"] or not isinstance(result.reference.arrays, str)
            or not all(isinstance(o, dict) and o.get("dtypes") for o in outputs)):
        return None
    if any(f"{o.get('prefix')}{i}" not in held for o in outputs for i in range(len(o["dtypes"]))):
        return None
    folder = result.reference.arrays
    view = Outcome("done", meta=meta, arrays=with_held(folder, session.judges.of(judge), folder, held),
                   inputs=result.reference.inputs, output=result.reference.output)
    return Result(result.case, view, result.candidate, nonces=result.nonces)


class Reader:
    """Reads a candidate's case as the case ends, before its worker goes on: what its worker
    shared on the device goes to the reference worker, which holds it for judging (held.py) or,
    where workers hold nothing, saves it for this process; the rest is read from its files (on
    the CPU with KANALYZE_JUDGE_HELD=1, its outputs are held from those files too)."""

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
            if self.session.spec["judge_held"] and outcome.status == "done" \
                    and isinstance(outcome.arrays, (str, ArrayFolder)):
                return self._hold_files(outcome)
            return outcome
        self.count += 1
        folder = os.path.join(self.session.root, f"shared-{self.count}")
        held: dict = {}
        if self.session.spec["judge_held"] and isinstance(shared, dict):
            # What it returned (its outputs, and the inputs after the run that MEM002 compares) is
            # held by the judge; anything else saved as before.
            returned = _returned_dtypes(outcome.meta)
            rest = {key: d for key, d in shared.items() if key not in returned}
            error = self._ingest(rest, folder) if rest else None
            if not error:
                error, held = self._hold({f"{folder}/{key}": d for key, d in shared.items() if key in returned},
                                         None, folder)
        else:
            error = self._ingest(shared, folder)
        if error:
            return Outcome("done", meta={**outcome.meta, "status": "internal", "error": error}, output=outcome.output)
        arrays = ArrayFolder(folder)
        if arrays.nbytes <= READ_NOW_BYTES:
            arrays = arrays.load()
        own = outcome.arrays if isinstance(outcome.arrays, collections.abc.Mapping) else ArrayFolder(outcome.arrays)
        arrays = collections.ChainMap(arrays, own)
        if held:
            arrays = with_held(arrays, self.session.judges.of(self._worker()), folder, held)
        return Outcome("done", meta=outcome.meta, arrays=arrays, output=outcome.output)

    def _hold_files(self, outcome: Outcome) -> Outcome:
        """Have the judge hold the outputs a candidate's worker saved (on the CPU, where nothing is
        shared on the device), read before the worker goes on, as this process would read them."""
        folder = outcome.arrays.folder if isinstance(outcome.arrays, ArrayFolder) else outcome.arrays
        saved = {f"{folder}/{key}": {"folder": folder, "key": key, "dtype": dtype}
                 for key, dtype in _returned_dtypes(outcome.meta).items()}
        error, held = self._hold(None, saved, folder)
        if error:
            return Outcome("done", meta={**outcome.meta, "status": "internal", "error": error}, output=outcome.output)
        arrays = with_held(outcome.arrays, self.session.judges.of(self._worker()), folder, held)
        return Outcome("done", meta=outcome.meta, arrays=arrays, inputs=outcome.inputs, output=outcome.output)

    def _hold(self, exported: dict | None, saved: dict | None, folder: str) -> tuple[str | None, dict]:
        """(why not, or None; {key: dtype and shape} of what the judge now holds under `folder`)."""
        try:
            answer = self._ask_judge({"kind": "adopt", "exported": exported, "saved": saved,
                                      "max_bytes": MAX_CASE_BYTES})
        except Unanswered as exc:
            return f"kanalyze's reference worker could not read the candidate's arrays: {exc}", {}
        if answer.get("error"):
            return str(answer["error"]), {}
        found = answer.get("held") if isinstance(answer.get("held"), dict) else {}
        return None, {name.rsplit("/", 1)[1]: spec for name, spec in found.items()
                      if name.rsplit("/", 1)[0] == folder}

    def _worker(self) -> Worker:
        return self.judge or self.session.reference

    def _ingest(self, shared: dict, folder: str) -> str | None:
        try:
            return self._ask_judge({"kind": "ingest", "tensors": shared, "out": folder,
                                    "max_bytes": MAX_CASE_BYTES}).get("error")
        except Unanswered as exc:
            return f"kanalyze's reference worker could not read the candidate's device arrays: {exc}"


def _returned_dtypes(meta: dict) -> dict[str, str]:
    """{array key: torch dtype} of what a candidate's case record says it returned (its runs'
    outputs and gradients, and the inputs after each run); other arrays stay in their files."""
    found: dict[str, str] = {}
    for run in meta.get("runs") or []:
        if not isinstance(run, dict):
            continue
        for field in ("output", "gradients", "parameter_gradients"):
            output = run.get(field)
            if isinstance(output, dict) and isinstance(output.get("prefix"), str) \
                    and isinstance(output.get("dtypes"), list):
                found.update((f"{output['prefix']}{i}", str(d)) for i, d in enumerate(output["dtypes"]))
        for item in run.get("inputs_after") or []:
            if isinstance(item, dict) and item.get("kind") == "tensor" and isinstance(item.get("key"), str):
                found[item["key"]] = str(item.get("dtype"))
    return found
