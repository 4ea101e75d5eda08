"""SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

Rules carry their docs (`help.markdown`) and stable ids (the clause codes);
each result carries the finding's status, kernel and evidence in `properties`.
A result's `level` is the finding's severity, as in every format
(`Finding.severity`): `error` for a finding that stands, `warning` for an
unconfirmed flag, `note` for a refuted flag or an informational line.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kanalyze.findings import Finding, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(path: str) -> str:
    if os.path.isabs(path):
        return "file://" + path.replace(os.sep, "/")
    return path.replace(os.sep, "/")


def render_sarif(findings: list[Finding], rules: list[dict[str, Any]], version: str) -> str:
    """`rules`: dicts with code, name, summary, docs (markdown), gate, help_uri."""
    index = {rule["code"]: i for i, rule in enumerate(rules)}
    driver_rules = [{
        "id": rule["code"],
        "name": rule["name"],
        "shortDescription": {"text": rule["summary"]},
        "fullDescription": {"text": rule["summary"]},
        "help": {"text": rule["docs"], "markdown": rule["docs"]},
        "helpUri": rule["help_uri"],
        "defaultConfiguration": {"level": str(Severity.ERROR)},  # what a flag of the clause is
        "properties": {"gate": rule["gate"], "tags": [rule["code"][:3]]},
    } for rule in rules]
    results = []
    for f in findings:
        loc = f.location
        result: dict[str, Any] = {
            "ruleId": f.code,
            "level": str(f.severity),
            "kind": "fail",
            "message": {"text": f.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(loc.file)},
                    "region": {
                        "startLine": loc.row, "startColumn": loc.column,
                        "endLine": loc.end_row, "endColumn": loc.end_column,
                    },
                },
            }],
            "properties": {"status": str(f.status), "kernel": f.kernel, "evidence": f.evidence},
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        if f.witness is not None:
            result["properties"]["witness"] = f.witness.to_dict()
        results.append(result)
    log = {
        "version": "2.1.0",
        "$schema": SCHEMA,
        "runs": [{
            "tool": {"driver": {
                "name": "kanalyze",
                "version": version,
                "informationUri": "https://kanalyze.dev",
                "rules": driver_rules,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(log, indent=2) + "\n"
