"""JSON: a list of finding objects (code, name, message, status, severity,
filename, location, end_location, kernel, evidence, witness, url), as ruff's.

`severity` is the finding's, as every format shows it (`Finding.severity`):
error, warning or note."""

from __future__ import annotations

import json

from kanalyze.findings import Finding, rule_url


def render_json(findings: list[Finding]) -> str:
    items = []
    for f in findings:
        item = f.to_dict()
        item["severity"] = str(f.severity)
        item["url"] = rule_url(f.code, f.name)
        items.append(item)
    return json.dumps(items, indent=2, sort_keys=False) + "\n"
