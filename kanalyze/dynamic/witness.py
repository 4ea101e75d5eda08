"""Witnesses: the replayable record of a confirmed violation, and `kanalyze replay`.

A witness is a JSON file plus an `.npz` beside it (DESIGN.md, "Flag → gate →
witness"): the clause and gate, the kernel, the harness (problem and
candidate), the exact cases (seed, sizes, dtype, input distribution, injected
specials, run settings), the observed and expected values at the first
differing index, the metric, the environment (torch, triton, device or
interpreter, sandbox), and the command that replays it.  The arrays (inputs,
observed, expected) go in the `.npz`.

`replay(path)` re-runs exactly those cases through the same gate: the verdict
is `confirmed` while the violation is still there and `refuted` once fixed.

Integrity.  A witness is signed when it is written: its JSON holds an
`integrity` record, an HMAC-SHA256 over the canonical JSON of the rest of the
record and over the SHA-256 of each file it references (the `.npz`), keyed
with this user's signing key (kanalyze/keys.py).  `replay` checks it before
it runs anything and refuses, with an error and never a verdict, a witness
whose JSON or `.npz` changed after it was written, one that is not signed,
and one signed with another key (`kanalyze replay --trust` skips the check).

What that guarantees: whoever cannot read the key cannot turn a failing
witness into one that replays as fixed by editing it (its cases, injected
specials, harness paths, details or arrays).  What it does not: the
candidate and problem files are not covered (a fix to the candidate is what
replay is for), and a process running as the same user that can read the key
can forge a signature; keeping candidates from reading the key is the
sandbox's job (a scrubbed HOME and a scratch working directory today, which
hide its path but do not confine file reads).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import platform
import time

import numpy as np

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates.base import MAX_WITNESS_ELEMENTS, Verdict, first_index
from kanalyze.dynamic.harness import Harness
from kanalyze.dynamic.held_arrays import Window
from kanalyze.keys import KeyUnavailable, key_id, key_path, mac, user_key

DEFAULT_DIRECTORY = os.path.join(".kanalyze", "witnesses")
FORMAT = 1

ALGORITHM = "hmac-sha256"
RETRUST = "re-run `kanalyze check --dynamic` on the candidate to get a trusted witness"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if np.isfinite(value) else str(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


def write(verdict: Verdict, harness: Harness, environment: dict, directory: str,
          kernel: str | None = None, flags: list[dict] | None = None) -> str:
    """Write the witness of a confirmed verdict, signed; returns the JSON file's path."""
    os.makedirs(directory, exist_ok=True)
    cases = [c.to_dict() for c in verdict.cases]
    digest = hashlib.sha256(json.dumps([os.path.abspath(harness.candidate), verdict.code, cases, verdict.rows],
                                       sort_keys=True).encode()).hexdigest()[:10]
    stem = os.path.splitext(os.path.basename(harness.candidate))[0]
    base = os.path.join(directory, f"{stem}-{verdict.code}-{digest}")
    root = os.path.abspath(os.path.join(directory, os.pardir, os.pardir))
    paths = harness.to_dict()
    paths["candidate"], paths["problem"] = os.path.abspath(harness.candidate), os.path.abspath(harness.problem)
    paths["candidate_relative"] = os.path.relpath(paths["candidate"], root)
    paths["problem_relative"] = os.path.relpath(paths["problem"], root)
    record = {
        "kanalyze_witness": FORMAT,
        "clause": verdict.code,
        "gate": verdict.gate,
        "status": verdict.status,
        "summary": verdict.summary,
        "kernel": {"file": harness.candidate, "function": kernel or harness.callable},
        "harness": paths,
        "cases": cases,
        "details": _jsonable(verdict.details),
        "flags": flags or [],
        "environment": _jsonable({**environment, "python": platform.python_version(),
                                  "platform": platform.platform()}),
        "arrays": os.path.basename(base) + ".npz" if verdict.arrays else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "replay": f"kanalyze replay {base}.json",
    }
    if verdict.arrays:
        # Uncompressed: float data compresses by a few percent at 10-20x the time.  A
        # large array keeps a window around the first failing element: replay
        # regenerates the inputs from the seeds, the arrays are there to be looked at.
        arrays, record["slices"] = failing_slices(verdict.arrays, first_index(verdict.details))
        np.savez(base + ".npz", **arrays)
    # Sign what a reader will load: the record after a trip through JSON
    # (tuples become lists, keys strings), so that both sides hash the same text.
    record = json.loads(json.dumps(record))
    record["integrity"] = sign(record, directory, _key(create=True))
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    return base + ".json"


def failing_slices(arrays: dict[str, np.ndarray], index: list[int] | None) -> tuple[dict, dict]:
    """Arrays of at most MAX_WITNESS_ELEMENTS elements: a larger one keeps the flat window
    around `index` (its start when there is none); returns them and, per trimmed array,
    its shape and the window (`offset`, `count`) so that a reader can place the values."""
    kept, slices = {}, {}
    for name, array in arrays.items():
        if isinstance(array, Window):   # already cut, by the judge that held it (held_arrays.py)
            kept[name] = np.ascontiguousarray(array.values)
            slices[name] = {"shape": list(array.shape), "offset": array.offset, "count": int(array.values.size)}
            continue
        array = np.asarray(array)
        if array.size <= MAX_WITNESS_ELEMENTS:
            kept[name] = array
            continue
        center = 0
        if index is not None and len(index) == array.ndim and all(0 <= i < n for i, n in zip(index, array.shape)):
            center = int(np.ravel_multi_index(tuple(index), array.shape))
        start = max(0, min(center - MAX_WITNESS_ELEMENTS // 2, array.size - MAX_WITNESS_ELEMENTS))
        kept[name] = np.ascontiguousarray(array.reshape(-1)[start:start + MAX_WITNESS_ELEMENTS])
        slices[name] = {"shape": list(array.shape), "offset": start, "count": MAX_WITNESS_ELEMENTS}
    return kept, slices


class WitnessError(Exception):
    """A witness file that cannot be replayed (missing, malformed, its files gone)."""


class WitnessIntegrityError(WitnessError):
    """A witness whose integrity record does not hold: changed, unsigned, or signed with another key."""


# ---------------------------------------------------------------- signing

def _key(create: bool) -> bytes | None:
    """This user's key (kanalyze/keys.py), its problems as a WitnessError."""
    try:
        return user_key(create)
    except KeyUnavailable as exc:
        raise WitnessError(f"{exc}; {RETRUST}") from exc


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _referenced_files(record: dict) -> list[str]:
    """The files beside the JSON that the record names (today: the `.npz` of arrays)."""
    names = [record.get("arrays")]
    return [name for name in names if name]


def _digest(key: bytes, body: dict, files: dict[str, str]) -> str:
    """The HMAC of the record (without its integrity field) and of its files' hashes."""
    return mac(key, _canonical({"record": body, "files": files}))


def sign(record: dict, directory: str, key: bytes) -> dict:
    """The integrity record of `record`, whose referenced files lie in `directory`."""
    body = {k: v for k, v in record.items() if k != "integrity"}
    files = {name: _sha256_file(os.path.join(directory, name)) for name in _referenced_files(body)}
    return {"algorithm": ALGORITHM, "key_id": key_id(key), "files": files, "digest": _digest(key, body, files)}


# ---------------------------------------------------------------- reading and checking

def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as exc:
        raise WitnessError(f"cannot read witness {path}: {exc}") from exc
    if not isinstance(record, dict) or record.get("kanalyze_witness") != FORMAT:
        raise WitnessError(f"{path} is not a kanalyze witness")
    return record


def verify(record: dict, path: str) -> None:
    """Raise WitnessIntegrityError unless `record` (read from `path`) is as this user's kanalyze wrote it."""
    integrity = record.get("integrity")
    if integrity is None:
        raise WitnessIntegrityError(
            f"{path}: the witness is not signed (it has no integrity record: it was written before kanalyze "
            f"signed witnesses, or the record was removed); it cannot be replayed: {RETRUST}")
    _check_shape(integrity, path)
    body = {k: v for k, v in record.items() if k != "integrity"}
    key = _key(create=False)
    if key is None or not _same(key_id(key), integrity["key_id"]):
        mine = f"this user's key is {key_id(key)}" if key else "this user has no witness key yet"
        raise WitnessIntegrityError(
            f"{path}: the witness is signed with another key ({integrity['key_id']}; {mine}, in {key_path()}): "
            f"it was written by another user or machine, or the key was replaced; it cannot be replayed: "
            f"{RETRUST}, or pass --trust to replay it anyway if you trust where the file came from")
    # The signature first: once it holds, the recorded file hashes are the ones written.
    if not _same(_digest(key, body, integrity["files"]), integrity["digest"]):
        difference = ("the JSON record does not match its signature (a value in it was edited: a case's seed, "
                      "sizes or injected special, a harness path, a detail, a recorded hash ...)")
    else:
        difference = _file_difference(body, integrity["files"], os.path.dirname(os.path.abspath(path)))
    if difference is not None:
        raise WitnessIntegrityError(
            f"{path}: the witness was changed after it was written: {difference}; it cannot be replayed: {RETRUST}")


def _check_shape(integrity, path: str) -> None:
    fields = {"algorithm": str, "key_id": str, "files": dict, "digest": str}
    if not isinstance(integrity, dict) or any(not isinstance(integrity.get(k), t) for k, t in fields.items()):
        raise WitnessIntegrityError(
            f"{path}: the witness was changed after it was written: its integrity record is malformed "
            f"(it needs {', '.join(fields)}); it cannot be replayed: {RETRUST}")
    if integrity["algorithm"] != ALGORITHM:
        raise WitnessIntegrityError(
            f"{path}: the witness was changed after it was written: its integrity record names the algorithm "
            f"{integrity['algorithm']!r}, not {ALGORITHM!r}; it cannot be replayed: {RETRUST}")


def _file_difference(body: dict, recorded: dict, directory: str) -> str | None:
    """What differs between the files the record names, as signed, and the files on disk."""
    for name in _referenced_files(body):
        if not isinstance(name, str) or os.path.basename(name) != name or name not in recorded:
            return f"it names the file {name!r}, which is not a file beside it that its signature covers"
        label = f"the .npz {name}" if name.endswith(".npz") else f"the file {name}"
        file = os.path.join(directory, name)
        if not os.path.isfile(file):
            return f"{label} is missing"
        actual = _sha256_file(file)
        if not _same(actual, recorded[name]):
            return f"{label}'s SHA-256 is {actual[:16]}…, not the {str(recorded[name])[:16]}… it was written with"
    return None


def _same(ours: str, theirs) -> bool:
    """A constant-time comparison that a hostile value (not a string, not ASCII) cannot crash."""
    return isinstance(theirs, str) and hmac.compare_digest(ours.encode(), theirs.encode())


def _resolve(record: dict, path: str, key: str) -> str:
    harness = record["harness"]
    if os.path.exists(harness[key]):
        return harness[key]
    root = os.path.abspath(os.path.join(os.path.dirname(path), os.pardir, os.pardir))
    relative = os.path.join(root, harness.get(f"{key}_relative", ""))
    if os.path.exists(relative):
        return relative
    raise WitnessError(f"the witness's {key} file {harness[key]} no longer exists")


def replay(path: str, options=None, trust: bool = False) -> Verdict:
    """Re-run the witness's cases through its gate; the verdict says whether it still fails.

    The witness's integrity is checked first (WitnessIntegrityError when it does not
    hold); `trust` skips that check, for a witness from another machine."""
    from kanalyze.dynamic.runner import run_gates

    record = load(path)
    if not trust:
        verify(record, path)
    try:
        data = {k: v for k, v in record["harness"].items() if not k.endswith("_relative")}
        data["candidate"], data["problem"] = _resolve(record, path, "candidate"), _resolve(record, path, "problem")
        harness = Harness.from_dict(data)
        cases = [Case.from_dict(c) for c in record["cases"]]
    except (KeyError, TypeError) as exc:
        raise WitnessError(f"{path}: malformed witness ({exc})") from exc
    if not cases:
        raise WitnessError(f"{path}: the witness holds no case to replay")
    code = record["clause"]
    run = run_gates(harness, [code], {code: record.get("flags", [])}, options, cases=cases)
    for verdict in run.verdicts:
        if verdict.code == code:
            return verdict
    return run.verdicts[0]
