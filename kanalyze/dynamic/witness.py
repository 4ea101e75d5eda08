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
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time

import numpy as np

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates.base import Verdict
from kanalyze.dynamic.harness import Harness

DEFAULT_DIRECTORY = os.path.join(".kanalyze", "witnesses")
FORMAT = 1


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
    """Write the witness of a confirmed verdict; returns the JSON file's path."""
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
        # Uncompressed: float data compresses by a few percent at 10-20x the time
        # (seconds for a GPU-sized witness).
        np.savez(base + ".npz", **verdict.arrays)
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    return base + ".json"


class WitnessError(Exception):
    """A witness file that cannot be replayed (missing, malformed, its files gone)."""


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as exc:
        raise WitnessError(f"cannot read witness {path}: {exc}") from exc
    if not isinstance(record, dict) or record.get("kanalyze_witness") != FORMAT:
        raise WitnessError(f"{path} is not a kanalyze witness")
    return record


def _resolve(record: dict, path: str, key: str) -> str:
    harness = record["harness"]
    if os.path.exists(harness[key]):
        return harness[key]
    root = os.path.abspath(os.path.join(os.path.dirname(path), os.pardir, os.pardir))
    relative = os.path.join(root, harness.get(f"{key}_relative", ""))
    if os.path.exists(relative):
        return relative
    raise WitnessError(f"the witness's {key} file {harness[key]} no longer exists")


def replay(path: str, options=None) -> Verdict:
    """Re-run the witness's cases through its gate; the verdict says whether it still fails."""
    from kanalyze.dynamic.runner import run_gates

    record = load(path)
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
