"""Replay every witness an audit wrote, and count the confirmations whose witness shows its claim.

    python bench/replay_witnesses.py AUDIT_DIR... [--device cpu] [--timeout 600] [--jobs N] [--json OUT]
    python bench/replay_witnesses.py AUDIT_DIR... --compare      # a process each vs one a pair, timed

A `confirmed` verdict is worth its witness: `kanalyze replay` regenerates the inputs from
the seeds, sizes and settings the witness holds, runs the candidate again in a fresh
session and judges it as the gate did.  For each confirmed verdict of each AUDIT_DIR's
journal (results.jsonl) that names a witness, this runs `kanalyze replay`, one process for
the witnesses of each pair (their workers from one zygote; on the CPU the references of the
inputs they share computed once; `--one-each`: a process for each witness), and sorts the
outcome:

* `shown`: the replay confirms the clause again;
* `not shown`: the replay refutes it: the witness does not show its claim;
* `not replayed`: the replay could not decide (an unconfirmed replay, a witness changed
  since it was written, the time limit), with the reason it gave.

It prints one line per witness (with the seconds of its pair's process) and a table per
clause.  A witness is replayed on the device its audit ran on (`options.device` of the
journal) unless --device says otherwise.
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


def replay(items: list[dict], device: str | None, timeout: float) -> list[dict]:
    """Replay `items` (witnesses of one device) in one `kanalyze replay` process, `timeout` seconds
    each; a witness the time limit left without its line is `not replayed`, the others keep theirs."""
    command = [sys.executable, "-m", "kanalyze", "replay", "--device", device or items[0]["device"],
               *(item["witness"] for item in items)]
    started = time.monotonic()
    limit = timeout * len(items)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        output, cut = done.stdout, None
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode("utf-8", "replace") if isinstance(expired.stdout, bytes) else expired.stdout
        output, cut, done = output or "", f"no answer within {limit:g} s", None
    seconds = round(time.monotonic() - started, 1)
    lines = output.splitlines()
    if len(items) == 1 and done is not None and lines and not lines[-1].startswith(items[0]["witness"] + ": "):
        lines[-1] = f"{items[0]['witness']}: {lines[-1]}"     # one witness: its line has no path
    results = []
    for item in items:
        said = next((line[len(item["witness"]) + 2:] for line in lines if line.startswith(item["witness"] + ": ")),
                    None)
        if said is None:
            why = cut or ((done.stderr.strip().splitlines() or ["no line for it"])[-1] if done else "no line for it")
            results.append({**item, "outcome": NOT_REPLAYED, "said": why[:300], "seconds": seconds})
            continue
        status = said.split(":", 1)[0].split()[-1]            # "EXC001 confirmed: ..." or "not replayed: ..."
        outcome = {"confirmed": SHOWN, "refuted": NOT_SHOWN}.get(status, NOT_REPLAYED)
        results.append({**item, "outcome": outcome, "said": said[:300], "seconds": seconds})
    return results


def groups(items: list[dict], one_each: bool) -> list[list[dict]]:
    """The witnesses replayed together: those of one pair on one device (or each alone)."""
    if one_each:
        return [[item] for item in items]
    by_pair: dict[tuple, list[dict]] = {}
    for item in items:
        by_pair.setdefault((item["pair"], item["candidate"], item["device"]), []).append(item)
    return list(by_pair.values())


def replay_all(items: list[dict], device: str | None, timeout: float, jobs: int, one_each: bool,
               show: bool = True) -> list[dict]:
    outcomes = []
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        running = [pool.submit(replay, group, device, timeout) for group in groups(items, one_each)]
        for done in concurrent.futures.as_completed(running):
            for result in done.result():
                outcomes.append(result)
                if show:
                    print(f"{result['outcome']:<12} {result['code']:<7} {result['seconds']:>6.1f} s  "
                          f"{Path(result['candidate'] or '?').name[:60]}: {result['said'][:120]}", flush=True)
    return outcomes


def compare(items: list[dict], device: str | None, timeout: float, jobs: int) -> None:
    """Both ways side by side in this run: a process for each witness, then one for each pair."""
    seconds, outcomes = {}, {}
    for one_each in (True, False):
        started = time.monotonic()
        outcomes[one_each] = {r["witness"]: r["outcome"] for r in replay_all(items, device, timeout, jobs, one_each,
                                                                              show=False)}
        seconds[one_each] = time.monotonic() - started
    differ = [w for w in outcomes[True] if outcomes[True][w] != outcomes[False].get(w)]
    print(f"\n{len(items)} witnesses, --jobs {jobs}: a process each {seconds[True]:.1f} s, one a pair "
          f"{seconds[False]:.1f} s ({seconds[False] / seconds[True]:.2f}x); outcomes differ on {len(differ)}")
    for witness in differ:
        print(f"  {witness}: {outcomes[True][witness]} alone, {outcomes[False].get(witness)} with its pair's")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audits", nargs="+", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device (default: the audit's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per replay (default 600)")
    parser.add_argument("--json", type=Path, help="write every replay's outcome here")
    parser.add_argument("--jobs", type=int, default=1, help="replay processes at once (default 1)")
    parser.add_argument("--one-each", action="store_true", help="a process for each witness, not each pair")
    parser.add_argument("--compare", action="store_true",
                        help="time both ways side by side (a process each, one a pair) and compare their outcomes")
    args = parser.parse_args()
    items = [item for audit in args.audits for item in confirmations(audit)]
    print(f"{len(items)} confirmed verdicts with a witness in {len(args.audits)} journals", flush=True)
    if args.compare:
        compare(items, args.device, args.timeout, args.jobs)
        return 0
    outcomes = replay_all(items, args.device, args.timeout, args.jobs, args.one_each)
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
