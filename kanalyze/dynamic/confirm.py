"""From static findings to verdicts: which gates run on which file, and what the findings become.

`confirm(findings, files, options, names)` is what `check --dynamic` calls
(through check.run_dynamic):

* each candidate file gets its harness (harness.py); a flagged file without
  one keeps its flags `unconfirmed`, and the message says how to add one;
* targeted mode runs the gates of the clauses flagged in the file, and the
  baseline (the problem's own inputs) even where nothing is flagged; `all`
  runs every gate on every file that has a harness;
* files run in parallel (each in its own workers);
* a verdict moves every flag of its clause in the file to `confirmed` (with
  the witness, written under `.kanalyze/witnesses/`), `refuted` or
  `unconfirmed`, and records a one-line summary in `evidence["gate_result"]`;
* a violation a gate confirms where no detector fired becomes a new finding,
  `confirmed`, with no static evidence (these measure static recall).

Imports the data model and the dynamic side only.
"""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

from kanalyze.dynamic import containment
from kanalyze.dynamic import witness as witnesses
from kanalyze.dynamic.gates import gates_by_code
from kanalyze.dynamic.gates.base import flag_evidence
from kanalyze.dynamic.harness import Harness, NoHarness, find_harness, kernel_harness
from kanalyze.dynamic.runner import GateRun, Options, resolve_mode, run_gates
from kanalyze.dynamic.sandbox import mounts
from kanalyze.dynamic.sandbox.process import Limits
from kanalyze.findings import Finding, Location, Status, Witness


@dataclass
class DynamicOptions:
    gates: str | list[str] = "targeted"     # "targeted", "all", or a list of codes
    reference: str | None = None
    kernelbench: str | None = None
    mapping: dict = field(default_factory=dict)   # [tool.kanalyze.harness]
    root: str = "."
    mode: str = "auto"
    jobs: int | None = None
    witness_dir: str | None = None
    case_seconds: float | None = None
    # Each candidate's gates end within this (`--timeout`): a later session that would end past it
    # does not start, and its clauses stay unconfirmed, saying so (runner.Options `deadline`).
    seconds: float | None = None
    max_numel: int | None = None
    # Told of each kernel as its gates finish: progress(name, done, total); total first with done = 0.
    progress: Callable[[str, int, int], None] | None = None


def _display(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return relative if not relative.startswith("..") else path


def _callable_row(path: str, name: str) -> int:
    """The row that defines the callable under test (`class ModelNew`, a contract's function)."""
    pattern = re.compile(rf"\s*(class|def)\s+{re.escape(name)}\b")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for row, line in enumerate(handle, 1):
                if pattern.match(line):
                    return row
    except OSError:
        pass
    return 1


def _codes_for(path: str, flagged: list[Finding], options: DynamicOptions, known: set[str]) -> list[str]:
    if options.gates == "all":
        return sorted(known)
    if isinstance(options.gates, list):
        return [c for c in options.gates if c in known]
    return sorted({f.code for f in flagged if f.code in known})


def confirm(findings: list[Finding], files: list[str], options: DynamicOptions,
            names: dict[str, str], notes: list[str] | None = None) -> list[Finding]:
    """The findings with their verdicts; what the run must say once (degraded containment)
    goes to `notes`."""
    gates = gates_by_code()
    known = set(gates)
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.location.file, []).append(finding)
    candidates = list(dict.fromkeys([*files, *by_file]))
    plans: list[tuple[str, Harness, list[str]]] = []
    for path in candidates:
        flagged = [f for f in by_file.get(path, []) if not f.code.startswith("KAN")]
        plans += _kernel_plans(path, flagged, options, gates)
        flagged = [f for f in flagged if not (f.code in known and gates[f.code].kernel_harness)]
        harness = find_harness(path, reference=options.reference, kernelbench=options.kernelbench,
                               mapping=options.mapping, root=options.root)
        if isinstance(harness, NoHarness):
            for f in flagged:
                _set(f, Status.UNCONFIRMED, f"{f.code} unconfirmed: {harness.reason}")
            continue
        codes = [c for c in _codes_for(path, flagged, options, known) if not gates[c].kernel_harness]
        for f in flagged:
            if f.code not in known:
                _set(f, Status.UNCONFIRMED, f"{f.code} unconfirmed: kanalyze has no gate for {f.code} yet")
        if codes or options.gates == "targeted":
            # Nothing flagged still runs the baseline (the problem's own inputs, called twice):
            # a candidate that crashes, or is wrong, there is reported, never silently clean.
            plans.append((path, harness, codes))

    limits = Limits()
    if options.case_seconds:
        limits.case_seconds = options.case_seconds
    run_options = Options(mode=options.mode, limits=limits, max_numel=options.max_numel)
    directory = options.witness_dir or os.path.join(options.root, witnesses.DEFAULT_DIRECTORY)
    if plans:
        mounts.hide_from_candidates(directory)   # a witness holds reference values: no later candidate reads it

    def run(plan):
        path, harness, codes = plan
        flags = {c: [{"row": f.location.row, "kernel": f.kernel, "message": f.message,
                      **flag_evidence(f.evidence)}
                     for f in by_file.get(path, []) if f.code == c] for c in codes}
        own = run_options if not options.seconds else replace(run_options,
                                                                deadline=time.perf_counter() + options.seconds)
        try:
            return plan, flags, run_gates(harness, codes, flags, own), None
        except Exception as exc:  # one candidate's trouble never stops the others
            return plan, flags, None, f"{type(exc).__name__}: {exc}"

    jobs = options.jobs or min(len(plans), os.cpu_count() or 1) or 1
    report = _progress_reporter(options.progress, len(plans))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(lambda plan: report(run(plan)), plans))

    said = containment.note([o[2].environment.get("candidate_confinement") for o in outcomes if o[2] is not None])
    if said and notes is not None:
        notes.append(said)
    out = list(findings)
    for (path, harness, codes), flags, gate_run, error in outcomes:
        flagged = [f for f in by_file.get(path, []) if (f.code in known and gates[f.code].kernel_harness)
                   == (harness.kind == "kernel")]
        if gate_run is None:
            for f in flagged:
                if f.code in codes:
                    _set(f, Status.UNCONFIRMED, f"{f.code} unconfirmed: the dynamic run failed: {error}")
            continue
        new, undecided = _apply(gate_run, harness, flagged, flags, directory, names, path)
        out.extend(new)
        if undecided and notes is not None:
            notes.extend(_undecided_notes(path, undecided))
    out.sort(key=lambda f: f.sort_key)
    return out


def _undecided_notes(path: str, undecided: list[tuple[str, str]]) -> list[str]:
    """`gates: FILE: CMP001, EXC001 could not be decided: REASON`, one line per reason: gates that
    ran with no flag to carry their verdict (the baseline, `--gates all`) and decided nothing
    must not leave a report that reads as clean."""
    by_reason: dict[str, list[str]] = {}
    for code, summary in undecided:
        by_reason.setdefault(summary, []).append(code)
    return [f"gates: {_display(path)}: {', '.join(codes)} could not be decided: {reason}"
            for reason, codes in by_reason.items()]


def _progress_reporter(progress, total: int):
    """A pass-through for each plan's outcome that tells `progress` (when there is one) how far the run is."""
    if progress is None:
        return lambda outcome: outcome
    lock, done = threading.Lock(), [0]
    progress("", 0, total)

    def report(outcome):
        (path, _, codes), *_ = outcome
        with lock:
            done[0] += 1
            progress(f"{_display(path)} ({', '.join(codes)})", done[0], total)
        return outcome
    return report


def _kernel_plans(path: str, flagged: list[Finding], options: DynamicOptions, gates: dict) -> list:
    """The runs of the gates that need no problem: a flag's counterexample is the whole input."""
    codes = sorted({f.code for f in flagged if f.code in gates and gates[f.code].kernel_harness
                    and (not isinstance(options.gates, list) or f.code in options.gates)})
    plans = []
    for code in codes:
        own = [f for f in flagged if f.code == code]
        if gates[code].device == "cuda" and resolve_mode(options.mode) != "cuda":
            for f in own:
                _set(f, Status.FLAGGED, f"{code} flagged: running its counterexample needs a GPU with the memory "
                     "it names; none is here, so the proof stands without a run")
            continue
        kernel = next((f.kernel for f in own if f.kernel), None) or "kernel"
        plans.append((path, kernel_harness(path, kernel), [code]))
    return plans


def _set(finding: Finding, status: Status, line: str, witness: Witness | None = None) -> None:
    finding.status = status
    finding.evidence = {**finding.evidence, "gate_result": line}
    if witness is not None:
        finding.witness = witness


def _apply(gate_run: GateRun, harness: Harness, flagged: list[Finding], flags: dict, directory: str,
           names: dict[str, str], path: str) -> tuple[list[Finding], list[tuple[str, str]]]:
    """Move the file's flags to their verdicts; return the findings no detector predicted, and
    (code, summary) of the unconfirmed verdicts that no flag carries."""
    new: list[Finding] = []
    undecided: list[tuple[str, str]] = []
    for verdict in gate_run.verdicts:
        own = [f for f in flagged if f.code == verdict.code
               and (verdict.rows is None or f.location.row in verdict.rows)]
        witness = None
        line = f"{verdict.code} {verdict.status}: {verdict.summary}"
        if verdict.status == "confirmed":
            kernel = next((f.kernel for f in own if f.kernel), None)
            written = witnesses.write(verdict, harness, gate_run.environment, directory, kernel=kernel,
                                      flags=[f for f in flags.get(verdict.code, [])
                                             if verdict.rows is None or f["row"] in verdict.rows])
            line += f" (witness {_display(written)})"
            witness = Witness(verdict.code, verdict.gate, {"summary": verdict.summary, "cases": len(verdict.cases)},
                              path=_display(written))
        status = Status(verdict.status)
        for f in own:
            _set(f, status, line, witness)
            f.evidence.update(_run_account(gate_run.environment))
        if not own and status is Status.UNCONFIRMED:
            undecided.append((verdict.code, verdict.summary))
        if not own and status is Status.CONFIRMED:
            row = _callable_row(path, harness.callable)
            new.append(Finding(
                code=verdict.code, name=names.get(verdict.code, verdict.gate), message=verdict.summary,
                location=Location(path, row, 1, row, 1), status=Status.CONFIRMED,
                evidence={"gate": verdict.gate, "static": None, "gate_result": line,
                          **_run_account(gate_run.environment)}, witness=witness))
    return new, undecided


def _run_account(environment: dict) -> dict:
    """What a finding's evidence says of the gate run behind it: where its time went (`gate_seconds`),
    the candidate's slowest cases, slowest first (`case_seconds`), and what the gates asked of
    the arrays the judge held (`judge`), and how many sessions the gates ran in where more than
    one (`sessions`: held_budget.py)."""
    account = {"gate_seconds": environment.get("seconds", {})}
    if environment.get("sessions"):
        account["sessions"] = environment["sessions"]
    if environment.get("case_seconds"):
        account["case_seconds"] = sorted(environment["case_seconds"], key=lambda c: -(c.get("wall") or c["seconds"]))[:12]
    if environment.get("judge"):
        account["judge"] = environment["judge"]
    return account
