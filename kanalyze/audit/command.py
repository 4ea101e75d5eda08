"""`kanalyze audit`, behind kanalyze/cli.py: the arguments → pairs → audit → what is printed.

The only module of the package that prints: a progress line on a terminal (stderr,
rich; nothing on a pipe, nothing with -q), then the summary on stdout (text, or
JSON with `--output-format json`), and writes the HTML report (html.py; DIR/report.html
or `--html PATH`).  `--summary DIR` prints the summary of DIR's journal again, writes
its report again, and runs nothing else.
"""

from __future__ import annotations

import json
import os
import sys

from kanalyze.audit import pairs as sources
from kanalyze.audit.executor import ExecutorError
from kanalyze.audit.html import write_report
from kanalyze.audit.journal import RESULTS, JournalError
from kanalyze.audit.run import AuditOptions, audit, summary_of
from kanalyze.audit.summary_text import render_text
from kanalyze.extras import importable


def _pairs(args, usage_error) -> list[sources.Pair]:
    given = [name for name, value in (("--manifest", args.manifest), ("--kernelbench", args.kernelbench),
                                      ("--reference", args.reference)) if value]
    if len(given) != 1:
        raise usage_error("audit needs exactly one of --manifest PAIRS.jsonl, --kernelbench DIR "
                          f"or --reference PROBLEM.py (got {', '.join(given) or 'none'})")
    for name, path in (("--manifest", args.manifest), ("--kernelbench", args.kernelbench),
                       ("--reference", args.reference)):
        if path and not os.path.exists(path):
            raise usage_error(f"{name}: path not found: {path}")
    if args.manifest:
        if args.candidates:
            raise usage_error("--manifest names the candidates; leave out the CANDIDATE paths")
        return sources.from_manifest(args.manifest)
    if not args.candidates:
        raise usage_error(f"{given[0]} needs the candidates: kanalyze audit CANDIDATE_DIR {given[0]} ...")
    if args.kernelbench:
        return sources.from_kernelbench(args.candidates, args.kernelbench)
    return sources.from_reference(args.candidates, args.reference)


# What each pair's worker imports: the static pass's dependencies, and the gates' (kanalyze[dynamic]).
PAIR_MODULES = {"libcst": "libcst", "networkx": "networkx", "z3": "z3-solver", "numpy": "numpy",
                "tree_sitter": "tree-sitter", "tree_sitter_cuda": "tree-sitter-cuda", "rich": "rich",
                "torch": "torch", "triton": "triton"}


def _check_pairs_can_run(usage_error) -> None:
    """A pair's worker runs in this environment (the local executor): where it lacks a module every
    pair needs, every pair would crash the same way and fill the journal with it; say so instead."""
    missing = [package for module, package in PAIR_MODULES.items() if not importable(module)]
    if missing:
        raise usage_error(f"each pair runs the static pass and the gates, which need {', '.join(missing)}, not "
                          f"installed here: pip install \"kanalyze[dynamic]\" (nothing was run or journaled)")


def _print_summary(summary: dict, fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(summary))


def _report(args, directory: str, usage_error) -> None:
    """Write the HTML report of DIR's journal (its path printed after a text summary);
    a usage error (exit 2) when it cannot be written."""
    try:
        path = write_report(directory, args.html, args.sample, args.sample_seed)
    except (OSError, JournalError) as exc:
        raise usage_error(f"cannot write the HTML report {args.html or directory}: {exc}") from exc
    if args.output_format == "text":
        sys.stdout.write(f"report: {path}\n")


def _exit_code(summary: dict) -> int:
    return 1 if summary["with_violation"] or summary["kanalyze_failed"] else 0


def run_audit_command(args, usage_error) -> int:
    if args.sample < 0:
        raise usage_error("--sample is a number of pairs: 0 or more")
    if args.summary:
        if not os.path.exists(os.path.join(args.summary, RESULTS)):
            raise usage_error(f"--summary: no journal at {os.path.join(args.summary, RESULTS)}")
        summary = summary_of(args.summary)
        _print_summary(summary, args.output_format)
        _report(args, args.summary, usage_error)
        return _exit_code(summary)
    if not args.output:
        raise usage_error("audit needs --output DIR (where the journal results.jsonl goes)")
    if args.jobs < 1 or args.pair_timeout <= 0 or (args.stop_after is not None and args.stop_after < 0):
        raise usage_error("--jobs must be at least 1, --pair-timeout above 0 and --stop-after 0 or more")
    try:
        pairs = _pairs(args, usage_error)
    except sources.PairsError as exc:
        raise usage_error(str(exc)) from exc
    if not pairs:
        raise usage_error("no pairs to audit: the manifest is empty or the folders hold no .py file")
    pairs, missing = _drop_missing(pairs, args, usage_error)
    if args.executor == "local":
        _check_pairs_can_run(usage_error)
    options = AuditOptions(output=args.output, gates=args.gates, device=args.device, jobs=args.jobs,
                           pair_seconds=args.pair_timeout, case_seconds=args.case_timeout,
                           executor_kind=args.executor, address=args.address,
                           extend_select=list(args.extend_select), ir=args.ir, stop_after=args.stop_after,
                           spares=args.spares, check_builds=args.check_builds)
    show = not args.quiet and sys.stderr.isatty()
    try:
        summary = _audit_with_progress(pairs, options) if show else audit(pairs, options)
    except (JournalError, ExecutorError) as exc:
        raise usage_error(str(exc)) from exc
    _print_summary(summary, args.output_format)
    left = len(pairs) - summary["pairs"]
    if args.stop_after is not None and left > 0:
        sys.stderr.write(f"{left} pair{'s' if left != 1 else ''} not started within --stop-after "
                         f"{args.stop_after:g} s: the same command resumes them\n")
    _report(args, args.output, usage_error)
    return max(_exit_code(summary), int(bool(missing)))


def _drop_missing(pairs: list[sources.Pair], args, usage_error) -> tuple[list[sources.Pair], list[str]]:
    """The pairs whose files exist, and the paths of those that do not, said on stderr (as a
    linter reports a file it cannot open, and checks the others); a usage error when none exists."""
    missing = [path for path in map(sources.missing_file, pairs) if path is not None]
    if not missing:
        return pairs, []
    where = (f" (a manifest's paths are relative to its folder, {os.path.dirname(os.path.abspath(args.manifest))})"
             if args.manifest else "")
    said = f"{len(missing)} of {len(pairs)} pairs name a file that does not exist{where}, first {missing[0]}"
    if len(missing) == len(pairs):
        raise usage_error(f"no pairs to audit: {said}")
    sys.stderr.write(f"{said}: not audited; the other pairs are\n")
    return [pair for pair in pairs if sources.missing_file(pair) is None], missing


def _audit_with_progress(pairs: list[sources.Pair], options: AuditOptions) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    violations = 0
    with Progress(TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("audit", total=None, note="")

        def on_start(to_run: int, already: int) -> None:
            bar.update(task, total=to_run, note=f"({already} already in the journal)" if already else "")

        def on_result(record: dict) -> None:
            nonlocal violations
            violations += any(v["status"] == "confirmed" for v in record.get("verdicts", {}).values())
            bar.update(task, advance=1, note=f"{violations} with a violation")

        return audit(pairs, options, on_start=on_start, on_result=on_result)
