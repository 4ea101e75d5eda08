"""The IR stage over a set of files: plan, compile (or read the cache), scan.

For each Triton file: the plan (scratch module + launch contexts) → one job
per kernel, context and target → the worker's compiled configurations → the
scanners' facts and the kernel's resources.  For each CUDA unit: nvcc per
target → the same.  The result is facts, not findings: the pipeline
(kanalyze.check) hands them to the rules and merges them with the static
findings.  One kernel's failure is one `CompiledKernel` with `ok=False`; the
rest goes on.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from kanalyze.analyzer.cuda.sources import is_cuda_path, may_contain_inline_cuda
from kanalyze.analyzer.ir.artifacts import ArtifactCache, code_fingerprint, digest, tool_versions
from kanalyze.analyzer.ir.cuda_units import cuda_units
from kanalyze.analyzer.ir.nvcc import NVCC_MISSING, CudaSource, compile_cuda, find_nvcc, nvcc_version
from kanalyze.analyzer.ir.plan import FilePlan, plan_file
from kanalyze.analyzer.ir.resources import Resources
from kanalyze.analyzer.ir.runner import job_spec, run_batch
from kanalyze.analyzer.ir.scan import IRHit, Scanner
from kanalyze.analyzer.ir.settings import IRSettings
from kanalyze.analyzer.ir.targets import Target
from kanalyze.analyzer.sources import may_contain_triton

MAX_LABEL_VALUES = 8


@dataclass
class CompiledKernel:
    """One configuration of one kernel on one target, or why it did not compile."""

    path: str
    kernel: str
    target: Target
    config: str                    # "BLOCK=1024, num_warps=4 (launch at line 40)"
    row: int                       # where budget findings go: the autotune Config, else the def
    def_row: int
    ok: bool
    error: str | None = None
    error_row: int | None = None
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)
    resources: Resources = field(default_factory=Resources)
    hits: list[IRHit] = field(default_factory=list)
    from_cache: bool = False
    seconds: float = 0.0
    language: str = "triton"


    def to_dict(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k not in ("target", "resources", "hits")}
        return {**data, "target": self.target.name, "resources": self.resources.to_dict(),
                "hits": [hit.__dict__ for hit in self.hits]}

    @classmethod
    def from_dict(cls, data: dict) -> "CompiledKernel":
        kernel = cls(**{**data, "target": Target.parse(data["target"]),
                        "resources": Resources.from_dict(data["resources"]), "hits": []})
        kernel.hits = [IRHit(**{**hit, "rows": tuple(hit["rows"])}) for hit in data["hits"]]
        return kernel


@dataclass
class FileIR:
    path: str
    kernels: list[CompiledKernel] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every result is final: none timed out or lost its worker (those are retried next run)."""
        return not any(k.timed_out or (k.error or "").startswith("the compile worker exited") for k in self.kernels)


@dataclass
class IRRun:
    files: list[FileIR] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # said once per run (nvcc or triton missing)
    compiled: int = 0                                  # configurations compiled in this run
    from_cache: int = 0                                # ... read from the cache
    seconds: float = 0.0


def triton_available() -> bool:
    from importlib.util import find_spec

    return find_spec("triton") is not None


def _label(record: dict, context: dict | None) -> str:
    values = [f"{k}={v}" for k, v in (record.get("constexprs") or {}).items()]
    if len(values) > MAX_LABEL_VALUES:
        values = values[:MAX_LABEL_VALUES] + ["…"]
    options = record.get("options") or {}
    values += [f"{k}={options[k]}" for k in ("num_warps", "num_stages") if options.get(k) is not None]
    where = []
    if context is not None:
        where.append(context["label"])
    if record.get("of", 1) > 1:
        where.append(f"autotune config {record['index'] + 1} of {record['of']}")
    text = ", ".join(values)
    if not text:
        return "; ".join(where)
    return f"{text} ({'; '.join(where)})" if where else text


def _notes(context: dict, record: dict) -> list[str]:
    """What was assumed for this result; a retry's assumption replaces the first guess."""
    later = list(record.get("notes") or [])
    replaced = {name for note in later if "kernel does not compile" in note
                for name in note.split(":", 1)[0].split(", ")}
    return [n for n in context["notes"] if n.split(":", 1)[0] not in replaced] + later


class _Tally:
    """The stage's progress: compile jobs expected and done, told to `progress(name, done, total)`.
    A job is one kernel in one launch context for one target (its autotune configurations
    compile together), or one CUDA unit for one target; one read from the cache counts as done
    at once.  Every job is expected before the first is done; done from the compiling threads."""

    def __init__(self, progress: Callable[[str, int, int], None] | None) -> None:
        self.progress, self.lock = progress, threading.Lock()
        self.done = self.total = 0

    def tell(self, path: str = "", *, done: int = 0, expected: int = 0) -> None:
        if self.progress is None or not (done or expected):
            return
        with self.lock:
            self.done, self.total = self.done + done, self.total + expected
            try:
                shown = os.path.relpath(path) if path else ""
            except ValueError:  # another drive (Windows)
                shown = path
            self.progress(shown, self.done, self.total)


class _Stage:
    def __init__(self, settings: IRSettings, cache: ArtifactCache, workers: int,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.workers = max(1, workers)
        self.run = IRRun()
        self.fingerprint = code_fingerprint()  # plans and scans change with the analyzer's code
        self.tally = _Tally(progress)

    # --- Triton -------------------------------------------------------------

    def plan(self, path: str, text: str) -> FilePlan | None:
        key = "plan-" + digest(os.path.abspath(path), text, self.settings.key(), self.fingerprint)
        cached = self.cache.get(key)
        if cached is not None:
            return FilePlan.from_json(cached)
        import libcst as cst

        from kanalyze.analyzer.cstwalk import cached_children
        from kanalyze.analyzer.triton.model import TritonModule

        try:
            with cached_children():
                model = TritonModule.from_source(path, text)
                plan = plan_file(model, self.settings)
        except (cst.ParserSyntaxError, RecursionError, MemoryError, ValueError):
            return None  # the static pass reports the file (KAN000)
        self.cache.put(key, plan.to_json())
        return plan

    def summary_key(self, path: str, text: str) -> str:
        """A file's scanned results: everything a warm run needs, without PTX to parse again."""
        return "file-" + digest(os.path.abspath(path), text, self.settings.key(),
                                [t.name for t in self.settings.targets], tool_versions(), self.fingerprint)

    def triton(self, sources: list[tuple[str, str]]) -> list[FileIR]:
        files: list[FileIR] = []
        fresh: list[tuple[FileIR, str]] = []
        remaining = []
        for path, text in sources:
            summary = self.cache.get(self.summary_key(path, text))
            if summary is None:
                remaining.append((path, text))
                continue
            file_ir = FileIR(path, [CompiledKernel.from_dict(k) for k in summary["kernels"]], summary["missing"])
            self.run.from_cache += sum(k.ok for k in file_ir.kernels)
            files.append(file_ir)
        for file_ir in self._triton(remaining):
            files.append(file_ir)
            fresh.append((file_ir, dict(remaining)[file_ir.path]))
        for file_ir, text in fresh:
            if file_ir.complete:
                self.cache.put(self.summary_key(file_ir.path, text),
                               {"kernels": [k.to_dict() for k in file_ir.kernels], "missing": file_ir.missing})
        return sorted(files, key=lambda f: f.path)

    def _triton(self, sources: list[tuple[str, str]]) -> list[FileIR]:
        files: list[FileIR] = []
        batches: list[tuple[FilePlan, list[dict]]] = []
        jobs: list[tuple[FileIR, FilePlan, dict, dict, str]] = []   # (file, plan, info, spec, cache key)
        cached: dict[str, list[dict]] = {}
        for path, text in sources:
            plan = self.plan(path, text)
            if plan is None or not plan.kernels:
                continue
            file_ir = FileIR(path, missing=plan.missing)
            files.append(file_ir)
            pending: list[dict] = []
            for k, kernel in enumerate(plan.kernels):
                for c, context in enumerate(kernel.contexts):
                    for target in self.settings.targets:
                        spec = job_spec(context.__dict__, target, f"{k}-{c}-{target.name}", self.settings.max_configs)
                        key = "job-" + digest(plan.scratch_hash, {**spec, "id": None}, tool_versions())
                        jobs.append((file_ir, plan, {"kernel": kernel, "context": context.__dict__, "target": target},
                                     spec, key))
                        records = self.cache.get(key)
                        if records is None:
                            pending.append(spec)
                        else:
                            cached[key] = records
            if pending:
                batches.append((plan, pending))
        self.tally.tell(expected=len(jobs))
        for file_ir, *_, key in jobs:
            if key in cached:
                self.tally.tell(file_ir.path, done=1)
        results = self._compile(batches)
        for file_ir, plan, info, spec, key in jobs:
            records = results.get((plan.path, spec["id"]))
            from_cache = records is None
            if records is None:
                records = cached.get(key, [])
            elif not any(r.get("timed_out") or r.get("crashed") for r in records):
                self.cache.put(key, records)
            lines = self._lines(file_ir.path)
            for record in records:
                file_ir.kernels.append(self._triton_kernel(file_ir.path, lines, info, record, from_cache))
        return files

    def _compile(self, batches: list[tuple[FilePlan, list[dict]]]) -> dict[tuple[str, str], list[dict]]:
        work = []
        for plan, pending in batches:
            chunks = min(len(pending), self.workers)
            name = os.path.basename(plan.path) if plan.path.endswith(".py") else "kernels.py"
            for i in range(chunks):
                work.append((plan, name, pending[i::chunks]))
        results: dict[tuple[str, str], list[dict]] = {}
        if not work:
            return results

        def compile_chunk(item):
            plan, name, jobs = item
            batch = run_batch(plan.scratch, name, jobs, self.settings.timeout_s)
            self.tally.tell(plan.path, done=len(jobs))
            return plan.path, batch

        with ThreadPoolExecutor(max_workers=min(self.workers, len(work))) as pool:
            for path, batch in pool.map(compile_chunk, work):
                for job_id, records in batch.items():
                    results[(path, job_id)] = records
        return results

    def _triton_kernel(self, path: str, lines: list[str], info: dict, record: dict, from_cache: bool) -> CompiledKernel:
        kernel, context, target = info["kernel"], info["context"], info["target"]
        index = record.get("index", 0)
        rows = kernel.config_rows
        row = rows[index] if record.get("of", 1) == len(rows) and index < len(rows) else kernel.def_row
        compiled = CompiledKernel(
            path=path, kernel=kernel.name, target=target, config=_label(record, context), row=row,
            def_row=kernel.def_row, ok=bool(record.get("ok")), error=record.get("error"),
            error_row=record.get("row"), timed_out=bool(record.get("timed_out")),
            notes=_notes(context, record),
            resources=Resources.from_dict(record.get("resources") or {}),
            from_cache=from_cache, seconds=record.get("seconds", 0.0),
        )
        if record.get("dropped"):
            compiled.notes.append(f"{record['dropped']} more autotune configurations were not compiled "
                                  f"(max-configs = {self.settings.max_configs})")
        if compiled.ok:
            compiled.hits = Scanner(record, lines).scan()
            self.run.compiled += not from_cache
            self.run.from_cache += from_cache
        return compiled

    @staticmethod
    def _lines(path: str) -> list[str]:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read().splitlines()
        except OSError:
            return []

    # --- CUDA ---------------------------------------------------------------

    def cuda_work(self, units: list[CudaSource]) -> list[tuple[FileIR, CudaSource, Target, str]] | None:
        """Each unit for each target with its cache key, expected by the tally; None without nvcc."""
        if not units:
            return []
        nvcc = find_nvcc()
        if nvcc is None:
            return None
        by_file: dict[str, FileIR] = {}
        work = []
        for unit in units:
            file_ir = by_file.setdefault(unit.filename, FileIR(unit.filename))
            for target in self.settings.targets:
                key = "cuda-" + digest(unit.text, unit.origin_row, unit.row_map, unit.flags, self.settings.nvcc_flags,
                                       target.name, nvcc_version(nvcc), tool_versions())
                work.append((file_ir, unit, target, key))
        self.tally.tell(expected=len(work))
        return work

    def cuda(self, work: list[tuple[FileIR, CudaSource, Target, str]] | None) -> list[FileIR]:
        if work is None:
            self.run.notes.append(NVCC_MISSING)
        if not work:
            return []
        by_file = {file_ir.path: file_ir for file_ir, *_ in work}

        def counted(item):
            outcome = compile_unit(item)
            self.tally.tell(item[0].path, done=1)
            return outcome

        def compile_unit(item):
            file_ir, unit, target, key = item
            scanned = self.cache.get(f"scan-{key}-{self.fingerprint}")
            if scanned is not None:
                return item, [CompiledKernel.from_dict(k) for k in scanned], True
            record = self.cache.get(key)
            from_cache = record is not None
            if record is None:
                record = compile_cuda(unit, target, timeout_s=self.settings.timeout_s,
                                      extra_flags=self.settings.nvcc_flags)
                if "did not finish" not in (record.get("error") or ""):
                    self.cache.put(key, record)
            kernels = self._cuda_kernels(unit, target, record, from_cache)
            if "did not finish" not in (record.get("error") or ""):
                self.cache.put(f"scan-{key}-{self.fingerprint}", [k.to_dict() for k in kernels])
            return item, kernels, from_cache

        with ThreadPoolExecutor(max_workers=min(self.workers, len(work))) as pool:
            for (file_ir, unit, target, _), kernels, from_cache in pool.map(counted, work):
                file_ir.kernels.extend(kernels)
                compiled = sum(k.ok for k in kernels) > 0
                self.run.compiled += compiled and not from_cache
                self.run.from_cache += compiled and from_cache
        return list(by_file.values())

    def _cuda_kernels(self, unit: CudaSource, target: Target, record: dict, from_cache: bool) -> list[CompiledKernel]:
        flags = " ".join(unit.flags + self.settings.nvcc_flags)
        config = f"nvcc -arch=sm_{target.capability}{target.suffix}" + (f" {flags}" if flags else "")
        origin = unit.file_row(1) or unit.origin_row
        if not record.get("ok"):
            row = unit.file_row(record.get("row")) or origin
            return [CompiledKernel(unit.filename, unit.name or os.path.basename(unit.filename), target, config,
                                   row, origin, False, error=record.get("error"), error_row=row, language="cuda")]
        # Rows are the compiled text's: the file's own for a .cu file, mapped back for inline CUDA.
        lines = unit.text.splitlines() if unit.row_map else self._lines(unit.filename)
        kernels = []
        for function in record["functions"]:
            scanner = Scanner(record, lines, fast_math=record.get("fast_math", False), function=function["symbol"])
            hits = []
            for hit in scanner.scan():
                rows = tuple(r for r in (unit.file_row(r) for r in hit.rows) if r)
                if rows:
                    hit.row, hit.rows = rows[0], rows
                    hits.append(hit)
            row = unit.file_row(function["row"]) or origin
            kernels.append(CompiledKernel(
                unit.filename, function["kernel"], target, config, row, row, True,
                resources=Resources.from_dict(function["resources"]), hits=hits,
                from_cache=from_cache, seconds=record.get("seconds", 0.0), language="cuda"))
        return kernels


def analyze_ir(sources: list[tuple[str, str]], settings: IRSettings, cache: ArtifactCache, *,
               workers: int | None = None, cuda: list[CudaSource] | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> IRRun:
    """Compile and scan every kernel of `sources` ((path, text) of Triton files,
    CUDA files and Python files that build CUDA), plus the CUDA units `cuda`.
    `progress(name, done, total)`: told of the compile jobs (`_Tally`) as each batch of
    them ends, the file's path relative to the working directory as the name."""
    started = time.perf_counter()
    stage = _Stage(settings, cache, workers or os.cpu_count() or 1, progress)
    python = [(p, t) for p, t in sources if not is_cuda_path(p) and may_contain_triton(t)]
    units = [u for p, t in sources if is_cuda_path(p) or may_contain_inline_cuda(t) for u in cuda_units(p, t)]
    units += list(cuda or ())
    work = stage.cuda_work(units)  # expected before any Triton job is done: the total stays put
    if python:
        if triton_available():
            stage.run.files.extend(stage.triton(python))
        else:
            stage.run.notes.append("triton is not installed: Triton kernels were not compiled to PTX/SASS "
                                   '(pip install "kanalyze[ir]")')
    stage.run.files.extend(stage.cuda(work))
    stage.run.seconds = round(time.perf_counter() - started, 3)
    return stage.run
