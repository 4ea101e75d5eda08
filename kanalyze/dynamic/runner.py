"""Running gates for one candidate: sizes, cases, workers, verdicts.

    run_gates(harness, ["ORD001", "PRC002"], flags)   the gates of a check
    run_at_sizes(harness, [{"N": 1025}])              one candidate at given sizes
                                                      (the z3 bounds pass's hand-off)

Each gate plans its cases (gates/), a `Session` runs them through the
reference and candidate workers (session.py), and each gate judges what came
back (judging.py).  Every run starts with a baseline: the problem's own inputs
at the base sizes, which is KernelBench's check.  Where every gate's arrays
would not fit what a session's judge holds, the gates run in several sessions,
each after the baseline again (held_budget.py).
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field, replace

from kanalyze.dynamic import planning
from kanalyze.dynamic.cases import Case, Run
from kanalyze.dynamic.gates import gates_by_code
from kanalyze.dynamic.gates.base import UNCONFIRMED, GateContext, Verdict
from kanalyze.dynamic.harness import Harness
from kanalyze.dynamic.held_arrays import merge_account
from kanalyze.dynamic.held_budget import later_baseline
from kanalyze.dynamic.judging import NO_CASE, TIME_LIMIT, decided_by_baseline, distrusted, held_windows, judge
from kanalyze.dynamic.reference_jobs import judged_now
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox import extensions, rundir
from kanalyze.dynamic.sandbox.process import Limits, Outcome
from kanalyze.dynamic.session import BASELINE, MAX_NUMEL, PROGRESS, Session
from kanalyze.dynamic.streaming import Streaming

BUILD_SECONDS = 600.0   # a worker's start when it compiles a CUDA C++ extension


def cuda_present() -> bool:
    """A CUDA device is there (checked without importing torch)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def resolve_mode(mode: str) -> str:
    if mode == "auto":
        return "cuda" if cuda_present() else "cpu"
    if mode not in ("cpu", "cuda"):
        raise ValueError(f"unknown device mode {mode!r} (auto, cpu or cuda)")
    return mode


@dataclass
class Options:
    mode: str = "auto"
    limits: Limits = field(default_factory=Limits)
    max_numel: int | None = None
    seed: int = 0
    # Bytes one session's judge may hold (held_budget.py); None: a share of what the reference's
    # worker reported of the device's memory (the machine's on the CPU).
    held_budget: int | None = None
    # Where the gates' arrays would not fit one session: one session all the same, each case judged
    # as it ends so that the judge lets go of its arrays (streaming.py), instead of several sessions.
    # None: on a GPU, where the judge holds the arrays (KANALYZE_STREAM=0 turns it off).
    stream: bool | None = None
    # When the gates should be done (a time.perf_counter() instant; the audit's pair limit, the
    # Verifier's timeout, `check --timeout`): a later session that would not end by then does not
    # start, and its gates say so (`out_of_time`).  None: every session runs.
    deadline: float | None = None
    # When every case must have ended (a time.perf_counter() instant near the run's end; the
    # audit's pair limit less what its end needs): no worker starts after it and a candidate's case
    # still running then is cut, its gate saying so (sandbox/dispatch.py), so that the run ends with
    # what it decided.  None: no such time.
    until: float | None = None


@dataclass
class GateRun:
    verdicts: list[Verdict]
    environment: dict
    sizes: dict[str, int]
    seconds: float
    # What the baseline (the problem's own inputs, called twice) showed, said even where no gate
    # ran or confirmed anything: {"status": "passed" | "failed" | "undecided", "summary"}; None
    # when there was none (a kernel harness, a replay).
    baseline: dict | None = None


def run_gates(harness: Harness, codes: list[str], flags: dict[str, list[dict]] | None = None,
              options: Options | None = None, cases: list[Case] | None = None) -> GateRun:
    """Run the gates of `codes` on one candidate; `cases` replays exactly those (a witness)."""
    started = time.perf_counter()
    options = options or Options()
    flags = flags or {}
    mode = resolve_mode(options.mode)
    gates = gates_by_code()
    codes = [c for c in codes if c in gates]
    if harness.kind == "kernel":  # the gates of a kernel harness say where they run
        mode = next((gates[c].device for c in codes if gates[c].device), mode)
    cuda_cpp = extensions.builds_at_import(harness.candidate)
    no_room = rundir.free_space_problem()
    if no_room:
        return GateRun([Verdict(c, UNCONFIRMED, f"kanalyze could not run: {no_room}", gate=gates[c].name)
                        for c in codes], {"mode": mode}, dict(harness.knobs), time.perf_counter() - started)
    if cuda_cpp and mode == "cpu":
        why = "the candidate builds CUDA C++ (load_inline / cpp_extension), which runs only on a GPU; none is here"
        return GateRun([Verdict(c, UNCONFIRMED, why, gate=gates[c].name) for c in codes], {"mode": mode},
                       dict(harness.knobs), time.perf_counter() - started)
    limits = options.limits
    if options.until is not None:   # a candidate's case still running then is cut (sandbox/dispatch.py)
        limits = replace(limits, until=options.until)
    if cuda_cpp:  # its workers compile the extension while they start (once per source: extensions.py)
        limits = replace(limits, start_seconds=max(limits.start_seconds, BUILD_SECONDS),
                         import_seconds=max(limits.import_seconds, BUILD_SECONDS))
    variants, rewrites = _variants(harness, codes, flags, mode, cases)
    promotion, reversal = rewrites.get("promoted"), rewrites.get("reversed")
    session = Session(harness, mode, limits, variants)
    try:
        plan = None
        if cases is not None:
            sizes = dict(cases[0].sizes)
        elif harness.kind == "kernel":
            sizes = {}
        else:
            plan = planning.plan(session, options.max_numel or MAX_NUMEL[mode])
            sizes = plan.sizes
        contexts = {code: GateContext(harness, sizes, mode, flags.get(code, []), options.seed, promotion,
                                      None, cuda_cpp, reversal, plan) for code in codes}
        session.unneeded = _unneeded(gates, contexts)

        def planned(code: str) -> list[Case]:
            return [c for c in gates[code].plan(contexts[code]) if c.variant == "original" or c.variant in variants]

        # A gate that reads the reference's output shapes (PRC002: which knobs a reduction runs
        # over) plans once the baseline has run, from its outputs' shapes.
        later = [code for code in codes if gates[code].needs_output_shapes and harness.kind != "kernel"]

        def planned_later(baseline_results: list[Result]) -> dict[str, list[Case]]:
            shapes = output_shapes(baseline_results)
            for code in later:
                contexts[code].output_shapes = shapes
            return {code: planned(code) for code in later}

        sessions: list[list[str]] = []   # the gates left to later sessions (held_budget.py)
        if cases is None:
            plan = {code: planned(code) for code in codes if code not in later}
            # Called twice, as a benchmark calls it: the second call is the steady state whose
            # trace the other cases' are held to (traces.py), beyond a first call's lazy set-up.
            baseline = Case(BASELINE, "", dict(sizes), seed=options.seed, runs=[Run(), Run()],
                            dtype=harness.dtypes[0] if harness.dtypes else None, model_seed=options.seed)
            if harness.kind == "kernel":
                all_cases, more = [c for code in codes if code in plan for c in plan[code]], None
            else:
                # Every gate's cases come once the baseline has run: its outputs say how many
                # sessions they need (held_budget.py), and the first session runs the first share.
                all_cases = [baseline]
                # Its reference records the ops where a later case of the same inputs reads them (RES001).
                baseline.record_ops = any(c.record_ops and c.input_key == baseline.input_key
                                          for cases_ in plan.values() for c in cases_)

                def first_share(baseline_results: list[Result]) -> list[Case]:
                    plan.update(planned_later(baseline_results))
                    # Gates the baseline decides need no case (judge says why), where the judge
                    # can compare the baseline already: on a GPU, where it holds the arrays.
                    viewed = [judged_now(session, r) for r in baseline_results]
                    for code in decided_by_baseline([r for r in viewed if r is not None], codes, flags):
                        plan[code] = []
                    # The flagged clauses' gates first: where time runs short, they are the ones run.
                    ordered = sorted(codes, key=lambda code: not flags.get(code))
                    groups = _sessions({code: plan[code] for code in ordered}, baseline, baseline_results,
                                       options.held_budget)
                    if len(groups) > 1 and _streams(options, session):   # one session, each case judged as it ends
                        session.streaming = Streaming(session, gates, contexts, ordered, {baseline.input_key},
                                                      options.deadline)
                        groups = [list(ordered)]   # (the cases in one session's order)
                    sessions.extend(groups[1:])
                    PROGRESS.info("session 1 of %d: %s", len(groups), ", ".join(groups[0]) or "the baseline")
                    return [c for code in groups[0] for c in plan[code]]

                # (the baseline alone: no second reference worker to start)
                more = first_share if later or any(plan.values()) else None
        else:
            all_cases, more = [c for c in cases if c.variant == "original" or c.variant in variants], None
        results = session.execute(all_cases, more)
        judging = time.perf_counter()
        verdicts, baseline_outcome = judge(results, codes, contexts, gates, replay=cases is not None,
                                            flags_by_code=flags)
        for verdict in verdicts:   # a witness's windows of what the judge holds, while it still does
            verdict.arrays = held_windows(verdict)
        environment = {**session.environment, "sizes": sizes, "knobs": harness.knobs}
        if session.streaming is not None:
            environment["streamed"] = session.streaming.account()
        account = session.judges.account()
        environment["seconds"] = {**environment.get("seconds", {}), "judge": round(time.perf_counter() - judging, 3)}
    finally:
        session.close()
    # The gates of later sessions: those the first one's judge left without a case (a gate the
    # baseline decided, a candidate that fails there, is said already).  A session is expected to
    # take as long as the longest so far (the first one's, which also planned the sizes, until a
    # later one has run); one that would end past the deadline does not start.
    ran, longest, later_longest = 1, time.perf_counter() - started, 0.0
    for group in sessions:
        todo = [code for code in group if _no_case(verdicts, code)]
        if not todo:
            continue
        verdicts = [v for v in verdicts if v.code not in todo]
        left = None if options.deadline is None else options.deadline - time.perf_counter()
        if left is not None and left < (later_longest or longest):
            verdicts += [Verdict(code, UNCONFIRMED, out_of_time(len(sessions) + 1, later_longest or longest, left),
                                 gate=gates[code].name) for code in todo]
            environment["out_of_time"] = environment.get("out_of_time", []) + todo
            continue
        began = time.perf_counter()
        PROGRESS.info("session %d of %d: %s", ran + 1, len(sessions) + 1, ", ".join(todo))
        verdicts += _later_session(harness, mode, limits, variants, later_baseline(baseline),
                                   {code: plan[code] for code in todo}, contexts, gates, flags, environment,
                                   account, [v.code for v in verdicts])
        later_longest = max(later_longest, time.perf_counter() - began)
        ran += 1
    if sessions:   # (a worker protocol broken in any session leaves no verdict of the run trusted)
        verdicts = distrusted(sorted(verdicts, key=lambda v: codes.index(v.code) if v.code in codes else -1))
        environment["sessions"] = ran
    if account:
        environment["judge"] = account
    return GateRun(verdicts, environment, sizes, time.perf_counter() - started, baseline_outcome)


def _variants(harness: Harness, codes: list[str], flags: dict, mode: str,
              cases: list[Case] | None) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """The candidate rewritten for the gates of `codes` (variant name -> source), and the
    rewrites each made: "promoted", PRC002's fp32 accumulators (promote.py); "reversed", ORD001's
    and ORD002's program order reversed on a GPU (reverse_order.py), with "control", the candidate
    unchanged in a worker of its own (ORD001).  Only the variants a replay's cases use."""
    from kanalyze.dynamic.promote import promote_accumulators
    from kanalyze.dynamic.reverse_order import reverse_program_order

    def used(name: str) -> bool:
        return cases is None or any(c.variant == name for c in cases)

    todo = {}
    if "PRC002" in codes and used("promoted"):
        rows = [f["row"] for f in flags.get("PRC002", []) if f.get("row")] or None
        todo["promoted"] = lambda source: promote_accumulators(source, rows)
    if {"ORD001", "ORD002"} & set(codes) and mode == "cuda" and used("reversed"):
        todo["reversed"] = reverse_program_order
    sources, rewrites = {}, {}
    if todo:
        with open(harness.candidate, encoding="utf-8") as handle:
            source = handle.read()
        for name, rewrite in todo.items():
            changed, changes = rewrite(source)
            if changes:
                sources[name], rewrites[name] = changed, changes
        # ORD001's control: the candidate as written, in a worker of its own as the reversed one
        # runs, so that bits a new process changes (a library's choice of algorithm) are not
        # taken for the order's doing.
        if "reversed" in sources and "ORD001" in codes and used("control"):
            sources["control"] = source
    return sources, rewrites


def _streams(options: Options, session: Session) -> bool:
    """Whether a session whose gates' arrays would not fit judges each case as it ends (streaming.py)."""
    if not session.spec["judge_held"]:
        return False
    if options.stream is not None:
        return options.stream
    return session.mode == "cuda" and os.environ.get("KANALYZE_STREAM", "1") != "0"


def _sessions(plan: dict[str, list[Case]], baseline: Case, baseline_results: list[Result],
              budget: int | None) -> list[list[str]]:
    """The gates of `plan` in sessions whose held arrays fit (held_budget.py); one session
    where the baseline's outputs are not known."""
    from kanalyze.dynamic import held_budget

    meta = next((r.reference.meta for r in baseline_results if r.reference_ok), {})
    output = held_budget.baseline_output(meta)
    reported = meta.get("budget_bytes")
    if budget is None and type(reported) is int and reported > 0:
        budget = int(reported * held_budget.HELD_SHARE)
    if output is None or budget is None:
        return [list(plan)]
    nbytes, dtypes, inputs = output
    return held_budget.sessions(plan, baseline, nbytes, dtypes, budget, inputs)


def _no_case(verdicts: list[Verdict], code: str) -> bool:
    """The first session's judge had no case of `code` (it was left to a later session)."""
    own = [v for v in verdicts if v.code == code]
    return len(own) == 1 and own[0].status == UNCONFIRMED and own[0].summary == NO_CASE


def _later_session(harness: Harness, mode: str, limits: Limits, variants: dict[str, str], baseline: Case,
                   plan: dict[str, list[Case]], contexts: dict, gates: dict, flags: dict, environment: dict,
                   account: dict, said: list[str]) -> list[Verdict]:
    """The verdicts of `plan`'s gates, run in a session of their own after the baseline once more;
    what it took is added to `environment` and `account`.  A verdict found on the way for a
    gate that did not run (INT001's changed trace, the baseline's CMP001) is kept where no
    earlier session said one."""
    codes = list(plan)
    wanted = {c.variant for cases in plan.values() for c in cases}
    session = Session(harness, mode, limits, {name: source for name, source in variants.items() if name in wanted})
    session.unneeded = _unneeded(gates, contexts)
    try:
        results = session.execute([baseline] + [c for cases in plan.values() for c in cases])
        judging = time.perf_counter()
        verdicts, _ = judge(results, codes, contexts, gates, replay=False, flags_by_code=flags)
        verdicts = [v for v in verdicts if v.code in codes or v.code not in said]
        for verdict in verdicts:
            verdict.arrays = held_windows(verdict)
        seconds = {**session.environment.get("seconds", {}), "judge": round(time.perf_counter() - judging, 3)}
        for step, value in seconds.items():
            environment["seconds"][step] = round(environment["seconds"].get(step, 0.0) + value, 3)
        environment["case_seconds"] = environment.get("case_seconds", []) + session.environment.get("case_seconds", [])
        if session.environment.get("not_needed"):
            environment["not_needed"] = environment.get("not_needed", []) + session.environment["not_needed"]
        for key, value in session.judges.account().items():
            account[key] = merge_account(key, account.get(key, 0), value)
    finally:
        session.close()
    return verdicts


def _unneeded(gates: dict, contexts: dict):
    """Session.unneeded: asks the gate of a case whether, from the results so far, it need not run."""
    def unneeded(results: list[Result], i: int) -> str | None:
        case = results[i].case
        if case.gate not in gates or case.gate not in contexts:
            return None
        return gates[case.gate].unneeded(contexts[case.gate], case, results)
    return unneeded


def out_of_time(sessions: int, expected: float, left: float) -> str:
    """Why a gate left to a later session did not run: the time limit would have ended it."""
    return (f"{TIME_LIMIT} would have ended its session first (at this size the gates need "
            f"{sessions} sessions of about {expected:.0f} s each, so that what the judge holds fits; "
            f"{max(left, 0.0):.0f} s were left); a longer time limit runs it")


def output_shapes(baseline_results: list[Result]) -> list | None:
    """The shapes of the reference's outputs on the problem's own inputs, as its worker saw them."""
    for result in baseline_results:
        output = result.reference.meta.get("output") if result.reference_ok else None
        shapes = output.get("shapes") if isinstance(output, dict) else None
        if isinstance(shapes, list) and all(isinstance(s, list) for s in shapes):
            return shapes
    return None


@dataclass
class SizeOutcome:
    sizes: dict[str, int]
    status: str          # ok | rejected | slow | out_of_bounds | crashed | wrong | internal (kanalyze's own failure)
    detail: str
    out_of_bounds: dict | None = None


def run_at_sizes(harness: Harness, sizes_list: list[dict[str, int]], options: Options | None = None) -> list[SizeOutcome]:
    """Run the candidate at each of the given sizes (knobs not named keep their values).

    For the bounds pass: an out-of-bounds access comes back with the program id
    and the element offset (`out_of_bounds`), a wrong value with the metric.
    """
    from kanalyze.dynamic.gates.cmp003_perturbed_shapes import size_outcome

    options = options or Options()
    mode = resolve_mode(options.mode)
    cases = [Case(f"sizes/{i}", "CMP003", {**harness.knobs, **sizes}, seed=options.seed,
                  model_seed=options.seed)
             for i, sizes in enumerate(sizes_list)]
    session = Session(harness, mode, options.limits)
    out = []
    try:
        for result in session.execute(cases):  # judged before the session's files go
            if result.kanalyze_failure():
                out.append(SizeOutcome(result.case.sizes, "internal", result.kanalyze_failure()))
                continue
            status, detail, details = size_outcome(result)
            out.append(SizeOutcome(result.case.sizes, status, detail, details.get("out_of_bounds")))
    finally:
        session.close()
    return out


__all__ = ["GateRun", "Options", "Outcome", "Session", "SizeOutcome", "cuda_present", "resolve_mode", "run_at_sizes",
           "run_gates"]
