"""Fixes (kanalyze/fixes/) against their snapshots, as ruff tests its fixes, and `check --fix/--diff/--unsafe-fixes`.

Each `fixtures/fixes/<code>_<name>.py` is a "before" file; `<code>_<name>.fixed.py` is what
the fixes of its clause make of it, byte for byte.  A line `# unfixed: CODE` above a line
marks a finding no fix handles (it must still be reported after fixing); every other
finding of the clause must be gone.  Set KANALYZE_UPDATE_SNAPSHOTS=1 to rewrite the
snapshots after a deliberate change (then read the diff).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
from pathlib import Path

import pytest

from kanalyze.check import analyze_text
from kanalyze.cli import main
from kanalyze.fixes import FIXERS, Source, apply, fix_until_stable, fixes_for, parses

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "fixes"
BEFORE = sorted(p for p in FIXTURES.glob("*.py") if not p.name.endswith(".fixed.py"))
# The applicability of every fix in each fixture: "safe" fixtures are fixed by `--fix`
# alone; "unsafe" ones only with `--unsafe-fixes` (and not at all without it).
APPLICABILITY = {
    "cmp003_grid_cdiv_masked": "safe",
    "cmp003_grid_cdiv_unsafe": "unsafe",
    "cmp003_tail_mask": "unsafe",
    "cmp003_tail_mask_tiles": "unsafe",
    "exc001_propagate_nan": "unsafe",
    "exc001_where_nan": "unsafe",
    "mem004_int64_offsets": "safe",
    "prc001_dot_ieee": "unsafe",
    "prc002_fp32_accumulator": "unsafe",
}
UNFIXED = re.compile(r"^\s*#\s*unfixed:\s*(?P<code>[A-Z]{3}\d{3})\s*$")


def _code(path: Path) -> str:
    return path.name[:6].upper()


def _findings(path: Path, text: str, code: str):
    return [f for f in analyze_text(str(path), text)[0] if f.code == code]


def _fixed(path: Path, unsafe: bool):
    text = path.read_text(encoding="utf-8")
    code = _code(path)
    return fix_until_stable(text, _findings(path, text, code), lambda t: _findings(path, t, code), unsafe=unsafe)


def _unfixed_rows(text: str, code: str) -> list[int]:
    rows, pending = [], False
    for row, line in enumerate(text.splitlines(), start=1):
        match = UNFIXED.match(line)
        if match:
            pending = pending or match.group("code") == code
        elif pending and line.strip() and not line.strip().startswith("#"):
            rows.append(row)
            pending = False
    return rows


def test_every_fixture_has_a_snapshot_and_an_applicability() -> None:
    assert {p.stem for p in BEFORE} == set(APPLICABILITY)
    for path in BEFORE:
        assert path.with_suffix(".fixed.py").exists(), f"no snapshot for {path.name}"
    assert {fixer.name for fixer in FIXERS} <= {f.name for p in BEFORE for f in _all_fixes(p)}, "a fixer no fixture uses"


def _all_fixes(path: Path):
    text = path.read_text(encoding="utf-8")
    source = Source(text)
    return [fix for f in _findings(path, text, _code(path)) for fix in fixes_for(f, source)]


@pytest.mark.parametrize("path", BEFORE, ids=lambda p: p.stem)
def test_fix_matches_its_snapshot(path: Path) -> None:
    unsafe = APPLICABILITY[path.stem] == "unsafe"
    new, applied, remaining = _fixed(path, unsafe)
    snapshot = path.with_suffix(".fixed.py")
    if os.environ.get("KANALYZE_UPDATE_SNAPSHOTS"):
        snapshot.write_text(new, encoding="utf-8")
    assert applied, "no fix applied"
    assert {fix.applicability for fix in applied} == {APPLICABILITY[path.stem]}
    assert new == snapshot.read_text(encoding="utf-8")
    assert parses(new)
    ast.parse(new)
    # Checked again, the fixed findings are gone; the ones no fix handles stay, where the file says.
    assert sorted(f.location.row for f in remaining) == _unfixed_rows(new, _code(path))
    assert remaining == [] or not any(fixes_for(f, new) for f in remaining)


def test_a_tiles_findings_name_each_open_dimensions_bound() -> None:
    """CMP003's `bounds`: one size per open dimension, from a comparison, the stepping loop or the
    grid; "" where none says; no term for a dimension the arange covers exactly (`d` of width D)."""
    path = FIXTURES / "cmp003_tail_mask_tiles.py"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    bounds = {lines[f.location.row - 1].strip(): f.evidence.get("bounds") for f in _findings(path, text, "CMP003")}
    assert bounds["tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :])"] == {"rm": "M", "rn": "N"}
    assert bounds["a = tl.load(a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak))"] == \
        {"offs_m": "M", "offs_k": "K"}
    assert bounds["x = tl.load(x_ptr + rows[:, None] * stride_r + cols[None, :])"] == \
        {"rows": "n_rows", "cols": "n_cols"}
    assert bounds["x = tl.load(x_ptr + rows[:, None] * D + d[None, :])"] == {"rows": "n_rows"}
    assert bounds["acc += tl.load(x_ptr + row * n_cols + cols[None, :])"] == {"cols": "n_cols"}
    assert bounds["a = tl.load(a_ptrs)"] == {"offs_m": "", "offs_k": ""}  # grouped programs, moving pointers


@pytest.mark.parametrize("path", [p for p in BEFORE if APPLICABILITY[p.stem] == "unsafe"], ids=lambda p: p.stem)
def test_unsafe_fixes_wait_for_unsafe_fixes(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    new, applied, _ = _fixed(path, unsafe=False)
    assert (new, applied) == (text, [])


def test_overlapping_fixes_wait_for_the_next_pass_and_a_broken_result_is_refused() -> None:
    path = FIXTURES / "mem004_int64_offsets.py"
    text = path.read_text(encoding="utf-8")
    findings = _findings(path, text, "MEM004")
    once, applied = apply(text, findings)
    # `i_t * H`, `(i_t * H + i_h)` and `D * (...)` share one edit (`i_t.to(tl.int64)`), applied once.
    assert once.count("i_t.to(tl.int64)") == 2 and len(applied) == len(findings)
    # A fix whose result would not parse is dropped: nothing else is lost.
    broken = text.replace("def gelu(x", "def gelu(x  # unclosed")
    assert not parses(broken) and apply(broken, findings) == (broken, [])


def _project(tmp_path: Path, monkeypatch, *names: str) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nselect = ["ALL"]\nprofile = "candidate"\n')
    for name in names:
        shutil.copy(FIXTURES / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    return tmp_path


def test_fix_writes_safe_fixes_only_and_reports_what_remains(tmp_path, monkeypatch, capsys) -> None:
    project = _project(tmp_path, monkeypatch, "cmp003_grid_cdiv_masked.py", "exc001_propagate_nan.py")
    before = (project / "exc001_propagate_nan.py").read_text()
    code = main(["check", ".", "--fix", "--select", "CMP003,MEM001,EXC001", "--output-format", "concise"])
    out = capsys.readouterr().out
    fixed = (FIXTURES / "cmp003_grid_cdiv_masked.fixed.py").read_text()
    assert (project / "cmp003_grid_cdiv_masked.py").read_text() == fixed
    assert (project / "exc001_propagate_nan.py").read_text() == before  # unsafe fixes only
    assert code == 1
    assert "Found 11 errors (6 fixed, 5 remaining)." in out, out
    assert "No fixes available (4 hidden fixes can be enabled with the `--unsafe-fixes` option)." in out

    code = main(["check", ".", "--fix", "--unsafe-fixes", "--select", "CMP003,MEM001,EXC001"])
    out = capsys.readouterr().out
    assert (project / "exc001_propagate_nan.py").read_text() == \
        (FIXTURES / "exc001_propagate_nan.fixed.py").read_text()
    assert code == 1 and "Found 5 errors (4 fixed, 1 remaining)." in out, out


def test_diff_writes_nothing_and_exits_1_when_there_is_something_to_fix(tmp_path, monkeypatch, capsys) -> None:
    project = _project(tmp_path, monkeypatch, "mem004_int64_offsets.py", "exc001_where_nan.py")
    before = {p.name: p.read_text() for p in project.glob("*.py")}
    assert main(["check", ".", "--diff", "--select", "MEM004,EXC001"]) == 1
    out, err = capsys.readouterr()
    assert {p.name: p.read_text() for p in project.glob("*.py")} == before
    assert out.startswith("--- exc001_where_nan.py\n+++ exc001_where_nan.py\n@@ ")
    assert "--- mem004_int64_offsets.py\n+++ mem004_int64_offsets.py\n@@ " in out
    assert "+    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\n" in out
    assert "tl.where(x <= 0" not in out  # unsafe: not without --unsafe-fixes
    assert "Would fix 13 errors (3 additional fixes available with `--unsafe-fixes`)." in err, err

    assert main(["check", "exc001_where_nan.py", "--diff", "--select", "EXC001"]) == 0
    assert "No errors would be fixed (3 fixes available with `--unsafe-fixes`)." in capsys.readouterr().err
    assert main(["check", "exc001_where_nan.py", "--diff", "--unsafe-fixes", "--select", "EXC001"]) == 1
    assert "+    y = tl.where(x <= 0, 0.0, x)\n" in capsys.readouterr().out
    assert {p.name: p.read_text() for p in project.glob("*.py")} == before


def test_a_fixer_failing_on_one_file_costs_that_files_fixes_alone(tmp_path, monkeypatch, capsys) -> None:
    """A fixer's internal error on one file is a warning naming it; the other files' fixes are
    still offered and the exit code says there is something to fix (no exit 2)."""
    import kanalyze.fixes as fixes

    _project(tmp_path, monkeypatch, "mem004_int64_offsets.py", "exc001_where_nan.py")
    real = fixes.fix_until_stable

    def failing(source, findings, check, **kwargs):
        if findings and findings[0].location.file.endswith("exc001_where_nan.py"):
            raise KeyError(12345)
        return real(source, findings, check, **kwargs)

    monkeypatch.setattr(fixes, "fix_until_stable", failing)
    assert main(["check", ".", "--diff", "--select", "MEM004,EXC001"]) == 1
    out, err = capsys.readouterr()
    assert "--- mem004_int64_offsets.py" in out and "--- exc001_where_nan.py" not in out
    assert "exc001_where_nan.py: cannot fix: kanalyze's fixer failed: KeyError: 12345" in err, err


def test_fix_from_stdin_prints_the_fixed_text(tmp_path, monkeypatch, capsys) -> None:
    import io
    import sys

    _project(tmp_path, monkeypatch)
    text = (FIXTURES / "prc001_dot_ieee.py").read_text()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code = main(["check", "--stdin-filename", "k.py", "--fix", "--unsafe-fixes", "--select", "PRC001"])
    out, err = capsys.readouterr()
    assert out == (FIXTURES / "prc001_dot_ieee.fixed.py").read_text()
    assert code == 0 and "Found 4 errors (4 fixed, 0 remaining)." in err


def test_fix_runs_the_static_pass_alone(tmp_path, monkeypatch, capsys) -> None:
    _project(tmp_path, monkeypatch, "mem004_int64_offsets.py")
    assert main(["check", ".", "--fix", "--ir"]) == 2
    assert "--fix runs the static pass alone; leave out --ir" in capsys.readouterr().err
    assert main(["check", ".", "--diff", "--add-noqa"]) == 2
    assert "--diff and --add-noqa do not go together" in capsys.readouterr().err


def test_the_editor_offers_each_fix_as_a_quick_fix(tmp_path: Path) -> None:
    """The same edits as `--fix`, as quick fixes after the noqa one; "Explain" is a command, no quick fix."""
    from lsprotocol import types

    from test_lsp import FIXED_KERNEL, TF32_KERNEL, Editor, apply_edits, run

    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.kanalyze]\n")
    uri = (root / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(root)
        await editor.start()
        editor.open(uri, TF32_KERNEL)
        [diagnostic] = await editor.diagnostics(uri, 1)
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        titles = [a.title for a in actions]
        assert titles == ["Suppress PRC001 on this line (# noqa: PRC001)",
                          'Fix PRC001: Pass `input_precision="ieee"` to `tl.dot` (unsafe)',
                          "Explain PRC001 (precision-downgrade)"], titles
        fix = actions[1]
        assert fix.kind == types.CodeActionKind.QuickFix and not fix.is_preferred
        assert fix.diagnostics[0].code == "PRC001"
        [document_edit] = fix.edit.document_changes
        assert document_edit.text_document.version == 1
        assert apply_edits(TF32_KERNEL, document_edit.edits) == FIXED_KERNEL
        assert actions[2].kind is None and actions[2].command.command == "kanalyze.explain"
        # A client that asks for quick fixes only gets no "Explain".
        only = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic], only=[types.CodeActionKind.QuickFix])))
        assert [a.title for a in only] == titles[:2]
        editor.change(uri, 2, FIXED_KERNEL)
        assert await editor.diagnostics(uri, 2) == []
        await editor.stop()

    run(scenario)
