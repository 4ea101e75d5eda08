"""The proofs of one file: every launch × constexpr configuration × access, both
questions, merged into one report per access (the package's docstring says how).

The file's questions share one z3 resource budget (`proof-rlimit`, solver.py).
Once it is spent, the configurations left are not evaluated and the questions
left are not asked: their accesses are "unknown" (solver.BUDGET_SPENT) and are
listed in `BoundsAnalysis.cut`, which KAN003 reports as one note for the file.
The same when the watchdog's CPU deadline (`proof-deadline`, which the pipeline
sets below the file's CPU budget) stops them first (solver.TIME_SPENT)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
ACCESS_NAMES = {TL + "load", TL + "store"} | {TL + f"atomic_{op}" for op in
                                              ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}
DEFAULT_MAX_SIZE = 2**20
DEFAULT_MAX_NUMEL = 2**32


@dataclass
class AccessReport:
    """Everything the proofs found about one access, over all its launches."""

    call: cst.Call
    kernel: str                     # the launched kernel
    function: str                   # the jit function the access is in (a helper, maybe)
    kind: str                       # load | store | atomic
    masked: bool
    parameter: str | None = None    # the kernel pointer parameter
    tensor: str | None = None       # the wrapper's name for the tensor passed
    bounds: Any = None              # Verdict (solver.py): proved | violated | unknown
    overflow: Any = None            # Verdict for the access as a whole
    wraps: dict = field(default_factory=dict)   # id(op node) → Verdict with the smallest size
    reasons: list = field(default_factory=list)  # why it is unknown somewhere
    configurations: int = 0
    seconds: float = 0.0


@dataclass
class BoundsAnalysis:
    accesses: list[AccessReport] = field(default_factory=list)
    seconds: float = 0.0
    solver_seconds: float = 0.0
    queries: int = 0
    screened: int = 0               # questions the Python screen proved without z3 (screen.py)
    timeouts: int = 0               # questions z3 gave up on (their own rlimit, or the watchdog)
    max_size: int = DEFAULT_MAX_SIZE
    max_numel: int = DEFAULT_MAX_NUMEL
    truncated: list[str] = field(default_factory=list)   # kernels with more autotune configs than checked
    proof_rlimit: int | None = None  # the file's z3 budget (`proof-rlimit`; None: solver.py's default)
    spent: int = 0                  # z3 resource units the file's questions used
    refused: int = 0                # questions not asked: the budget was spent
    cut: list[AccessReport] = field(default_factory=list)  # accesses left unproved by the spent budget
    deadline: float | None = None   # the watchdog: time.process_time() at which the proofs stop
    out_of_time: bool = False       # the watchdog stopped them (the cut is by time, not by `proof-rlimit`)
    cpu_seconds: float = 0.0        # CPU seconds of the proofs
    configurations: dict[str, list[int]] = field(default_factory=dict)  # kernel → [asked in full, in all]


def has_launched_accesses(model: TritonModule) -> bool:
    """Cheap: is there anything to prove (no z3 needed to answer)?"""
    launched = {id(j.node) for j in model.jit.values() if j.launches}
    if not launched:
        return False
    return any(site.qualname in ACCESS_NAMES for site in model.calls)


def proof_ranges(raw: dict) -> dict:
    """The proof settings among a `[tool.kanalyze]` table (validated by config.py)."""
    return {key: raw[key] for key in ("max-size", "max-numel", "proof-rlimit") if key in raw}


def settings_of(model: TritonModule) -> dict:
    """The proof settings the pipeline handed to this file's model: `max-size`,
    `max-numel`, `proof-rlimit`, `proofs: False` when neither MEM003 nor MEM004
    is selected, and `proof-deadline` (the time.process_time() at which the proofs
    stop; check/analyze.py sets it below the file's CPU budget, absent: no deadline)."""
    return dict(model.settings)


def analyze(model: TritonModule) -> BoundsAnalysis:
    """The proofs of one file, computed once (both rules read them)."""
    raw = settings_of(model)
    key = (raw.get("max-size", DEFAULT_MAX_SIZE), raw.get("max-numel", DEFAULT_MAX_NUMEL), raw.get("proofs", True),
           raw.get("proof-rlimit"))
    cached = getattr(model, "_bounds_analysis", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    analysis = BoundsAnalysis(max_size=key[0], max_numel=key[1], proof_rlimit=key[3],
                              deadline=raw.get("proof-deadline"))
    # `proofs: False` when neither MEM003 nor MEM004 is selected: skip z3 entirely.
    if raw.get("proofs", True) and has_launched_accesses(model):
        _run(model, analysis)
    model._bounds_analysis = (key, analysis)
    return analysis


def _run(model: TritonModule, analysis: BoundsAnalysis) -> None:
    from kanalyze.analyzer.bounds.solver import BUDGET_SPENT, TIME_SPENT, Budget, Settings
    from kanalyze.analyzer.bounds.symbols import fresh_context

    fresh_context()
    started, cpu_started = time.perf_counter(), time.process_time()
    limits = {} if analysis.proof_rlimit is None else {"file_rlimit": analysis.proof_rlimit}
    budget = Budget(Settings(max_size=analysis.max_size, max_numel=analysis.max_numel, deadline=analysis.deadline,
                             **limits))
    reports: dict[int, AccessReport] = {}
    try:
        _kernels(model, reports, budget, analysis)
    finally:
        budget.close()  # the watchdog's thread, if a question started one
    fresh_context()  # let the terms of this file go (and its solver)
    analysis.accesses = list(reports.values())
    analysis.cut = [report for report in analysis.accesses
                    if BUDGET_SPENT in report.reasons or TIME_SPENT in report.reasons]
    analysis.seconds = time.perf_counter() - started
    analysis.cpu_seconds = time.process_time() - cpu_started
    analysis.out_of_time = budget.out_of_time
    analysis.solver_seconds = budget.solver_seconds
    analysis.queries = budget.queries
    analysis.screened = budget.screened
    analysis.timeouts = budget.timeouts
    analysis.proof_rlimit = budget.settings.file_rlimit
    analysis.spent = budget.spent
    analysis.refused = budget.refused


def _kernels(model: TritonModule, reports: dict, budget, analysis: BoundsAnalysis) -> None:
    """Every launched kernel × launch × configuration, until the file's budget or time is spent."""
    from kanalyze.analyzer.bounds.launch import configurations, pointer_parameters

    seen_kernels: set[int] = set()
    for jit in model.jit.values():
        if not jit.launches or id(jit.node) in seen_kernels:
            continue
        seen_kernels.add(id(jit.node))
        pointers = pointer_parameters(model, jit) if not budget.exhausted else set()
        configs, total = configurations(jit)
        if total > len(configs):
            analysis.truncated.append(f"{jit.name}: {len(configs)} of {total} autotune configs")
        finished = 0  # launch configurations whose questions were all asked
        for launch in jit.launches:
            for index, config in configs:
                if budget.exhausted:  # the file's budget or time is spent: nothing more is evaluated or asked
                    _unknown_launch(model, jit, reports, budget.gave_up())
                    continue
                _configuration(model, jit, launch, index, config, pointers, reports, budget)
                finished += not budget.exhausted
        if finished < len(jit.launches) * len(configs):
            analysis.configurations[jit.name] = [finished, len(jit.launches) * len(configs)]


def _configuration(model: TritonModule, jit, launch, index, config: dict, pointers: set, reports: dict,
                   budget) -> None:
    """One launch under one constexpr configuration: bind it, evaluate every access, prove."""
    import z3

    from kanalyze.analyzer.bounds.checks import evaluate
    from kanalyze.analyzer.bounds.launch import bind
    from kanalyze.analyzer.bounds.solver import Verdict
    from kanalyze.analyzer.bounds.symbols import Unsupported

    try:
        bound = bind(model, launch, index, config, pointers)
        accesses = list(bound.frame.accesses())
    except (Unsupported, z3.Z3Exception, RecursionError) as exc:
        _unknown_launch(model, jit, reports, f"the launch is not modeled: {exc}")
        return
    items, reports_of = [], []
    for call, terms in accesses:
        report = reports.get(id(call))
        if report is None:
            report = reports[id(call)] = _new_report(model, jit, call)
        report.configurations += 1
        if isinstance(terms, Unsupported):
            report.parameter = report.parameter or _base_parameter(jit, call)
        else:
            report.parameter = terms.pointer.base
        tensor = bound.ctx.tensors.get(report.parameter)
        report.tensor = tensor.label if tensor is not None else report.tensor
        if isinstance(terms, Unsupported):
            _merge(report, Verdict("unknown", terms.reason), Verdict("unknown", terms.reason), [])
            continue
        try:
            items.append((terms, evaluate(terms, bound)))
            reports_of.append(report)
        except (Unsupported, z3.Z3Exception, RecursionError) as exc:
            reason = exc.reason if isinstance(exc, Unsupported) else f"internal: {exc}"
            _merge(report, Verdict("unknown", reason), Verdict("unknown", reason), [])
    _prove(model, bound, items, reports_of, budget)


def _prove(model: TritonModule, bound, items: list, reports_of: list, budget) -> None:
    """Both questions for every access of one launch configuration."""
    import z3

    from kanalyze.analyzer.bounds.checks import check_bounds, check_overflows, screen_bounds
    from kanalyze.analyzer.bounds.solver import Verdict
    from kanalyze.analyzer.bounds.symbols import Unsupported

    started = time.perf_counter()
    try:
        suspects = screen_bounds(items, bound, budget)
        bounds_verdicts = [check_bounds(terms, bound, ev, budget, suspects[i]) if i in suspects else Verdict("proved")
                           for i, (terms, ev) in enumerate(items)]
        overflows = check_overflows(items, bound, budget, [set(report.wraps) for report in reports_of])
    except (Unsupported, z3.Z3Exception, RecursionError) as exc:
        reason = exc.reason if isinstance(exc, Unsupported) else f"internal: {exc}"
        bounds_verdicts = [Verdict("unknown", reason)] * len(items)
        overflows = [(Verdict("unknown", reason), [])] * len(items)
    for (terms, _), report, verdict, (overflow, wraps) in zip(items, reports_of, bounds_verdicts, overflows):
        for v in (verdict, *wraps):
            if v.counterexample is not None and "kernel" not in v.counterexample:
                v.counterexample.update(_context(model, bound, terms, report))
        _merge(report, verdict, overflow, wraps)
        report.seconds += (time.perf_counter() - started) / max(len(items), 1)


def _new_report(model: TritonModule, jit, call: cst.Call) -> AccessReport:
    from kanalyze.analyzer.triton.calls import keyword

    name = model.call_name(call) or ""
    kind = "load" if name.endswith(".load") else "store" if name.endswith(".store") else "atomic"
    position = 1 if kind == "load" else None if name.endswith("atomic_cas") else 2
    mask = keyword(call, "mask", position)
    masked = mask is not None and not (isinstance(mask, cst.Name) and mask.value == "None")
    function = model.function_of(call)
    return AccessReport(call, jit.name, function.name if function else jit.name, kind, masked)


def _base_parameter(jit, call: cst.Call) -> str | None:
    """The parameter at the left of the pointer sum (`x_ptr` in `x_ptr + idx`), if it is one."""
    from kanalyze.analyzer.triton.calls import keyword

    expr = keyword(call, "pointer", 0)
    while isinstance(expr, (cst.BinaryOperation, cst.Subscript)):
        expr = expr.left if isinstance(expr, cst.BinaryOperation) else expr.value
    return expr.value if isinstance(expr, cst.Name) and jit.param(expr.value) is not None else None


def _unknown_launch(model, jit, reports: dict, reason: str) -> None:
    from kanalyze.analyzer.bounds.solver import Verdict

    for site in model.calls_in(jit):
        if site.qualname in ACCESS_NAMES:
            report = reports.get(id(site.node))
            if report is None:
                report = reports[id(site.node)] = _new_report(model, jit, site.node)
            _merge(report, Verdict("unknown", reason), Verdict("unknown", reason), [])


def _context(model: TritonModule, bound, terms, report: AccessReport) -> dict:
    from kanalyze.analyzer.cstwalk import node_text

    launch = bound.launch
    text = node_text(model.module, launch.call)
    return {
        "kernel": report.kernel,
        "wrapper": launch.wrapper.qualname if launch.wrapper is not None else None,
        "wrapper_params": _parameters(launch.wrapper),
        "launch": text if len(text) <= 120 else text[:119] + "…",
        "config": bound.config_index,
        "parameter": terms.pointer.base,
        "tensor": report.tensor,
        "access": report.kind,
    }


def _parameters(wrapper) -> list[dict] | None:
    """The wrapper's positional parameters, so that a gate can call it with the counterexample."""
    if wrapper is None:
        return None
    params = wrapper.node.params
    if params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or params.star_kwarg is not None \
            or any(p.default is None for p in params.kwonly_params):
        return None
    return [{"name": p.name.value, "default": p.default is not None}
            for p in [*params.posonly_params, *params.params]]


def _merge(report: AccessReport, bounds, overflow, wraps: list) -> None:
    report.bounds = _worse(report.bounds, bounds)
    for wrap in wraps:
        if wrap.status != "violated":
            continue
        key = id(wrap.node)
        previous = report.wraps.get(key)
        if previous is None or (wrap.objective or 0) < (previous.objective or 0):
            report.wraps[key] = wrap
    report.overflow = _worse(report.overflow, overflow)
    for v in (bounds, overflow):
        if v.status == "unknown" and v.reason and v.reason not in report.reasons:
            report.reasons.append(v.reason)


_RANK = {"proved": 0, "unknown": 1, "violated": 2}


def _worse(old, new):
    """A violation anywhere wins (the smallest one), then unknown, then proved."""
    if old is None:
        return new
    if _RANK[new.status] != _RANK[old.status]:
        return new if _RANK[new.status] > _RANK[old.status] else old
    if new.status == "violated" and (new.objective or 0) < (old.objective or 0):
        return new
    return old


__all__ = ["AccessReport", "BoundsAnalysis", "analyze", "has_launched_accesses"]
