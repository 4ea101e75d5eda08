"""The local executor: a pair in, a result out; each pair in a child process of its own.

    executor = LocalExecutor(jobs=2, seconds=600)
    for job, result in executor.run(jobs):     # as each pair ends, in any order
        ...

A job is `(id, spec)` (spec: pair.py's).  Each runs `python -m kanalyze.audit.pair`
in a new session, so that killing it after `seconds` (the pair's time limit) ends
what it started too.  A child that crashes, is killed or overruns still gives a
result: {"status": "crashed" | "timeout", "reason": ...}; one that finishes gives
{"status": "done", ...pair.py's result}.  The caller (run.py) writes the journal.
ray_executor.py runs the same `run_one` inside each Ray task (`--executor ray`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterable, Iterator

STDERR_TAIL = 2000


class ExecutorError(Exception):
    """An executor that cannot run at all (Ray not installed or not reachable): exit 2."""


class LocalExecutor:
    def __init__(self, jobs: int = 1, seconds: float = 600.0, command: list[str] | None = None) -> None:
        self.jobs = max(1, jobs)
        self.seconds = seconds
        # The child's command line, SPEC and OUT appended (tests swap in one that crashes).
        self.command = command or [sys.executable, "-m", "kanalyze.audit.pair"]

    def run(self, jobs: Iterable[tuple[str, dict]]) -> Iterator[tuple[tuple[str, dict], dict]]:
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            futures = {pool.submit(self.run_one, job[1]): job for job in jobs}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def run_one(self, spec: dict) -> dict:
        folder = tempfile.mkdtemp(prefix="kanalyze-audit-")
        started = time.monotonic()
        try:
            return {**self._run_in(folder, spec), "wall_seconds": round(time.monotonic() - started, 3)}
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _run_in(self, folder: str, spec: dict) -> dict:
        spec_path, out_path = os.path.join(folder, "spec.json"), os.path.join(folder, "result.json")
        stderr_path = os.path.join(folder, "stderr")
        with open(spec_path, "w", encoding="utf-8") as handle:
            json.dump({**spec, "seconds": self.seconds}, handle)
        with open(stderr_path, "wb") as stderr:
            child = subprocess.Popen([*self.command, spec_path, out_path], stdin=subprocess.DEVNULL,
                                     stdout=stderr, stderr=stderr, start_new_session=True)
            try:
                code = child.wait(timeout=self.seconds)
            except subprocess.TimeoutExpired:
                _kill_group(child)
                return {"status": "timeout",
                        "reason": f"kanalyze's pair worker did not finish within --pair-timeout {self.seconds:g} s"}
            finally:
                _kill_group(child)    # whatever the child left running in its group
        try:
            with open(out_path, encoding="utf-8") as handle:
                return {"status": "done", **json.load(handle)}
        except (OSError, ValueError):
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return {"status": "crashed",
                    "reason": f"kanalyze's pair worker {how} without a result: {_tail(stderr_path) or 'no output'}"}


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - STDERR_TAIL))
            lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
