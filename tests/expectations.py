"""Inline expectations in fixtures, in the style of semgrep's rule tests.

    # expect: PRC002          the next code line must carry a PRC002 finding
    # expect: PRC002, EXC001  ... both
    # ok: PRC002              the next code line must not (a look-alike)
    // expect: ORD001         the same in CUDA, also inside an inline CUDA string

The target is the next line that is not itself an expectation comment.
"""

from __future__ import annotations

import re
from pathlib import Path

DIRECTIVE = re.compile(r"^\s*(?:#|//)\s*(?P<kind>expect|ok):\s*(?P<codes>[A-Z]{3}\d{3}(?:\s*,\s*[A-Z]{3}\d{3})*)\s*$")


def parse_expectations(text: str) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
    """(expected, forbidden): sets of (row, code)."""
    expected: set[tuple[int, str]] = set()
    forbidden: set[tuple[int, str]] = set()
    pending: list[tuple[str, list[str]]] = []
    for row, line in enumerate(text.splitlines(), start=1):
        match = DIRECTIVE.match(line)
        if match:
            codes = [c.strip() for c in match.group("codes").split(",")]
            pending.append((match.group("kind"), codes))
            continue
        if not pending or not line.strip():
            continue
        for kind, codes in pending:
            target = expected if kind == "expect" else forbidden
            target.update((row, code) for code in codes)
        pending = []
    return expected, forbidden


def fixture_files(root: Path, pattern: str = "*.py") -> list[Path]:
    return sorted(p for p in root.rglob(pattern) if p.is_file())
