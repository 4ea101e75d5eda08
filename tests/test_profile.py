"""Profiles (kanalyze/profile.py): a library's policy findings fold into one note per
file and clause; a candidate (a file defining ModelNew, or any file under
`--profile candidate`) sees every finding at error; declared policies take
findings away or make them errors; every format and the exit code agree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kanalyze.check import run_static
from kanalyze.cli import main
from kanalyze.config import ConfigError, load_config
from kanalyze.profile import apply_profiles

LIBRARY = Path(__file__).resolve().parent.parent / "fixtures/profiles/library_policies.py"
MODEL_NEW = "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return matmul(a, b)\n"


def check(path: Path, **options):
    config = load_config([str(path)], **options)
    result = run_static([str(path)], config, use_cache=False, jobs=1)
    return apply_profiles(result.findings, config, result.profiles)


def by_code(findings) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for f in findings:
        grouped.setdefault(f.code, []).append(f)
    return grouped


@pytest.fixture
def library(tmp_path: Path) -> Path:
    target = tmp_path / "ops.py"
    shutil.copy(LIBRARY, target)
    return target


def test_a_library_file_folds_policy_findings_into_notes(library: Path) -> None:
    findings = check(library, isolated=True)
    assert {f.code for f in findings} == {"PRC001", "ORD001"}
    for f in findings:
        assert f.informational and str(f.severity) == "note" and not f.stands
        assert f.evidence["profile"] == "library"
        assert "lists each" in f.message


def test_the_candidate_profile_lists_each_finding_at_error(library: Path) -> None:
    findings = check(library, isolated=True, profile="candidate")
    assert sorted(f.code for f in findings) == ["ORD001", "PRC001", "PRC001"]
    assert all(f.stands and str(f.severity) == "error" for f in findings)


def test_a_file_that_defines_model_new_is_a_candidate(library: Path) -> None:
    library.write_text(library.read_text() + MODEL_NEW)
    assert all(f.stands for f in check(library, isolated=True))
    assert not any(f.stands for f in check(library, isolated=True, profile="library"))


def test_declared_policies(library: Path) -> None:
    pyproject = library.parent / "pyproject.toml"
    pyproject.write_text("[tool.kanalyze]\nallow-tf32 = true\ndeterministic = true\n")
    grouped = by_code(check(library))
    assert "PRC001" not in grouped, "TF32 is the declared policy: not reported"
    assert [f.stands for f in grouped["ORD001"]] == [True], "declared deterministic: a backward atomic is an error"
    pyproject.write_text("[tool.kanalyze]\nallow-tf32 = false\ndeterministic = false\n")
    grouped = by_code(check(library))
    assert "ORD001" not in grouped
    assert [f.stands for f in grouped["PRC001"]] == [True, True]


BACKWARD_STORE_RACE = """
import triton
import triton.language as tl


@triton.jit
def _norm_backward_kernel(dy_ptr, dw_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(pid, n_rows, tl.num_programs(0)):
        acc += tl.load(dy_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(dw_ptr + cols, acc, mask=cols < n_cols)   # every program stores its own partial
"""


def test_a_store_programs_race_on_is_an_error_whatever_the_library_declares(tmp_path: Path) -> None:
    """A backward pass's float atomics are a policy a library may choose (a note, or nothing
    under `deterministic = false`); a store its programs race on loses all but one partial."""
    kernel = tmp_path / "norm.py"
    kernel.write_text(BACKWARD_STORE_RACE)
    [race] = check(kernel, isolated=True)
    assert race.code == "ORD001" and race.stands and "whichever program writes last" in race.message
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\ndeterministic = false\n")
    assert [f.code for f in check(kernel) if f.stands] == ["ORD001"]


def test_several_findings_of_a_clause_make_one_note(library: Path) -> None:
    notes = by_code(check(library, isolated=True))["PRC001"]
    assert len(notes) == 1 and notes[0].evidence["folded"] == 2 and "lines 14, 15" in notes[0].message
    assert len(by_code(check(library, isolated=True, profile="candidate"))["PRC001"]) == 2


@pytest.mark.parametrize("bad", ['profile = "strict"', "allow-tf32 = 1", 'deterministic = "no"'])
def test_bad_profile_settings_are_config_errors(tmp_path: Path, bad: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.kanalyze]\n{bad}\n")
    with pytest.raises(ConfigError):
        load_config([str(tmp_path)])


def test_formats_and_exit_code_agree(library: Path, capsys) -> None:
    assert main(["check", str(library), "--isolated", "--no-cache", "--output-format", "json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert {item["severity"] for item in items} == {"note"}
    assert main(["check", str(library), "--isolated", "--no-cache", "--output-format", "sarif"]) == 0
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert {r["level"] for r in results} == {"note"} and len(results) == len(items)
    assert main(["check", str(library), "--isolated", "--no-cache", "--profile", "candidate"]) == 1
    assert "Found 3 errors" in capsys.readouterr().out
