"""Where an audit's pairs come from, and what identifies each one.

    from_manifest("pairs.jsonl")            one {"candidate": ..., "problem": ...} a line; paths
                                            relative to the manifest's folder unless absolute;
                                            every other key kept as the pair's metadata
    from_kernelbench(CANDIDATES, DIR)       level1_problem19_*.py pairs with DIR/level1/19_*.py
                                            (the pairing `check --kernelbench` uses)
    from_reference(CANDIDATES, PROBLEM)     every candidate against one problem

A candidate with no problem still becomes a pair (`problem` None, `problem_error`
saying why): the audit gives it a result line instead of silently leaving it out.
`pair_id` hashes the two files' bytes and the options that change verdicts, so a
rerun with the same options recognises finished pairs, and a changed file is a new pair.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kanalyze.dynamic.harness import kernelbench_problem


class PairsError(Exception):
    """Pairs that cannot be read at all (a missing manifest, a line that is not JSON)."""


@dataclass
class Pair:
    candidate: str
    problem: str | None
    metadata: dict = field(default_factory=dict)
    problem_error: str | None = None       # why there is no problem, when there is none


def from_manifest(manifest: str) -> list[Pair]:
    try:
        lines = Path(manifest).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairsError(f"cannot read the manifest {manifest}: {exc}") from exc
    base = Path(manifest).resolve().parent
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PairsError(f"{manifest}:{number}: not a JSON object: {exc}") from exc
        if not isinstance(entry, dict) or not isinstance(entry.get("candidate"), str):
            raise PairsError(f"{manifest}:{number}: each line needs a \"candidate\" path "
                             '(and a "problem" path): {"candidate": "c.py", "problem": "p.py"}')
        metadata = {k: v for k, v in entry.items() if k not in ("candidate", "problem")}
        candidate = str(base / entry["candidate"])
        problem = entry.get("problem")
        if not isinstance(problem, str):
            pairs.append(Pair(candidate, None, metadata, f"{manifest}:{number} names no \"problem\""))
        else:
            pairs.append(Pair(candidate, str(base / problem), metadata))
    return pairs


def missing_file(pair: Pair) -> str | None:
    """The first of the pair's files that does not exist (its candidate, then its problem), or None."""
    for path in (pair.candidate, pair.problem):
        if path is not None and not os.path.exists(path):
            return path
    return None


def candidate_files(paths: list[str]) -> list[str]:
    """The .py files named, or found (sorted) under the folders named."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(str(p) for p in Path(path).rglob("*.py") if p.is_file())
        elif os.path.exists(path):
            files.append(path)
        else:
            raise PairsError(f"candidate path not found: {path}")
    return files


def from_kernelbench(candidates: list[str], directory: str) -> list[Pair]:
    pairs = []
    for candidate in candidate_files(candidates):
        problem = kernelbench_problem(candidate, directory)
        why = None if problem else (f"no KernelBench problem in {directory} matches {os.path.basename(candidate)} "
                                    "(candidates are named level1_problem19_*.py; problems are level1/19_*.py)")
        pairs.append(Pair(candidate, problem, {}, why))
    return pairs


def from_reference(candidates: list[str], problem: str) -> list[Pair]:
    return [Pair(candidate, problem) for candidate in candidate_files(candidates) if not _same(candidate, problem)]


def _same(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def _digest(path: str | None) -> str:
    """The sha256 of a file's bytes, or a digest of why it cannot be read (still stable)."""
    if path is None:
        return "none"
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        return "unreadable:" + hashlib.sha256(f"{os.path.abspath(path)}:{exc.strerror}".encode()).hexdigest()


def pair_id(pair: Pair, options: dict) -> str:
    """16 hex digits from the candidate's and the problem's bytes and `options`
    (the verdict-changing ones: gates, device, kanalyze's version)."""
    key = json.dumps({"candidate": _digest(pair.candidate), "problem": _digest(pair.problem),
                      "options": options}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]
