#!/usr/bin/env python3
"""The Verifier as a reward loop uses it: one `Verifier` per problem, several candidates in turn.

    python bench/bench_verifier.py CORPUS [--device cuda] [--problems 4] [--per 3] [--gates targeted]

CORPUS is what bench/corpus/fetch_corpus.py writes (pairs.jsonl beside candidates/ and
problems/).  It takes the problems with the most Triton candidates, and for each
call prints, side by side from the same run: the outcome, the whole `verify()` time,
the KernelBench-style check inside it (a fresh process, JIT, five allclose trials:
`seconds["allclose"]`) and their ratio; then the median ratio of first calls (the
Verifier's set-up paid) and of later calls (set-up kept).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kanalyze import Verifier  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--per", type=int, default=3, help="candidates per problem")
    parser.add_argument("--gates", default="targeted")
    parser.add_argument("--level", type=int, default=1)
    args = parser.parse_args(argv)

    pairs = [json.loads(line) for line in (args.corpus / "pairs.jsonl").read_text().splitlines() if line.strip()]
    by_problem = collections.defaultdict(list)
    for pair in pairs:
        if pair.get("language") == "triton" and pair.get("level") == args.level:
            by_problem[pair["problem"]].append(pair["candidate"])
    chosen = sorted(by_problem, key=lambda p: (-len(by_problem[p]), p))[:args.problems]

    first, later = [], []
    print(f"{'problem':<44} {'candidate':<34} {'outcome':<12} {'verify s':>8} {'check s':>8} {'ratio':>6}")
    for problem in chosen:
        started = time.monotonic()
        with Verifier(str(args.corpus / problem), device=args.device, gates=args.gates) as verifier:
            setup = time.monotonic() - started
            for index, candidate in enumerate(by_problem[problem][:args.per]):
                result = verifier.verify(str(args.corpus / candidate))
                total = result.seconds.get("total", 0.0) + (setup if index == 0 else 0.0)
                check = result.seconds.get("allclose") or 0.0
                ratio = total / check if check else float("nan")
                (first if index == 0 else later).append(ratio)
                name = "/".join(Path(candidate).parts[-2:])
                print(f"{Path(problem).name[:44]:<44} {name[-34:]:<34} {result.outcome:<12} {total:>8.2f} "
                      f"{check:>8.2f} {ratio:>6.2f}  {result.reason[:80]}")
    for label, ratios in (("first call (set-up included)", first), ("later calls", later)):
        ratios = [r for r in ratios if r == r]
        if ratios:
            print(f"median verify ÷ KernelBench-style check, {label}: {statistics.median(ratios):.2f}× "
                  f"over {len(ratios)} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
