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

from kanalyze.analyzer.sources import SourceError, SourceText, discover, may_contain_triton, read_source
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


def _error_finding(path: str, reason: str, row: int = 1, column: int = 1, code=PARSE_ERROR) -> Finding:
    return Finding(
        code=code[0], name=code[1],
        message=reason,
        location=Location(path, row, column, row, column),
        evidence={"reason": reason},
    )


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


def _analyze_batch(batch: list[tuple[str, str]]) -> list[tuple[str, list[dict], int]]:
    results = []
    for path, text in batch:
        findings, suppressed = analyze_text(path, text)
        results.append((path, [f.to_dict() for f in findings], suppressed))
    return results


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
    result = CheckResult()
    cache = Cache.open(config.root) if use_cache else Cache.disabled()
    to_parse: list[tuple[str, str]] = []
    per_file: dict[str, list[Finding]] = {}

    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root):
        result.files_checked += 1
        source = read_source(path, explicit=explicit)
        if source is None:
            continue
        if isinstance(source, SourceError):
            per_file[path] = [_error_finding(path, source.reason, source.row, source.column + 1)]
            continue
        assert isinstance(source, SourceText)
        if not may_contain_triton(source.text):
            continue
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
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            outputs = [r for batch in pool.map(_analyze_batch, _batches(to_parse, workers * 4)) for r in batch]
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
