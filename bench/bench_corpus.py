"""The dynamic pass over a corpus of real pairs, beside KernelBench's own check, one pair at a time.

For each line of a corpus's `pairs.jsonl` (bench/corpus/fetch_corpus.py builds one), in
this one run, side by side:

  kernelbench  a KernelBench-style check: a fresh `python` process imports the problem and
               the candidate, builds both models from one seed, and runs 5 trials of
               `get_inputs()` and `torch.allclose(ref, out, atol=1e-2, rtol=1e-2)`;
  targeted     `kanalyze check CAND --dynamic --reference PROBLEM` as a user runs it (the
               gates the static flags call for), JSON output;
  all          with `--all`, the same with `--gates all`.

Prints per pair the times, the verdicts and the peak disk use of the temporary folder's disk
during each kanalyze column (sampled every 0.1 s), then the medians and their ratios, the count of
verdicts per status, and the verdicts that blame kanalyze itself (an `unconfirmed` whose
reason is kanalyze's worker); `--json` keeps every number.

    python3 bench/bench_corpus.py --corpus /tmp/kb_corpus/pairs.jsonl --device cuda --language triton \\
        --limit 20 --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kanalyze.audit import allclose  # noqa: E402
from kanalyze.audit.summary import KANALYZE_FAILED  # noqa: E402
from kanalyze.dynamic.sandbox.rundir import SHARED_MEMORY  # noqa: E402

def kernelbench(problem: str, candidate: str, device: str, timeout: float) -> dict:
    """KernelBench's criterion in a fresh process (kanalyze.audit.allclose): PASS, FAIL, ERROR, TIMEOUT or CRASHED.
    A CUDA C++ candidate builds in torch's own folder, as under KernelBench, never in the build
    cache that kanalyze's run beside it then reuses."""
    return allclose.check(problem, candidate, device, timeout, share_builds=False)


def kanalyze(problem: str, candidate: str, device: str, timeout: float, gates: str | None) -> dict:
    command = [sys.executable, "-m", "kanalyze", "check", candidate, "--dynamic", "--reference", problem,
               "--device", device, "--output-format", "json", "--isolated", "--no-cache", "--exit-zero",
               "--witness-dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "kanalyze-bench-witnesses")]
    if gates:
        command += ["--gates", gates]
    started = time.perf_counter()
    disk, memory = DiskPeak(), DiskPeak(SHARED_MEMORY)   # (the second: RAM, arrays handed over through it)
    try:
        with disk, memory:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        findings = json.loads(done.stdout) if done.stdout.strip().startswith(("[", "{")) else None
        error = None if findings is not None else (done.stderr.strip().splitlines() or ["no output"])[-1]
    except subprocess.TimeoutExpired:
        findings, error = None, f"kanalyze ran past {timeout:.0f} s"
    findings = findings["findings"] if isinstance(findings, dict) else findings
    verdicts = [{"code": f["code"], "status": f.get("status"), "result": (f.get("evidence") or {}).get("gate_result")}
                for f in findings or [] if f.get("status") != "flagged"]
    def account(key: str, default=None):   # the first finding's account of the gate run (confirm.py)
        return next(((f.get("evidence") or {}).get(key) for f in findings or []
                     if (f.get("evidence") or {}).get(key)), default)

    phases = account("gate_seconds")    # where the run's time went (plan, reference, candidate, judge, ...)
    cases = account("case_seconds")     # the candidate's slowest cases (gate, case, seconds)
    sessions = account("sessions", 1)
    judge = account("judge")            # what the gates asked of held arrays, and where they were kept
    return {"seconds": time.perf_counter() - started, "error": error, "verdicts": verdicts, "phases": phases,
            "cases": cases, "sessions": sessions, "judge": judge, "disk_bytes": disk.peak,
            "shared_memory_bytes": memory.peak}


class DiskPeak:
    """The most the temporary folder's disk held above what it held at the start, sampled every
    0.1 s in a thread while the block runs (other processes' use on that disk counts too)."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder or tempfile.gettempdir()
        self.peak = 0
        self._done = threading.Event()

    def _watch(self, start: int) -> None:
        while not self._done.wait(0.1):
            self.peak = max(self.peak, shutil.disk_usage(self.folder).used - start)

    def __enter__(self) -> "DiskPeak":
        if not os.path.isdir(self.folder):
            self._thread = None
            return self
        self._thread = threading.Thread(target=self._watch, args=(shutil.disk_usage(self.folder).used,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


def blames_kanalyze(verdict: dict) -> bool:
    return verdict["status"] == "unconfirmed" and any(p in (verdict.get("result") or "") for p in KANALYZE_FAILED)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="pairs.jsonl")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--language", choices=("triton", "cuda", "both"), default="both")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300.0, help="per pair and column")
    parser.add_argument("--all", action="store_true", help="also every gate")
    parser.add_argument("--json", help="write every number here")
    args = parser.parse_args()

    base = Path(args.corpus).resolve().parent
    pairs = [json.loads(line) for line in Path(args.corpus).read_text().splitlines() if line.strip()]
    pairs = [p for p in pairs if args.language == "both" or p.get("language") == args.language]
    pairs = pairs[args.offset:][:args.limit]
    rows = []
    for n, pair in enumerate(pairs, 1):
        problem, candidate = str(base / pair["problem"]), str(base / pair["candidate"])
        row = {"pair": pair, "kernelbench": kernelbench(problem, candidate, args.device, args.timeout),
               "targeted": kanalyze(problem, candidate, args.device, args.timeout, None)}
        if args.all:
            row["all"] = kanalyze(problem, candidate, args.device, args.timeout, "all")
        rows.append(row)
        shown = ", ".join(f"{v['code']} {v['status']}" for v in row["targeted"]["verdicts"]) or "no verdict"
        print(f"[{n}/{len(pairs)}] {Path(candidate).name}: kb {row['kernelbench']['verdict']} "
              f"{row['kernelbench']['seconds']:.1f} s, targeted {row['targeted']['seconds']:.1f} s "
              f"(disk {row['targeted']['disk_bytes'] / 2 ** 20:.0f} MiB): {shown}"
              + (f" ({row['targeted']['error']})" if row["targeted"]["error"] else ""), flush=True)
        if row["targeted"]["phases"]:
            print("    seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in row["targeted"]["phases"].items()), flush=True)
        if row["targeted"].get("cases"):
            print("    slowest cases: " + ", ".join(f"{c['case']} {c['seconds']:.1f}"
                                                   for c in row["targeted"]["cases"][:6]), flush=True)
        for v in row["targeted"]["verdicts"]:
            print(f"    {(v['result'] or '')[:220]}", flush=True)
        if args.all:
            every = ", ".join(f"{v['code']} {v['status']}" for v in row["all"]["verdicts"]) or "no verdict"
            print(f"    all gates {row['all']['seconds']:.1f} s (disk {row['all']['disk_bytes'] / 2 ** 20:.0f} MiB, "
                  f"shared memory {row['all'].get('shared_memory_bytes', 0) / 2 ** 20:.0f} MiB"
                  + (f", {row['all']['sessions']} sessions" if row["all"]["sessions"] > 1 else "") + "): "
                  f"{every}"
                  + (f" ({row['all']['error']})" if row["all"]["error"] else ""), flush=True)
            if row["all"]["phases"]:
                print("    seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in row["all"]["phases"].items()), flush=True)
            if row["all"].get("cases"):
                print("    slowest cases: " + ", ".join(f"{c['case']} {c['seconds']:.1f}"
                                                       for c in row["all"]["cases"][:6]), flush=True)
            held = {k: v for k, v in (row["all"].get("judge") or {}).items() if k.startswith("held_")}
            if held:
                print("    judge held: " + ", ".join(f"{k[5:]} {v / 2 ** 20:.0f} MiB" if k.endswith(("_peak", "_bytes"))
                                                     else f"{k[5:]} {v}" for k, v in held.items()), flush=True)
        if args.json:  # after every pair: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=1))
    summarize(rows, args.all)
    return 0


def summarize(rows: list[dict], with_all: bool) -> None:
    if not rows:
        print("no pairs")
        return
    kb = statistics.median(r["kernelbench"]["seconds"] for r in rows)
    print(f"\n{len(rows)} pairs; median seconds: kernelbench {kb:.2f}", end="")
    for column in ("targeted", "all") if with_all else ("targeted",):
        median = statistics.median(r[column]["seconds"] for r in rows)
        print(f", {column} {median:.2f} ({median / kb:.2f}x)", end="")
    print()
    for column in ("targeted", "all") if with_all else ("targeted",):
        peaks = [r[column].get("disk_bytes", 0) / 2 ** 20 for r in rows]
        memory = max(r[column].get("shared_memory_bytes", 0) for r in rows) / 2 ** 20
        print(f"{column}: peak disk use per pair, median {statistics.median(peaks):.0f} MiB, most {max(peaks):.0f} MiB"
              f" (shared memory, most {memory:.0f} MiB)")
    for column in ("targeted", "all") if with_all else ("targeted",):
        statuses: dict[str, int] = {}
        for r in rows:
            for v in r[column]["verdicts"]:
                statuses[v["status"]] = statuses.get(v["status"], 0) + 1
        own = [(r["pair"]["candidate"], v) for r in rows for v in r[column]["verdicts"] if blames_kanalyze(v)]
        errors = [r for r in rows if r[column]["error"]]
        print(f"{column}: verdicts {statuses}; kanalyze's own failures {len(own)}; runs without a report "
              f"{len(errors)}")
        for candidate, v in own[:10]:
            print(f"  {Path(candidate).name}: {v['code']}: {(v['result'] or '')[:200]}")
    kb_verdicts: dict[str, int] = {}
    for r in rows:
        kb_verdicts[r["kernelbench"]["verdict"]] = kb_verdicts.get(r["kernelbench"]["verdict"], 0) + 1
    print(f"kernelbench: {kb_verdicts}")


if __name__ == "__main__":
    sys.exit(main())
