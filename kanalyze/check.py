"""The pipeline: files → kernel units → static findings → (gates) → report.

This is the only module that ties the analyzer and the rules together.  It
never prints; the CLI, the LSP server and the report writers do.

Static path, in order:
  1. discover files (sources.discover), honouring `exclude`;
  2. read each one safely; unreadable input becomes KAN000, never a traceback;
  3. skip files that cannot contain a kernel (text prefilter);
  4. look the file up in the content-hash cache;
  5. otherwise parse it with LibCST, build the kernel model, run every rule,
     compute positions only if something fired, apply `# noqa`;
  6. filter by select / ignore / per-file-ignores.
Step 5 runs in a process pool when there are enough files to be worth it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Iterable

from kanalyze.analyzer.cuda_sources import cuda_files_named_in, is_cuda_path, may_contain_inline_cuda
from kanalyze.analyzer.sources import (
    MAX_NESTING, SourceError, SourceText, discover, may_contain_triton, read_source, too_deeply_nested,
)
from kanalyze.cache import Cache
from kanalyze.config import Config
from kanalyze.findings import Finding, Location

PARSE_ERROR = ("KAN000", "parse-error")
INTERNAL_ERROR = ("KAN001", "internal-error")

# Below this many files to parse, a process pool costs more than it saves.
POOL_THRESHOLD = 8


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0
    files_parsed: int = 0
    files_from_cache: int = 0
    suppressed: int = 0
    notes: list[str] = field(default_factory=list)  # said once per run, e.g. "nvcc was not found"


def _error_finding(path: str, reason: str, row: int = 1, column: int = 1, code=PARSE_ERROR) -> Finding:
    return Finding(
        code=code[0], name=code[1],
        message=reason,
        location=Location(path, row, column, row, column),
        evidence={"reason": reason},
    )


def _nesting_finding(path: str) -> Finding:
    # Checked before any LibCST parse: its native parser overflows the stack
    # (a signal, not an exception) on thousands of nested brackets.
    return _error_finding(path, f"cannot parse: more than {MAX_NESTING} brackets are open at once "
                                f"(Python itself refuses such code)")


def analyze_text(path: str, text: str) -> tuple[list[Finding], int]:
    """Every finding of every rule in one file's text, `# noqa` applied.

    Returns the findings and the number of findings that `# noqa` suppressed.
    Never raises on user input.
    """
    from kanalyze.analyzer.cstwalk import cached_children

    with cached_children():
        return _analyze(path, text)


def _analyze(path: str, text: str) -> tuple[list[Finding], int]:
    import libcst as cst

    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.analyzer.triton import TritonModule
    from kanalyze.rules import detecting_rules, rules_by_code

    if too_deeply_nested(text):
        return [_nesting_finding(path)], 0
    try:
        model = TritonModule.from_source(path, text)
    except cst.ParserSyntaxError as exc:
        message = " ".join(exc.message.split())
        return [_error_finding(path, f"cannot parse: {message}", exc.raw_line, exc.raw_column + 1)], 0
    except (RecursionError, MemoryError) as exc:
        return [_error_finding(path, f"cannot parse: the file is too deeply nested ({type(exc).__name__})")], 0
    except Exception as exc:  # LibCST raises more than ParserSyntaxError on odd input
        return [_error_finding(path, f"cannot parse: {type(exc).__name__}: {exc}")], 0

    reports = []
    findings: list[Finding] = []
    for rule in detecting_rules():
        try:
            reports.extend(rule.check(model))
        except Exception as exc:  # a bug in one rule must not hide the others
            findings.append(_error_finding(
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


def analyze_source(path: str, text: str, language: str | None = None) -> tuple[list[Finding], int]:
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
        findings, suppressed = analyze_text(path, text)
    if may_contain_inline_cuda(text):
        if not triton and too_deeply_nested(text):  # the Triton pass has not checked it
            return [_nesting_finding(path)], 0
        # The Triton pass already ran the Python-side detectors (and reported a parse error).
        more, more_suppressed = analyze_inline_cuda(path, text, python_rules=not triton)
        findings = sorted(findings + more, key=lambda f: f.sort_key)
        suppressed += more_suppressed
    return findings, suppressed


def needs_analysis(path: str, text: str) -> bool:
    """The prefilter of `analyze_source`: can this text hold a kernel at all?"""
    return is_cuda_path(path) or may_contain_triton(text) or may_contain_inline_cuda(text)


def analyze_cuda_text(path: str, text: str) -> tuple[list[Finding], int]:
    """Every CUDA finding in a `.cu`/`.cuh`/`.cuda` file, `// NOLINT` applied (cuda_check.py)."""
    from kanalyze.cuda_check import analyze_cuda_text as analyze

    return analyze(path, text)


def analyze_inline_cuda(path: str, text: str, *, python_rules: bool = True) -> tuple[list[Finding], int]:
    """Every finding of a Python file that builds CUDA (cuda_check.py): the CUDA
    detectors over each inline unit, the Python side of each extension, and with
    `python_rules` every rule's Python-side detectors."""
    from kanalyze.cuda_check import analyze_inline_cuda as analyze

    return analyze(path, text, python_rules=python_rules)


def _analyze_batch(batch: list[tuple[str, str]], proof_ranges: dict | None = None) -> list[tuple[str, list[dict], int]]:
    if proof_ranges is not None:  # a spawned worker does not inherit the parent's setting
        from kanalyze.analyzer.bounds import configure

        configure(proof_ranges)
    results = []
    for path, text in batch:
        findings, suppressed = analyze_source(path, text)
        results.append((path, [f.to_dict() for f in findings], suppressed))
    return results


def _preload() -> None:
    """Import the analyzers and rules before forking the workers: they inherit them instead of
    each importing them again (about 0.4 s of CPU per worker)."""
    from kanalyze.cuda_check import preload
    from kanalyze.rules import all_rules

    all_rules()
    preload()


def _batches(items: list, count: int) -> list[list]:
    # Interleave so that large and small files spread evenly over workers.
    return [items[i::count] for i in range(count) if items[i::count]]


def run_static(
    paths: Iterable[str],
    config: Config,
    *,
    force_exclude: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
) -> CheckResult:
    from kanalyze.analyzer import bounds

    # The proof settings are process-wide (pool workers inherit them): put back
    # what was there, so that one run's selection never leaks into the next.
    previous = dict(bounds._RANGES)
    try:
        return _run_static(paths, config, force_exclude=force_exclude, use_cache=use_cache, jobs=jobs)
    finally:
        bounds.configure(previous)


def _run_static(
    paths: Iterable[str],
    config: Config,
    *,
    force_exclude: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
) -> CheckResult:
    result = CheckResult()
    from kanalyze.analyzer.bounds import configure, proof_ranges

    ranges = proof_ranges(config.raw)  # `max-size` / `max-numel` of the MEM003 / MEM004 proofs
    if not (config.selects("MEM003") or config.selects("MEM004")):
        ranges["proofs"] = False  # the z3 proofs are most of a cold check's cost: skip them when unwanted
    configure(ranges)
    cache = Cache.open(config.root, repr(sorted(ranges.items()))) if use_cache else Cache.disabled()
    to_parse: list[tuple[str, str]] = []
    per_file: dict[str, list[Finding]] = {}

    # A worklist: CUDA files that a checked Python file builds (`load(sources=[...])`) join it.
    pending = list(discover(paths, config.exclude, force_exclude=force_exclude, root=config.root))
    listed = {os.path.normpath(p) for p, _ in pending}
    for path, explicit in pending:
        result.files_checked += 1
        source = read_source(path, explicit=explicit)
        if source is None:
            continue
        if isinstance(source, SourceError):
            per_file[path] = [_error_finding(path, source.reason, source.row, source.column + 1)]
            continue
        assert isinstance(source, SourceText)
        if not needs_analysis(path, source.text):
            continue
        for named in cuda_files_named_in(path, source.text):
            if os.path.normpath(named) not in listed:
                listed.add(os.path.normpath(named))
                pending.extend((p, False) for p, _ in discover([named], config.exclude, force_exclude=True,
                                                                root=config.root))
        cached = cache.get(path, source.text)
        if cached is not None:
            findings, suppressed = cached
            per_file[path] = [Finding.from_dict(d) for d in findings]
            result.suppressed += suppressed
            result.files_from_cache += 1
            continue
        to_parse.append((path, source.text))

    result.files_parsed = len(to_parse)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers > 1 and len(to_parse) >= POOL_THRESHOLD:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        if context.get_start_method() == "fork":
            _preload()
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            batches = _batches(to_parse, workers * 4)
            outputs = [r for batch in pool.map(_analyze_batch, batches, [ranges] * len(batches)) for r in batch]
    else:
        outputs = _analyze_batch(to_parse)

    texts = dict(to_parse)
    for path, finding_dicts, suppressed in outputs:
        cache.put(path, texts[path], finding_dicts, suppressed)
        per_file[path] = [Finding.from_dict(d) for d in finding_dicts]
        result.suppressed += suppressed
    cache.save()

    for path in sorted(per_file):
        result.findings.extend(f for f in per_file[path] if config.selects(f.code, path))
    result.findings.sort(key=lambda f: f.sort_key)
    return result


def run_ir(
    paths: Iterable[str],
    config: Config,
    result: CheckResult,
    *,
    targets: list[str] | None = None,
    show_resources: bool = False,
    force_exclude: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
) -> CheckResult:
    """The IR stage (`--ir`): compile every kernel ahead of time (Triton; CUDA
    through nvcc), scan PTX/SASS, check resource budgets, and merge what it
    finds into `result`, the static findings.  Only called with `--ir`, so the
    static path never loads it (nor triton)."""
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.merge import failure_findings, hit_findings, merge
    from kanalyze.analyzer.ir.settings import SettingsError, load_settings
    from kanalyze.analyzer.ir.stage import analyze_ir
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.config import ConfigError
    from kanalyze.rules.res002_resource_budget import ResourceBudget

    try:
        settings = load_settings(config.raw, targets, show_resources)
    except SettingsError as exc:
        raise ConfigError(str(exc)) from exc
    sources: list[tuple[str, str]] = []
    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root):
        source = read_source(path, explicit=explicit)
        if isinstance(source, SourceText) and needs_analysis(path, source.text):
            sources.append((path, source.text))
    cache = ArtifactCache.open(config.root) if use_cache else ArtifactCache.disabled()
    run = analyze_ir(sources, settings, cache, workers=jobs)

    rules = _clause_rules({"PRC001", "PRC002", "ORD001", "EXC001", "EXC002", "RES002", "KAN002"})
    names = {code: rule.name for code, rule in rules.items()}
    gates = {code: rule.gate for code, rule in rules.items()}
    budget = ResourceBudget()
    found = hit_findings(run, names, gates) + failure_findings(run, names["KAN002"])
    for file_ir in run.files:
        for kernel in file_ir.kernels:
            for report in budget.check_ir(kernel, show_resources=settings.show_resources):
                found.append(Finding(code=report.code, name=budget.name, message=report.message,
                                     location=Location(file_ir.path, report.row, 1, report.row, 1),
                                     kernel=report.kernel, evidence=report.evidence))
    found = [f for f in found if config.selects(f.code, f.location.file)]
    static, alone = merge(result.findings, found)
    texts = dict(sources)
    kept = []
    for finding in alone:
        text = texts.get(finding.location.file, "")
        rows = tuple(finding.evidence.get("rows") or (finding.location.row,))
        if Suppressions.parse(text).suppressed(finding.code, rows):
            result.suppressed += 1
            continue
        kept.append(finding)
    result.findings = sorted(static + kept, key=lambda f: f.sort_key)
    result.notes.extend(run.notes)
    result.notes.append(f"IR: {run.compiled} kernel configurations compiled, {run.from_cache} from the cache "
                        f"({', '.join(t.name for t in settings.targets)}; {run.seconds:.1f} s)")
    return result


def run_dynamic(paths: Iterable[str], config: Config, result: CheckResult, options, *,
                force_exclude: bool = False) -> CheckResult:
    """The dynamic pass (`--dynamic`): run the gates that the flags call for (or
    every gate) in sandboxed workers, and move each flag to confirmed / refuted /
    unconfirmed; gate-found violations join as confirmed findings.  `options` is a
    `kanalyze.dynamic.confirm.DynamicOptions`.  Only called with `--dynamic`, so
    the static path never loads torch or triton (the workers import them)."""
    from kanalyze.dynamic.confirm import confirm
    from kanalyze.rules import rules_by_code

    files = [path for path, _ in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root)
             if path.endswith(".py")]
    names = {code: rule.name for code, rule in rules_by_code().items()}
    found = confirm(result.findings, files, options, names)
    result.findings = [f for f in found if config.selects(f.code, f.location.file)]
    return result


def _clause_rules(codes: set[str]) -> dict:
    """The rule classes of `codes`, importing only their modules (the IR stage's
    warm path should not pay for the whole catalog)."""
    import importlib
    import pkgutil

    import kanalyze.rules as package

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        code = info.name.split("_", 1)[0].upper()
        if code in codes and not info.name.endswith("_cuda"):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and getattr(value, "code", None) == code and value.__module__ == module.__name__:
                    found[code] = value
    return found

