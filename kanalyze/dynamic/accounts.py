"""What a worker says of itself, as the session keeps it (parent side; stdlib only).

A worker's `ready` message and its per-case `seconds` are its own account: a
candidate's worker could send anything there, so only what is plausible is kept,
and none of it is ever judged.
"""

from __future__ import annotations

import math


def describe_ready(ready: dict, role: str) -> dict:
    """What a worker's `ready` message says, as the session's environment keeps it: versions,
    confinement, numerics, the candidate's import error, where its start went."""
    if not ready:
        return {}
    out = {"versions": ready.get("versions", {}), f"{role}_confinement": ready.get("confinement", {}),
           f"{role}_numerics": ready.get("numerics", {})}
    if role == "candidate" and ready.get("import_error"):
        out["candidate_import_error"] = ready["import_error"]
    if isinstance(ready.get("seconds"), dict):   # where the worker's start went (process.py, worker.py)
        out[f"{role}_start_seconds"] = dict(durations(ready["seconds"]))
    return out


def durations(steps) -> list[tuple[str, float]]:
    """A worker's account of its steps, as far as it is plausible: at most 32 short names with
    finite, non-negative durations under a day (a candidate's worker could send anything)."""
    if not isinstance(steps, dict):
        return []
    return [(step, float(value)) for step, value in list(steps.items())[:32]
            if isinstance(step, str) and len(step) < 40 and type(value) in (int, float)
            and math.isfinite(value) and 0 <= value < 86400]
