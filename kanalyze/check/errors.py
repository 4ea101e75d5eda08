"""The findings kanalyze makes about its own trouble with a file: KAN000 and KAN001."""

from __future__ import annotations

from kanalyze.analyzer.sources import MAX_NESTING
from kanalyze.findings import Finding, Location

PARSE_ERROR = ("KAN000", "parse-error")
INTERNAL_ERROR = ("KAN001", "internal-error")


def error_finding(path: str, reason: str, row: int = 1, column: int = 1, code=PARSE_ERROR) -> Finding:
    return Finding(
        code=code[0], name=code[1],
        message=reason,
        location=Location(path, row, column, row, column),
        evidence={"reason": reason},
    )


def nesting_finding(path: str) -> Finding:
    # Checked before any LibCST parse: its native parser overflows the stack
    # (a signal, not an exception) on thousands of nested brackets.
    return error_finding(path, f"cannot parse: more than {MAX_NESTING} brackets are open at once "
                               f"(Python itself refuses such code)")
