"""Speed of the CUDA static pass, measured side by side in one run.

Builds (or takes) a corpus of CUDA sources, `.cu` files and Python files that
build CUDA with `load_inline` (KernelBench style), and prints for the same files:
  - bare tree-sitter parsing of every CUDA source in them (the `.cu` files and the
    strings the Python files hand to `load_inline`), sequentially: the baseline;
  - bare parsing of everything the pass has to parse: that, plus LibCST parsing the
    Python files the strings live in (the strings are read without running them);
  - a cold `kanalyze check` (new process, empty cache), a warm one (cache filled by
    the cold run), and a one-file check including interpreter start-up,
as seconds and as ratios to the baseline, also for the `.cu` files alone.
Target (2-core machine): cold <= 1.5x bare tree-sitter parsing.

    python bench/bench_cuda.py                 # generated corpus, ~4 MB
    python bench/bench_cuda.py --size-mb 8
    python bench/bench_cuda.py --corpus PATH   # an existing tree

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
    from kanalyze.analyzer.cuda_inline import find_extensions
    from kanalyze.analyzer.cuda_sources import may_contain_inline_cuda
    from kanalyze.analyzer.triton import TritonModule

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
            "ts", "ts_cu", "libcst", "cold", "warm", "cold_cu", "single")}
        for i in range(options.repeat):
            rows["ts"].append(timed(bare_tree_sitter, all_sources))
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
        print(f"{'bare parse of all it reads (+ LibCST of the .py)':<48}{both_wall:>8.2f}"
              f"{both_wall / wall['ts']:>7.2f}x{both_cpu:>8.2f}{both_cpu / cpu['ts']:>7.2f}x")
        line("kanalyze check, cold (empty cache)", "cold", "ts", "<= 1.5x")
        print(f"{'  ... relative to all the parsing it does':<48}{'':>8}{wall['cold'] / both_wall:>7.2f}x"
              f"{'':>8}{cpu['cold'] / both_cpu:>7.2f}x")
        line("kanalyze check, warm (cached)", "warm", "ts")
        if cu_files:
            line(".cu files only: bare tree-sitter parse", "ts_cu", "ts_cu")
            line(".cu files only: kanalyze check, cold", "cold_cu", "ts_cu", "<= 1.5x")
        print(f"{'kanalyze check, one file + start-up':<48}{wall['single']:>8.2f}{'':>8}{cpu['single']:>8.2f}"
              f"{'':>8}  < 0.5 s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
