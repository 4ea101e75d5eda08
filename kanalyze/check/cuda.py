"""The CUDA side of the pipeline (analyze.py calls it): CUDA units → findings.

A `.cu` file is one unit.  A Python file that builds CUDA is read one of two
ways: a *plain* file (a `load_inline` solution whose Python side cannot hold a
Python-side finding, analyzer/inline_plain.py) with Python's own `ast`;
any other through LibCST's model of the file, which the Python-side detectors
also read.  Both give the same units, mapped to the same rows and columns.
Then: the kernel model of each unit, every CUDA rule, positions only when
something fired, `// NOLINT` and `# noqa`.
"""

from __future__ import annotations

from kanalyze.analyzer.sources import measure_nesting
from kanalyze.check.errors import INTERNAL_ERROR, PARSE_ERROR, enter_stage, error_finding, nesting_finding
from kanalyze.findings import Finding, Location


def preload() -> None:
    """Import what a CUDA check needs and build the parser (before the pipeline forks workers)."""
    import importlib

    for name in ("build", "facts", "inline_plain", "positions", "suppressions"):
        importlib.import_module(f"kanalyze.analyzer.cuda.{name}")
    from kanalyze.analyzer.cuda.model import _parser

    _parser()


def analyze_cuda_text(path: str, text: str) -> tuple[list[Finding], int]:
    """Every CUDA finding in a `.cu`/`.cuh`/`.cuda` file, `// NOLINT` applied."""
    from kanalyze.analyzer.cuda.sources import CudaUnit

    return _analyze_cuda(path, text, [CudaUnit(path, text, "file")], None, [], python_rules=False)


def analyze_inline_cuda(path: str, text: str, *, python_rules: bool = True) -> tuple[list[Finding], int]:
    """Every finding of a Python file that builds CUDA: the CUDA detectors over each
    inline unit (findings at the Python file's rows and columns), the Python side of
    each extension, and with `python_rules` every rule's Python-side detectors."""
    nesting = measure_nesting(text)
    if nesting.problem:  # LibCST's native parser would crash; the Triton pass says so when it ran
        return ([nesting_finding(path, nesting)] if python_rules else []), 0
    enter_stage("reading the inline CUDA")
    if python_rules:  # (a Triton file has its LibCST model already; the Python-side rules read it)
        from kanalyze.analyzer.cuda.inline_plain import read_plain

        plain = read_plain(path, text)
        if plain is not None:
            extensions, sizes = plain
            units = [unit for ext in extensions for unit in ext.units]
            return _analyze_cuda(path, text, units, None, extensions, python_rules=False, python_file=True,
                                 sizes=sizes)
    return _analyze_with_libcst(path, text, python_rules)


def _analyze_with_libcst(path: str, text: str, python_rules: bool) -> tuple[list[Finding], int]:
    import libcst as cst

    from kanalyze.analyzer.cstwalk import cached_children
    from kanalyze.analyzer.cuda.inline import find_extensions, module_int_constants
    from kanalyze.analyzer.syntax_errors import locate_parse_error
    from kanalyze.analyzer.triton.model import TritonModule

    with cached_children():
        enter_stage("parsing and modelling the file")
        try:
            host = TritonModule.from_source(path, text)
        except cst.ParserSyntaxError as exc:
            if not python_rules:
                return [], 0
            reason, row, column = locate_parse_error(text, exc)
            return [error_finding(path, f"cannot parse: {reason}", row, column)], 0
        except Exception as exc:  # LibCST raises more than ParserSyntaxError on odd input
            return ([error_finding(path, f"cannot parse: {type(exc).__name__}: {exc}")] if python_rules else []), 0
        enter_stage("reading the inline CUDA")
        try:
            extensions = find_extensions(host)
        except Exception as exc:  # reading the strings must not stop the file's other checks
            extensions = []
            internal = error_finding(path, f"reading the inline CUDA failed: {type(exc).__name__}: {exc}",
                                      code=INTERNAL_ERROR)
        else:
            internal = None
        units = [unit for ext in extensions for unit in ext.units]
        findings, suppressed = _analyze_cuda(path, text, units, host, extensions, python_rules=python_rules,
                                             python_file=True, sizes=module_int_constants(host))
        return ([internal] if internal is not None else []) + findings, suppressed


def _analyze_cuda(path: str, text: str, units: list, host, extensions: list, *, python_rules: bool,
                  python_file: bool = False, sizes: dict[str, int] | None = None) -> tuple[list[Finding], int]:
    """`host` is the file's LibCST model, or None (a `.cu` file, or a plain Python file:
    then only the rules whose Python side reads nothing but the extensions run there)."""
    from kanalyze.analyzer.cuda.model import CudaModule
    from kanalyze.rules import cuda_rules, detecting_rules
    from kanalyze.rules.cuda_rule import CudaReport

    findings: list[Finding] = []
    reports: list = []
    partial: list[tuple] = []   # (unit, model or None, why) for units read in part
    rules = cuda_rules()
    sizes = sizes or {}

    def guarded(rule, run) -> None:
        enter_stage(f"rule {rule.code}")
        try:
            reports.extend(run())
        except Exception as exc:  # a bug in one rule must not hide the others
            findings.append(error_finding(
                path, f"rule {rule.code} failed on this file: {type(exc).__name__}: {exc}", code=INTERNAL_ERROR))

    for unit in units:
        enter_stage(f"parsing the CUDA ({unit.origin})")
        try:
            model = CudaModule.parse(unit)
        except (RecursionError, MemoryError, ValueError) as exc:
            partial.append((unit, None, f"cannot parse: {type(exc).__name__}: {exc}"))
            continue
        except Exception as exc:  # a bug in the model must not stop the other units and files
            findings.append(error_finding(path, f"the CUDA model failed on `{unit.origin}`: "
                                                 f"{type(exc).__name__}: {exc}", code=INTERNAL_ERROR))
            continue
        model.problem_sizes, model.host = sizes, host
        if unit.extension is not None:
            unit.extension.models.append(model)
        if model.errors or model.unknown_macros or unit.skipped:
            partial.append((unit, model, ""))
        for rule in rules:
            guarded(rule, lambda: rule.check_cuda(model))
    if python_file:
        for rule in rules:
            if host is not None or not rule.host_reads_python:
                guarded(rule, lambda: rule.check_host(host, extensions))
        if python_rules:
            for rule in detecting_rules():
                guarded(rule, lambda: rule.check(host))
    skipped = [s for ext in extensions for s in ext.skipped]
    if not reports and not partial and not skipped:
        return findings, 0

    enter_stage("placing the findings")
    from kanalyze.analyzer.cuda.positions import CudaLocator, read_in_part
    from kanalyze.analyzer.cuda.suppressions import CudaSuppressions
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.check.dead_kernels import without_dead_kernels
    from kanalyze.rules import rules_by_code

    locator = CudaLocator(text, host)
    located: list[tuple[str, tuple[int, int, int, int], str, str | None, dict]] = []
    for report in without_dead_kernels(reports):
        if isinstance(report, CudaReport):
            span = locator.unit_span(report.unit, report.node.start_byte, report.node.end_byte)
        else:
            span = locator.python_span(report.node)
        located.append((report.code, span, report.message, report.kernel, report.evidence))
    for unit, model, why in partial:
        span, message = read_in_part(unit, model, why, locator)
        located.append((PARSE_ERROR[0], span, message, None, {"reason": message, "cuda_source": unit.origin}))
    for note in skipped:
        located.append((PARSE_ERROR[0], locator.python_span(note.node),
                        f"{note.what}; findings in that source may be missing", None, {"reason": note.what}))

    names = rules_by_code()
    noqa = Suppressions.parse(text) if python_file else None
    nolint = CudaSuppressions.parse(text)
    seen: set[tuple] = set()
    suppressed = 0
    for code, (row, column, end_row, end_column), message, kernel, evidence in located:
        key = (code, row, column, message)
        if key in seen:
            continue
        seen.add(key)
        lines = (row, end_row) if end_row != row else (row,)
        if nolint.suppressed(code, lines) or (noqa is not None and noqa.suppressed(code, lines)):
            suppressed += 1
            continue
        findings.append(Finding(code=code, name=names[code].name, message=message,
                                location=Location(path, row, column, end_row, end_column),
                                kernel=kernel, evidence=evidence))
    findings.sort(key=lambda f: f.sort_key)
    return findings, suppressed
