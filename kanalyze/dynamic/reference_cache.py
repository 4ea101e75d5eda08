"""Reference results kept for the rest of the process: one problem, many candidates.

The reference side of a case depends only on the problem file, the device
mode and the case's inputs (sizes, seed, distribution, specials, dtype), never
on the candidate: a plant and its twin, or a corpus of candidates for one
KernelBench problem, share it.  Finished reference outcomes (and size plans)
are kept here, their arrays moved into a folder that lives until the process
exits, so that a later session starts no reference worker at all when every
case it needs is known.  Keys include the problem file's mtime and size: an
edited problem is recomputed.  `hits` and `misses` count the outcome look-ups (how a
long-lived caller, kanalyze.verifier, shows that a later candidate reused the references);
`forget(problem)` drops one problem's references and their files.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid

from kanalyze.dynamic.harness import Harness
from kanalyze.dynamic.sandbox import rundir
from kanalyze.dynamic.sandbox.process import Outcome


class ReferenceCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: str | None = None
        self._inputs: str | None = None
        self._outcomes: dict[tuple, tuple[Outcome, bool]] = {}
        self._plans: dict[tuple, dict] = {}   # (problem, max_numel) -> its plan (planning.py)
        self._ready: dict[tuple, dict] = {}
        self.hits = 0        # outcome look-ups answered from the cache
        self.misses = 0      # ... and those the reference worker had to compute

    def clear(self) -> None:
        """Forget every reference (the benchmark measures each start method from the same state)."""
        with self._lock:
            self._outcomes.clear()
            self._plans.clear()
            self._ready.clear()

    def forget(self, problem: str) -> None:
        """Drop every reference of the problem file at `problem` (any mode), and their arrays."""
        path = os.path.abspath(problem)
        with self._lock:
            outcomes = [key for key in self._outcomes if key[0][0] == path]
            kept = [self._outcomes.pop(key)[0] for key in outcomes]
            for key in [key for key in self._plans if key[0][0] == path]:
                del self._plans[key]
            for key in [key for key in self._ready if key[0] == path]:
                del self._ready[key]
        for outcome in kept:
            for folder in (outcome.arrays, outcome.inputs):
                if isinstance(folder, str):
                    shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _problem(harness: Harness, mode: str) -> tuple:
        path = os.path.abspath(harness.problem)
        stat = os.stat(path)
        return (path, stat.st_mtime_ns, stat.st_size, mode, harness.kind, tuple(harness.dtypes))

    def _folder(self) -> str:
        if self._root is None:
            self._root = rundir.scratch("references-")
        return self._root

    def inputs_folder(self) -> str:
        """Where kept inputs go: apart from the kept outputs, since a candidate's worker is shown
        this folder (read-only) and never the other (mounts.py)."""
        if self._inputs is None:
            self._inputs = rundir.scratch("reference-inputs-")
        return self._inputs

    # ------------------------------------------------------------ plans

    def plan(self, harness: Harness, mode: str, max_numel: int) -> dict | None:
        with self._lock:
            return self._plans.get((self._problem(harness, mode), max_numel))

    def put_plan(self, harness: Harness, mode: str, max_numel: int, plan: dict) -> None:
        """A problem's plan (planning.py): its sizes, and the inputs' count and growth there."""
        with self._lock:
            self._plans[(self._problem(harness, mode), max_numel)] = dict(plan)

    # ------------------------------------------------------------ outcomes

    def get(self, harness: Harness, mode: str, input_key: str, record_ops: bool,
            float64: bool = True) -> Outcome | None:
        """A kept outcome of `input_key`, where it recorded the ops if `record_ops` and computed
        (or tried) the float64 reference if `float64`; None else."""
        with self._lock:
            found = self._outcomes.get((self._problem(harness, mode), input_key))
            if found is None or (record_ops and not found[1]) or (float64 and not _tried_float64(found[0])):
                self.misses += 1
                return None
            self.hits += 1
        return found[0]

    def put(self, harness: Harness, mode: str, input_key: str, record_ops: bool, outcome: Outcome) -> Outcome:
        """Keep a finished outcome (not a timeout or a crash); returns the kept copy, to be used
        instead of `outcome` (whose arrays file moves into the cache)."""
        if outcome.status != "done":
            return outcome
        with self._lock:
            kept = Outcome(outcome.status, outcome.meta, None, outcome.detail, outcome.output)
            kept.arrays = self._keep(outcome.arrays, self._folder())
            kept.inputs = self._keep(outcome.inputs, self.inputs_folder())
            self._outcomes[(self._problem(harness, mode), input_key)] = (kept, record_ops)
        return kept

    @staticmethod
    def _keep(path, folder: str) -> str | None:
        """The folder of arrays moved into `folder` (GPU-sized inputs: gigabytes, not copied); callers
        use the kept path."""
        if not isinstance(path, str) or not os.path.isdir(path):
            return None
        kept = os.path.join(folder, uuid.uuid4().hex)
        try:
            os.replace(path, kept)
        except OSError:
            shutil.copytree(path, kept)
        return kept

    def ready(self, harness: Harness, mode: str) -> dict:
        with self._lock:
            return dict(self._ready.get(self._problem(harness, mode), {}))

    def put_ready(self, harness: Harness, mode: str, ready: dict) -> None:
        if ready:
            with self._lock:
                self._ready[self._problem(harness, mode)] = ready


def _tried_float64(outcome: Outcome) -> bool:
    meta = outcome.meta if isinstance(outcome.meta, dict) else {}
    return "output64" in meta or "output64_error" in meta


REFERENCES = ReferenceCache()
