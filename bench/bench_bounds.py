"""What the z3 bounds proofs (MEM003, MEM004) add to a static check, side by side in one run.

For the same files, in this process, on one core, it times the whole static
analysis (`analyze_text`: parse, kernel model, every rule) with the proofs and
without them (the bounds analysis replaced by an empty one), alternating the
two so that machine load hits both alike, and prints CPU seconds, the ratio,
and what the proofs concluded: how many accesses were proved, violated or left
unknown, and why (`--verbose` lists every access).

    python bench/bench_bounds.py                  # the fixture corpus and a generated one
    python bench/bench_bounds.py --verbose        # and every access's verdict, with reasons
    python bench/bench_bounds.py --corpus PATH    # an existing tree instead

The generated corpus is bench_static.py's (the fixtures with renamed
identifiers, plus standard-library modules): the same kernels many times, so
its ratio is the fixture corpus's, diluted by files without kernels.
Target (issue 7): the proofs add at most 50% to a cold static check.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kanalyze.analyzer.bounds import proofs as bounds  # noqa: E402
from kanalyze.analyzer.sources import may_contain_triton  # noqa: E402
from kanalyze.check import analyze_text  # noqa: E402


def _static_bench():
    spec = importlib.util.spec_from_file_location("bench_static", ROOT / "bench" / "bench_static.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_all(texts: list[tuple[str, str]]) -> float:
    started = time.process_time()
    for path, text in texts:
        analyze_text(path, text)
    return time.process_time() - started


def measure(texts: list[tuple[str, str]], repeat: int) -> tuple[float, float]:
    """(median CPU seconds without the proofs, with them)."""
    real_run = bounds._run
    without, with_ = [], []
    for _ in range(repeat):
        bounds._run = lambda model, analysis: None
        try:
            without.append(check_all(texts))
        finally:
            bounds._run = real_run
        with_.append(check_all(texts))
    return statistics.median(without), statistics.median(with_)


def verdicts(texts: list[tuple[str, str]], verbose: bool) -> None:
    from kanalyze.analyzer.cstwalk import node_text
    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.triton.model import TritonModule

    mem003, mem004, reasons = collections.Counter(), collections.Counter(), collections.Counter()
    queries = timeouts = screened = 0
    solver = 0.0
    for path, text in texts:
        try:
            model = TritonModule.from_source(path, text)
        except Exception:
            continue
        analysis = bounds.analyze(model)
        queries, timeouts, solver = queries + analysis.queries, timeouts + analysis.timeouts, \
            solver + analysis.solver_seconds
        screened += analysis.screened
        positions = Positions(model.module, text) if verbose and analysis.accesses else None
        for access in analysis.accesses:
            mem003[access.bounds.status] += 1
            mem004["violated" if access.wraps else access.overflow.status] += 1
            for reason in access.reasons:
                reasons[reason.split("`")[0].strip() or reason] += 1
            if positions is not None:
                row = positions.span(access.call)[0]
                wraps = ", ".join(node_text(model.module, v.node) for v in access.wraps.values())
                print(f"{path}:{row}: {node_text(model.module, access.call)[:60]}")
                print(f"    MEM003 {access.bounds.status}"
                      + (f" ({access.bounds.reason})" if access.bounds.reason else "")
                      + f"; MEM004 {'wraps: ' + wraps if wraps else access.overflow.status}"
                      + (f" ({access.overflow.reason})" if access.overflow.reason and not wraps else ""))
    print(f"  accesses: MEM003 {dict(mem003)}; MEM004 {dict(mem004)}")
    print(f"  solver: {queries} questions, {solver:.2f} s, {timeouts} gave up; "
          f"{screened} proved by the Python screen without z3")
    for reason, count in reasons.most_common(8):
        print(f"  unknown x{count}: {reason}")


def report(label: str, texts: list[tuple[str, str]], repeat: int, verbose: bool) -> None:
    kernels = sum(1 for _, t in texts if may_contain_triton(t))
    without, with_ = measure(texts, repeat)
    print(f"{label}: {len(texts)} files ({kernels} with kernels), median of {repeat}, CPU seconds")
    print(f"  {'static check without the proofs':<36}{without:>8.3f}")
    print(f"  {'static check with the proofs':<36}{with_:>8.3f}   +{(with_ - without) / without:.0%}"
          f"  (target <= +50%)")
    print(f"  {'per file with kernels, added':<36}{(with_ - without) / max(kernels, 1) * 1000:>8.1f} ms")
    verdicts(texts, verbose)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="an existing directory instead of the fixture and generated corpora")
    parser.add_argument("--size-mb", type=float, default=2.0, help="size of the generated corpus")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="every access's verdict, with reasons")
    options = parser.parse_args()

    z3_import = subprocess.run([sys.executable, "-X", "importtime", "-c", "import z3"], capture_output=True,
                               text=True).stderr.strip().splitlines()[-1].split("|")[1].strip()
    print(f"`import z3` (paid once per process, only for files with launched kernels): {int(z3_import) / 1e6:.3f} s")
    if options.corpus:
        files = sorted(p for p in Path(options.corpus).rglob("*.py") if ".venv" not in p.parts)
        report(options.corpus, [(str(p), p.read_text(errors="replace")) for p in files], options.repeat,
               options.verbose)
        return
    fixtures = sorted((ROOT / "fixtures").rglob("*.py"))
    report("fixture corpus", [(str(p), p.read_text()) for p in fixtures], options.repeat, options.verbose)
    workdir = Path(tempfile.mkdtemp(prefix="kanalyze-bench-bounds-"))
    try:
        generated = _static_bench().build_corpus(workdir, options.size_mb, 0.5, 0)
        report("generated corpus", [(str(p), p.read_text(errors="replace")) for p in generated], options.repeat,
               False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
