"""`kanalyze replay WITNESS.json|DIR ...`: re-run witnesses, each through the gate that wrote it.

One witness: its verdict on one line, `CODE status: summary`; exit 1 while it still
fails, 0 once fixed, 2 (never 0) for a witness that cannot be replayed (among them one
changed after it was written).

Several, or a folder (its `*.json`, as `kanalyze check --dynamic` and `kanalyze audit`
write them): one line per witness, its path first, in the order given; one that cannot be
replayed is said so on its line and the others go on.  They run in this one process: one
zygote (its imports of torch and triton paid once) starts the workers of all of them, and
on the CPU a problem's references computed for one witness serve the next one of that problem
that has the same inputs (the reference cache; on a GPU a session's references are held by
its judge and go with it).  Exit 1 when any still fails, else 2 when any could not be
decided, else 0: every one is fixed.  `--output-format json` gives a list of
{"witness", "code", "status", "summary"} (status `error` for a witness that could not be
replayed at all).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kanalyze.cli.parser import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, UsageError


def witness_files(given: list[str]) -> list[str]:
    """The files named, and each named folder's `*.json` (sorted); a path that is neither is a usage error."""
    found: list[str] = []
    for path in given:
        if os.path.isdir(path):
            found += sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith(".json"))
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such witness file or folder")
    return found


def cmd_replay(args: argparse.Namespace) -> int:
    from kanalyze.dynamic.runner import Options
    from kanalyze.dynamic.witness import WitnessError, replay

    paths = witness_files(args.witness)
    if not paths:
        raise UsageError(f"no witness (*.json) in {', '.join(args.witness)}")
    single = len(paths) == 1 and not os.path.isdir(args.witness[0])
    if args.trust:
        whose = "its signature; its verdict is" if single else "their signatures; each verdict is"
        sys.stderr.write(f"kanalyze: warning: --trust: replaying {', '.join(args.witness)} without checking "
                         f"{whose} only as trustworthy as where the file came from\n")
    results = []
    for path in paths:
        try:
            verdict = replay(path, Options(mode=args.device), trust=args.trust)
        except WitnessError as exc:
            if single:
                raise UsageError(str(exc)) from exc
            results.append({"witness": path, "code": None, "status": "error", "summary": str(exc)})
        except Exception as exc:   # kanalyze's own failure on this witness: said, and the others go on
            if single:
                raise
            results.append({"witness": path, "code": None, "status": "error",
                            "summary": f"kanalyze could not replay it: {type(exc).__name__}: {exc}"})
        else:
            results.append({"witness": path, "code": verdict.code, "status": verdict.status,
                            "summary": verdict.summary})
        if not single and args.output_format == "text":
            sys.stdout.write(_line(results[-1], with_path=True))
            sys.stdout.flush()
    if args.output_format == "json":
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
    elif single:
        sys.stdout.write(_line(results[0], with_path=False))
    statuses = {result["status"] for result in results}
    if "confirmed" in statuses:
        return EXIT_FINDINGS
    return EXIT_CLEAN if statuses == {"refuted"} else EXIT_ERROR


def _line(result: dict, with_path: bool) -> str:
    head = f"{result['witness']}: " if with_path else ""
    if result["status"] == "error":
        return f"{head}not replayed: {result['summary']}\n"
    return f"{head}{result['code']} {result['status']}: {result['summary']}\n"
