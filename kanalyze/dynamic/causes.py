"""What a failure's words say of its cause (stdlib only).

A run can fail for want of what the machine gives it: device or host memory, disk.  kanalyze's
own workers share both with the candidate (its reference workers hold the problem's models,
outputs and float64 copies beside it; an audit runs pairs side by side), and on the CPU a worker
runs under kanalyze's own memory limit (`Limits.memory_bytes`).  So a candidate that ran short
of disk, or of memory where the problem itself needs a fair share of what the run gives
(`SHARE`), has no clause confirmed by it (results.Result.kanalyze_failure); one that needs many
times what the problem needs (allocating without bound, say) ran short by its own doing.  An
audit runs any pair that ran short beside others again alone (audit/executor.starved).
"""

from __future__ import annotations

# How a shortage of device memory, host memory or disk reads (torch's and numpy's errors, numpy's
# memory maps included: "Not enough free space to write"; a worker's end by the kernel's OOM
# killer; rundir.py's NoRoom).
MEMORY = ("OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory", "MemoryError",
          "can't allocate memory", "Cannot allocate memory", "killed: out of memory?")
DISK = ("NoRoom", "No space left on device", "Not enough free space")
SHORTAGES = MEMORY + DISK
# kanalyze's own workers may hold this many times the problem's bytes (its model, inputs and
# outputs) beside a candidate: two reference workers, each with models and float64 copies.
SHARE = 8


def shortage(text: str, markers: tuple[str, ...] = SHORTAGES) -> str | None:
    """The stretch of `text` that names a shortage (one of `markers`), or None."""
    for marker in markers:
        at = text.find(marker)
        if at >= 0:
            start = max(0, at - 60)
            if start:   # from a word's start
                start = min(text.find(" ", start) + 1 or start, at)
            return text[start: at + 140].strip()
    return None


def the_runs_shortage(text: str, problem_bytes, budget_bytes) -> str | None:
    """The shortage `text` names when it is the run's, not the candidate's own doing: any of
    disk; of memory where `SHARE` times what the problem needs reaches the memory the run gives
    (`budget_bytes`: a candidate's limit on the CPU, the device's memory on a GPU); None else."""
    found = shortage(text)
    if found is None or any(marker in found for marker in DISK):
        return found
    known = all(type(n) is int and n > 0 for n in (problem_bytes, budget_bytes))
    return found if known and problem_bytes * SHARE >= budget_bytes else None
