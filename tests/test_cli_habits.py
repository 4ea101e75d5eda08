"""ruff's habits on the command line: `full`/`concise` output, `--add-noqa`, standard
input, `.gitignore`, `--cache-dir`, paths relative to the working directory, a clear
error for an unwritable `-o`, and docs that name only flags and keys that exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kanalyze.cli import build_parser, main
from kanalyze.findings import Finding, Location, Status
from kanalyze.report import render_text
from kanalyze.report.snippet import MAX_WIDTH, split_rows
from kernels import TF32_KERNEL

ROOT = Path(__file__).resolve().parent.parent
DOT = "tl.dot(a, b)"
ATOMIC_CU = textwrap.dedent('''\
    __global__ void sum_atomic(const float* x, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            atomicAdd(out, x[i]);
        }
    }
''')
ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
    monkeypatch.delenv("KANALYZE_OUTPUT_FORMAT", raising=False)
    return tmp_path


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KANALYZE_OUTPUT_FORMAT", "NO_COLOR")}
    return {**env, "PYTHONPATH": str(ROOT), "KANALYZE_CACHE_DIR": str(tmp_path / ".cache"), **extra}


def kanalyze(tmp_path: Path, *argv: str, cwd: Path | None = None, stdin: bytes = b"",
             **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kanalyze", *argv], cwd=cwd or tmp_path, input=stdin,
                          capture_output=True, env=cli_env(tmp_path, **env), timeout=120)


def on_a_terminal(tmp_path: Path, *argv: str, **env: str) -> tuple[int, str]:
    """`python -m kanalyze ARGV` with its stdout on a pseudo-terminal."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "kanalyze", *argv], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=subprocess.DEVNULL, env=cli_env(tmp_path, **env))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=120)
    os.close(master)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")


# --- 1. `full` and `concise` ----------------------------------------------------------

def test_full_shows_the_line_and_carets_under_the_span(project, capsys) -> None:
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", "full")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("kern.py:10:9: PRC001 `tl.dot(a, b)`")
    assert lines[1:5] == ["   |", "10 |     c = tl.dot(a, b)", "   |         " + "^" * len(DOT) + " PRC001", "   |"]
    assert lines[5] == "" and lines[6] == "Found 1 error."


@pytest.mark.parametrize("fmt", ["concise", "text"])
def test_concise_and_text_are_one_line_per_finding(project, capsys, fmt) -> None:
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", fmt)
    assert code == 1
    assert out.splitlines() == [out.splitlines()[0], "Found 1 error."] and " |" not in out


def test_full_marks_every_row_of_a_span_and_labels_the_last(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(\n        a,\n        b)"))
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", "full")
    assert code == 1
    assert out.splitlines()[1:8] == [
        "   |",
        "10 |     c = tl.dot(", "   |         ^^^^^^^",
        "11 |         a,", "   |         ^^",
        "12 |         b)", "   |         ^^ PRC001",
    ]


def test_full_escapes_the_source_lines_and_keeps_the_carets_aligned(project, capsys) -> None:
    payload = "\x1b[2J\u202e"
    (project / "kern.py").write_text(TF32_KERNEL.replace("c = tl.dot(a, b)", f'c = tl.dot(a, b, acc=None if "{payload}" else None)'))
    code, out, _ = run(capsys, "check", "kern.py", "--output-format", "full", "--color", "always")
    assert code == 1
    assert "\x1b[2J" not in out and "\u202e" not in out  # only the report's own colours are escapes
    source, carets = ANSI.sub("", out).splitlines()[2:4]
    shown = 'tl.dot(a, b, acc=None if "\\x1b[2J\\u202e" else None)'
    assert source == f"10 |     c = {shown}"
    assert carets.index("^") == source.index("tl.dot") and carets.count("^") == len(shown)


def finding(row: int, column: int, end_row: int, end_column: int, **evidence) -> Finding:
    return Finding("PRC001", "precision-downgrade", "m", Location("k.py", row, column, end_row, end_column),
                   status=Status.CONFIRMED if evidence else Status.FLAGGED, evidence=evidence)


def full(findings: list[Finding], text: str) -> list[str]:
    return render_text(findings, summary=False, source=lambda path: split_rows(text)).splitlines()


def test_full_lines_up_carets_after_tabs_and_wide_characters() -> None:
    text = "x = 1\n\ts = '行列'; y = f(s)\n"
    column = text.splitlines()[1].index("f(s)") + 1
    lines = full([finding(2, column, 2, column + 4)], text)
    assert lines[2] == "2 |     s = '行列'; y = f(s)"
    assert lines[3].index("^") == lines[2].index("f(s)") + 2 and lines[3].count("^") == 4  # 行列: 4 cells


def test_full_puts_the_verdict_under_the_carets_and_a_blank_line_after() -> None:
    lines = full([finding(1, 1, 1, 2, gate_result="PRC001 confirmed: 3e-3 apart")], "x = 1\n")
    assert lines == ["k.py:1:1: PRC001 [confirmed] m", "  |", "1 | x = 1", "  | ^ PRC001", "  |",
                     "    PRC001 confirmed: 3e-3 apart", ""]


def test_full_windows_a_long_line_and_skips_rows_it_cannot_show() -> None:
    text = "y = " + "a + " * 500 + "f(x)\n"
    column = text.index("f(x)") + 1
    lines = full([finding(1, column, 1, column + 4)], text)
    assert lines[2].startswith("1 | …") and len(lines[2]) < MAX_WIDTH + 10
    assert lines[3].index("^") == lines[2].index("f(x)") and lines[3].count("^") == 4
    assert full([finding(9, 1, 9, 2)], text) == ["k.py:9:1: PRC001 m", ""]  # no row 9: no snippet


def test_the_default_is_full_on_a_terminal_and_concise_in_a_pipe(project) -> None:
    code, out = on_a_terminal(project, "check", "kern.py", "--no-cache", NO_COLOR="1")
    assert code == 1 and "10 |     c = tl.dot(a, b)" in out, out
    done = kanalyze(project, "check", "kern.py", "--no-cache")
    assert done.returncode == 1 and b" |" not in done.stdout and done.stdout.count(b"\n") == 2
    code, out = on_a_terminal(project, "check", "kern.py", "--no-cache", NO_COLOR="1",
                              KANALYZE_OUTPUT_FORMAT="concise")
    assert code == 1 and " |" not in out
    done = kanalyze(project, "check", "kern.py", "--no-cache", KANALYZE_OUTPUT_FORMAT="text")
    assert done.returncode == 1 and done.stdout.startswith(b"kern.py:10:9: PRC001") and b" |" not in done.stdout


# --- 2. --add-noqa --------------------------------------------------------------------

def test_add_noqa_then_nothing_to_add_and_a_clean_check(project, capsys) -> None:
    code, out, err = run(capsys, "check", ".", "--add-noqa")
    assert code == 0 and "Added 1 noqa directive." in err and out == ""
    assert "    c = tl.dot(a, b)  # noqa: PRC001\n" in (project / "kern.py").read_text()
    assert "Added 0 noqa directives." in run(capsys, "check", ".", "--add-noqa")[2]
    assert run(capsys, "check", ".")[0] == 0


def test_add_noqa_merges_with_the_comment_there_and_keeps_the_rest(project, capsys) -> None:
    (project / "kern.py").write_text(TF32_KERNEL.replace(
        "c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC002  # the accumulator is checked elsewhere"))
    assert run(capsys, "check", "kern.py", "--add-noqa")[0] == 0
    assert "c = tl.dot(a, b)  # noqa: PRC002, PRC001  # the accumulator is checked elsewhere\n" in \
        (project / "kern.py").read_text()
    assert run(capsys, "check", "kern.py")[0] == 0


def test_add_noqa_in_cuda_writes_nolint_and_merges(project, capsys) -> None:
    (project / "sum.cu").write_text(ATOMIC_CU)
    (project / "two.cu").write_text(ATOMIC_CU.replace("atomicAdd(out, x[i]);", "atomicAdd(out, x[i]);  // NOLINT(EXC001)"))
    code, _, err = run(capsys, "check", "sum.cu", "two.cu", "--add-noqa")
    assert code == 0 and "Added 2 noqa directives." in err
    assert "atomicAdd(out, x[i]);  // NOLINT(ORD001)\n" in (project / "sum.cu").read_text()
    assert "atomicAdd(out, x[i]);  // NOLINT(EXC001, ORD001)\n" in (project / "two.cu").read_text()
    assert run(capsys, "check", "sum.cu", "two.cu")[0] == 0


def test_add_noqa_keeps_bytes_line_endings_and_the_bom(project, capsys) -> None:
    data = "\ufeff# caf\u00e9\r\n".encode() + TF32_KERNEL.replace("\n", "\r\n").encode()
    (project / "kern.py").write_bytes(data)
    assert run(capsys, "check", "kern.py", "--add-noqa")[0] == 0
    assert (project / "kern.py").read_bytes() == data.replace(b"c = tl.dot(a, b)\r\n",
                                                              b"c = tl.dot(a, b)  # noqa: PRC001\r\n")


def test_add_noqa_round_trip_over_the_cuda_fixtures(project, capsys) -> None:
    """Python lines get `# noqa`, rows inside an inline CUDA string `// NOLINT`, `.cu` files
    `// NOLINT`; a `#define` with a comment keeps its value; a second run adds nothing."""
    shutil.copytree(ROOT / "fixtures" / "cuda", project / "cuda")
    code, _, err = run(capsys, "check", "cuda", "--add-noqa", "--profile", "candidate")
    added = int(re.search(r"Added (\d+) noqa", err).group(1))
    assert code == 0 and added > 20
    for path in (project / "cuda").glob("*.py"):
        compile(path.read_text(), str(path), "exec")  # still Python
    assert "Added 0 noqa directives." in run(capsys, "check", "cuda", "--add-noqa", "--profile", "candidate")[2]
    _, out, _ = run(capsys, "check", "cuda", "--profile", "candidate", "--output-format", "json")
    assert {item["code"] for item in json.loads(out)} <= {"KAN000"}  # no comment suppresses a parse error


def test_add_noqa_skips_rows_no_comment_can_end() -> None:
    from kanalyze.cli.add_noqa import annotate

    text = 'x = f(a) + \\\n    g(b)\ns = """\n  atomicAdd(out, v);\n"""\n'
    new, added, missed = annotate("k.py", text, [(1, 1, "RES001"), (4, 4, "ORD001")])
    assert missed == [(1, "RES001")] and added == 1
    assert new.splitlines()[3] == "  atomicAdd(out, v);  // NOLINT(ORD001)"


def test_add_noqa_needs_files_on_disk(project) -> None:
    done = kanalyze(project, "check", "-", "--add-noqa", stdin=TF32_KERNEL.encode())
    assert done.returncode == 2 and b"--add-noqa needs files on disk" in done.stderr


# --- 3. standard input ------------------------------------------------------------------

def test_stdin_is_reported_under_its_name(project) -> None:
    done = kanalyze(project, "check", "--stdin-filename", "kern.py", stdin=TF32_KERNEL.encode())
    assert done.returncode == 1 and done.stdout.startswith(b"kern.py:10:9: PRC001"), done.stderr
    done = kanalyze(project, "check", "-", "--output-format", "json", stdin=TF32_KERNEL.encode())
    assert done.returncode == 1 and [item["filename"] for item in json.loads(done.stdout)] == ["-"]


def test_stdin_language_comes_from_the_name(project) -> None:
    done = kanalyze(project, "check", "--stdin-filename", "sum.cu", stdin=ATOMIC_CU.encode())
    assert done.returncode == 1 and b"sum.cu:4:9: ORD001" in done.stdout
    assert kanalyze(project, "check", "--stdin-filename", "sum.py", stdin=ATOMIC_CU.encode()).returncode == 0


def test_stdin_name_meets_per_file_ignores_and_exclude(project) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.kanalyze]\nexclude = ["vendor"]\n[tool.kanalyze.per-file-ignores]\n"tests/*" = ["PRC"]\n')
    source = TF32_KERNEL.encode()
    assert kanalyze(project, "check", "--stdin-filename", "tests/k.py", stdin=source).returncode == 0
    assert kanalyze(project, "check", "--stdin-filename", "src/k.py", stdin=source).returncode == 1
    # As ruff: `exclude` leaves out a file named explicitly only with --force-exclude.
    assert kanalyze(project, "check", "--stdin-filename", "vendor/k.py", stdin=source).returncode == 1
    done = kanalyze(project, "check", "--stdin-filename", "vendor/k.py", "--force-exclude", stdin=source)
    assert done.returncode == 0 and done.stdout == b""


def test_stdin_filename_wins_over_other_paths(project) -> None:
    done = kanalyze(project, "check", "other.py", "--stdin-filename", "kern.py", stdin=TF32_KERNEL.encode())
    assert done.returncode == 1 and b"ignoring other.py in favor of standard input" in done.stderr


# --- 4. .gitignore ----------------------------------------------------------------------

GITIGNORE = textwrap.dedent("""\
    # generated code
    gen/
    *_gen.py
    !keep_gen.py
    /anchored.py
    deep/**/x.py
    sub/*.cuh
    \\#hash.py
    [bc]ee.py
    ?q.py
    lib/**
    **/cache/*.py
""") + "spaced.py   \n"  # trailing spaces are not part of a pattern
TREE = ["gen/a.py", "a_gen.py", "keep_gen.py", "anchored.py", "pkg/anchored.py", "deep/x.py", "deep/1/2/x.py",
        "deep/y.py", "sub/h.cuh", "sub/inner/h.cuh", "#hash.py", "spaced.py", "pkg/local.py", "pkg/other.py",
        "pkg/n/local.py", "pkg/build.py", "plain.py", "pkg/dironly/z.py", "pkg/ghost.py", "pkg/g/ghost.py/m.py",
        "bee.py", "dee.py", "xq.py", "xxq.py", "lib/l.py", "pkg/lib/l.py", "cache/c.py", "pkg/cache/c.py",
        "pkg/cache/sub/c.py"]


def make_tree(base: Path) -> None:
    for name in TREE:
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text("x = 1\n")
    (base / ".gitignore").write_text(GITIGNORE)
    (base / "pkg" / ".gitignore").write_text("local.py\n!/n/local.py\ndironly/\nghost.py/\n")


def discovered(base: Path, respect: bool = True) -> set[str]:
    from kanalyze.analyzer.sources import discover

    return {os.path.relpath(p, base).replace(os.sep, "/") for p, _ in discover([str(base)], respect_gitignore=respect)}


def git(base: Path, *argv: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(base)}
    return subprocess.run(["git", *argv], cwd=base, capture_output=True, text=True, env=env, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")
def test_gitignore_is_read_as_git_reads_it(tmp_path: Path) -> None:
    make_tree(tmp_path)
    git(tmp_path, "init", "-q")
    (tmp_path / ".git" / "info" / "exclude").write_text("pkg/other.py\n")
    expected = {p for p in git(tmp_path, "ls-files", "--others", "--exclude-standard").splitlines()
                if p.endswith((".py", ".cuh"))}
    assert discovered(tmp_path) == expected
    assert {"keep_gen.py", "pkg/anchored.py", "pkg/n/local.py", "deep/y.py", "plain.py"} <= expected
    assert not {"a_gen.py", "gen/a.py", "anchored.py", "deep/1/2/x.py", "sub/h.cuh", "pkg/local.py",
                "pkg/other.py", "#hash.py", "spaced.py", "pkg/dironly/z.py", "pkg/g/ghost.py/m.py"} & expected
    assert "pkg/ghost.py" in expected  # `ghost.py/` ignores a directory of that name, not a file


def test_gitignore_means_nothing_outside_a_work_tree_and_can_be_turned_off(tmp_path: Path) -> None:
    make_tree(tmp_path)
    everything = {name for name in TREE if name.endswith((".py", ".cuh"))}
    assert discovered(tmp_path) == everything  # no .git: as git and ruff, no .gitignore applies
    (tmp_path / ".git").mkdir()  # (the reader needs no git program)
    assert "a_gen.py" not in discovered(tmp_path)
    assert discovered(tmp_path, respect=False) == everything
    # A walk that starts below the root reads the .gitignore files above it too.
    assert discovered(tmp_path / "pkg") == {"anchored.py", "build.py", "ghost.py", "n/local.py", "other.py",
                                           "lib/l.py", "cache/sub/c.py"}


def test_the_cli_respects_gitignore_but_checks_files_named(project, capsys) -> None:
    (project / ".git").mkdir()
    (project / ".gitignore").write_text("kern.py\n")
    assert run(capsys, "check", ".")[0] == 0
    assert run(capsys, "check", "kern.py")[0] == 1  # named on the command line: checked, as ruff
    assert run(capsys, "check", ".", "--no-respect-gitignore")[0] == 1
    (project / "pyproject.toml").write_text("[tool.kanalyze]\nrespect-gitignore = false\n")
    assert run(capsys, "check", ".")[0] == 1
    assert run(capsys, "check", ".", "--respect-gitignore")[0] == 0


def test_gitignore_keeps_discovery_fast(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("*_0.py\n" + "".join(f"*_{i}x.py\n/top{i}/\nlogs{i}/**/*.py\n" for i in range(40)))
    for d in range(60):
        folder = tmp_path / f"pkg{d}"
        folder.mkdir()
        (folder / ".gitignore").write_text("!keep_1.py\n")
        for f in range(50):
            (folder / f"m{f}_{f % 7}.py").write_text("")
    best = {}
    for respect in (False, True):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            found = discovered(tmp_path, respect)
            times.append(time.perf_counter() - start)
        best[respect] = min(times)
        assert len(found) == (60 * 50 if not respect else 60 * (50 - 8))  # m0_0, m7_0, ..., m49_0 go
    assert best[True] < 3 * best[False] + 0.5, best


# --- 5. --cache-dir ---------------------------------------------------------------------

def cache_files(folder: Path) -> list[Path]:
    return list(folder.glob("static-*.json"))


def test_cache_dir_from_the_option_the_environment_and_the_file(project, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KANALYZE_CACHE_DIR")
    (project / "pyproject.toml").write_text('[tool.kanalyze]\ncache-dir = "from-file"\n')
    run(capsys, "check", "kern.py")
    assert cache_files(project / "from-file") and not (project / ".kanalyze_cache").exists()
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(project / "from-env"))
    run(capsys, "check", "kern.py")
    assert cache_files(project / "from-env")
    run(capsys, "check", "kern.py", "--cache-dir", "from-option")
    assert cache_files(project / "from-option")
    (project / "pyproject.toml").write_text("[tool.kanalyze]\ncache-dir = 3\n")
    assert run(capsys, "check", "kern.py")[0] == 2


# --- 6. paths ---------------------------------------------------------------------------

def test_paths_relative_to_the_working_directory_in_text_absolute_in_json(project, capsys, monkeypatch) -> None:
    (project / "sub").mkdir()
    (project / "other").mkdir()
    shutil.move(project / "kern.py", project / "sub" / "kern.py")
    (project / "other" / "k2.py").write_text(TF32_KERNEL)
    monkeypatch.chdir(project / "sub")
    _, out, _ = run(capsys, "check", "..", "--output-format", "concise")
    assert [line.split(":")[0] for line in out.splitlines()[:2]] == [str(project / "other" / "k2.py"), "kern.py"]
    _, out, _ = run(capsys, "check", "..", "--output-format", "github")
    assert "file=kern.py," in out
    _, out, _ = run(capsys, "check", ".", "--output-format", "json")
    assert [item["filename"] for item in json.loads(out)] == [str(project / "sub" / "kern.py")]
    _, out, _ = run(capsys, "check", ".", "--output-format", "sarif")
    uri = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == (project / "sub" / "kern.py").as_uri()


# --- 7. -o ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["kern.py/report.txt", "."])
def test_an_unwritable_output_file_is_a_usage_error(project, capsys, target) -> None:
    code, _, err = run(capsys, "check", "kern.py", "-o", target)
    assert code == 2 and err.startswith(f"kanalyze: error: cannot write {target}: ") and "internal" not in err


def test_output_file_folders_are_made(project, capsys) -> None:
    assert run(capsys, "check", "kern.py", "-o", "reports/kanalyze.txt")[0] == 1
    assert (project / "reports" / "kanalyze.txt").read_text().startswith("kern.py:10:9: PRC001")


# --- 8. the docs name what exists --------------------------------------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w])")
# Flags of other programs the docs mention: pre-commit's, Ray's, and the benchmarks' (checked in their source).
OTHER_PROGRAMS = {"--all-files": "pre-commit", "--head": "ray start", "--port": "ray start",
                  "--num-cpus": "ray start", "--disable-usage-stats": "ray start"}
PROGRAM = re.compile(r"pre-commit(?: run [\w-]+)?|bench/\w+\.py|(?<![\w-])kanalyze(?= (?!\[))")


def parser_flags() -> set[str]:
    flags = set()
    stack = [build_parser()]
    while stack:
        parser = stack.pop()
        for action in parser._actions:
            flags.update(s for s in action.option_strings if s.startswith("--"))
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                stack.extend(action.choices.values())  # subcommands
    return flags


def bench_flags() -> set[str]:
    return {flag for path in (ROOT / "bench").glob("*.py")
            for flag in re.findall(r"""add_argument\(\s*(?:"-\w",\s*)?"(--[a-z0-9-]+)\"""", path.read_text())}


def test_every_flag_the_docs_name_exists() -> None:
    ours, theirs = parser_flags(), bench_flags() | set(OTHER_PROGRAMS)
    assert {"--add-noqa", "--stdin-filename", "--cache-dir", "--no-respect-gitignore", "--trust"} <= ours
    unknown = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for flag in FLAG.finditer(line):
                # After `kanalyze ...` on a line a flag is kanalyze's; after another program's name,
                # or in prose, it may be that program's.
                programs = PROGRAM.findall(line[: flag.start()])
                ours_alone = bool(programs) and programs[-1] == "kanalyze"
                if flag.group() not in ours and (ours_alone or flag.group() not in theirs):
                    unknown.append(f"{doc.relative_to(ROOT)}:{number}: {flag.group()}")
    assert not unknown, "flags the parser does not have:\n" + "\n".join(unknown)


def config_blocks(text: str) -> list[list[str]]:
    """The lines of each `[tool.kanalyze]` table in the fenced blocks of a document."""
    blocks, current = [], None
    for line in text.splitlines():
        header = re.match(r"\s*\[([^\]]+)\]\s*(#.*)?$", line)
        if line.startswith("```") or header:
            current = [] if header and header.group(1).strip() == "tool.kanalyze" else None
            if current is not None:
                blocks.append(current)
        elif current is not None:
            current.append(line)
    return blocks


def test_every_config_key_the_docs_name_exists() -> None:
    from kanalyze.config import _KNOWN_KEYS

    named = {(doc.relative_to(ROOT), key) for doc in DOCS for block in config_blocks(doc.read_text(encoding="utf-8"))
             for line in block for key in re.findall(r"(?:^|\s{2,})([A-Za-z][\w-]*)\s*=", line.split("#")[0])}
    assert {key for _, key in named} >= {"select", "cache-dir", "respect-gitignore"}
    assert not [f"{doc}: {key}" for doc, key in named if key not in _KNOWN_KEYS]


def test_the_docs_checks_notice_what_does_not_exist() -> None:
    assert "--no-such-flag" not in parser_flags()
    assert config_blocks("```toml\n[tool.kanalyze]\nselekt = 1\n[tool.kanalyze.ir]\nx = 1\n```\n") == [["selekt = 1"]]
