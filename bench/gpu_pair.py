"""Run the dynamic pass on pairs of a manifest one at a time, in this process, saying each step.

    python bench/gpu_pair.py MANIFEST [--gates CMP001,CMP003] [--device cuda]

For a pair that the audit reported oddly (a worker that ended, a case that never
answered): the session's progress, step by step with the seconds since the start,
then each verdict in full and where the session's time went.  MANIFEST is a
pairs.jsonl (bench/corpus/README.md), or a few of its lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kanalyze.dynamic.harness import find_harness  # noqa: E402
from kanalyze.dynamic.runner import Options, run_gates  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest")
    parser.add_argument("--gates", default="CMP001", help="comma-separated clauses (default: CMP001, the baseline)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(relativeCreated)9.0f ms  %(message)s")
    root = Path(args.manifest).resolve().parent
    for line in Path(args.manifest).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        pair = json.loads(line)
        candidate, problem = root / pair["candidate"], root / pair["problem"]
        print(f"\n=== {pair['candidate']}\n    {pair['problem']}", flush=True)
        started = time.perf_counter()
        run = run_gates(find_harness(str(candidate), reference=str(problem)), args.gates.split(","), {},
                        Options(mode=args.device))
        print(f"--- {time.perf_counter() - started:.1f} s; baseline: {run.baseline}")
        for verdict in run.verdicts:
            print(f"{verdict.code} {verdict.status}: {verdict.summary}")
        print("seconds:", json.dumps(run.environment.get("seconds", {}), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
