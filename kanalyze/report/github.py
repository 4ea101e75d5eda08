"""GitHub Actions workflow commands: one annotation line per finding.

The command is the finding's severity (`Finding.severity`, as every format):
`::error` for a finding that stands, `::warning` for an unconfirmed flag,
`::notice` for a refuted flag or an informational line.

The runner reads every line of a step's output as a possible command, and the
log shows ANSI colours, so the path and message (which can hold text from the
checked files) are made `printable` first, then escaped as GitHub's toolkit
does (`escapeData` / `escapeProperty`): a `%`, `\\r` or `\\n` cannot end the
line and start a second command, nor a `:` or `,` end a property.
"""

from __future__ import annotations

from kanalyze.findings import Finding, Severity
from kanalyze.report.escape import printable

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        loc = f.location
        props = ",".join([
            f"title={_escape_property(printable(f'kanalyze ({f.code})'))}",
            f"file={_escape_property(printable(loc.file))}",
            f"line={loc.row}", f"col={loc.column}",
            f"endLine={loc.end_row}", f"endColumn={loc.end_column}",
        ])
        status = "info" if f.informational else f.status
        text = _escape_data(printable(f"{f.code} [{status}] {f.message}"))
        lines.append(f"::{COMMAND[f.severity]} {props}::{text}")
    return "\n".join(lines) + ("\n" if lines else "")
