"""Nothing the user wrote wrong, and no pass that cannot run, ends in "All checks passed!".

A code or prefix that names no clause is a usage error (exit 2) wherever it is
written: the command line, `[tool.kanalyze]`, the editor's settings (shown to the
user).  A misspelt code in a `# noqa` comment is a warning on stderr.  A pass that
was asked for but whose packages are not installed is an error that says what to
install (exit 2), never a run that skipped it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from kanalyze.analyzer.cuda.suppressions import unknown_cuda_codes
from kanalyze.analyzer.suppressions import unknown_codes
from kanalyze.cli import main
from kanalyze.config import closest_selector, is_known_selector, known_codes
from kanalyze.lsp.settings import Settings
from kanalyze.rules import rules_by_code
from kernels import TF32_KERNEL

ROOT = Path(__file__).resolve().parent.parent

DOT_ROW = 10


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


# --- what a selector may name -------------------------------------------------------

def test_the_known_codes_are_the_catalogs() -> None:
    """config.py reads the codes from the rule modules' names (no rule imported): the same set."""
    assert set(known_codes()) == set(rules_by_code())


@pytest.mark.parametrize("selector", ["ALL", "DEFAULT", "all", "PRC", "prc", "PRC0", "PRC001", "KAN", "KAN000", "P"])
def test_codes_prefixes_and_special_selectors_are_known(selector) -> None:
    assert is_known_selector(selector)


@pytest.mark.parametrize("selector,closest", [
    ("PRC01", "PRC001"), ("PRC0001", "PRC001"), ("ORD01", "ORD001"), ("ALLL", "ALL"), ("DEFALUT", "DEFAULT"),
    ("KAN0000", "KAN000"), ("XYZ123", None),
])
def test_unknown_selectors_and_their_closest_known_one(selector, closest) -> None:
    assert not is_known_selector(selector)
    assert closest_selector(selector) == closest


# --- the command line ---------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select", "--extend-ignore"])
def test_an_unknown_code_on_the_command_line_is_a_usage_error(project, capsys, flag) -> None:
    code, out, err = run(capsys, "check", "kern.py", flag, "PRC,PRC01")
    assert code == 2 and out == ""
    assert f"argument {flag}" in err and "`PRC01`" in err and "did you mean `PRC001`?" in err


def test_a_code_with_no_close_match_points_at_the_catalog(project, capsys) -> None:
    code, out, err = run(capsys, "check", "kern.py", "--ignore", "XYZ123")
    assert code == 2 and out == "" and "`XYZ123`" in err and "kanalyze rules" in err


def test_an_empty_selection_is_a_usage_error(project, capsys) -> None:
    code, out, err = run(capsys, "check", "kern.py", "--select", ",")
    assert code == 2 and out == "" and "no code given" in err


def test_known_selectors_still_select(project, capsys) -> None:
    assert run(capsys, "check", "kern.py", "--select", "prc0")[0] == 1
    assert run(capsys, "check", "kern.py", "--select", "ALL", "--extend-ignore", "PRC001")[0] == 0


@pytest.mark.parametrize("gates,message", [
    ("PRC01", "`PRC01` is no code (did you mean `PRC001`?)"),
    ("RES002", "`RES002` has no gate"),
])
def test_an_unknown_or_gateless_code_in_gates_is_a_usage_error(project, capsys, gates, message) -> None:
    code, out, err = run(capsys, "check", "kern.py", "--gates", gates)
    assert code == 2 and out == "" and message in err and "the clauses with gates are" in err


def test_gates_take_prefixes() -> None:
    from kanalyze.cli.parser import _gates

    assert _gates("prc") == ["PRC001", "PRC002"]
    assert _gates("ORD001,all") == "all"


# --- [tool.kanalyze] ----------------------------------------------------------------

@pytest.mark.parametrize("table,where", [
    ('select = ["PRC01"]', "`select`"),
    ('ignore = ["PRC01"]', "`ignore`"),
    ('extend-select = ["PRC01"]', "`extend-select`"),
    ('extend-ignore = ["PRC01"]', "`extend-ignore`"),
    ('[tool.kanalyze.per-file-ignores]\n"tests/*" = ["PRC", "PRC01"]', "per-file-ignores `tests/*`"),
])
def test_an_unknown_code_in_the_config_file_is_a_usage_error(project, capsys, table, where) -> None:
    (project / "pyproject.toml").write_text(f"[tool.kanalyze]\n{table}\n")
    code, out, err = run(capsys, "check", "kern.py")
    assert code == 2 and out == ""
    assert "pyproject.toml" in err and where in err and "`PRC01`" in err and "did you mean `PRC001`?" in err


def test_an_empty_select_in_the_config_file_is_a_usage_error(project, capsys) -> None:
    (project / "pyproject.toml").write_text("[tool.kanalyze]\nselect = []\n")
    code, out, err = run(capsys, "check", "kern.py")
    assert code == 2 and out == "" and "`select` is empty" in err
    (project / "pyproject.toml").write_text('[tool.kanalyze]\nselect = []\nextend-select = ["PRC"]\n')
    assert run(capsys, "check", "kern.py")[0] == 1


# --- # noqa ---------------------------------------------------------------------------

def test_an_unknown_code_in_noqa_is_a_warning_and_suppresses_nothing(project, capsys) -> None:
    typo = "PRC" + "01"  # not written whole: `kanalyze check .` of this repository would warn about this line
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", f"c = tl.dot(a, b)  # noqa: {typo}"))
    code, out, err = run(capsys, "check", "kern.py")
    assert code == 1 and "PRC001" in out
    assert f"warning: kern.py:{DOT_ROW}: unknown code `PRC01` in `# noqa` (did you mean `PRC001`?)" in err


def test_known_and_foreign_codes_in_noqa_are_not_warned_about(project, capsys) -> None:
    """`# noqa` is shared with ruff and flake8: E501 or RUF100 is theirs, not a typo of ours."""
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC001, E501, RUF100"))
    code, out, err = run(capsys, "check", "kern.py")
    assert code == 0 and "warning" not in err


def test_every_code_of_a_kanalyze_noqa_is_judged() -> None:
    text = "# kanalyze: noqa: XYZ123, PRC001\nx = 1  # noqa: E501, KAN0\ny = 2  # NOQA: mem01\n"
    found = [(u.row, u.code, u.comment) for u in unknown_codes(text)]
    assert found == [(1, "XYZ123", "# kanalyze: noqa"), (3, "MEM01", "# noqa")]
    assert "did you mean `MEM001`?" in unknown_codes(text)[1].warning("k.py")


def test_unknown_codes_in_cuda_suppressions() -> None:
    text = ("// kanalyze: noqa: FOO1\r"
            "int a; // NOLINT(ORD01, bugprone-*, PRC*)\n"
            "// NOLINTNEXTLINE(PRC9*)\n"
            "int b; // NOLINT(ORD001)\n")
    found = [(u.row, u.code, u.comment) for u in unknown_cuda_codes(text)]
    assert found == [(1, "FOO1", "// kanalyze: noqa"), (2, "ORD01", "// NOLINT"), (3, "PRC9*", "// NOLINTNEXTLINE")]


def test_a_cuda_file_with_an_unknown_nolint_code_warns(project, capsys) -> None:
    (project / "add.cu").write_text("__global__ void add(float *x) { atomicAdd(x, 1.0f); }  // NOLINT(ORD01)\n")
    _, _, err = run(capsys, "check", "add.cu")
    assert "warning: add.cu:1: unknown code `ORD01` in `// NOLINT` (did you mean `ORD001`?)" in err


# --- passes that cannot run here --------------------------------------------------------

def _check_without(modules: tuple[str, ...], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`kanalyze check` in a process where `modules` cannot be imported (as if not installed)."""
    probe = (f"import sys\nfor name in {modules!r}:\n    sys.modules[name] = None\n"
             f"from kanalyze.cli import main\nsys.exit(main({['check', *args]!r}))\n")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KANALYZE_CACHE_DIR": str(cwd / ".cache")})


@pytest.mark.parametrize("hidden,args,message", [
    (("torch",), ["--dynamic"], "--dynamic runs the gates with torch, which is not installed"),
    (("triton",), ["--dynamic"], "--dynamic runs the gates with triton, which is not installed"),
    (("torch", "triton"), ["--gates", "all"], "--gates runs the gates with torch and triton, which are not installed"),
    (("torch",), ["--gates", "PRC001", "--device", "cpu"], "--gates runs the gates with torch"),
])
def test_the_dynamic_pass_without_its_packages_is_an_error(tmp_path, hidden, args, message) -> None:
    (tmp_path / "kern.py").write_text(TF32_KERNEL.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")'))
    done = _check_without(hidden, ["kern.py", "--isolated", *args], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and message in done.stderr and 'pip install "kanalyze[dynamic]"' in done.stderr


def test_ir_without_triton_is_an_error_for_triton_kernels(tmp_path) -> None:
    (tmp_path / "kern.py").write_text(TF32_KERNEL)
    done = _check_without(("triton",), ["kern.py", "--isolated", "--ir"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "--ir compiles Triton kernels with triton" in done.stderr and 'pip install "kanalyze[ir]"' in done.stderr


def test_ir_without_triton_still_checks_cuda_files(tmp_path) -> None:
    """CUDA compiles with nvcc, not triton: a CUDA-only check is not refused."""
    (tmp_path / "host.cu").write_text("int host_only(int x) { return x + 1; }\n")
    done = _check_without(("triton",), ["host.cu", "--isolated", "--ir"], tmp_path)
    assert "not installed here" not in done.stderr and done.returncode == 0, done.stdout + done.stderr


# --- the editor ------------------------------------------------------------------------------

def test_unknown_codes_in_the_editor_settings_are_problems_and_not_applied() -> None:
    settings, problems = Settings().merged({"select": ["PRC01"], "ignore": "ORD001"})
    assert settings.select is None and settings.ignore == ("ORD001",)
    assert problems == ["`select`: unknown code or prefix `PRC01` (did you mean `PRC001`?)"]
    settings, problems = Settings().merged({"select": []})
    assert settings.select is None and "`select` is empty" in problems[0]


def test_the_editor_shows_unknown_codes_in_its_settings_and_in_pyproject(tmp_path: Path) -> None:
    from test_lsp import Editor, WAIT

    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.kanalyze]\nignore = ["EXC01"]\n')
    (root / "kern.py").write_text(TF32_KERNEL)
    uri = (root / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(root)
        shown: list[types.ShowMessageParams] = []

        @editor.client.feature(types.WINDOW_SHOW_MESSAGE)
        def show_message(ls, params: types.ShowMessageParams) -> None:
            shown.append(params)

        async def message_naming(text: str) -> types.ShowMessageParams:
            for _ in range(WAIT * 10):
                hit = next((m for m in shown if text in m.message), None)
                if hit is not None:
                    return hit
                await asyncio.sleep(0.1)
            raise AssertionError(f"no message naming {text!r}: {shown}")

        await editor.start(initialization_options={"select": ["PRC01"]})
        editor.open(uri, TF32_KERNEL)
        # The diagnostics come from what is valid (the defaults), and the user is told why.
        assert [d.code for d in await editor.diagnostics(uri, 1)] == ["PRC001"]
        setting = await message_naming("`PRC01`")
        assert setting.type == types.MessageType.Warning and "did you mean `PRC001`?" in setting.message
        config = await message_naming("`EXC01`")
        assert config.type == types.MessageType.Warning and "pyproject.toml" in config.message
        assert "did you mean `EXC001`?" in config.message
        await editor.stop()

    asyncio.run(scenario())


# --- a candidate nothing flags still has to run -------------------------------------

def test_an_unflagged_candidate_that_fails_on_its_own_inputs_is_confirmed(tmp_path, monkeypatch, capsys) -> None:
    """`check --dynamic` in targeted mode runs the baseline even where no static rule fires: a
    candidate that raises on the problem's own inputs is CMP001 confirmed, its clean twin stays clean."""
    import json

    clean = (ROOT / "fixtures/kernelbench/candidates/level1_problem6_leaky_relu.py").read_text()
    broken = clean.replace("        x = x.contiguous()\n", "        batch, features, depth = x.shape   # the problem's input is 2-D\n"
                           "        x = x.contiguous()\n")
    assert broken != clean
    problem = str(ROOT / "fixtures/kernelbench/level1/6_leaky_relu.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    for name, source in (("clean.py", clean), ("broken.py", broken)):
        (tmp_path / name).write_text(source)
    found = {}
    for name in ("clean.py", "broken.py"):
        code, out, _ = run(capsys, "check", name, "--dynamic", "--reference", problem, "--device", "cpu",
                           "--output-format", "json", "--isolated", "--no-cache")
        found[name] = (code, json.loads(out))
    code, findings = found["clean.py"]
    assert code == 0 and findings == []
    code, findings = found["broken.py"]
    assert code == 1
    assert [(f["code"], f["status"]) for f in findings] == [("CMP001", "confirmed")]
    assert "not enough values to unpack" in findings[0]["evidence"]["gate_result"]
