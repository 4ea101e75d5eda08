"""Where `kanalyze check`'s report goes and what it looks like: the format, the paths, the file.

The format, as ruff's: `--output-format`, else KANALYZE_OUTPUT_FORMAT, else
`full` on a terminal and `concise` (one line per finding, what `text` means)
when the output is a pipe or a file, so that tools reading it see what they
always saw.  Paths: relative to the working directory in text and github,
absolute in json and sarif (report/paths.py).  `-o PATH` is opened before the
analysis runs (its folder created, as ruff does): a path that cannot be written
is a usage error then, not a lost run.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Callable

from kanalyze.cli.parser import UsageError
from kanalyze.report import FORMATS


def output_format(args: argparse.Namespace) -> str:
    fmt = args.output_format or os.environ.get("KANALYZE_OUTPUT_FORMAT") or ""
    if not fmt:
        return "full" if args.output_file is None and sys.stdout.isatty() else "concise"
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format: {fmt} (one of {', '.join(FORMATS)})")
    return "concise" if fmt == "text" else fmt


def open_output(path: str | None) -> IO[str] | None:
    """The `-o` file, opened for writing (None: stdout); a UsageError that says why it cannot be."""
    if path is None:
        return None
    try:
        try:
            return open(path, "w", encoding="utf-8")
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def write_report(report: str, handle: IO[str] | None, path: str | None) -> None:
    if handle is None:
        sys.stdout.write(report)
        return
    try:
        handle.write(report)
        handle.close()
    except OSError as exc:  # a full disk
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def source_rows(texts: dict[str, str]) -> Callable[[str], list[str] | None]:
    """A finding's file as rows, for the `full` format: `texts` (standard input, by the
    name the report gives it) or the file, read as the analysis read it; None if it cannot be."""
    from kanalyze.analyzer.sources import SourceText, read_source
    from kanalyze.report.snippet import split_rows

    read: dict[str, list[str] | None] = {name: split_rows(text) for name, text in texts.items()}

    def rows(path: str) -> list[str] | None:
        if path not in read:
            source = read_source(path)
            read[path] = split_rows(source.text) if isinstance(source, SourceText) else None
        return read[path]

    return rows


def render(fmt: str, findings: list, args: argparse.Namespace, suppressed: int, texts: dict[str, str],
           fixed: int = 0) -> str:
    """The report in `fmt`; `texts`: what was read from standard input, by its name;
    `fixed`: how many findings `--fix` fixed (the text summary counts them)."""
    from kanalyze import __version__
    from kanalyze.cli.commands import rule_metadata
    from kanalyze.report import render_github, render_json, render_sarif, render_statistics, render_text
    from kanalyze.report.paths import relative_to_cwd, with_paths

    findings = with_paths(findings, absolute_paths=fmt in ("json", "sarif"))
    if fmt == "json":
        return render_json(findings)
    # Rule metadata imports every rule (and LibCST): only SARIF and --statistics
    # need more than the findings carry, so a warm text run stays fast.
    if fmt == "sarif":
        return render_sarif(findings, rule_metadata(), __version__)
    if fmt == "github":
        return render_github(findings)
    to_tty = args.output_file is None and sys.stdout.isatty()
    color = args.color == "always" or (args.color == "auto" and to_tty and not os.environ.get("NO_COLOR"))
    rows = source_rows({relative_to_cwd(path): text for path, text in texts.items()}) if fmt == "full" else None
    # -q: each finding's line (and the dynamic pass's verdict under it), no summary
    report = render_text(findings, color=color, suppressed=suppressed, summary=not args.quiet, source=rows,
                         fixed=fixed)
    if args.statistics:
        report += render_statistics(findings, {f.code: f.name for f in findings})
    return report
