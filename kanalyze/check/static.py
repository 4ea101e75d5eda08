"""The static pass over many files: discover, read, prefilter, cache, analyze (in a
process pool when there are enough files), filter by the selection.

One bad file never stops the others.  Each file's analysis has a CPU budget
(errors.cpu_budget); a worker that dies (the parser's stack overflowing into a
segmentation fault) or hangs in native code past three budgets of wall time
costs the files it held a second run, each in a process of its own, where the
culprit alone gets a KAN001 finding.  Without a pool, a file the nesting guard
is unsure of is analyzed in a process of its own too.

Before any file is analyzed, the project index (analyzer/project_index.py) links
the Python files of the run: each file's analysis gets what the others say about
it (its kernels that another checked module launches), and its cache entry is
keyed by that as well as by its text (`_cache_text`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kanalyze.analyzer.cuda.sources import cuda_files_named_in, is_cuda_path
from kanalyze.analyzer.project_index import Linked, ProjectIndex
from kanalyze.analyzer.sources import (MAX_EXPRESSION_DEPTH, MAX_NESTING, SourceError, SourceText, decode_source,
                                       discover, measure_nesting, read_source)
from kanalyze.cache import Cache
from kanalyze.check.analyze import analyze_source, needs_analysis
from kanalyze.check.errors import (FILE_BUDGET_S, FILE_BUDGET_WITH_PROOFS_S, crash_finding, error_finding,
                                   worth_caching)
from kanalyze.config import Config
from kanalyze.findings import Finding
from kanalyze.profile import profile_of

# Below this many files to parse, a process pool costs more than it saves.
POOL_THRESHOLD = 8
# A worker that has not answered after this many budgets of wall time is stuck
# where the CPU budget cannot reach (native code): it is killed.
WALL_CLOCK_FACTOR = 3
# Without a pool, a file that nests this deep (sources.measure_nesting) is analyzed
# in a process of its own: a parser crash is not expected there, but conceivable.
UNSURE_DEPTH = MAX_EXPRESSION_DEPTH * 2 // 5
UNSURE_BRACKETS = MAX_NESTING // 2

Output = tuple[str, list[dict], int]  # (path, findings as dicts, suppressed)
Finished = Callable[[str], None]  # told of each file's path as its analysis ends (the run's progress)


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0
    files_parsed: int = 0
    files_from_cache: int = 0
    suppressed: int = 0
    notes: list[str] = field(default_factory=list)  # said once per run, e.g. "nvcc was not found"
    profiles: dict[str, str] = field(default_factory=dict)  # each read file's profile (kanalyze/profile.py)


def _analyze_batch(batch: list[tuple[str, str]], proofs: dict, budget: float | None = FILE_BUDGET_S,
                   in_worker: bool = False, links: dict[str, Linked] | None = None,
                   finished: Finished | None = None) -> list[Output]:
    """Analyze files one after the other.  `in_worker`: this process is a worker,
    which the kernel kills if one file keeps it past WALL_CLOCK_FACTOR budgets.
    `links`: what the project index says about each file (absent: the file alone)."""
    results = []
    links = links or {}
    for path, text in batch:
        if in_worker and budget and hasattr(signal, "setitimer"):
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the default action: terminate
            signal.setitimer(signal.ITIMER_REAL, WALL_CLOCK_FACTOR * budget)
        try:
            findings, suppressed = analyze_source(path, text, proofs=proofs, budget=budget, linked=links.get(path))
        finally:
            if in_worker and budget and hasattr(signal, "setitimer"):
                signal.setitimer(signal.ITIMER_REAL, 0)
        results.append((path, [f.to_dict() for f in findings], suppressed))
        if finished is not None:
            finished(path)
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


def _unsure(text: str) -> bool:
    nesting = measure_nesting(text)
    return nesting.expressions > UNSURE_DEPTH or nesting.brackets > UNSURE_BRACKETS


def _context():
    import multiprocessing

    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def _analyze_in_pool(to_parse: list[tuple[str, str]], proofs: dict, budget: float | None,
                     workers: int, links: dict[str, Linked], finished: Finished | None = None) -> list[Output]:
    """The files over a pool of `workers` processes.  When a worker dies, the pool
    breaks and every batch it had not finished fails: those files are analyzed
    again, each in a process of its own (`_analyze_isolated`).  `finished` hears of a
    batch's files as the batch comes back (the first done, the first told); the outputs
    keep the batches' order."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = _context()
    if context.get_start_method() == "fork":
        _preload()
    outputs: list[Output] = []
    again: list[tuple[str, str]] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        batches = _batches(to_parse, workers * 4)
        futures = [(batch, pool.submit(_analyze_batch, batch, proofs, budget, True, _links_of(batch, links)))
                   for batch in batches]
        if finished is not None:
            for future in as_completed([future for _, future in futures]):
                if not future.cancelled() and future.exception() is None:
                    for path, _, _ in future.result():
                        finished(path)
        for batch, future in futures:
            try:
                outputs.extend(future.result())
            except Exception:  # BrokenProcessPool: a worker died, this batch with it
                again.extend(batch)
    return outputs + (_analyze_isolated(again, proofs, budget, workers, links, finished) if again else [])


def _links_of(batch: list[tuple[str, str]], links: dict[str, Linked]) -> dict[str, Linked]:
    return {path: links[path] for path, _ in batch if path in links}


def _analyze_isolated(items: list[tuple[str, str]], proofs: dict, budget: float | None, workers: int,
                      links: dict[str, Linked] | None = None, finished: Finished | None = None) -> list[Output]:
    """Each file in a fresh process of its own, `workers` at a time: a file that
    kills its process (a segmentation fault, the wall-clock kill) gets one KAN001
    finding saying how it died, and the others their findings."""
    from multiprocessing.connection import wait

    context = _context()
    limit = WALL_CLOCK_FACTOR * budget + 5 if budget else None  # the child's own kill comes first
    pending, running, outputs = deque(items), {}, {}
    while pending or running:
        while pending and len(running) < max(workers, 1):
            path, text = pending.popleft()
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_isolated_child, daemon=True,
                                      args=(writer, path, text, proofs, budget, _links_of([(path, text)], links or {})))
            process.start()
            writer.close()
            running[reader] = (process, path, time.monotonic())
        for reader in wait(list(running), timeout=1.0):
            process, path, _ = running.pop(reader)
            try:
                outputs[path] = reader.recv()
            except (EOFError, OSError):  # it died before it answered
                process.join()
                outputs[path] = (path, [crash_finding(path, _how_it_died(process.exitcode, budget)).to_dict()], 0)
            reader.close()
            process.join()
            if finished is not None:
                finished(path)
        for reader, (process, path, started) in list(running.items()):
            if limit is not None and time.monotonic() - started > limit:
                process.kill()  # wait() sees its pipe close and reports it
    return [outputs[path] for path, _ in items]


def _isolated_child(writer, path: str, text: str, proofs: dict, budget: float | None,
                    links: dict[str, Linked]) -> None:
    writer.send(_analyze_batch([(path, text)], proofs, budget, in_worker=True, links=links)[0])
    writer.close()


def _how_it_died(exitcode: int | None, budget: float | None) -> str:
    if exitcode is not None and exitcode < 0:
        if -exitcode == getattr(signal, "SIGALRM", None) and budget:
            return f"killed after {WALL_CLOCK_FACTOR * budget:g} s of wall time without returning to Python"
        try:
            return f"{signal.Signals(-exitcode).name}, {signal.strsignal(-exitcode)}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def run_static(
    paths: Iterable[str],
    config: Config,
    *,
    force_exclude: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    budget: float | None | str = "config",
    index: ProjectIndex | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CheckResult:
    """`budget`: the CPU seconds one file's analysis may take (None: no limit; "config": the
    configuration's `file-timeout`, else the default for the selection).  `index`: the project
    index to link the files by, built beforehand over a larger tree (a benchmark checking a
    project file by file); None builds it over the files of this run.  `progress(name, done,
    total)`: told of the files to analyze (cached or not; z3 proofs included) before the first
    and as each one ends, its path relative to the working directory as the name."""
    ranges = _ranges(config)
    return _check_files(paths, config, ranges, force_exclude=force_exclude, use_cache=use_cache, jobs=jobs,
                        budget=file_budget(config, ranges) if budget == "config" else budget, index=index,
                        progress=progress)


def file_budget(config: Config, ranges: dict) -> float:
    """The CPU seconds a file may take: `file-timeout`, else longer with the z3 proofs on."""
    if config.file_timeout is not None:
        return config.file_timeout
    return FILE_BUDGET_WITH_PROOFS_S if ranges.get("proofs", True) else FILE_BUDGET_S


def _ranges(config: Config) -> dict:
    from kanalyze.analyzer.bounds.proofs import proof_ranges

    ranges = proof_ranges(config.raw)  # `max-size` / `max-numel` of the MEM003 / MEM004 proofs
    if not (config.selects("MEM003") or config.selects("MEM004")):
        ranges["proofs"] = False  # the z3 proofs are most of a cold check's cost: skip them when unwanted
    return ranges


def run_text(name: str, data: bytes, config: Config) -> CheckResult:
    """Text that is no file on disk (standard input), checked as the file `name` would be
    (its suffix says the language; per-file-ignores match it): no cache, no pool."""
    result = CheckResult(files_checked=1)
    source = decode_source(name, data)
    if isinstance(source, SourceError):
        result.findings = [error_finding(name, source.reason, source.row, source.column + 1)]
    elif isinstance(source, SourceText) and needs_analysis(name, source.text):
        result.profiles[name] = profile_of(config, source.text)
        ranges = _ranges(config)
        findings, result.suppressed = analyze_source(name, source.text, proofs=ranges,
                                                     budget=file_budget(config, ranges))
        result.findings = sorted((f for f in findings if config.selects(f.code, name)), key=lambda f: f.sort_key)
        result.files_parsed = 1
    return result


def _check_files(paths: Iterable[str], config: Config, ranges: dict, *, force_exclude: bool, use_cache: bool,
                 jobs: int | None, budget: float | None, index: ProjectIndex | None = None,
                 progress: Callable[[str, int, int], None] | None = None) -> CheckResult:
    result = CheckResult()
    cache = Cache.open(config.root, repr(sorted(ranges.items())), config.cache_dir) if use_cache else Cache.disabled()
    to_parse: list[tuple[str, str]] = []
    per_file: dict[str, list[Finding]] = {}
    texts: dict[str, str] = {}  # every file read: the project index links the Python ones
    to_analyze: list[tuple[str, str]] = []

    # A worklist: CUDA files that a checked Python file builds (`load(sources=[...])`) join it.
    pending = list(discover(paths, config.exclude, force_exclude=force_exclude, root=config.root,
                            respect_gitignore=config.respect_gitignore))
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
        texts[path] = source.text
        if not needs_analysis(path, source.text):
            continue
        result.profiles[path] = profile_of(config, source.text)
        for named in cuda_files_named_in(path, source.text):
            if os.path.normpath(named) not in listed:
                listed.add(os.path.normpath(named))
                pending.extend((p, False) for p, _ in discover([named], config.exclude, force_exclude=True,
                                                                root=config.root))
        to_analyze.append((path, source.text))

    index = index if index is not None else ProjectIndex.build(texts, callers=config.selects("PRC001"))
    links = {path: linked for path, _ in to_analyze if (linked := index.linked(path)) is not None}
    finished = _tally(progress, len(to_analyze))
    for path, text in to_analyze:
        cached = cache.get(path, _cache_text(text, links.get(path)))
        if cached is not None:
            findings, suppressed = cached
            per_file[path] = [Finding.from_dict(d) for d in findings]
            result.suppressed += suppressed
            result.files_from_cache += 1
            if finished is not None:
                finished(path)
            continue
        to_parse.append((path, text))

    result.files_parsed = len(to_parse)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers > 1 and len(to_parse) >= POOL_THRESHOLD:
        outputs = _analyze_in_pool(to_parse, ranges, budget, workers, links, finished)
    else:
        # No pool to absorb a crash: a file the nesting guard is unsure of gets a process of its own.
        sure: list[tuple[str, str]] = []
        unsure: list[tuple[str, str]] = []
        for path, text in to_parse:
            (unsure if not is_cuda_path(path) and _unsure(text) else sure).append((path, text))
        outputs = (_analyze_batch(sure, ranges, budget, links=links, finished=finished)
                   + _analyze_isolated(unsure, ranges, budget, workers, links, finished))

    for path, finding_dicts, suppressed in outputs:
        if worth_caching(finding_dicts):
            cache.put(path, _cache_text(texts[path], links.get(path)), finding_dicts, suppressed)
        per_file[path] = [Finding.from_dict(d) for d in finding_dicts]
        result.suppressed += suppressed
    cache.save()

    for path in sorted(per_file):
        result.findings.extend(f for f in per_file[path] if config.selects(f.code, path))
    result.findings.sort(key=lambda f: f.sort_key)
    return result


def _cache_text(text: str, linked: Linked | None) -> str:
    """What a file's cache entry is keyed by: its text and, when the project index linked it,
    what the index told its analysis.  A checked text never holds a NUL (sources.decode_source
    refuses it), so the two parts cannot run into each other."""
    return text if linked is None else f"{text}\0{linked.key()}"


def _tally(progress: Callable[[str, int, int], None] | None, total: int) -> Finished | None:
    """What tells `progress` of each file as it ends (None without one, or without files):
    `progress("", 0, total)` at once, then the file's path relative to the working directory."""
    if progress is None or not total:
        return None
    done = 0
    progress("", 0, total)

    def finished(path: str) -> None:
        nonlocal done
        done += 1
        try:
            shown = os.path.relpath(path)
        except ValueError:  # another drive (Windows)
            shown = path
        progress(shown, done, total)
    return finished
