"""The command line as users meet it: formats, exit codes, config, suppression, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kanalyze.cli import main
from kernels import TF32_KERNEL

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text())
FINDINGS_SCHEMA = json.loads((ROOT / "kanalyze/schemas/findings.schema.json").read_text())

DOT_ROW, DOT_COL = 10, 9


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (tmp_path / "kern.py").write_text(TF32_KERNEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    return tmp_path


def test_text_output_and_exit_code(project, capsys) -> None:
    code, out, _ = run(capsys, "check", "kern.py")
    assert code == 1
    assert out.splitlines()[0].startswith(f"kern.py:{DOT_ROW}:{DOT_COL}: PRC001 `tl.dot(a, b)`")
    assert "Found 1 error." in out


def test_bare_path_means_check(project, capsys) -> None:
    code, out, _ = run(capsys, "kern.py")
    assert code == 1 and "PRC001" in out


def test_clean_file_exits_zero(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")'))
    code, out, _ = run(capsys, "check", "kern.py")
    assert code == 0 and "All checks passed!" in out


def test_exit_zero(project, capsys) -> None:
    code, out, _ = run(capsys, "check", "kern.py", "--exit-zero")
    assert code == 0 and "PRC001" in out


def test_missing_path_is_usage_error(project, capsys) -> None:
    code, _, err = run(capsys, "check", "nope.py")
    assert code == 2 and "path not found" in err


def test_unknown_option_is_usage_error(project, capsys) -> None:
    code, _, err = run(capsys, "check", "--bogus")
    assert code == 2 and "unrecognized arguments" in err


def test_json_output(project, capsys) -> None:
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", "json")
    assert code == 1
    items = json.loads(out)
    jsonschema.Draft202012Validator(FINDINGS_SCHEMA).validate(items)
    assert len(items) == 1
    item = items[0]
    for key in ("code", "name", "message", "status", "filename", "location", "end_location", "kernel", "evidence"):
        assert key in item
    assert item["code"] == "PRC001" and item["name"] == "precision-downgrade"
    assert item["status"] == "flagged" and item["kernel"] == "matmul"
    assert item["location"] == {"row": DOT_ROW, "column": DOT_COL}
    assert item["end_location"]["row"] == DOT_ROW and item["end_location"]["column"] > DOT_COL
    assert item["evidence"]["gate"] == "prc001-ieee-error-bound"


def test_sarif_output_validates(project, capsys) -> None:
    (project / "broken.py").write_text("import triton\n@triton.jit\ndef f(:\n")
    code, out, _ = run(capsys, "check", ".", "--output-format", "sarif")
    assert code == 1
    log = json.loads(out)
    jsonschema.validate(log, SARIF_SCHEMA)
    run_ = log["runs"][0]
    rule_ids = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    assert len(rule_ids) == len(set(rule_ids)) and "PRC001" in rule_ids and "KAN000" in rule_ids
    by_rule = {r["ruleId"]: r for r in run_["results"]}
    assert set(by_rule) == {"PRC001", "KAN000"}
    region = by_rule["PRC001"]["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (DOT_ROW, DOT_COL)
    assert rule_ids[by_rule["PRC001"]["ruleIndex"]] == "PRC001"


def test_json_schema_validates_every_fixture_finding(capsys) -> None:
    code, out, _ = run(capsys, "check", str(ROOT / "fixtures"), "--output-format", "json", "--no-cache", "--isolated")
    items = json.loads(out)
    assert code == 1 and len(items) > 20
    jsonschema.Draft202012Validator(FINDINGS_SCHEMA).validate(items)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(FINDINGS_SCHEMA).validate([{**items[0], "status": "maybe"}])


def test_sarif_schema_rejects_a_broken_log() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.1.0", "runs": [{"results": []}]}, SARIF_SCHEMA)


def test_github_output(project, capsys) -> None:
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", "github")
    assert code == 1
    assert out.startswith(f"::error title=kanalyze (PRC001),file=kern.py,line={DOT_ROW},col={DOT_COL},")
    assert "::PRC001 [flagged] `tl.dot(a, b)`" in out


def test_line_noqa(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC001"))
    assert run(capsys, "check", "kern.py")[0] == 0


def test_line_noqa_for_another_code_does_not_suppress(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC002"))
    assert run(capsys, "check", "kern.py")[0] == 1


def test_bare_noqa_suppresses_everything_on_the_line(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa"))
    assert run(capsys, "check", "kern.py")[0] == 0


@pytest.mark.parametrize("directive,expected", [
    ("# kanalyze: noqa", 0), ("# kanalyze: noqa: PRC001", 0), ("# kanalyze: noqa: PRC002", 1),
])
def test_file_level_noqa(project, capsys, directive, expected) -> None:
    (project / "kern.py").write_text(directive + "\n" + TF32_KERNEL)
    assert run(capsys, "check", "kern.py")[0] == expected


def test_select_and_ignore_on_the_command_line(project, capsys) -> None:
    assert run(capsys, "check", "kern.py", "--ignore", "PRC001")[0] == 0
    assert run(capsys, "check", "kern.py", "--select", "ORD")[0] == 0
    assert run(capsys, "check", "kern.py", "--select", "PRC")[0] == 1


def test_config_found_from_checked_path_upwards(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nignore = ["PRC001"]\n')
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "kern.py").write_text(TF32_KERNEL)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run(capsys, "check", str(tmp_path / "pkg"))[0] == 0
    assert run(capsys, "check", str(tmp_path / "pkg"), "--isolated")[0] == 1
    assert run(capsys, "check", str(tmp_path / "pkg"), "--select", "PRC001")[0] == 1


def test_per_file_ignores_and_exclude(project, capsys) -> None:
    (project / "vendor").mkdir()
    (project / "vendor" / "k2.py").write_text(TF32_KERNEL)
    (project / "tests").mkdir()
    (project / "tests" / "k3.py").write_text(TF32_KERNEL)
    (project / "pyproject.toml").write_text(
        '[tool.kanalyze]\nexclude = ["vendor"]\n[tool.kanalyze.per-file-ignores]\n"tests/*" = ["PRC"]\n')
    code, out, _ = run(capsys, "check", ".", "--output-format", "json")
    # json names files absolutely, as ruff's (text: relative to the working directory)
    assert [item["filename"] for item in json.loads(out)] == [str(project / "kern.py")]
    # Named explicitly, an excluded file is checked unless --force-exclude (as ruff).
    assert run(capsys, "check", "vendor/k2.py")[0] == 1
    assert run(capsys, "check", "vendor/k2.py", "--force-exclude")[0] == 0


def test_bad_config_is_a_usage_error(project, capsys) -> None:
    (project / "pyproject.toml").write_text('[tool.kanalyze]\nselekt = ["PRC"]\n')
    code, _, err = run(capsys, "check", "kern.py")
    assert code == 2 and "unknown key" in err


@pytest.mark.parametrize("name,content,reason", [
    ("syntax.py", b"import triton\n@triton.jit\ndef k(x_ptr\n", "cannot parse"),
    ("latin1.py", b"import triton\n# caf\xe9\n", "not valid utf-8"),
    ("binary.py", b"\x7fELF\x00\x00triton\x00", "binary file"),
    ("empty.py", b"", "empty file"),
    ("nested.py", b"import triton\n@triton.jit\ndef k(x):\n    return " + b"(" * 20000 + b"x" + b")" * 20000 + b"\n",
     "brackets are open at once"),
    ("nested_inline.py", b"from torch.utils.cpp_extension import load_inline\nx = " + b"(" * 20000 + b"1"
     + b")" * 20000 + b"\n", "brackets are open at once"),
    ("newer.py", b"import triton\ntype Alias[T] = list[T]\ndef f[T](x: T) -> T: return x\nmatch = 1\nprint(f'{x!r:>{w}}')\n@triton.jit\ndef k(x_ptr):\n    pass\n", None),
])
def test_bad_input_gives_one_clear_finding(project, capsys, name, content, reason) -> None:
    (project / name).write_bytes(content)
    code, out, err = run(capsys, "check", name, "--output-format", "json")
    assert "Traceback" not in err
    items = json.loads(out)
    if reason is None:  # valid modern syntax: read fine, no finding
        assert code == 0 and items == []
        return
    assert code == 1 and len(items) == 1
    assert items[0]["code"] == "KAN000" and reason in items[0]["message"].lower()


def test_huge_file(project, capsys, monkeypatch) -> None:
    from kanalyze.analyzer import sources

    monkeypatch.setattr(sources, "MAX_FILE_BYTES", 1000)
    (project / "huge.py").write_text("import triton\n" + "x = 1\n" * 500)
    code, out, _ = run(capsys, "check", "huge.py")
    assert code == 1 and "KAN000 file too large" in out


def test_one_bad_file_does_not_stop_the_others(project, capsys) -> None:
    (project / "a_broken.py").write_text("import triton\n@triton.jit\ndef broken(:\n")
    code, out, _ = run(capsys, "check", ".", "--output-format", "json")
    codes = sorted(item["code"] for item in json.loads(out))
    assert codes == ["KAN000", "PRC001"]


def test_empty_init_in_a_package_is_not_reported(project, capsys) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    assert run(capsys, "check", "pkg")[0] == 0


def test_cache_is_reused_and_invalidated(project) -> None:
    from kanalyze.check import run_static
    from kanalyze.config import load_config

    config = load_config(["."])
    first = run_static(["."], config)
    second = run_static(["."], config)
    assert (first.files_parsed, second.files_parsed, second.files_from_cache) == (1, 0, 1)
    assert [f.to_dict() for f in first.findings] == [f.to_dict() for f in second.findings]
    (project / "kern.py").write_text(TF32_KERNEL.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")'))
    third = run_static(["."], config)
    assert third.files_parsed == 1 and third.findings == []


def test_rules_and_explain(capsys) -> None:
    code, out, _ = run(capsys, "rules")
    assert code == 0 and "PRC001  precision-downgrade" in out
    code, out, _ = run(capsys, "explain", "prc001")
    assert code == 0 and "## Why is this bad" in out and "input_precision" in out
    code, _, err = run(capsys, "explain", "XYZ999")
    assert code == 2 and "unknown code" in err


def test_python_dash_m_and_no_torch_import(project) -> None:
    """The static path must not import torch or triton, nor execute what it reads."""
    marker = project / "executed"
    (project / "kern.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + TF32_KERNEL)
    probe = ("import sys, runpy; sys.argv=['kanalyze','check','kern.py','--no-cache'];\n"
             "try:\n    runpy.run_module('kanalyze', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print('RC', code, 'torch' in sys.modules, 'triton' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=project,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip().splitlines()[-1] == "RC 1 False False", proc.stdout + proc.stderr
    assert not marker.exists()
