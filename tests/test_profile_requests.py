"""The library profile's folds for precision a library asks for by name, narrowings of
data whose dtype kanalyze cannot see, and sizes refused before a kernel runs
(kanalyze/profile.py); what stays an error there: a device assert (compiled away
outside TRITON_DEBUG) and a float atomic in a forward pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kanalyze.check import run_static
from kanalyze.config import load_config
from kanalyze.profile import apply_profiles

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures/profiles/library_requests.py"
TEXT = FIXTURE.read_text(encoding="utf-8")


def row_of(fragment: str) -> int:
    rows = [n for n, line in enumerate(TEXT.splitlines(), start=1) if fragment in line]
    assert len(rows) == 1, fragment
    return rows[0]


TF32_BY_NAME = row_of('input_precision="tf32"')
UNDER_FLAG = row_of("s = s.to(tl.float16)")
OUT_DTYPE = row_of("out_dtype=tl.float16")
UNSEEN_DTYPE = row_of("mask=offs < n).to(tl.float16)")
DEVICE_ASSERT = row_of("tl.device_assert(")
FORWARD_ATOMIC = row_of("tl.atomic_add(")
HOST_ASSERT = row_of("assert L % 64 == 0")


def check(path: Path, **options):
    config = load_config([str(path)], **options)
    result = run_static([str(path)], config, use_cache=False, jobs=1)
    return apply_profiles(result.findings, config, result.profiles)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    target = tmp_path / "ops.py"
    shutil.copy(FIXTURE, target)
    return target


def test_the_candidate_profile_lists_each_at_error(library: Path) -> None:
    found = {(f.location.row, f.code) for f in check(library, isolated=True, profile="candidate")
             if str(f.severity) == "error"}
    assert found == {(TF32_BY_NAME, "PRC001"), (UNDER_FLAG, "PRC001"), (OUT_DTYPE, "PRC002"),
                     (UNSEEN_DTYPE, "PRC001"), (DEVICE_ASSERT, "CMP003"), (FORWARD_ATOMIC, "ORD001"),
                     (HOST_ASSERT, "CMP003")}


def test_the_library_profile_folds_requests_and_refusals(library: Path) -> None:
    findings = check(library, isolated=True)
    errors = {(f.location.row, f.code) for f in findings if str(f.severity) == "error"}
    assert errors == {(DEVICE_ASSERT, "CMP003"), (FORWARD_ATOMIC, "ORD001")}
    notes = {f.location.row: f for f in findings if f.informational}
    assert set(notes) == {TF32_BY_NAME, UNDER_FLAG, OUT_DTYPE, UNSEEN_DTYPE, HOST_ASSERT}
    assert "allow-tf32 = false" in notes[TF32_BY_NAME].message
    assert "flag" in notes[UNDER_FLAG].message and "cannot see" in notes[UNSEEN_DTYPE].message
    assert "out_dtype" in notes[OUT_DTYPE].message and "refuses" in notes[HOST_ASSERT].message
    assert all("lists each" in n.message and str(n.severity) == "note" for n in notes.values())


def test_declared_policies_reach_the_requested_tf32(library: Path) -> None:
    pyproject = library.parent / "pyproject.toml"
    pyproject.write_text("[tool.kanalyze]\nallow-tf32 = false\n")
    strict = {(f.location.row, f.code) for f in check(library) if f.stands}
    assert (TF32_BY_NAME, "PRC001") in strict
    pyproject.write_text("[tool.kanalyze]\nallow-tf32 = true\ndeterministic = false\n")
    shown = {(f.location.row, f.code) for f in check(library)}
    assert (TF32_BY_NAME, "PRC001") not in shown and (FORWARD_ATOMIC, "ORD001") not in shown
