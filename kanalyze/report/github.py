"""GitHub Actions workflow commands: one `::error ...::` line per finding."""

from __future__ import annotations

from kanalyze.findings import Finding


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        loc = f.location
        props = ",".join([
            f"title={_escape_property(f'kanalyze ({f.code})')}",
            f"file={_escape_property(loc.file)}",
            f"line={loc.row}", f"col={loc.column}",
            f"endLine={loc.end_row}", f"endColumn={loc.end_column}",
        ])
        lines.append(f"::error {props}::{_escape_data(f'{f.code} [{f.status}] {f.message}')}")
    return "\n".join(lines) + ("\n" if lines else "")
