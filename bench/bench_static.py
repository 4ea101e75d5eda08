"""Static-pass speed, measured side by side in one run.

Builds (or takes) a corpus of Python files and prints, for the same files:
  - bare `libcst.parse_module` of every file, sequentially (the baseline),
  - a cold `kanalyze check` (new process, empty cache, default selection), and
    the same with the opt-in z3 proofs (`--extend-select MEM003,MEM004`),
  - a warm `kanalyze check` (new process, cache filled by the cold run),
  - a one-file `kanalyze check` including interpreter start-up,
as seconds and as ratios to the baseline.  Targets (2-core machine):
cold ≤ 1.0×, warm ≤ 0.1×, one file < 0.5 s.  Then what the z3 proofs cost: a
cold check with the proofs over one without them, on the corpus and on the
fixture corpus (fixtures/), target ≤ 1.5× (issue 7: at most 50% added).

    python bench/bench_static.py                 # generated corpus, ~4 MB
    python bench/bench_static.py --size-mb 8
    python bench/bench_static.py --corpus PATH   # an existing tree

The generated corpus mixes kernel files (the fixtures, with identifiers
renamed so that no two files are identical) and ordinary Python modules from
the standard library, which is what a repository of kernels looks like.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_corpus(target: Path, size_mb: float, kernel_share: float, seed: int) -> list[Path]:
    rng = random.Random(seed)
    kernels = [p.read_text() for p in sorted((ROOT / "fixtures" / "triton").rglob("*.py"))]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    plain = [p for p in sorted(stdlib.glob("*.py")) if 2_000 < p.stat().st_size < 120_000]
    budget = int(size_mb * 1024 * 1024)
    kernel_budget = int(budget * kernel_share)
    files: list[Path] = []
    written = 0
    index = 0
    while written < kernel_budget:
        text = rng.choice(kernels)
        suffix = f"_{index}"
        text = re.sub(r"\b(def|class) (\w+)", lambda m: f"{m.group(1)} {m.group(2)}{suffix}", text)
        text = re.sub(r"\b(\w+_kernel)\b", lambda m: m.group(1) + suffix, text)
        path = target / "kernels" / f"k{index // 50}" / f"kernel_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append(path)
        written += len(text.encode())
        index += 1
    rng.shuffle(plain)
    for i, source in enumerate(plain * 10):
        if written >= budget:
            break
        path = target / "lib" / f"m{i // 50}" / f"{source.stem}_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        files.append(path)
        written += source.stat().st_size
    return files


def bare_parse(files: list[Path]) -> float:
    import libcst

    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    start = time.perf_counter()
    for text in texts:
        try:
            libcst.parse_module(text)
        except Exception:
            pass
    return time.perf_counter() - start


def run_check(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kanalyze", "check", "--exit-zero", "-q", *args],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="an existing directory to check instead of a generated one")
    parser.add_argument("--size-mb", type=float, default=4.0)
    parser.add_argument("--kernel-share", type=float, default=0.5, help="fraction of bytes in kernel files")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is shown)")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kanalyze-bench-"))
    try:
        if options.corpus:
            corpus = Path(options.corpus)
            files = sorted(p for p in corpus.rglob("*.py") if ".venv" not in p.parts)
        else:
            corpus = workdir / "corpus"
            files = build_corpus(corpus, options.size_mb, options.kernel_share, options.seed)
        size = sum(f.stat().st_size for f in files)
        kernel_files = sum(1 for f in files if b"triton" in f.read_bytes())
        one_file = next(f for f in files if b"triton" in f.read_bytes())
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        bare, cold, cold_proofs, warm, single = [], [], [], [], []
        fixtures, fixtures_proofs = [], []
        proofs = ["--extend-select", "MEM003,MEM004"]
        for i in range(options.repeat):
            env["KANALYZE_CACHE_DIR"] = str(workdir / f"cache-fixtures{i}")
            fixtures.append(run_check(["--no-cache", str(ROOT / "fixtures")], env))
            fixtures_proofs.append(run_check(["--no-cache", *proofs, str(ROOT / "fixtures")], env))
            env["KANALYZE_CACHE_DIR"] = str(workdir / f"cache-proofs{i}")
            cold_proofs.append(run_check([*proofs, str(corpus)], env))
            env["KANALYZE_CACHE_DIR"] = str(workdir / f"cache{i}")
            bare.append(bare_parse(files))
            cold.append(run_check([str(corpus)], env))
            warm.append(run_check([str(corpus)], env))
            single.append(run_check(["--no-cache", str(one_file)], env))
        b, c, n, w, s = (statistics.median(x) for x in (bare, cold, cold_proofs, warm, single))
        print(f"corpus: {len(files)} files, {size / 1e6:.1f} MB, {kernel_files} mention triton; "
              f"{os.cpu_count()} cores; median of {options.repeat}")
        print(f"{'measurement':<38}{'seconds':>9}{'ratio':>9}  target")
        print(f"{'bare libcst.parse_module (baseline)':<38}{b:>9.3f}{1.0:>8.2f}x")
        print(f"{'kanalyze check, cold (empty cache)':<38}{c:>9.3f}{c / b:>8.2f}x  <= 1.0x")
        print(f"{'  the same with the z3 proofs (MEM00x)':<38}{n:>9.3f}{n / b:>8.2f}x")
        print(f"{'kanalyze check, warm (cached)':<38}{w:>9.3f}{w / b:>8.2f}x  <= 0.1x")
        print(f"{'kanalyze check, one file + start-up':<38}{s:>9.3f}{'':>9}  < 0.5 s")
        fx, fp = statistics.median(fixtures), statistics.median(fixtures_proofs)
        print(f"{'the z3 proofs, cold, with / without':<38}{'':>9}{'ratio':>9}  target")
        print(f"{'  this corpus':<38}{'':>9}{n / c:>8.2f}x  <= 1.5x")
        print(f"{'  the fixture corpus':<38}{'':>9}{fp / fx:>8.2f}x  <= 1.5x   ({fx:.2f} s, {fp:.2f} s)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
