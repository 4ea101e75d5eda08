"""Each rule's own VALID / INVALID examples (Fixit style)."""

from __future__ import annotations

import pytest

from kanalyze.check import analyze_text
from kanalyze.rules import all_rules

CASES = [(rule, kind, i, example)
         for rule in all_rules() if rule.has_detectors
         for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
         for i, example in enumerate(examples)]


@pytest.mark.parametrize("rule,kind,index,example", CASES,
                         ids=[f"{r.code}-{k}-{i}" for r, k, i, _ in CASES])
def test_rule_example(rule, kind, index, example) -> None:
    findings, _ = analyze_text("example.py", example)
    codes = [f.code for f in findings]
    assert "KAN000" not in codes, f"example does not parse: {findings}"
    if kind == "valid":
        assert rule.code not in codes, [f.message for f in findings if f.code == rule.code]
    else:
        assert rule.code in codes, f"{rule.code} did not fire; got {codes}"


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.has_detectors], ids=lambda r: r.code)
def test_rule_has_examples_and_docs(rule) -> None:
    assert rule.VALID and rule.INVALID
    for heading in ("## What it does", "## Why is this bad", "## Example", "## Use instead"):
        assert heading in rule.docs, f"{rule.code} docs lack {heading!r}"
    assert rule.gate and rule.name and rule.summary
