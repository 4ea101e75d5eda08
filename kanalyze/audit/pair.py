"""One pair's run, in a child process of its own (`python -m kanalyze.audit.pair SPEC OUT`).

Or started before its turn, `python -m kanalyze.audit.pair --standby DEVICE` (executor.py's
spares): it starts its zygote and imports kanalyze while other pairs run, then reads `SPEC OUT`
on stdin; its result says how long it stood by (`standby_seconds`), and its `seconds` start
when its pair came, its imports done.

    run_pair(spec) -> result     the static pass on the candidate, the gates, KernelBench's allclose

spec: {"candidate", "problem" (or None with "problem_error"), "gates" ("all",
"targeted" or a list of codes), "device" ("cpu" | "cuda"), "case_timeout",
"seconds" (the pair's time limit), "witness_dir", "extend_select" (codes added to the
static pass's selection), "ir" (the compiled code too), "check_builds" ("shared": KernelBench's
check loads a CUDA C++ extension the gates built; "own": it builds its own, as KernelBench
does)}.  The result (plain JSON):

    static     the candidate's static findings: [{"code", "row", "message", "kernel"}, and what of its
               evidence a gate reads (gates/base.py FLAG_EVIDENCE)]
    verdicts   {code: {"status", "summary", "static_flag", "witness", "failure"}}: one per gate run
               ("failure": how a confirmed run failed, where the gate says: CMP003's crashed,
               out_of_bounds or wrong; else null)
    baseline   what the problem's own inputs showed, even where no gate confirmed anything:
               {"status": "passed" | "failed" | "undecided", "summary"}, or null where it did not run
    allclose   KernelBench's criterion on the same problem (allclose.py; its "contained": the
               protections its caged process ran without)
    contained  the protections the gates' candidate workers ran without (containment.gaps;
               empty when every one held, or no candidate worker ran)
    seconds    {"static", "gates", "allclose", "steps": where the gates' time went (runner.py),
               "by_gate": {code: [cases, seconds, wall]}: the candidate's cases of each gate and their
               time, by their workers' account and from kanalyze's side (by_gate),
               "slowest": the candidate's slowest cases, each {"gate", "case", "variant", "seconds",
               "wall", "steps": its worker's own account, step by step}}

`run_pair` is also kanalyze.verifier's per-candidate call (in that process, with
`"overlap_allclose": True`): one code path for the audit and the Verifier.

The child writes its result to OUT (renamed into place, so the parent never reads
half of it) and nothing else; the parent writes the journal.  It dies with its
parent: a watchdog thread ends the child's process group when the parent is gone.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

from kanalyze.audit.child import die_with_parent

# Of a pair's time, what is left to KernelBench's check when it runs after the gates: a later
# session of the gates that would end past the rest does not start (runner.Options `deadline`).
ALLCLOSE_SHARE = 0.25
# When a case still running is cut (runner.Options `until`): with KernelBench's check after the
# gates, halfway through its share; with it beside them, TAIL_SHARE of the pair's time before its end.
# Past the gates' own share, so that what they planned runs; before the pair's end, so that the pair
# ends with what its gates decided instead of being stopped and losing it.
TAIL_SHARE = 0.05
PROGRESS_SUFFIX = ".progress"   # beside the result: the pair's last step (LastStep)
STANDBY = "--standby"           # `python -m kanalyze.audit.pair --standby DEVICE`: a spare (standby)
SLOWEST = 6   # the candidate's slowest cases a journal line keeps, step by step


def static_pass(candidate: str, extend_select: list[str] | None = None, ir: bool = False) -> list[dict]:
    """The candidate's findings as `kanalyze check --isolated` gives them: the default selection
    and `extend_select`, the compiled code's with `ir` (`KAN000` when unreadable)."""
    from kanalyze.check import run_static
    from kanalyze.config import load_config
    from kanalyze.dynamic.gates.base import flag_evidence

    config = load_config([candidate], isolated=True, extend_select=extend_select or ())
    result = run_static([candidate], config, use_cache=False, jobs=1)
    if ir:
        from kanalyze.check import run_ir

        result = run_ir([candidate], config, result, use_cache=False, jobs=1)
    return [{"code": f.code, "row": f.location.row, "message": f.message, "kernel": f.kernel,
             **flag_evidence(f.evidence)}
            for f in result.findings if config.selects(f.code, f.location.file)]


def gate_codes(gates, static: list[dict]) -> list[str]:
    """The gates to run: every gate that needs a problem (`all`), the flagged clauses'
    (`targeted`), or the codes named."""
    from kanalyze.dynamic.gates import gates_by_code

    known = sorted(code for code, gate in gates_by_code().items() if not gate.kernel_harness)
    if gates == "all":
        return known
    if gates == "targeted":
        return sorted({f["code"] for f in static} & set(known))
    return [code for code in gates if code in known]


def run_gates_of(spec: dict, static: list[dict], codes: list[str], seconds: float | None = None,
                 cut: float | None = None) -> tuple[dict[str, dict], dict | None, dict, list]:
    """The verdicts by code, the baseline's outcome, where the time went ({"steps", "by_gate",
    "slowest"}), and the protections the candidate's workers ran without.  `seconds`: the time
    the gates have (runner.Options `deadline`), or None; `cut`: the time after which no case
    runs on (runner.Options `until`)."""
    from kanalyze.dynamic import witness as witnesses
    from kanalyze.dynamic.containment import gaps
    from kanalyze.dynamic.gates.base import flag_evidence
    from kanalyze.dynamic.harness import NoHarness, find_harness
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    flagged = {f["code"] for f in static}

    def each(status: str, summary: str) -> tuple[dict[str, dict], None, dict, list]:
        return {code: {"status": status, "summary": summary, "static_flag": code in flagged, "witness": None,
                       "failure": None} for code in codes}, None, {}, []

    if spec.get("problem") is None:
        return each("unconfirmed", f"no problem to run against: {spec.get('problem_error') or 'none given'}")
    harness = find_harness(spec["candidate"], reference=spec["problem"])
    if isinstance(harness, NoHarness):
        return each("unconfirmed", harness.reason)
    limits = Limits()
    if spec.get("case_timeout"):
        limits.case_seconds = spec["case_timeout"]
    flags = {code: [{"row": f["row"], "kernel": f["kernel"], "message": f["message"],
                     **flag_evidence(f)}
                    for f in static if f["code"] == code] for code in codes}
    try:
        now = time.perf_counter()
        gate_run = run_gates(harness, codes, flags, Options(mode=spec["device"], limits=limits,
                                                            deadline=None if seconds is None else now + seconds,
                                                            until=None if cut is None else now + cut))
    except Exception as exc:  # kanalyze's own failure: said so, in every gate's verdict
        return each("unconfirmed", f"kanalyze could not run the gates: {type(exc).__name__}: {exc}")
    verdicts: dict[str, dict] = {}
    for verdict in gate_run.verdicts:
        witness = None
        if verdict.status == "confirmed" and spec.get("witness_dir"):
            try:
                witness = witnesses.write(verdict, harness, gate_run.environment, spec["witness_dir"],
                                          flags=flags.get(verdict.code, []))
            except Exception as exc:  # the verdict stands without its file; say why it is missing
                witness = f"not written: {type(exc).__name__}: {exc}"
        previous = verdicts.get(verdict.code)
        if previous is None or previous["status"] != "confirmed":   # a clause's confirmation wins
            verdicts[verdict.code] = {"status": verdict.status, "summary": verdict.summary,
                                      "static_flag": verdict.code in flagged, "witness": witness,
                                      "failure": verdict.details.get("failure") if verdict.status == "confirmed"
                                      else None}
    cases = gate_run.environment.get("case_seconds", [])
    timing = {"steps": gate_run.environment.get("seconds", {}), "by_gate": by_gate(cases),
              "slowest": sorted(cases, key=lambda c: -_wall(c))[:SLOWEST]}
    return verdicts, gate_run.baseline, timing, gaps(gate_run.environment.get("candidate_confinement"))


def by_gate(case_seconds: list[dict]) -> dict[str, list]:
    """The candidate's cases of each gate, counted, with the seconds they took by their workers'
    account and from kanalyze's side: {code: [cases, seconds, wall]} (a gate's variants, as the
    reversed programs of ORD001, count in its cases; the problem's own inputs, which every gate
    shares, are "baseline").  `wall` holds what `seconds` leaves out: a worker's start before its
    first case (a CUDA C++ build at import), the hand-over around each case."""
    totals: dict[str, list] = {}
    for case in case_seconds:
        total = totals.setdefault(case["gate"] or "baseline", [0, 0.0, 0.0])
        total[0] += 1
        total[1] = round(total[1] + case["seconds"], 3)
        total[2] = round(total[2] + _wall(case), 3)
    return totals


def _wall(case: dict) -> float:
    """A case's seconds from kanalyze's side, or its worker's own where that side has none."""
    wall = case.get("wall")
    return wall if isinstance(wall, (int, float)) else case["seconds"]


def allclose_of(spec: dict, seconds: float) -> dict:
    from kanalyze.audit.allclose import check

    if spec.get("problem") is None:
        return {"verdict": "ERROR", "detail": "no problem to compare with", "seconds": 0.0}
    if seconds < 1.0:   # (its fresh process alone takes longer: the pair would be stopped, losing the gates')
        return {"verdict": "TIMEOUT", "detail": "not run: the pair's time limit left it no time", "seconds": 0.0,
                "contained": []}
    return check(os.path.abspath(spec["problem"]), os.path.abspath(spec["candidate"]), spec["device"], seconds,
                 share_builds=spec.get("check_builds", "shared") != "own")


def run_pair(spec: dict) -> dict:
    """The pair's result.  With `spec["overlap_allclose"]` (kanalyze.verifier) allclose's fresh
    process starts first and runs while the static pass and the gates do (its import of torch
    overlaps their work); otherwise it runs after them, with the time that is left."""
    started = time.monotonic()
    if spec.get("witness_dir"):   # other pairs' witnesses hold reference values: hidden from this candidate
        from kanalyze.dynamic.sandbox.mounts import hide_from_candidates

        hide_from_candidates(spec["witness_dir"])
    overlapped: list = []
    thread = None
    if spec.get("overlap_allclose"):
        def overlap(limit: float = spec.get("seconds", 600.0) - 2.0) -> None:
            try:
                overlapped.append(allclose_of(spec, limit))
            except Exception as exc:  # kanalyze's own failure (no process could start): raised below
                overlapped.append(exc)

        thread = threading.Thread(target=overlap, daemon=True)
        thread.start()
    if spec.get("problem") is not None:
        _begin_workers(spec)
    _step("the static pass")
    static = static_pass(spec["candidate"], spec.get("extend_select"), spec.get("ir", False))
    static_seconds = time.monotonic() - started
    codes = gate_codes(spec["gates"], static)
    _step("the gates: the problem's sizes and the baseline")
    # Targeted with nothing flagged still runs the baseline: a candidate that fails on its own
    # inputs is CMP001 confirmed, never a pair with no verdict.
    verdicts, baseline, timing, contained = (run_gates_of(spec, static, codes, *_gate_seconds(spec, started))
                                            if codes or spec["gates"] == "targeted" else ({}, None, {}, []))
    gate_seconds = time.monotonic() - started - static_seconds
    if thread is not None:
        thread.join()
        if isinstance(overlapped[0], Exception):
            raise overlapped[0]
        allclose = overlapped[0]
    else:
        _step("KernelBench's check")
        allclose = allclose_of(spec, spec.get("seconds", 600.0) - (time.monotonic() - started) - 2.0)
    return {"static": static, "verdicts": verdicts, "baseline": baseline, "allclose": allclose,
            "contained": contained, "seconds": {"static": round(static_seconds, 3), "gates": round(gate_seconds, 3),
                        "allclose": round(allclose.pop("seconds"), 3),
                        **{key: timing.get(key, {}) for key in ("steps", "by_gate")},
                        "slowest": timing.get("slowest", [])}}


def _gate_seconds(spec: dict, started: float) -> tuple[float | None, float | None]:
    """The time the gates have: the pair's, less what has gone and, where KernelBench's check runs
    after them, the share left to it (ALLCLOSE_SHARE); and the time after which no case runs on
    (TAIL_SHARE).  Nones where the pair has no limit."""
    if not spec.get("seconds"):
        return None, None
    gone = time.monotonic() - started
    after = 0.0 if spec.get("overlap_allclose") else ALLCLOSE_SHARE
    tail = TAIL_SHARE if spec.get("overlap_allclose") else ALLCLOSE_SHARE / 2
    return spec["seconds"] * (1 - after) - gone, spec["seconds"] * (1 - tail) - gone


def _begin_workers(spec: dict) -> None:
    """The gates' zygote starts now: its imports of torch and triton overlap the static pass,
    as `check --dynamic`'s do."""
    from kanalyze.dynamic.sandbox.process import prestart_zygote

    prestart_zygote(spec["device"], wait=False)


class LastStep(logging.Handler):
    """Keeps the run's last step (the `kanalyze.progress` log) in `path`, rewritten whole at each
    step, with the seconds since the pair began: the executor reads it when the pair's time
    limit ends this process (executor.py)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path, self.started = path, time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with open(self.path + ".part", "w", encoding="utf-8") as handle:
                json.dump({"seconds": round(time.monotonic() - self.started, 1), "step": record.getMessage()}, handle)
            os.replace(self.path + ".part", self.path)
        except OSError:   # the pair goes on without its trail
            pass


def last_step(out_path: str) -> dict | None:
    """What the pair whose result goes to `out_path` last said it was doing ({"seconds", "step"}), or None."""
    try:
        with open(out_path + PROGRESS_SUFFIX, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return None
    if not (isinstance(found, dict) and isinstance(found.get("step"), str)
            and isinstance(found.get("seconds"), (int, float))):
        return None
    return {"seconds": found["seconds"], "step": found["step"][:300]}


def _step(words: str) -> None:
    logging.getLogger("kanalyze.progress").info(words)


def standby(device: str) -> tuple[str, str] | None:
    """A pair's process started before its turn (executor.py's spares): its zygote's imports and
    kanalyze's own run while other pairs do; then it waits for its pair, one line on stdin
    (`SPEC OUT`, JSON-encoded), and returns it (None: the audit ended first)."""
    import importlib

    from kanalyze.dynamic.sandbox.process import prestart_zygote

    prestart_zygote(device, wait=False)
    for module in ("kanalyze.check", "kanalyze.dynamic.runner", "kanalyze.audit.allclose"):
        importlib.import_module(module)   # the static pass's, the gates' and the check's imports
    line = sys.stdin.readline()
    if not line.strip():
        return None
    spec_path, out_path = json.loads(line)
    return str(spec_path), str(out_path)


def main(argv: list[str]) -> int:
    """`SPEC OUT`, or `--standby DEVICE` and then `SPEC OUT` on stdin (`standby`)."""
    die_with_parent()
    standby_seconds = None
    if argv[0] == STANDBY:
        waited = time.monotonic()
        handed = standby(argv[1])
        if handed is None:
            return 0
        standby_seconds = round(time.monotonic() - waited, 3)
        argv = list(handed)
    spec_path, out_path = argv
    progress = logging.getLogger("kanalyze.progress")
    progress.setLevel(logging.INFO)
    progress.propagate = False
    progress.addHandler(LastStep(out_path + PROGRESS_SUFFIX))
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    result = run_pair(spec)
    if standby_seconds is not None:
        result["standby_seconds"] = standby_seconds
    with open(out_path + ".part", "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)
    os.replace(out_path + ".part", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
