"""Replay every witness an audit wrote, and count the confirmations whose witness shows its claim.

    python bench/replay_witnesses.py AUDIT_DIR... [--device cpu] [--timeout 600] [--jobs N] [--json OUT]

A `confirmed` verdict is worth its witness: `kanalyze replay` regenerates the inputs from
the seeds, sizes and settings the witness holds, runs the candidate again in a fresh
session and judges it as the gate did.  For each confirmed verdict of each AUDIT_DIR's
journal (results.jsonl) that names a witness, this runs `kanalyze replay` in a process of
its own and sorts the outcome:

* `shown`: the replay confirms the clause again (exit 1);
* `not shown`: the replay refutes it (exit 0): the witness does not show its claim;
* `not replayed`: the replay could not decide (exit 2: an unconfirmed replay, a witness
  changed since it was written, the time limit), with the reason it gave.

It prints one line per witness and a table per clause.  A witness is replayed on the
device its audit ran on (`options.device` of the journal) unless --device says otherwise.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import subprocess
import sys
import time
from pathlib import Path

SHOWN, NOT_SHOWN, NOT_REPLAYED = "shown", "not shown", "not replayed"


def confirmations(audit: Path) -> list[dict]:
    """The journal's confirmed verdicts that name a witness file that exists."""
    found = []
    for line in (audit / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        for code, verdict in (record.get("verdicts") or {}).items():
            witness = verdict.get("witness")
            if verdict.get("status") == "confirmed" and isinstance(witness, str) and Path(witness).is_file():
                found.append({"pair": record.get("id"), "candidate": record.get("candidate"), "code": code,
                              "witness": witness, "device": (record.get("options") or {}).get("device", "cpu")})
    return found


def replay(item: dict, device: str | None, timeout: float) -> dict:
    command = [sys.executable, "-m", "kanalyze", "replay", "--device", device or item["device"], item["witness"]]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**item, "outcome": NOT_REPLAYED, "said": f"no answer within {timeout:g} s",
                "seconds": round(time.monotonic() - started, 1)}
    said = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1]
    outcome = {1: SHOWN, 0: NOT_SHOWN}.get(done.returncode, NOT_REPLAYED)
    return {**item, "outcome": outcome, "said": said[:300], "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audits", nargs="+", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device (default: the audit's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per replay (default 600)")
    parser.add_argument("--json", type=Path, help="write every replay's outcome here")
    parser.add_argument("--jobs", type=int, default=1, help="replays at once, each a process of its own (default 1)")
    args = parser.parse_args()
    items = [item for audit in args.audits for item in confirmations(audit)]
    print(f"{len(items)} confirmed verdicts with a witness in {len(args.audits)} journals", flush=True)
    outcomes = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        running = [pool.submit(replay, item, args.device, args.timeout) for item in items]
        for done in concurrent.futures.as_completed(running):
            result = done.result()
            outcomes.append(result)
            print(f"{result['outcome']:<12} {result['code']:<7} {result['seconds']:>6.1f} s  "
                  f"{Path(result['candidate'] or '?').name[:60]}: {result['said'][:120]}", flush=True)
    by_clause: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for result in outcomes:
        by_clause[result["code"]][result["outcome"]] += 1
    print(f"\n{'clause':<8} {SHOWN:>6} {NOT_SHOWN:>10} {NOT_REPLAYED:>13}")
    for code, counts in sorted(by_clause.items()):
        print(f"{code:<8} {counts[SHOWN]:>6} {counts[NOT_SHOWN]:>10} {counts[NOT_REPLAYED]:>13}")
    total = collections.Counter(r["outcome"] for r in outcomes)
    print(f"{'all':<8} {total[SHOWN]:>6} {total[NOT_SHOWN]:>10} {total[NOT_REPLAYED]:>13}")
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1), encoding="utf-8")
    return 1 if total[NOT_SHOWN] else 0


if __name__ == "__main__":
    sys.exit(main())
