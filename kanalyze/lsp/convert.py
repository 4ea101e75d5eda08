"""Findings → what an editor shows: diagnostics, `# noqa` edits, hover text.

Positions: a Location's rows and columns are 1-based, counted in characters
(code points), the end exclusive.  LSP positions are 0-based, and columns are
counted in the encoding the client and server agreed on (UTF-16 unless the
client offers another), so every column goes through the document's line
text.  Lines end at "\\r\\n", "\\n" or "\\r", as both LibCST and the protocol say.

Witnesses: the dynamic pass writes one JSON record per confirmed violation
under `.kanalyze/witnesses/` of the project.  A finding whose clause, file
and kernel match a witness there is shown as `confirmed`, linked to it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lsprotocol import types

from kanalyze.findings import Finding, Severity
from kanalyze.lsp.analysis import CUDA
from kanalyze.rules import explanation, rules_by_code

SOURCE = "kanalyze"
WITNESS_DIR = Path(".kanalyze") / "witnesses"

_LINE_END = re.compile(r"\r\n|\r|\n")
# A finding's severity, as every report shows it (findings.py, `Finding.severity`).
_SEVERITY = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning,
             Severity.NOTE: types.DiagnosticSeverity.Information}


def split_lines(text: str) -> list[str]:
    return _LINE_END.split(text)


# --- ranges -----------------------------------------------------------------

Units = Callable[[str], int]  # the number of client code units in a string


def _position(lines: list[str], row: int, column: int, units: Units) -> types.Position:
    """1-based (row, column in characters) → 0-based LSP position in client units."""
    line = max(row - 1, 0)
    if line >= len(lines):  # past the end: the end of the last line
        line = len(lines) - 1
        return types.Position(line=line, character=units(lines[line]))
    return types.Position(line=line, character=units(lines[line][: max(column - 1, 0)]))


def finding_range(finding: Finding, lines: list[str], units: Units) -> types.Range:
    loc = finding.location
    start = _position(lines, loc.row, loc.column, units)
    end = _position(lines, loc.end_row, loc.end_column, units)
    if (end.line, end.character) <= (start.line, start.character):
        # A point (a file-level report such as KAN000): underline the rest of
        # the line so that editors show something to hover.
        end = types.Position(line=start.line, character=units(lines[start.line]) if lines else 0)
    return types.Range(start=start, end=end)


def contains(rng: types.Range, position: types.Position) -> bool:
    start = (rng.start.line, rng.start.character)
    end = (rng.end.line, rng.end.character)
    return start <= (position.line, position.character) <= end


def overlaps(a: types.Range, b: types.Range) -> bool:
    return ((a.start.line, a.start.character) <= (b.end.line, b.end.character)
            and (b.start.line, b.start.character) <= (a.end.line, a.end.character))


# --- witnesses --------------------------------------------------------------

@dataclass(frozen=True)
class WitnessRef:
    """What the editor needs of a witness record to match it to a finding."""

    path: str                 # the witness JSON file
    clause: str
    file: str | None          # the kernel's source file, absolute
    function: str | None      # the kernel function, if the record names one
    gate: str | None

    def matches(self, finding: Finding, document_path: str) -> bool:
        if self.clause != finding.code or self.file is None:
            return False
        if not _same_file(self.file, document_path):
            return False
        if self.function and finding.kernel:
            kernel = finding.kernel
            return kernel == self.function or kernel.endswith("." + self.function)
        return True


def _same_file(a: str, b: str) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def _kernel_of(record: dict[str, Any]) -> tuple[str | None, str | None]:
    """(file, function) from `kernel: {file, function}`, `kernel: "file::function"` or top-level keys."""
    kernel = record.get("kernel")
    if isinstance(kernel, dict):
        return kernel.get("file"), kernel.get("function")
    if isinstance(kernel, str):
        if "::" in kernel:
            file, _, function = kernel.rpartition("::")
            return file, function
        return kernel, None
    return record.get("file"), record.get("function")


class WitnessIndex:
    """The witness records under `<root>/.kanalyze/witnesses/`, re-read when the folder changes."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple, list[WitnessRef]]] = {}

    def refs(self, root: str) -> list[WitnessRef]:
        directory = Path(root) / WITNESS_DIR
        try:
            entries = sorted((e.path, e.stat().st_mtime_ns) for e in os.scandir(directory)
                             if e.name.endswith(".json") and e.is_file())
        except OSError:
            return []
        stamp = tuple(entries)
        cached = self._cache.get(root)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        refs = [ref for path, _ in entries if (ref := _load_witness(path, root)) is not None]
        self._cache[root] = (stamp, refs)
        return refs


def _load_witness(path: str, root: str) -> WitnessRef | None:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None  # a witness being written, or not one at all
    if not isinstance(record, dict) or not isinstance(record.get("clause"), str):
        return None
    file, function = _kernel_of(record)
    if isinstance(file, str) and not os.path.isabs(file):
        file = os.path.join(root, file)
    return WitnessRef(
        path=path, clause=record["clause"].upper(),
        file=file if isinstance(file, str) else None,
        function=function if isinstance(function, str) else None,
        gate=record.get("gate") if isinstance(record.get("gate"), str) else None,
    )


# --- diagnostics --------------------------------------------------------------

def help_uri(code: str) -> str | None:
    rule = rules_by_code().get(code)
    return rule.help_uri() if rule else None


def _evidence_text(evidence: dict[str, Any]) -> str:
    parts = [f"{key}: {value}" for key, value in evidence.items() if key not in ("gate", "reason")]
    return "; ".join(parts)


def to_diagnostic(finding: Finding, uri: str, lines: list[str], units: Units,
                  witness: WitnessRef | None = None) -> types.Diagnostic:
    rng = finding_range(finding, lines, units)
    rule = rules_by_code().get(finding.code)
    gate = finding.evidence.get("gate") or (rule.gate if rule else "")
    message = finding.message
    status = str(finding.status)
    related: list[types.DiagnosticRelatedInformation] = []
    witness_path = None
    if witness is not None:
        status = "confirmed"
        witness_path = witness.path
        # As the project sees it: relative to the folder that holds `.kanalyze/`.
        shown = os.path.relpath(witness.path, Path(witness.path).parents[len(WITNESS_DIR.parts)])
        message = f"{message} (confirmed: witness {shown})"
        related.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=Path(witness.path).as_uri(), range=types.Range(
                start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))),
            message=f"confirmed by gate `{witness.gate or gate}`; replay it with `kanalyze replay {shown}`",
        ))
    elif gate:
        related.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri, range=rng),
            message=f"flagged by the static pass; gate `{gate}` of the dynamic pass confirms or refutes it",
        ))
    evidence = _evidence_text(finding.evidence)
    if evidence:
        related.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri, range=rng), message=f"evidence: {evidence}"))
    href = help_uri(finding.code)
    return types.Diagnostic(
        range=rng,
        message=message,
        severity=_SEVERITY[finding.severity],  # a witness only confirms a flag: it stands either way
        code=finding.code,
        code_description=types.CodeDescription(href=href) if href else None,
        source=SOURCE,
        related_information=related or None,
        data={
            "name": finding.name,
            "status": status,
            "gate": gate or None,
            "kernel": finding.kernel,
            "evidence": finding.evidence,
            "witness": witness_path,
        },
    )


# --- suppression edits --------------------------------------------------------

_NOQA_WITH_CODES = re.compile(r"#\s*noqa:\s*[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*", re.IGNORECASE)
_NOLINT_WITH_CODES = re.compile(r"//\s*NOLINT\(([^)]*)\)")
_NOLINT_BARE = re.compile(r"//\s*NOLINT\b(?!\()")


@dataclass(frozen=True)
class LineEdit:
    """Replace characters [start, end) of one line (0-based, in characters) with `text`."""

    line: int
    start: int
    end: int
    text: str


def suppression_edit(lines: list[str], finding: Finding, kind: str | None) -> LineEdit | None:
    """The edit that silences `finding` on its first line, or None where none is safe.

    Python: `# noqa: CODE`, or `, CODE` added to the line's existing list.
    CUDA:   `// NOLINT(CODE)`, or `, CODE` added to an existing `NOLINT(...)`.
    """
    line = finding.location.row - 1
    if not 0 <= line < len(lines):
        return None
    text = lines[line]
    code = finding.code
    end = len(text.rstrip())
    if kind == CUDA:
        existing = _NOLINT_WITH_CODES.search(text)
        if existing:
            return LineEdit(line, existing.end(1), existing.end(1), f", {code}")
        if _NOLINT_BARE.search(text):
            return None  # already silences every code
        return LineEdit(line, end, len(text), f"  // NOLINT({code})")
    if text[:end].endswith("\\"):
        return None  # a comment after a line continuation would break the code
    existing = _NOQA_WITH_CODES.search(text)
    if existing and not text[: existing.start()].rstrip().endswith("kanalyze:"):
        return LineEdit(line, existing.end(), existing.end(), f", {code}")
    return LineEdit(line, end, len(text), f"  # noqa: {code}")


# --- hover ----------------------------------------------------------------------

def hover_markdown(findings: list[tuple[Finding, str]]) -> str:
    """The docs of each clause flagged at a position, with what was found there."""
    sections = []
    for finding, status in findings:
        rule = rules_by_code().get(finding.code)
        head = f"**{finding.code}** `{finding.name}` ({status}): {finding.message}"
        body = explanation(rule) if rule else ""
        sections.append(f"{head}\n\n{body}".rstrip())
    return "\n\n---\n\n".join(sections)
