"""One file's text → its findings: the Triton pass, and the dispatch to the CUDA pass.

What the pool's workers, the editor and the tests call; never raises on user input.
"""

from __future__ import annotations

from kanalyze.analyzer.cuda.sources import is_cuda_path, may_contain_inline_cuda
from kanalyze.analyzer.sources import may_contain_triton, too_deeply_nested
from kanalyze.check.errors import INTERNAL_ERROR, error_finding, nesting_finding
from kanalyze.findings import Finding, Location


def analyze_text(path: str, text: str, proofs: dict | None = None) -> tuple[list[Finding], int]:
    """Every finding of every rule in one file's text, `# noqa` applied.

    `proofs` are the MEM003/MEM004 proof settings (`max-size`, `max-numel`, and
    `proofs: False` to skip z3); the defaults when None.  Returns the findings
    and the number of findings that `# noqa` suppressed.  Never raises on user input.
    """
    from kanalyze.analyzer.cstwalk import cached_children

    with cached_children():
        return _analyze(path, text, proofs or {})


def _analyze(path: str, text: str, proofs: dict) -> tuple[list[Finding], int]:
    import libcst as cst

    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.analyzer.triton.model import TritonModule
    from kanalyze.rules import detecting_rules, rules_by_code

    if too_deeply_nested(text):
        return [nesting_finding(path)], 0
    try:
        model = TritonModule.from_source(path, text, proofs)
    except cst.ParserSyntaxError as exc:
        message = " ".join(exc.message.split())
        return [error_finding(path, f"cannot parse: {message}", exc.raw_line, exc.raw_column + 1)], 0
    except (RecursionError, MemoryError) as exc:
        return [error_finding(path, f"cannot parse: the file is too deeply nested ({type(exc).__name__})")], 0
    except Exception as exc:  # LibCST raises more than ParserSyntaxError on odd input
        return [error_finding(path, f"cannot parse: {type(exc).__name__}: {exc}")], 0

    reports = []
    findings: list[Finding] = []
    for rule in detecting_rules():
        try:
            reports.extend(rule.check(model))
        except Exception as exc:  # a bug in one rule must not hide the others
            findings.append(error_finding(
                path, f"rule {rule.code} failed on this file: {type(exc).__name__}: {exc}", code=INTERNAL_ERROR))
    if not reports:
        return findings, 0

    positions = Positions(model.module, text)
    suppressions = Suppressions.parse(text)
    names = rules_by_code()
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
    findings.sort(key=lambda f: f.sort_key)
    return findings, suppressed


def analyze_source(path: str, text: str, language: str | None = None,
                   proofs: dict | None = None) -> tuple[list[Finding], int]:
    """One file's text → its findings, whatever the file holds: what the pool's
    workers and the editor call.  A CUDA file (by suffix, or `language="cuda"`
    for an unsaved editor buffer) goes through the CUDA pass; Python through the
    Triton pass when it may hold a Triton kernel and through the CUDA pass when
    it may build CUDA (load_inline, cupy); anything else gives no findings."""
    if language == "cuda" or is_cuda_path(path):
        return analyze_cuda_text(path, text)
    findings: list[Finding] = []
    suppressed = 0
    triton = may_contain_triton(text)
    if triton:
        findings, suppressed = analyze_text(path, text, proofs)
    if may_contain_inline_cuda(text):
        if not triton and too_deeply_nested(text):  # the Triton pass has not checked it
            return [nesting_finding(path)], 0
        # The Triton pass already ran the Python-side detectors (and reported a parse error).
        more, more_suppressed = analyze_inline_cuda(path, text, python_rules=not triton)
        findings = sorted(findings + more, key=lambda f: f.sort_key)
        suppressed += more_suppressed
    return findings, suppressed


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


