"""The local executor: a pair in, a result out; each pair in a child process of its own.

    executor = LocalExecutor(jobs=2, seconds=600)
    for job, result in executor.run(jobs):     # as each pair ends, in any order
        ...

A job is `(id, spec)` (spec: pair.py's).  Each runs `python -m kanalyze.audit.pair`
in a new session, so that killing it after `seconds` (the pair's time limit) ends
what it started too.  A child that crashes, is killed or overruns still gives a
result: {"status": "crashed" | "timeout", "reason": ...}; one that finishes gives
{"status": "done", ...pair.py's result}.  The caller (run.py) writes the journal.

Pairs run side by side share the device, the memory and the disk.

* A pair starts beside others only while the temporary directory's disk has room for one
  more pair at KernelBench's real sizes: 20 GiB free (three level-1 pairs side by side
  wrote 49 GB of inputs and outputs on an H200, a float64 output alone 16 GiB).  Counted in
  bytes, not as a share of the disk: on a large shared disk with a quota, a quarter of its
  size was the whole quota, and pairs ran one at a time.
* A pair that ran short beside others (`starved`: a CUDA or host out-of-memory, a full
  disk) is not written then: its run decided nothing about the candidate, the shortage may
  have been its neighbours'.  No new pair starts; once the running ones have ended it runs
  again alone, and its line says so (`"retried"`); then the run goes on with one pair fewer
  side by side.  So does a pair that reached a time limit beside others (`slowed`: the
  candidate's case, its import, the allclose check or the pair's own limit), since they
  may have kept the device or the CPUs busy, without narrowing the run: a candidate that
  hangs hangs alone too (CUDA-L1's level2_43 did not finish within 120 s beside three
  other pairs on an H100, nor alone on an H200).  So a journal cut short (a time limit, a machine taken back) holds every
  pair that ran, and a corpus of large problems settles on the width the machine holds.
* With `stop_after` (`--stop-after SECONDS`) no pair starts after that many seconds: the
  running ones end and are written, a held-back one runs again, and the same command
  resumes the rest.  A run on borrowed time keeps what it ran, where a kill loses the pairs
  in flight.
* Spares: while pairs run, as many processes as will start next start now (`pair.py
  --standby`: their zygotes import torch and triton, they import kanalyze) and wait; a pair
  is handed to one (SPEC and OUT on its stdin), or to a fresh process where none stands by or
  it ended meanwhile.  Those left when the run ends are killed.

ray_executor.py runs the same `run_one` inside each Ray task (`--executor ray`), without spares.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Iterable, Iterator

from kanalyze.audit.child import kill_group
from kanalyze.audit.pair import STANDBY, last_step
from kanalyze.dynamic.causes import SHORTAGES, shortage

STDERR_TAIL = 2000


class ExecutorError(Exception):
    """An executor that cannot run at all (Ray not installed or not reachable): exit 2."""


# A pair starts beside others only with this much of the temporary directory's disk free.
ROOM_BYTES = 20 * 2 ** 30


def disk_room() -> bool:
    """Whether the temporary directory's disk has room for one more pair beside the others."""
    try:
        usage = shutil.disk_usage(tempfile.gettempdir())
    except OSError:
        return True   # unknown: the pair's own NoRoom check still stops it cleanly
    return usage.free >= ROOM_BYTES


class Spare:
    """A pair's process started before its turn (`pair.py --standby`), in its own folder."""

    def __init__(self, command: list[str], device: str) -> None:
        self.device = device
        self.folder = tempfile.mkdtemp(prefix="kanalyze-audit-")
        try:
            with open(os.path.join(self.folder, "stderr"), "wb") as stderr:
                self.process = subprocess.Popen([*command, STANDBY, device], stdin=subprocess.PIPE, stdout=stderr,
                                                stderr=stderr, start_new_session=True)
        except OSError:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def hand(self, spec_path: str, out_path: str) -> bool:
        """Give it its pair; False when it has ended meanwhile (the pair then starts fresh)."""
        if self.process.poll() is not None:
            return False
        try:
            self.process.stdin.write((json.dumps([spec_path, out_path]) + "\n").encode())
            self.process.stdin.close()
        except OSError:
            return False
        return True

    def discard(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        kill_group(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)


class LocalExecutor:
    def __init__(self, jobs: int = 1, seconds: float = 600.0, command: list[str] | None = None,
                 room=disk_room, stop_after: float | None = None, spares: bool | None = None) -> None:
        self.jobs = max(1, jobs)
        self.seconds = seconds
        self.stop_after = stop_after         # --stop-after: no pair starts after this many seconds
        # The child's command line, SPEC and OUT appended (tests swap in one that crashes).
        self.command = command or [sys.executable, "-m", "kanalyze.audit.pair"]
        self.room = room                     # () -> bool: may one more pair start beside the others
        # Spares (`run` only): the next pairs' processes start while these run (pair.py --standby);
        # by default with kanalyze's own pair command.
        self.spares = command is None if spares is None else spares
        self._spares: list[Spare] = []
        self._spares_lock = threading.Lock()
        self._running = 0
        self._turn = threading.Condition()

    def run(self, jobs: Iterable[tuple[str, dict]]) -> Iterator[tuple[tuple[str, dict], dict]]:
        pending = deque(jobs)
        deadline = time.monotonic() + self.stop_after if self.stop_after is not None else None
        width = self.jobs                       # pairs side by side; one fewer after each shortage
        running: dict[Future, tuple[tuple[str, dict], bool]] = {}
        short: deque[tuple[tuple[str, dict], str]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            while pending or running or short:
                if short and not running:       # alone now: nothing else holds the device, the memory or the disk
                    job, shortage = short.popleft()
                    result = self.run_one(job[1])
                    yield job, {**result, "retried": f"ran again alone: beside other pairs it ran short ({shortage})"}
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    pending.clear()             # the rest waits for a rerun, which resumes the journal
                while pending and not short and len(running) < width:
                    job = pending.popleft()
                    spare = self._take_spare(job[1].get("device"))
                    running[pool.submit(self.run_one, job[1], spare)] = job, width > 1   # (may have neighbours)
                self._keep_spares(min(width, len(pending)) if not short else 0, pending)
                if not running:
                    continue
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    job, beside_others = running.pop(future)
                    result = future.result()
                    shortage = starved(result) if beside_others else None
                    late = slowed(result) if beside_others else None
                    if shortage or late:
                        short.append((job, shortage or late))
                        width = max(1, width - 1) if shortage else width
                    else:
                        yield job, result
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self._keep_spares(0, ())

    def _take_spare(self, device: str | None) -> Spare | None:
        with self._spares_lock:
            for spare in self._spares:
                if spare.device == device:
                    self._spares.remove(spare)
                    return spare
        return None

    def _keep_spares(self, count: int, pending) -> None:
        """`count` spares standing by for the next pairs' devices; the rest discarded."""
        if not self.spares:
            return
        devices = [job[1].get("device") for job in list(pending)[:count] if job[1].get("device") in ("cpu", "cuda")]
        with self._spares_lock:
            keep, extra = [], list(self._spares)
            for device in devices:
                match = next((spare for spare in extra if spare.device == device), None)
                if match is not None:
                    extra.remove(match)
                    keep.append(match)
                    continue
                try:
                    keep.append(Spare(self.command, device))
                except OSError:   # (no process could start now: the pair starts fresh at its turn)
                    pass
            self._spares = keep
        for spare in extra:
            spare.discard()

    def run_one(self, spec: dict, spare: Spare | None = None) -> dict:
        with self._turn:   # alone, or beside others while the disk has room
            while self._running and not self.room():
                self._turn.wait(timeout=2.0)
            self._running += 1
        folder = spare.folder if spare is not None else tempfile.mkdtemp(prefix="kanalyze-audit-")
        started = time.monotonic()
        try:
            return {**self._run_in(folder, spec, spare), "wall_seconds": round(time.monotonic() - started, 3)}
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            with self._turn:
                self._running -= 1
                self._turn.notify_all()

    def _run_in(self, folder: str, spec: dict, spare: Spare | None) -> dict:
        spec_path, out_path = os.path.join(folder, "spec.json"), os.path.join(folder, "result.json")
        stderr_path = os.path.join(folder, "stderr")
        with open(spec_path, "w", encoding="utf-8") as handle:
            json.dump({**spec, "seconds": self.seconds}, handle)
        with open(stderr_path, "ab") as stderr:
            if spare is not None and spare.hand(spec_path, out_path):
                child = spare.process
            else:   # none stood by, or it ended while it did: a fresh process
                if spare is not None:
                    kill_group(spare.process)
                child = subprocess.Popen([*self.command, spec_path, out_path], stdin=subprocess.DEVNULL,
                                         stdout=stderr, stderr=stderr, start_new_session=True)
            try:
                code = child.wait(timeout=self.seconds)
            except subprocess.TimeoutExpired:
                kill_group(child)
                step = last_step(out_path)
                where = f" (its last step, {step['seconds']:g} s in: {step['step']})" if step else ""
                return {"status": "timeout", **({"last_step": step} if step else {}),
                        "reason": f"kanalyze's pair worker did not finish within --pair-timeout {self.seconds:g} s{where}"}
            finally:
                kill_group(child)    # whatever the child left running in its group
        try:
            with open(out_path, encoding="utf-8") as handle:
                return {"status": "done", **json.load(handle)}
        except (OSError, ValueError):
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return {"status": "crashed",
                    "reason": f"kanalyze's pair worker {how} without a result: {_tail(stderr_path) or 'no output'}"}


def starved(result: dict) -> str | None:
    """The first shortage a pair's result names (its verdicts, its allclose check, its own
    crash: dynamic/causes.py), or None.  A candidate's own out-of-memory counts too: beside other
    pairs it may be theirs."""
    return _first_named(result, SHORTAGES)


# How a time limit reads in a pair's result: the candidate's case or import (sandbox/dispatch.py,
# process.py), the allclose check (allclose.py), the pair's own limit (above).
TIME_LIMITS = ("did not finish within", "no verdict within")


def slowed(result: dict) -> str | None:
    """The first time limit a pair's result names, as "of time: ...", or None.  Beside other pairs
    it may have been theirs: a GPU, the CPUs or a build they kept busy."""
    found = _first_named(result, TIME_LIMITS)
    return f"of time: {found}" if found else None


def _first_named(result: dict, markers: tuple[str, ...]) -> str | None:
    """The first stretch of a pair's result that names one of `markers`: its own end, its
    allclose check, its verdicts (a candidate's words too), its baseline (with no gate flagged,
    the only word)."""
    texts = [result.get("reason") or "", (result.get("allclose") or {}).get("detail") or ""]
    texts += [v.get("summary") or "" for v in (result.get("verdicts") or {}).values()]
    texts.append((result.get("baseline") or {}).get("summary") or "")
    for text in texts:
        found = shortage(text, markers)
        if found:
            return found
    return None


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - STDERR_TAIL))
            lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
