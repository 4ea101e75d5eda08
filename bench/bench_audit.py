#!/usr/bin/env python3
"""`kanalyze audit` throughput on the CPU: the local executor with 1, 2 and 4 jobs (and with one job
without spares: `--no-spares`), and Ray on the same cores.

    python bench/bench_audit.py [--pairs 6] [--problems 5,6,7] [--gates MEM002,CMP001] [--ray-cpus N]

The pairs are Triton candidates of fixtures/kernelbench (the CUDA ones need a GPU) for
the level1 problems `--problems` (small elementwise and row kernels by default: the
interpreter is slow on a matmul), each with its problem, the first `--pairs` by name.  Each configuration audits
them from an empty journal with `python -m kanalyze audit --device cpu`, and the
table gives, side by side from the same run: wall seconds, pairs per minute, and the
mean of the pairs' own `wall_seconds` (the pair's child process, the same code under
both executors).  Ray runs on a one-node cluster started here
(`ray start --head --num-cpus N`, N = this machine's cores unless `--ray-cpus`),
whose start is timed apart; Ray's overhead per pair is its wall time over the local
executor's with as many jobs as Ray has CPUs, times those slots, per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"


def candidates(count: int, problems: list[str]) -> list[str]:
    names = sorted(p for problem in problems for p in (KB / "candidates").glob(f"level1_problem{problem}_*.py")
                   if not p.stem.endswith("_cuda"))
    return [str(p) for p in names[:count]]


def audit(files: list[str], output: str, gates: str, *more: str) -> tuple[float, list[dict]]:
    command = [sys.executable, "-m", "kanalyze", "audit", *files, "--kernelbench", str(KB), "--output", output,
               "--gates", gates, "--device", "cpu", "-q", *more]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.exit(f"audit {' '.join(more)} failed ({done.returncode}): {done.stderr[-2000:]}")
    records = [json.loads(line) for line in Path(output, "results.jsonl").read_text().splitlines()]
    return seconds, records


def start_cluster(cpus: int, folder: str) -> tuple[subprocess.Popen, str, float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, "start.log")
    command = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()",
               "start", "--head", "--block", "--num-cpus", str(cpus), "--port", str(port), "--disable-usage-stats",
               "--include-dashboard", "false", "--object-store-memory", str(100 << 20), "--temp-dir", folder]
    started = time.monotonic()
    with open(log, "w") as handle:
        head = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True)
    while "Ray runtime started" not in Path(log).read_text(errors="replace"):
        if head.poll() is not None or time.monotonic() - started > 180:
            stop_cluster(head)
            sys.exit("ray start failed:\n" + Path(log).read_text(errors="replace")[-2000:])
        time.sleep(0.2)
    return head, f"127.0.0.1:{port}", time.monotonic() - started


def stop_cluster(head: subprocess.Popen) -> None:
    head.send_signal(signal.SIGTERM)
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(head.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    head.wait()


def row(name: str, seconds: float, records: list[dict]) -> dict:
    inside = [r["wall_seconds"] for r in records if "wall_seconds" in r]
    statuses = sorted({r["status"] for r in records})
    print(f"{name:<26} {seconds:>8.1f} {len(records) / seconds * 60:>10.2f} {statistics.mean(inside):>10.2f}   "
          f"{','.join(statuses)}", flush=True)
    return {"seconds": seconds, "pairs": len(records), "verdicts": _verdicts(records)}


def _verdicts(records: list[dict]) -> dict:
    return {r["id"]: (r["status"], {c: v["status"] for c, v in r.get("verdicts", {}).items()},
                      (r.get("allclose") or {}).get("verdict")) for r in records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--problems", default="5,6,7", help="level1 problem numbers")
    parser.add_argument("--gates", default="MEM002,CMP001")
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args(argv)

    files = candidates(args.pairs, args.problems.split(","))
    print(f"{len(files)} pairs (fixtures/kernelbench), gates {args.gates}, device cpu, {os.cpu_count()} cores")
    print(f"{'executor':<26} {'wall s':>8} {'pairs/min':>10} {'pair s':>10}   statuses")
    results = {}
    work = tempfile.mkdtemp(prefix="kbench-", dir="/tmp")      # short: Ray's socket paths live below it
    try:
        for jobs in (1, 2, 4):
            seconds, records = audit(files, os.path.join(work, f"local{jobs}"), args.gates, "--jobs", str(jobs))
            results[f"local{jobs}"] = row(f"local --jobs {jobs}", seconds, records)
        seconds, records = audit(files, os.path.join(work, "cold1"), args.gates, "--jobs", "1", "--no-spares")
        results["cold1"] = row("local --jobs 1 --no-spares", seconds, records)
        print(f"spares: {results['local1']['seconds'] / seconds:.2f}x the wall time of --no-spares with one job; "
              f"verdicts {'the same' if results['cold1']['verdicts'] == results['local1']['verdicts'] else 'DIFFER'}")
        if args.no_ray:
            return 0
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray: not installed (pip install 'kanalyze[ray]'); Ray's row left out")
            return 0
        head, address, startup = start_cluster(args.ray_cpus, os.path.join(work, "ray"))
        try:
            seconds, records = audit(files, os.path.join(work, "ray-out"), args.gates, "--executor", "ray",
                                     "--address", address)
        finally:
            stop_cluster(head)
        results["ray"] = row(f"ray ({args.ray_cpus} CPUs)", seconds, records)
        slots = min(args.ray_cpus, 4)
        local = results.get(f"local{slots}") or results["local2"]
        overhead = (seconds - local["seconds"]) * slots / len(files)
        print(f"ray cluster start: {startup:.1f} s (not in Ray's wall time)")
        print(f"ray overhead per pair: {overhead:+.2f} s against local --jobs {slots} "
              f"(({seconds:.1f} - {local['seconds']:.1f}) s x {slots} slots / {len(files)} pairs)")
        same = results["ray"]["verdicts"] == results["local1"]["verdicts"]
        print(f"ray's journal has the local executor's pair ids and verdicts: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
