"""The audit: pairs → skip the finished → run the rest (executor) → journal → summary.

    audit(pairs, AuditOptions(output="DIR", gates=["MEM002"], device="cpu", jobs=2))

Each pair's id (pairs.pair_id) hashes its files and the options that change
verdicts; ids already in DIR/results.jsonl are skipped, so rerunning the same
command resumes.  A pair listed again with the same contents is not run again:
it gets a line of its own, "duplicate", pointing at the first.  The summary is
computed from the journal, as `kanalyze audit --summary DIR` computes it.
The ids are computed here, before any executor sees a pair: the local executor
and the Ray one (`executor_kind="ray"`) give the same ids, and resume each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from kanalyze import __version__
from kanalyze.audit.executor import ExecutorError, LocalExecutor
from kanalyze.audit.journal import RESULTS, Journal, read_records
from kanalyze.audit.pairs import Pair, pair_id
from kanalyze.audit.summary import summarize


@dataclass
class AuditOptions:
    output: str                                   # the folder of results.jsonl and witnesses/
    gates: str | list[str] = "all"                # "all", "targeted", or codes
    device: str = "auto"                          # auto | cpu | cuda
    jobs: int = 1
    pair_seconds: float = 600.0                   # --pair-timeout
    case_seconds: float | None = None             # --case-timeout (one gate case)
    executor: object | None = field(default=None, repr=False)   # built from executor_kind unless given
    executor_kind: str = "local"                  # --executor: local | ray
    address: str | None = None                    # --address: the Ray cluster's
    extend_select: list[str] = field(default_factory=list)   # --extend-select: the static pass's extra codes
    ir: bool = False                              # --ir: the compiled code too
    stop_after: float | None = None               # --stop-after: no pair starts after these seconds
    spares: bool = True                           # --no-spares: no pair's process stands by (executor.py)
    check_builds: str = "shared"                  # --check-builds: shared | own (the check's CUDA C++ build)


def make_executor(options: AuditOptions):
    """The executor `options` name; ExecutorError when it cannot be had (Ray not installed)."""
    if options.executor_kind == "ray":
        if options.stop_after is not None:
            raise ExecutorError("--stop-after is the local executor's (--executor local)")
        from kanalyze.audit.ray_executor import RayExecutor

        return RayExecutor(options.address, options.pair_seconds, per_gpu=options.jobs)
    if options.address is not None:
        raise ExecutorError("--address is a Ray cluster's address: it goes with --executor ray")
    return LocalExecutor(options.jobs, options.pair_seconds, stop_after=options.stop_after, spares=options.spares)


def verdict_options(options: AuditOptions) -> dict:
    """What goes into every pair id: a change of any of these runs the pair again."""
    from kanalyze.dynamic.runner import resolve_mode

    settings = {"gates": options.gates, "device": resolve_mode(options.device), "kanalyze": __version__}
    if options.extend_select:   # only when given: the ids of earlier journals stay the same
        settings["extend_select"] = sorted(options.extend_select)
    if options.ir:
        settings["ir"] = True
    return settings


def _base(pair: Pair, identifier: str, settings: dict, options: AuditOptions) -> dict:
    recorded = {"gates": settings["gates"], "device": settings["device"]}
    if options.check_builds != "shared":   # (only when given: a timing setting, not a verdict's)
        recorded["check_builds"] = options.check_builds
    return {"id": identifier, "candidate": pair.candidate, "problem": pair.problem, "metadata": pair.metadata,
            "options": recorded}


def plan(pairs: list[Pair], options: AuditOptions, finished: dict[str, dict]) -> tuple[list, list[dict]]:
    """The jobs still to run, and the duplicate lines still to write."""
    settings = verdict_options(options)
    witness_dir = os.path.join(os.path.abspath(options.output), "witnesses")
    jobs, duplicates, seen = [], [], {}
    for pair in pairs:
        identifier = pair_id(pair, settings)
        if identifier in seen:
            seen[identifier] += 1
            repeat = f"{identifier}-dup{seen[identifier]}"
            if repeat not in finished:
                duplicates.append({**_base(pair, repeat, settings, options), "status": "duplicate",
                                   "duplicate_of": identifier,
                                   "reason": f"the same candidate and problem contents as pair {identifier}; "
                                             "not run again"})
            continue
        seen[identifier] = 1
        if identifier in finished:
            continue
        spec = {"candidate": os.path.abspath(pair.candidate),
                "problem": os.path.abspath(pair.problem) if pair.problem else None,
                "problem_error": pair.problem_error, "gates": settings["gates"], "device": settings["device"],
                "case_timeout": options.case_seconds, "witness_dir": witness_dir,
                "extend_select": settings.get("extend_select", []), "ir": settings.get("ir", False),
                "check_builds": options.check_builds}
        jobs.append((identifier, {"base": _base(pair, identifier, settings, options), "spec": spec}))
    return jobs, duplicates


def audit(pairs: list[Pair], options: AuditOptions,
          on_start: Callable[[int, int], None] | None = None,
          on_result: Callable[[dict], None] | None = None) -> dict:
    """Run every pair not yet in the journal; return the summary of the whole journal.
    `on_start(to_run, already_done)` and `on_result(record)` feed a progress display."""
    executor = options.executor or make_executor(options)
    with Journal(options.output) as journal:
        finished = journal.load()
        jobs, duplicates = plan(pairs, options, finished)
        for record in duplicates:
            journal.append(record)
        if on_start:
            on_start(len(jobs), len(finished))
        bases = {identifier: job["base"] for identifier, job in jobs}
        for (identifier, _), result in executor.run([(i, job["spec"]) for i, job in jobs]):
            record = {**bases[identifier], **result}
            journal.append(record)
            if on_result:
                on_result(record)
    return summary_of(options.output)


def summary_of(directory: str) -> dict:
    records, _, _ = read_records(os.path.join(directory, RESULTS))
    return summarize(records)
