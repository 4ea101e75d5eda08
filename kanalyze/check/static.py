"""The static pass over many files: discover, read, prefilter, cache, analyze (in a
process pool when there are enough files), filter by the selection."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Iterable

from kanalyze.analyzer.cuda.sources import cuda_files_named_in
from kanalyze.analyzer.sources import SourceError, SourceText, discover, read_source
from kanalyze.cache import Cache
from kanalyze.check.analyze import analyze_source, needs_analysis
from kanalyze.check.errors import error_finding
from kanalyze.config import Config
from kanalyze.findings import Finding

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


def _analyze_batch(batch: list[tuple[str, str]], proofs: dict) -> list[tuple[str, list[dict], int]]:
    results = []
    for path, text in batch:
        findings, suppressed = analyze_source(path, text, proofs=proofs)
        results.append((path, [f.to_dict() for f in findings], suppressed))
    return results


def _preload() -> None:
    """Import the analyzers and rules before forking the workers: they inherit them instead of
    each importing them again (about 0.4 s of CPU per worker)."""
    from kanalyze.check.cuda import preload
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
    from kanalyze.analyzer.bounds.proofs import proof_ranges

    ranges = proof_ranges(config.raw)  # `max-size` / `max-numel` of the MEM003 / MEM004 proofs
    if not (config.selects("MEM003") or config.selects("MEM004")):
        ranges["proofs"] = False  # the z3 proofs are most of a cold check's cost: skip them when unwanted
    return _check_files(paths, config, ranges, force_exclude=force_exclude, use_cache=use_cache, jobs=jobs)


def _check_files(paths: Iterable[str], config: Config, ranges: dict, *, force_exclude: bool, use_cache: bool,
                 jobs: int | None) -> CheckResult:
    result = CheckResult()
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
            per_file[path] = [error_finding(path, source.reason, source.row, source.column + 1)]
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
        outputs = _analyze_batch(to_parse, ranges)

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


