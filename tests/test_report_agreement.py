"""Every format says the same thing about the same findings.

One list of findings, one of each status (and an informational resource line),
goes through every writer (text, json, sarif, github) and the editor's
conversion; each must give each finding the same severity, the same status, and
count what stands the same way as the summary line and the exit code:

    flagged, confirmed       error     stands: counted in "Found N errors", exit 1
    unconfirmed              warning   listed apart, exit 1 (no gate cleared it)
    refuted, informational   note      listed apart, exit 0
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from lsprotocol import types

from kanalyze.check import CheckResult
from kanalyze.cli import _rule_metadata, main
from kanalyze.findings import Finding, Location, Severity, Status, Witness
from kanalyze.lsp.convert import split_lines, to_diagnostic
from kanalyze.report import Summary, render_github, render_json, render_sarif, render_statistics, render_text

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text())
FINDINGS_SCHEMA = json.loads((ROOT / "kanalyze/schemas/findings.schema.json").read_text())
FILE = "kern.py"
TEXT = "\n".join(f"line {n} of the kernel file" for n in range(1, 21)) + "\n"


def finding(kind: str, row: int) -> Finding:
    """A finding of one kind: flagged, confirmed, refuted, unconfirmed, informational or parse-error."""
    code, name = {"informational": ("RES002", "resource-budget"), "parse-error": ("KAN000", "parse-error")}.get(
        kind, ("PRC001", "precision-downgrade"))
    status = Status(kind) if kind in {s.value for s in Status} else Status.FLAGGED
    evidence = {"gate": "prc001-ieee-error-bound"}
    if kind == "informational":
        evidence = {"informational": True, "summary": "40 registers/thread"}
    elif kind != "flagged" and kind != "parse-error":
        evidence["gate_result"] = f"PRC001 {kind}: what the gate saw"
    witness = Witness("PRC001", "prc001-ieee-error-bound", path=".kanalyze/witnesses/w.json") \
        if kind == "confirmed" else None
    return Finding(code, name, f"a {kind} finding", Location(FILE, row, 1, row, 5), status=status,
                   kernel="matmul", evidence=evidence, witness=witness)


KINDS = ["flagged", "confirmed", "refuted", "unconfirmed", "informational", "parse-error"]
EXPECTED = {"flagged": Severity.ERROR, "confirmed": Severity.ERROR, "parse-error": Severity.ERROR,
            "unconfirmed": Severity.WARNING, "refuted": Severity.NOTE, "informational": Severity.NOTE}


@pytest.fixture
def findings() -> list[Finding]:
    return [finding(kind, row) for row, kind in enumerate(KINDS, start=1)]


# What each format says a finding's severity is, read back from its output, in finding order.

def text_severities(findings: list[Finding]) -> list[Severity]:
    colour = {"\x1b[31m": Severity.ERROR, "\x1b[33m": Severity.WARNING, "\x1b[2m": Severity.NOTE}
    lines = [line for line in render_text(findings, color=True).splitlines() if line.startswith("\x1b[1mkern.py")]
    return [colour[re.search(r"\x1b\[1m(\x1b\[\d+m)[A-Z]{3}\d{3}", line).group(1)] for line in lines]


def json_severities(findings: list[Finding]) -> list[Severity]:
    items = json.loads(render_json(findings))
    jsonschema.Draft202012Validator(FINDINGS_SCHEMA).validate(items)
    return [Severity(item["severity"]) for item in items]


def sarif_severities(findings: list[Finding]) -> list[Severity]:
    log = json.loads(render_sarif(findings, _rule_metadata(), "test"))
    jsonschema.validate(log, SARIF_SCHEMA)
    return [Severity(result["level"]) for result in log["runs"][0]["results"]]


def github_severities(findings: list[Finding]) -> list[Severity]:
    command = {"error": Severity.ERROR, "warning": Severity.WARNING, "notice": Severity.NOTE}
    return [command[line[2:line.index(" ")]] for line in render_github(findings).splitlines()]


def editor_severities(findings: list[Finding]) -> list[Severity]:
    level = {types.DiagnosticSeverity.Error: Severity.ERROR, types.DiagnosticSeverity.Warning: Severity.WARNING,
             types.DiagnosticSeverity.Information: Severity.NOTE}
    lines = split_lines(TEXT)
    return [level[to_diagnostic(f, "file:///kern.py", lines, len).severity] for f in findings]


FORMATS = {"text": text_severities, "json": json_severities, "sarif": sarif_severities,
           "github": github_severities, "editor": editor_severities}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_gives_each_status_its_severity(findings, fmt) -> None:
    assert FORMATS[fmt](findings) == [EXPECTED[kind] for kind in KINDS]


def test_every_format_counts_as_many_errors_as_the_summary_line(findings) -> None:
    summary = Summary.of(findings)
    assert (summary.errors, summary.confirmed, summary.unconfirmed, summary.refuted, summary.informational) == \
        (3, 1, 1, 1, 1)
    for fmt, severities in FORMATS.items():
        assert severities(findings).count(Severity.ERROR) == summary.errors, fmt
    statistics = render_statistics(findings, {})
    assert sum(int(line.split("\t")[0]) for line in statistics.splitlines()) == summary.errors
    assert "RES002" not in statistics


def test_the_status_each_format_shows(findings) -> None:
    items = json.loads(render_json(findings))
    assert [item["status"] for item in items] == ["flagged", "confirmed", "refuted", "unconfirmed", "flagged", "flagged"]
    results = json.loads(render_sarif(findings, _rule_metadata(), "test"))["runs"][0]["results"]
    assert [r["properties"]["status"] for r in results] == [item["status"] for item in items]
    github = render_github(findings).splitlines()
    assert [re.search(r"::[A-Z]{3}\d{3} \[(\w+)\]", line).group(1) for line in github] == \
        ["flagged", "confirmed", "refuted", "unconfirmed", "info", "flagged"]
    text = [line for line in render_text(findings).splitlines() if line.startswith(FILE)]
    assert [re.search(r"^\S+ [A-Z]{3}\d{3}( \[\w+\])? ", line).group(1) for line in text] == \
        [None, " [confirmed]", " [refuted]", " [unconfirmed]", " [info]", None]


def test_the_summary_line_counts_what_stands_and_lists_the_rest_apart(findings) -> None:
    assert render_text(findings).splitlines()[-1] == \
        "Found 3 errors (1 confirmed); 1 refuted, 1 unconfirmed, 1 informational."
    by_kind = dict(zip(KINDS, findings))
    assert Summary.of([by_kind["flagged"]]).line() == "Found 1 error."
    assert Summary.of([by_kind["refuted"], by_kind["informational"]]).line() == \
        "All checks passed! (1 refuted, 1 informational)"
    assert Summary.of([by_kind["unconfirmed"]]).line() == "Found 0 errors; 1 unconfirmed."
    assert Summary.of([]).line() == "All checks passed!"


@pytest.mark.parametrize("kinds,exit_code", [
    (["flagged"], 1), (["confirmed"], 1), (["parse-error"], 1), (["unconfirmed"], 1),
    (["refuted"], 0), (["informational"], 0), (["refuted", "informational"], 0), ([], 0),
])
@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_the_exit_code_follows_what_stands_in_every_format(tmp_path, monkeypatch, capsys, kinds, exit_code, fmt) -> None:
    """The bug this guards: "Found 1 error." printed by a run that exited 0 (a refuted flag or a
    "within budget" line counted as an error), or the reverse."""
    import kanalyze.check

    chosen = [finding(kind, row) for row, kind in enumerate(kinds, start=1)]
    monkeypatch.setattr(kanalyze.check, "run_static", lambda *a, **k: CheckResult(findings=list(chosen)))
    monkeypatch.chdir(tmp_path)
    (tmp_path / FILE).write_text(TEXT)
    assert main(["check", FILE, "--isolated", "--output-format", fmt]) == exit_code
    out = capsys.readouterr().out
    if fmt == "text":
        assert out.splitlines()[-1].startswith("Found " if exit_code else "All checks passed!")
