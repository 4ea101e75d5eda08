#!/usr/bin/env python3
"""Fuzz the static pass: seeded mutants of real-looking kernels, and extreme shapes.

    python bench/fuzz_static.py --count 5000                 # thousands, as a benchmark
    python bench/fuzz_static.py --count 300 --seed 7 --keep failures/
    python bench/fuzz_static.py --seeds ~/src/fla/fla        # mutate other code as well

The mutants (bench/fuzz_mutations.py) start from the files of `fixtures/` (Triton and
CUDA kernels, KernelBench candidates, problems) and of `--seeds`.  They go through `kanalyze check --output-format json` in batches, in a subprocess
(a crash costs the batch, not this script), every other batch through `--diff
--unsafe-fixes` as well, and every third into the full text report, which must print none
of the mutants' control characters raw.  A mutant may be refused (KAN000: it does not
parse, or nests past the guard) but the run must never: end in a traceback or an
unexpected exit code, report an internal error (KAN001: a rule failed, a worker crashed,
the analysis ran past its per-file budget), or hang.  Prints the counts, the time per
file, and each failure; `--keep` saves the failing inputs.  tests/test_static_fuzz.py
runs a few hundred mutants of a fixed seed in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_mutations import mutants, seed_files  # noqa: E402

BATCH = 60                    # mutants per `kanalyze check` run
BATCH_SECONDS = 600           # a batch that runs longer hangs


# ------------------------------------------------------------------ checking

@dataclass
class Outcome:
    files: int = 0
    refused: int = 0                          # KAN000: does not parse, or nests too deep
    findings: int = 0
    failures: list[str] = field(default_factory=list)   # "file: what went wrong"
    seconds: list[float] = field(default_factory=list)  # per batch, per file


# What a report must never print raw, whatever the checked text holds: a NUL, an escape
# sequence's start, a carriage return that rewrites the line, a right-to-left override.
RAW = ("\x00", "\x1b", "\r", "\u202e")


def _kanalyze(root: Path, argv: list[str], timeout: float) -> tuple[int, str, str]:
    """`kanalyze ARGV` in `root`, in a subprocess: (exit code, stdout, stderr), decoded as text
    whatever bytes the report holds."""
    done = subprocess.run([sys.executable, "-m", "kanalyze", *argv], cwd=root, capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def check(batch: list[tuple[str, str]], select: str | None = None, fixes: bool = False, render: bool = False,
          timeout: float = BATCH_SECONDS) -> Outcome:
    """One `kanalyze check` over the batch, in a subprocess; what it said, and what went wrong.
    With `fixes`, `check --diff --unsafe-fixes` over it too (the fixers parse and rewrite); with
    `render`, the full text report, which must hold no raw control character of the mutants."""
    outcome = Outcome(files=len(batch))
    where = f"{batch[0][0]}..{batch[-1][0]}"
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        root = Path(folder)
        (root / "pyproject.toml").write_text("[tool.kanalyze]\n")
        for name, text in batch:
            (root / name).write_bytes(text.encode("utf-8", errors="surrogateescape"))
        common = ["check", ".", "--no-cache", "--jobs", "2"]
        started = time.perf_counter()
        try:
            code, out, err = _kanalyze(root, common + ["--output-format", "json", "--exit-zero"]
                                       + (["--select", select] if select else []), timeout)
            outcome.seconds.append((time.perf_counter() - started) / max(1, len(batch)))
            if code != 0 or "Traceback" in err:
                outcome.failures.append(f"{where}: exit {code}: {err[-600:]}")
                return outcome
            if fixes:   # exit 1: something to fix; 2: an internal error
                fixed, _, fix_err = _kanalyze(root, common + ["--diff", "--unsafe-fixes"], timeout)
                if fixed not in (0, 1) or "Traceback" in fix_err:
                    outcome.failures.append(f"{where}: --diff exit {fixed}: {fix_err[-600:]}")
            if render:
                shown, text, show_err = _kanalyze(root, common + ["--output-format", "full"], timeout)
                raw = sorted({repr(c) for c in RAW if c in text})
                if shown not in (0, 1) or "Traceback" in show_err or raw:
                    why = "prints raw " + ", ".join(raw) if raw else repr(show_err[-600:])
                    outcome.failures.append(f"{where}: the full report (exit {shown}) {why}")
        except subprocess.TimeoutExpired:
            outcome.failures.append(f"{where}: a run ran past {timeout:.0f} s")
            return outcome
    try:
        items = json.loads(out or "[]")
    except ValueError:
        outcome.failures.append(f"{where}: not JSON: {out[:300]!r}")
        return outcome
    for item in items:
        code = item.get("code")
        at = Path(item.get("filename") or "?").name
        if code == "KAN000":
            outcome.refused += 1
        elif code == "KAN001":   # (KAN003, a proof's budget reached, is a result: the run went on)
            outcome.failures.append(f"{at}:{(item.get('location') or {}).get('row')}: {code} {item.get('message')}")
        else:
            outcome.findings += 1
    return outcome


def run(seed: int, count: int, seeds: list[tuple[str, str]], select_all_every: int = 4,
        keep: Path | None = None, progress: bool = False) -> Outcome:
    total = Outcome()
    made = mutants(seed, count, seeds)
    texts = dict(made)
    for n, start in enumerate(range(0, len(made), BATCH)):
        batch = made[start:start + BATCH]
        # Every few batches with the opt-in proofs too (MEM003/MEM004 read host-side shapes).
        outcome = check(batch, select="ALL" if select_all_every and n % select_all_every == select_all_every - 1
                        else None, fixes=n % 2 == 0, render=n % 3 == 1)
        total.files += outcome.files
        total.refused += outcome.refused
        total.findings += outcome.findings
        total.failures += outcome.failures
        total.seconds += outcome.seconds
        if keep is not None:
            for failure in outcome.failures:
                name = failure.split(":")[0].split("..")[0]
                if name in texts:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / name).write_bytes(texts[name].encode("utf-8", errors="surrogateescape"))
        if progress:
            print(f"  {total.files}/{count} files, {len(total.failures)} failures", file=sys.stderr)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=Path, action="append", default=[], help="more folders of code to mutate")
    parser.add_argument("--keep", type=Path, help="save the failing inputs here")
    args = parser.parse_args(argv)
    seeds = seed_files(args.seeds)
    started = time.perf_counter()
    outcome = run(args.seed, args.count, seeds, keep=args.keep, progress=True)
    per_file = sorted(outcome.seconds)
    print(f"{outcome.files} mutants of {len(seeds)} seed files (seed {args.seed}) in {time.perf_counter() - started:.0f} s: "
          f"{outcome.refused} refused (KAN000), {outcome.findings} findings, {len(outcome.failures)} failures")
    if per_file:
        print(f"wall seconds per file, per batch of {BATCH}: median {per_file[len(per_file) // 2]:.3f}, "
              f"most {per_file[-1]:.3f}")
    for failure in outcome.failures:
        print("  FAIL", failure)
    return 1 if outcome.failures else 0


if __name__ == "__main__":
    sys.exit(main())
