"""One file's text → its findings: the Triton pass, and the dispatch to the CUDA pass.

What the pool's workers, the editor and the tests call; never raises on user input.
A file too deeply nested for the parsers is refused before any parse
(sources.measure_nesting); one whose analysis runs past its CPU budget is
reported as such (errors.cpu_budget).  The z3 proofs get a deadline below that
budget (errors.PROOF_SHARE of it), so that they alone never take a file there.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from kanalyze.analyzer.cuda.sources import is_cuda_path, may_contain_inline_cuda
from kanalyze.analyzer.project_index import Linked
from kanalyze.analyzer.sources import may_contain_triton, measure_nesting
from kanalyze.check.errors import (FILE_BUDGET_S, INTERNAL_ERROR, PROOF_SHARE, OverBudget, cpu_budget, enter_stage,
                                   error_finding, nesting_finding, over_budget_finding)
from kanalyze.findings import Finding, Location

# Python frames one analysis may stack.  LibCST's code generation and kanalyze's
# own walks recurse two to three frames per level of an expression, and the
# nesting guard lets expressions up to 1,000 levels deep through (sources.py):
# under Python's default limit of 1,000 frames they fail from about 480 levels.
# Measured on this machine, recursion through C calls (as LibCST's context
# managers do) crashes the 8 MiB main stack only past 30,000 such frames.
ANALYSIS_RECURSION_LIMIT = 10_000


def analyze_text(path: str, text: str, proofs: dict | None = None, *,
                 linked: Linked | None = None) -> tuple[list[Finding], int]:
    """Every finding of every rule in one file's text, `# noqa` applied.

    `proofs` are the MEM003/MEM004 proof settings (`max-size`, `max-numel`, and
    `proofs: False` to skip z3); the defaults when None.  `linked`: what the project
    index says about the file (analyzer/project_index.py); None analyzes it alone.
    Returns the findings and the number of findings that `# noqa` suppressed.
    Never raises on user input.
    """
    from kanalyze.analyzer.cstwalk import cached_children

    settings = dict(proofs or {})
    if linked is not None:
        settings["linked"] = linked
    with cached_children():
        return _analyze(path, text, settings)


def _analyze(path: str, text: str, proofs: dict) -> tuple[list[Finding], int]:
    import libcst as cst

    from kanalyze.analyzer.syntax_errors import locate_parse_error
    from kanalyze.analyzer.triton.model import TritonModule
    from kanalyze.check.dead_kernels import without_dead_kernels
    from kanalyze.rules import detecting_rules

    nesting = measure_nesting(text)
    if nesting.problem:
        return [nesting_finding(path, nesting)], 0
    enter_stage("parsing and modelling the file")
    try:
        model = TritonModule.from_source(path, text, proofs)
    except cst.ParserSyntaxError as exc:
        reason, row, column = locate_parse_error(text, exc)
        return [error_finding(path, f"cannot parse: {reason}", row, column)], 0
    except (RecursionError, MemoryError) as exc:
        return [error_finding(path, f"cannot parse: the file is too deeply nested ({type(exc).__name__})")], 0
    except Exception as exc:  # LibCST raises more than ParserSyntaxError on odd input
        return [error_finding(path, f"cannot parse: {type(exc).__name__}: {exc}")], 0
    except BaseException as exc:  # a panic in LibCST's native parser is a BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit, OverBudget)):
            raise
        return [error_finding(path, f"cannot parse: the parser failed: {type(exc).__name__}: {exc}")], 0

    reports = []
    findings: list[Finding] = []
    for rule in detecting_rules():
        enter_stage(f"rule {rule.code}")
        try:
            reports.extend(rule.check(model))
        except Exception as exc:  # a bug in one rule must not hide the others
            findings.append(error_finding(
                path, f"rule {rule.code} failed on this file: {type(exc).__name__}: {exc}", code=INTERNAL_ERROR))
    if not reports:
        return findings, 0
    enter_stage("placing the findings")
    try:
        never_run = getattr(proofs.get("linked"), "never_run", ())  # the project index's (never_run.py)
        placed, suppressed = _place(path, text, model, without_dead_kernels(reports, never_run))
    except Exception as exc:  # a RecursionError, say: LibCST's code generation recurses once per level
        return findings + [error_finding(path, f"placing the findings failed: {type(exc).__name__}: {exc}",
                                         code=INTERNAL_ERROR)], 0
    return sorted(findings + placed, key=lambda f: f.sort_key), suppressed


def _place(path: str, text: str, model, reports: list) -> tuple[list[Finding], int]:
    """The rules' reports as findings with rows and columns, `# noqa` applied, duplicates dropped."""
    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.rules import rules_by_code

    positions = Positions(model.module, text)
    suppressions = Suppressions.parse(text)
    names = rules_by_code()
    findings: list[Finding] = []
    seen: set[tuple] = set()
    suppressed = 0
    for report in reports:
        row, column, end_row, end_column = positions.span(report.node)
        key = (report.code, row, column, report.message)
        if key in seen:
            continue
        seen.add(key)
        if suppressions.suppressed(report.code, (row, end_row) if end_row != row else (row,)):
            suppressed += 1
            continue
        findings.append(Finding(
            code=report.code,
            name=names[report.code].name,
            message=report.message,
            location=Location(path, row, column, end_row, end_column),
            kernel=report.kernel,
            evidence=report.evidence,
        ))
    return findings, suppressed


def analyze_source(path: str, text: str, language: str | None = None, proofs: dict | None = None,
                   budget: float | None = FILE_BUDGET_S, linked: Linked | None = None) -> tuple[list[Finding], int]:
    """One file's text → its findings, whatever the file holds: what the pool's
    workers and the editor call.  A CUDA file (by suffix, or `language="cuda"`
    for an unsaved editor buffer) goes through the CUDA pass; Python through the
    Triton pass when it may hold a Triton kernel and through the CUDA pass when
    it may build CUDA (load_inline, cupy); anything else gives no findings.

    `budget` is the CPU seconds the file may take (None: no limit); past it the
    file gets one KAN001 finding that names the stage that ran over; the z3 proofs
    stop at PROOF_SHARE of it (a KAN003 note says so).  `linked`: what the project
    index of a check says about the file (None: the file alone)."""
    if budget:  # the proofs' watchdog (bounds/solver.py), in this process's CPU time, as the budget counts
        proofs = {**(proofs or {}), "proof-deadline": time.process_time() + PROOF_SHARE * budget}
    try:
        with cpu_budget(budget), _deep_recursion():
            return _analyze_source(path, text, language, proofs, linked)
    except OverBudget as stopped:
        return [over_budget_finding(path, stopped)], 0
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a bug outside the rules' guards, a panic in native code: this file alone
        return [error_finding(path, f"analysis failed: {type(exc).__name__}: {exc}", code=INTERNAL_ERROR)], 0


def _analyze_source(path: str, text: str, language: str | None, proofs: dict | None,
                    linked: Linked | None = None) -> tuple[list[Finding], int]:
    if language == "cuda" or is_cuda_path(path):
        return analyze_cuda_text(path, text)
    findings: list[Finding] = []
    suppressed = 0
    triton = may_contain_triton(text)
    if triton:
        findings, suppressed = analyze_text(path, text, proofs, linked=linked)
    if may_contain_inline_cuda(text):
        # The Triton pass already ran the Python-side detectors (and reported a parse error).
        more, more_suppressed = analyze_inline_cuda(path, text, python_rules=not triton)
        findings = sorted(findings + more, key=lambda f: f.sort_key)
        suppressed += more_suppressed
    return findings, suppressed


@contextmanager
def _deep_recursion() -> Iterator[None]:
    """Python's recursion limit raised to ANALYSIS_RECURSION_LIMIT, in the main thread
    only (another thread's stack may be smaller: there, deep input gives a KAN001)."""
    previous = sys.getrecursionlimit()
    if threading.current_thread() is not threading.main_thread() or previous >= ANALYSIS_RECURSION_LIMIT:
        yield
        return
    sys.setrecursionlimit(ANALYSIS_RECURSION_LIMIT)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def needs_analysis(path: str, text: str) -> bool:
    """The prefilter of `analyze_source`: can this text hold a kernel at all?"""
    return is_cuda_path(path) or may_contain_triton(text) or may_contain_inline_cuda(text)


def analyze_cuda_text(path: str, text: str) -> tuple[list[Finding], int]:
    """Every CUDA finding in a `.cu`/`.cuh`/`.cuda` file, `// NOLINT` applied (check/cuda.py)."""
    from kanalyze.check.cuda import analyze_cuda_text as analyze

    return analyze(path, text)


def analyze_inline_cuda(path: str, text: str, *, python_rules: bool = True) -> tuple[list[Finding], int]:
    """Every finding of a Python file that builds CUDA (check/cuda.py): the CUDA
    detectors over each inline unit, the Python side of each extension, and with
    `python_rules` every rule's Python-side detectors."""
    from kanalyze.check.cuda import analyze_inline_cuda as analyze

    return analyze(path, text, python_rules=python_rules)


