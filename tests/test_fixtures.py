"""Every fixture's findings must match its inline `# expect:` / `# ok:` lines exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from expectations import fixture_files, parse_expectations
from kanalyze.check import analyze_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TRITON_FIXTURES = fixture_files(FIXTURES / "triton")


@pytest.mark.parametrize("path", TRITON_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_expectations(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    expected, forbidden = parse_expectations(text)
    findings, _ = analyze_text(str(path), text)
    found = {(f.location.row, f.code) for f in findings}
    messages = {(f.location.row, f.code): f.message for f in findings}
    missing = sorted(expected - found)
    extra = sorted(found - expected)
    fired_on_lookalike = sorted(found & forbidden)
    assert not missing, f"expected findings that did not fire: {missing}"
    assert not fired_on_lookalike, f"fired on a look-alike: {[(k, messages[k]) for k in fired_on_lookalike]}"
    assert not extra, f"unexpected findings: {[(k, messages[k]) for k in extra]}"


def test_every_detector_has_flagged_and_clean_fixtures() -> None:
    from kanalyze.rules import all_rules

    expected_codes: set[str] = set()
    ok_codes: set[str] = set()
    for path in TRITON_FIXTURES:
        expected, forbidden = parse_expectations(path.read_text(encoding="utf-8"))
        expected_codes |= {code for _, code in expected}
        ok_codes |= {code for _, code in forbidden}
    for rule in all_rules():
        if rule.has_detectors:
            assert rule.code in expected_codes, f"{rule.code} has no flagged fixture"
            assert rule.code in ok_codes, f"{rule.code} has no clean look-alike fixture"
