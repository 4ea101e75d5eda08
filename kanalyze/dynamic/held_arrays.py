"""Arrays the judge holds, seen from kanalyze (parent side; numpy only).

On a GPU the reference's outputs and the candidate's stay on the device, in
the session's judge (sandbox/held.py).  Here each is a `HeldArray`: its name,
dtype and shape, and a way to ask.  compare.py sends its comparisons to the
judge when every array they read is held there (`held_by`), and gets a few
numbers back; a witness takes a window of values around the failing element
(`window`).  Any other use of the values (a gate that reads a whole array with
numpy) fetches that one array into a file of the session's (`values`): it
works everywhere, at the cost of the disk the judge was there to save.

Asking can fail (the judge ended, or did not answer in time): that is
kanalyze's failure, raised as CannotJudge, and the gate says `unconfirmed`.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import shutil
import threading
from collections.abc import Mapping

import numpy as np

from kanalyze.dynamic.results import CannotJudge
from kanalyze.dynamic.sandbox.transport import ArrayFolder, storage_dtype


class Judge:
    """kanalyze's side of the worker that holds a session's arrays."""

    def __init__(self, worker, seconds: float, root: str) -> None:
        self.worker, self.seconds, self.root = worker, seconds, root
        self.asked = 0           # requests answered (the benchmark's account)
        self.whole = 0           # whole arrays fetched (a gate read values with numpy)
        self.whole_bytes = 0
        self._files = itertools.count(1)
        self._lock = threading.Lock()   # gates judge on threads of their own (runner.py): one request at a time
        # Answers kept: held arrays never change, so a summary asked again (a gate judged as its cases
        # ended, then with the run's other gates: streaming.py) is the one given, even where the
        # judge has let go of the arrays since.
        self._answers: dict[str, dict] = {}
        self._windows: dict[tuple, np.ndarray] = {}
        self.dropped = self.dropped_bytes = 0

    def ask(self, request: dict) -> dict:
        key = json.dumps(request, sort_keys=True, default=str) if request.get("op") in KEPT else None
        if key is not None and key in self._answers:
            return self._answers[key]
        reply = self._ask(request)
        if key is not None:
            self._answers[key] = reply
        return reply

    def drop(self, names: list[str]) -> None:
        """Have the judge let go of these arrays (their summaries stay known, `ask`)."""
        if names:
            asked = self.asked
            try:
                reply = self._ask({"op": "drop", "names": sorted(names)})
            finally:
                self.asked = asked   # (not one of the gates' questions)
            self.dropped += int(reply.get("dropped") or 0)
            self.dropped_bytes += int(reply.get("bytes") or 0)

    def _ask(self, request: dict) -> dict:
        from kanalyze.dynamic.sandbox.dispatch import Unanswered, ask

        if self.worker is None:
            raise CannotJudge("kanalyze's judge has ended: the arrays it held are gone")
        try:
            with self._lock:
                answer = ask(self.worker, {"kind": "judge", "request": request}, self.seconds)
        except Unanswered as exc:
            raise CannotJudge(f"kanalyze's judge did not answer: {exc}") from exc
        reply = answer.get("answer")
        if not isinstance(reply, dict) or reply.get("error"):
            why = reply.get("error") if isinstance(reply, dict) else "no answer"
            raise CannotJudge(str(why)[:400])
        self.asked += 1
        return reply

    def stats(self) -> dict:
        """Where the judge kept its arrays (sandbox/held.py `_stats`); {} where it cannot say."""
        asked = self.asked
        try:
            reply = self._ask({"op": "stats"})
        except CannotJudge:
            return {}
        finally:
            self.asked = asked   # (the account's own question is not one of the gates')
        return {k: v for k, v in reply.items() if k.startswith("held_") and type(v) is int}

    def fetch(self, name: str, start: int = 0, count: int | None = None) -> np.ndarray:
        """The flat window of `count` elements from `start` (None: the whole array).  A window is
        kept: a witness's is fetched as its gate is judged and again for the witness."""
        if count is None:
            return self._fetch(name, start, count)
        if (name, start, count) not in self._windows:
            self._windows[(name, start, count)] = self._fetch(name, start, count)
        return self._windows[(name, start, count)].copy()   # (what a caller does to it stays its own)

    def _fetch(self, name: str, start: int, count: int | None) -> np.ndarray:
        folder = os.path.join(self.root, f"held-{next(self._files)}")
        request = {"op": "save", "name": name, "path": folder}
        request.update({"whole": True} if count is None else {"start": start, "count": count})
        self.ask(request)
        arrays = ArrayFolder(folder)
        if count is None:
            self.whole += 1
            self.whole_bytes += arrays.nbytes
        if "values" not in arrays:
            shutil.rmtree(folder, ignore_errors=True)
            raise CannotJudge("kanalyze's judge saved no values")
        if count is None and arrays.nbytes > WHOLE_IN_MEMORY:
            return arrays["values"]   # memory-mapped: the file stays until the session's folder goes
        values = np.array(arrays["values"])
        shutil.rmtree(folder, ignore_errors=True)
        return values


class Judges:
    """A session's handles on the arrays its reference workers hold (none where they hold none)."""

    def __init__(self, enabled: bool, seconds: float, root: str) -> None:
        self.enabled, self.seconds, self.root = enabled, seconds, root
        self._by_worker: dict[int, Judge] = {}

    def of(self, worker) -> Judge | None:
        if not self.enabled or worker is None:
            return None
        if id(worker) not in self._by_worker:
            self._by_worker[id(worker)] = Judge(worker, self.seconds, self.root)
        return self._by_worker[id(worker)]

    def account(self) -> dict:
        """What the gates asked of held arrays: requests, and whole arrays fetched (and their bytes);
        and where the judges kept them (`held_*`: the most on the device and in host memory at
        once, arrays the device's reserve moved to host memory, arrays saved to files instead)."""
        judges = list(self._by_worker.values())
        if not judges:
            return {}
        account = {"asked": sum(j.asked for j in judges), "whole_arrays": sum(j.whole for j in judges),
                   "whole_bytes": sum(j.whole_bytes for j in judges)}
        if any(j.dropped for j in judges):   # let go of as their cases were judged (streaming.py)
            account.update(dropped=sum(j.dropped for j in judges), dropped_bytes=sum(j.dropped_bytes for j in judges))
        for judge in judges:
            for key, value in judge.stats().items():
                account[key] = merge_account(key, account.get(key, 0), value)
        return account

    def close(self) -> None:
        """End the workers that hold arrays (the session is over: its verdicts are judged)."""
        for judge in self._by_worker.values():
            if judge.worker is not None:
                judge.worker.close()
                judge.worker = None


def merge_account(key: str, total: int, value: int) -> int:
    """Two judges' (or sessions') figures for one key of the account: the larger peak, else the sum."""
    return max(total, value) if key.endswith("_peak") else total + value


WHOLE_IN_MEMORY = 512 * 2 ** 20   # a whole array fetched up to this size is read into memory
KEPT = {"values", "calibrate", "bits", "classes", "finite", "unwritten", "flushed"}   # summaries: Judge.ask keeps them


class HeldArray:
    """One held array, as numpy would see it (its storage dtype: raw bits for bfloat16 and the
    float8 types, as transport.py saves them)."""

    def __init__(self, judge: Judge, name: str, dtype: str, shape) -> None:
        self.judge, self.name, self.torch_dtype = judge, name, dtype
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(storage_dtype(dtype))
        self._values: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def window(self, start: int, count: int) -> np.ndarray:
        """The flat values from `start` (at most `count` of them)."""
        return self.judge.fetch(self.name, start, count).view(self.dtype)

    def values(self) -> np.ndarray:
        """Every value (fetched once, into a file of the session's where it is large)."""
        if self._values is None:
            self._values = self.judge.fetch(self.name).view(self.dtype).reshape(self.shape)
        return self._values

    def __array__(self, dtype=None, copy=None):
        values = self.values()
        return values if dtype is None else values.astype(dtype)

    def __getitem__(self, index):
        flat = _flat_index(index, self.shape)
        if flat is not None and self._values is None:   # one element: no need for the rest
            return self.window(flat, 1).reshape(())
        return self.values()[index]

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") or attribute in ("judge", "name", "shape", "dtype", "torch_dtype", "_values"):
            raise AttributeError(attribute)
        return getattr(self.values(), attribute)   # reshape, view, astype...: numpy's, on the values

    def __repr__(self) -> str:
        return f"HeldArray({self.name!r}, {self.torch_dtype}{list(self.shape)})"


def _flat_index(index, shape: tuple) -> int | None:
    """The flat position of a full integer index, or None."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) != len(shape) or not all(isinstance(i, (int, np.integer)) for i in index):
        return None
    if not all(-n <= int(i) < n for i, n in zip(index, shape)):
        raise IndexError(f"index {list(index)} is out of bounds for shape {list(shape)}")
    return int(np.ravel_multi_index(tuple(int(i) % n for i, n in zip(index, shape)), shape)) if shape else 0


def held_arrays(judge: Judge, folder: str, described: dict) -> dict[str, HeldArray]:
    """{key: HeldArray} for what the judge holds under "FOLDER/KEY" (`described`: key → dtype, shape)."""
    arrays = {}
    for key, spec in (described or {}).items():
        if isinstance(spec, dict) and isinstance(spec.get("dtype"), str) and isinstance(spec.get("shape"), list):
            arrays[key] = HeldArray(judge, f"{folder}/{key}", spec["dtype"], spec["shape"])
    return arrays


def with_held(arrays, judge: Judge, folder: str, described: dict) -> Mapping:
    """A case's arrays: those held by the judge, then the rest as before (a folder, or a mapping)."""
    held = held_arrays(judge, folder, described)
    if not held:
        return arrays
    rest = arrays if isinstance(arrays, Mapping) else ArrayFolder(arrays)
    return CaseArrays(held, rest)


class MissingArray(CannotJudge, KeyError):
    """An array a case should have that kanalyze neither holds nor saved: kanalyze's failure."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CaseArrays(collections.ChainMap):
    """What the judge holds, then the case's files; a name in neither is kanalyze's failure,
    said in words (MissingArray), never a bare KeyError."""

    def __missing__(self, key):
        raise MissingArray(f"kanalyze could not find the case's array `{key}`: its judge does not hold it "
                           f"and its folder does not have it")


def held_names(arrays) -> list[str]:
    """The names of the held arrays among a case's arrays (`with_held`'s mapping), the rest unread."""
    if isinstance(arrays, collections.ChainMap):
        return [name for part in arrays.maps for name in held_names(part)]
    if isinstance(arrays, dict):
        return [array.name for array in arrays.values() if isinstance(array, HeldArray)]
    return []


def held_by(*arrays) -> Judge | None:
    """The judge holding every one of `arrays`, or None (some are not held, or not by one judge)."""
    judges = {id(a.judge): a.judge for a in arrays if isinstance(a, HeldArray)}
    if len(judges) != 1 or not all(isinstance(a, HeldArray) for a in arrays):
        return None
    return next(iter(judges.values()))


class Window:
    """A witness's window of a held array: the values and where they lie (witness.failing_slices)."""

    def __init__(self, values: np.ndarray, shape: tuple, offset: int) -> None:
        self.values, self.shape, self.offset = values, shape, offset


def windows(arrays: dict, index, elements: int) -> dict:
    """A verdict's arrays with each held one cut to a Window of `elements` values around the flat
    position of `index` (its start where there is none), while the judge still holds them."""
    out = {}
    for name, array in arrays.items():
        if not isinstance(array, HeldArray):
            out[name] = array
            continue
        if array.size <= elements:
            out[name] = array.window(0, array.size).reshape(array.shape)
            continue
        center = 0
        if index is not None and len(index) == array.ndim and all(0 <= i < n for i, n in zip(index, array.shape)):
            center = int(np.ravel_multi_index(tuple(index), array.shape))
        start = max(0, min(center - elements // 2, array.size - elements))
        out[name] = Window(array.window(start, elements), array.shape, start)
    return out


__all__ = ["HeldArray", "Judge", "Judges", "Window", "held_arrays", "held_by", "held_names", "windows", "with_held"]
