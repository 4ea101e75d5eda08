"""Speed of the CUDA static pass, measured side by side in one run.

Builds (or takes) a corpus of CUDA sources, `.cu` files and Python files that
build CUDA with `load_inline` (KernelBench style), and prints for the same files:
  - bare tree-sitter parsing of every CUDA source in them (the `.cu` files and the
    strings the Python files hand to `load_inline`), sequentially: the baseline;
  - that plus LibCST parsing every Python file the strings live in (what the pass
    parsed before plain files were read with `ast`; nothing is run to read them);
  - reading the strings out of the Python files alone, as the check does it (`ast` for
    plain files, LibCST for the others);
  - a cold `kanalyze check` (new process, empty cache), a warm one (cache filled by
    the cold run), and a one-file check including interpreter start-up,
as seconds and as ratios to the baseline, also for the `.cu` files alone.
Target (2-core machine): cold <= 1.5x bare tree-sitter parsing.

    python bench/bench_cuda.py                 # generated corpus, ~4 MB
    python bench/bench_cuda.py --size-mb 8
    python bench/bench_cuda.py --corpus PATH   # an existing tree
    python bench/bench_cuda.py --phases        # also: where a cold check's time goes, phase by phase

The generated corpus (bench/cuda_corpus.py) holds KernelBench-style solutions
(load_inline Python files and `.cu` files with host code) and a share of copies
of the CUDA fixtures, which are dense with findings.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_corpus import build_corpus  # noqa: E402


def cuda_sources(files: list[Path]) -> list[bytes]:
    """Every CUDA source the files hold, as tree-sitter gets it (read once, not timed)."""
    from kanalyze.analyzer.cuda.inline import find_extensions
    from kanalyze.analyzer.cuda.sources import may_contain_inline_cuda
    from kanalyze.analyzer.triton.model import TritonModule

    found: list[bytes] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix != ".py":
            found.append(text.encode())
        elif may_contain_inline_cuda(text):
            try:
                host = TritonModule.from_source(str(path), text)
            except Exception:
                continue
            found.extend(u.text.encode() for e in find_extensions(host) for u in e.units)
    return found


def bare_tree_sitter(sources: list[bytes]) -> None:
    import tree_sitter
    import tree_sitter_cuda

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))
    for source in sources:
        parser.parse(source)


def bare_libcst(texts: list[str]) -> None:
    import libcst

    for text in texts:
        try:
            libcst.parse_module(text)
        except Exception:
            pass


def extract_strings(files: list[Path]) -> None:
    """Only the Python-side reading of the strings, as the check does it (plain files with `ast`,
    the rest with LibCST): the cost of getting the CUDA out of the Python, beside the parse."""
    from kanalyze.analyzer.cuda.inline import find_extensions
    from kanalyze.analyzer.cuda.inline_plain import read_plain
    from kanalyze.analyzer.cuda.sources import may_contain_inline_cuda
    from kanalyze.analyzer.triton.model import TritonModule

    for path in files:
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if may_contain_inline_cuda(text) and read_plain(str(path), text) is None:
            try:
                find_extensions(TritonModule.from_source(str(path), text))
            except Exception:
                pass


def phases(files: list[Path]) -> list[tuple[str, float]]:
    """CPU seconds of each phase of a cold check of `files`, in this process, on one core.
    The pipeline's own functions are wrapped with timers (an inner phase's time is taken
    out of the outer one; the timers themselves add about a tenth): what the kernel model
    reads on demand is a phase of its own, whichever rule asks first."""
    import kanalyze.analyzer.cuda.inline_plain as plain
    import kanalyze.analyzer.cuda.model as cuda_model
    import kanalyze.analyzer.cuda.inline as cuda_inline
    import kanalyze.analyzer.triton.model as triton
    import kanalyze.check.cuda as cuda_check
    from kanalyze.analyzer.cuda.build import build
    from kanalyze.check import analyze_source
    from kanalyze.rules import cuda_rules, detecting_rules

    spent: dict[str, float] = {}
    stack: list[float] = []   # time of inner phases, to take out of the enclosing one

    def timer(label, function, consume=False):
        def timed_call(*args, **kwargs):
            stack.append(0.0)
            start = time.process_time()
            try:
                result = function(*args, **kwargs)
                return list(result) if consume else result
            finally:
                total = time.process_time() - start
                inner = stack.pop()
                spent[label] = spent.get(label, 0.0) + total - inner
                if stack:
                    stack[-1] += total
        return timed_call

    texts = []
    start = time.process_time()
    for path in files:
        texts.append((str(path), path.read_text(encoding="utf-8", errors="replace")))
    spent["reading the files"] = time.process_time() - start
    patches = [(plain, "read_plain", "strings out of plain Python (ast)", False),
               (triton.TritonModule, "from_source", "LibCST model of other Python", False),
               (cuda_inline, "find_extensions", "strings out of other Python (LibCST)", False),
               (cuda_model, "parse_cuda", "tree-sitter parse", False),
               (cuda_check, "_analyze_cuda", "positions, suppressions, findings", False)]
    for rule in cuda_rules():
        patches.append((type(rule), "check_cuda", f"{rule.code} CUDA detectors", True))
        patches.append((type(rule), "check_host", "Python-side detectors", True))
    for rule in detecting_rules():
        patches.append((type(rule), "check", "Python-side detectors", True))
    # What the model reads on demand (cached properties), out of the rule that asks first.
    from functools import cached_property

    for owner in (cuda_model.CudaModule, cuda_model.CudaFunction):
        for name, value in list(vars(owner).items()):
            if isinstance(value, cached_property):
                patches.append((owner, name, "kernel model (read on demand)", False))
    for name in ("_declared", "assignments", "calls_named"):
        patches.append((cuda_model.CudaFunction if name in ("_declared", "assignments") else cuda_model.CudaModule,
                        name, "kernel model (read on demand)", False))
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _, _ in patches if name in owner.__dict__]
    try:
        for owner, name, label, consume in patches:
            if name in owner.__dict__:
                original = owner.__dict__[name]
                if isinstance(original, classmethod):
                    setattr(owner, name, classmethod(timer(label, original.__func__, consume)))
                elif isinstance(original, cached_property):
                    wrapped = cached_property(timer(label, original.func))
                    wrapped.__set_name__(owner, name)
                    setattr(owner, name, wrapped)
                else:
                    setattr(owner, name, timer(label, original, consume))
        import kanalyze.analyzer.cuda.build as cuda_build
        cuda_build_saved = cuda_build.build
        cuda_build.build = timer("kernel model (top level)", build)
        start = time.process_time()
        for path, text in texts:
            analyze_source(path, text)
        spent["everything else"] = time.process_time() - start - sum(
            v for k, v in spent.items() if k != "reading the files")
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
        cuda_build.build = cuda_build_saved
    return sorted(spent.items(), key=lambda item: -item[1])


def run_check(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the check and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kanalyze", "check", "--exit-zero", "-q", *args], cwd=cwd,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(function, *args) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of an in-process call."""
    start, cpu = time.perf_counter(), time.process_time()
    function(*args)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="an existing directory to check instead of a generated one")
    parser.add_argument("--size-mb", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is shown)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixtures-share", type=float, default=0.1,
                        help="fraction of files copied from fixtures/cuda (dense with findings)")
    parser.add_argument("--phases", action="store_true", help="also time each phase of a cold check in-process")
    options = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kanalyze-bench-cuda-"))
    try:
        if options.corpus:
            corpus = Path(options.corpus)
            files = sorted(p for p in corpus.rglob("*") if p.suffix in (".cu", ".cuh", ".cuda", ".py")
                           and ".venv" not in p.parts)
        else:
            corpus = workdir / "corpus"
            files = build_corpus(corpus, options.size_mb, options.seed, options.fixtures_share)
        cu_files = [f for f in files if f.suffix != ".py"]
        size = sum(f.stat().st_size for f in files)
        all_sources = cuda_sources(files)
        cu_sources = cuda_sources(cu_files)
        py_texts = [f.read_text(encoding="utf-8", errors="replace") for f in files if f.suffix == ".py"]
        # A copy of kanalyze as it is now, run from its own directory: edits to the tree during
        # the run would change the cache's key (it hashes kanalyze's own files) and make warm runs cold.
        snapshot = workdir / "snapshot"
        shutil.copytree(ROOT / "kanalyze", snapshot / "kanalyze", ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "PYTHONPATH": str(snapshot)}
        one_file = next(f for f in files if f.suffix == ".py")

        rows: dict[str, list[tuple[float, float]]] = {k: [] for k in (
            "ts", "ts_cu", "libcst", "strings", "cold", "warm", "cold_cu", "single")}
        for i in range(options.repeat):
            rows["ts"].append(timed(bare_tree_sitter, all_sources))
            rows["strings"].append(timed(extract_strings, files))
            rows["ts_cu"].append(timed(bare_tree_sitter, cu_sources))
            rows["libcst"].append(timed(bare_libcst, py_texts))
            env["KANALYZE_CACHE_DIR"] = str(workdir / f"cache{i}")
            rows["cold"].append(run_check([str(corpus)], env, snapshot))
            rows["warm"].append(run_check([str(corpus)], env, snapshot))
            if cu_files:
                env["KANALYZE_CACHE_DIR"] = str(workdir / f"cache_cu{i}")
                rows["cold_cu"].append(run_check([str(p) for p in cu_files] if len(cu_files) < 500
                                                 else [str(corpus / "csrc")], env, snapshot))
            rows["single"].append(run_check(["--no-cache", str(one_file)], env, snapshot))
        wall = {k: statistics.median(w for w, _ in v) if v else float("nan") for k, v in rows.items()}
        cpu = {k: statistics.median(c for _, c in v) if v else float("nan") for k, v in rows.items()}
        print(f"corpus: {len(files)} files ({len(cu_files)} .cu, {len(files) - len(cu_files)} Python), "
              f"{size / 1e6:.1f} MB, {len(all_sources)} CUDA sources ({sum(map(len, all_sources)) / 1e6:.1f} MB); "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; median of {options.repeat}")
        print("wall: elapsed seconds; cpu: seconds of CPU used (the check's workers together).")
        print(f"{'measurement':<48}{'wall':>8}{'ratio':>8}{'cpu':>8}{'ratio':>8}  target")

        def line(label: str, key: str, base: str, target: str = "", both: float | None = None) -> None:
            w, c = (both, both) if both is not None else (wall[key], cpu[key])
            print(f"{label:<48}{w:>8.2f}{w / wall[base]:>7.2f}x{c:>8.2f}{c / cpu[base]:>7.2f}x  {target}")

        line("bare tree-sitter parse of the CUDA (baseline)", "ts", "ts")
        both_wall, both_cpu = wall["ts"] + wall["libcst"], cpu["ts"] + cpu["libcst"]
        print(f"{'bare parse of the CUDA + LibCST of every .py':<48}{both_wall:>8.2f}"
              f"{both_wall / wall['ts']:>7.2f}x{both_cpu:>8.2f}{both_cpu / cpu['ts']:>7.2f}x")
        line("reading the strings out of the Python alone", "strings", "ts")
        line("kanalyze check, cold (empty cache)", "cold", "ts", "<= 1.5x")
        print(f"{'  ... relative to the CUDA + LibCST parse':<48}{'':>8}{wall['cold'] / both_wall:>7.2f}x"
              f"{'':>8}{cpu['cold'] / both_cpu:>7.2f}x")
        line("kanalyze check, warm (cached)", "warm", "ts")
        if cu_files:
            line(".cu files only: bare tree-sitter parse", "ts_cu", "ts_cu")
            line(".cu files only: kanalyze check, cold", "cold_cu", "ts_cu", "<= 1.5x")
        print(f"{'kanalyze check, one file + start-up':<48}{wall['single']:>8.2f}{'':>8}{cpu['single']:>8.2f}"
              f"{'':>8}  < 0.5 s")
        if options.phases:
            measured = phases(files)
            print("\nwhere a cold check's time goes (in-process, one core; ratio to the baseline's cpu):")
            for label, seconds in measured:
                print(f"  {label:<46}{seconds:>8.2f}{seconds / cpu['ts']:>7.2f}x")
            print(f"  {'total':<46}{sum(s for _, s in measured):>8.2f}"
                  f"{sum(s for _, s in measured) / cpu['ts']:>7.2f}x")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
