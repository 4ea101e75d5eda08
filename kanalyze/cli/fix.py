"""`kanalyze check --fix`, `--diff` and `--unsafe-fixes`, as ruff's (the fixes: kanalyze/fixes/).

`--fix` applies every safe fix (and, with `--unsafe-fixes`, the unsafe ones) to
each file with a fixable finding, checks the result again, fixes again until no
fix applies (a few passes at most), writes the file, and reports what remains:
`Found 3 errors (2 fixed, 1 remaining).`; the exit code follows what remains.
`--diff` writes nothing: it prints a unified diff of what `--fix` would do on
stdout, `Would fix N errors.` on stderr, and exits 1 when there is something to
fix.  Standard input: `--fix` prints the fixed text on stdout and the report on
stderr (as ruff does), `--diff` the diff.  A file is written in its own encoding
(a BOM kept) and only the fixed characters change.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass, field

from kanalyze.analyzer.sources import read_for_rewrite
from kanalyze.cli.output import render, write_report
from kanalyze.cli.parser import EXIT_CLEAN, EXIT_FINDINGS, UsageError
from kanalyze.findings import Finding
from kanalyze.report.escape import printable


@dataclass
class Fixed:
    """What the fixes did to every file."""

    findings: list[Finding]                 # the findings after fixing (what remains)
    fixed: int = 0                          # findings fixed
    hidden: int = 0                         # remaining findings with an unsafe fix only
    diffs: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)   # the new text of each changed file
    warnings: list[str] = field(default_factory=list)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _diff(path: str, old: str, new: str) -> str:
    from kanalyze.report.paths import relative_to_cwd

    name = relative_to_cwd(path)
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), name, name)
    return "".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def fix_files(findings: list[Finding], config, *, unsafe: bool, write: bool,
              stdin: tuple[str, str] | None = None) -> Fixed:
    """Fix each file with a fixable finding (`stdin`: its name and text, never written)."""
    from kanalyze.check import run_text
    from kanalyze.fixes import fix_until_stable, fixable, hidden_unsafe
    from kanalyze.profile import apply_profiles

    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.location.file, []).append(finding)
    outcome = Fixed(findings=[])
    for path, members in sorted(by_file.items()):
        if not any(fixable(f) for f in members):
            outcome.findings += members
            continue
        encoding = "utf-8"
        if stdin is not None and path == stdin[0]:
            text = stdin[1]
        else:
            try:
                text, encoding = read_for_rewrite(path)
            except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as exc:
                outcome.warnings.append(f"{path}: cannot fix: {exc}")
                outcome.findings += members
                continue

        def check(new: str, path: str = path, encoding: str = encoding) -> list[Finding]:
            result = run_text(path, new.encode(encoding), config)
            return apply_profiles(result.findings, config, result.profiles)

        try:
            new, applied, remaining = fix_until_stable(text, members, check, unsafe=unsafe)
        except Exception as exc:  # a fixer's failure on one file costs that file's fixes, not the run
            outcome.warnings.append(f"{path}: cannot fix: kanalyze's fixer failed: {type(exc).__name__}: {exc}")
            outcome.findings += members
            continue
        if not unsafe:
            outcome.hidden += hidden_unsafe(new, remaining)
        outcome.findings += remaining
        if new == text:
            continue
        outcome.fixed += len(applied)
        outcome.texts[path] = new
        outcome.diffs.append(_diff(path, text, new))
        if write and not (stdin is not None and path == stdin[0]):
            try:
                with open(path, "wb") as handle:
                    handle.write(new.encode(encoding))
            except (OSError, UnicodeEncodeError) as exc:
                outcome.warnings.append(f"{path}: cannot write the fixes: {exc}")
    outcome.findings.sort(key=lambda f: f.sort_key)
    return outcome


def _hidden_line(hidden: int) -> str:
    return f"{hidden} hidden fix{'' if hidden == 1 else 'es'} can be enabled with the `--unsafe-fixes` option" \
        if hidden else ""


def run_fixes(args: argparse.Namespace, findings: list[Finding], config, fmt: str, suppressed: int,
              texts: dict[str, str], stdin_name: str | None, output) -> int:
    """`--fix` or `--diff` after the static pass; the exit code."""
    from kanalyze.report import Summary

    stdin = (stdin_name, texts[stdin_name]) if stdin_name is not None and stdin_name in texts else None
    outcome = fix_files(findings, config, unsafe=args.unsafe_fixes, write=args.fix and not args.diff, stdin=stdin)
    for warning in outcome.warnings:
        sys.stderr.write(f"kanalyze: warning: {printable(warning)}\n")
    hidden = _hidden_line(outcome.hidden)
    if args.diff:
        sys.stdout.write("".join(outcome.diffs))
        if not args.quiet:
            more = f"{outcome.hidden} {'additional ' if outcome.fixed else ''}" \
                   f"fix{'' if outcome.hidden == 1 else 'es'} available with `--unsafe-fixes`"
            line = f"Would fix {_plural(outcome.fixed, 'error')}" if outcome.fixed else "No errors would be fixed"
            sys.stderr.write(line + (f" ({more})" if outcome.hidden else "") + ".\n")
        return EXIT_FINDINGS if outcome.fixed and not args.exit_zero else EXIT_CLEAN
    if stdin is not None:
        sys.stdout.write(outcome.texts.get(stdin[0], stdin[1]))
        texts = {**texts, stdin[0]: outcome.texts.get(stdin[0], stdin[1])}
    report = render(fmt, outcome.findings, args, suppressed, texts, fixed=outcome.fixed)
    if hidden and fmt in ("full", "concise") and not args.quiet:
        report += f"No fixes available ({hidden}).\n"
    if stdin is not None and output is None:
        sys.stderr.write(report)
    else:
        write_report(report, output, args.output_file)
    if Summary.of(outcome.findings).failed and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def check_fix_options(args: argparse.Namespace, elsewhere: list[str]) -> None:
    """`--fix`/`--diff` run on the static pass's findings alone."""
    flag = "--diff" if args.diff else "--fix" if args.fix else None
    if flag is None:
        return
    if args.add_noqa:
        raise UsageError(f"{flag} and --add-noqa do not go together: fix first, then add noqa comments")
    if elsewhere:
        raise UsageError(f"{flag} runs the static pass alone; leave out {elsewhere[0]}")
