"""Text from the checked files never reaches the terminal raw (kanalyze/report/escape.py).

Paths, code excerpts in messages and the dynamic pass's verdicts can carry ANSI
escape sequences or Unicode bidi controls written by a hostile candidate; the text
and github formats show them as visible escapes (`\\x1b`, `\\u202e`) instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.findings import Finding, Location, Status, Witness
from kanalyze.report import render_github, render_statistics, render_text
from kanalyze.report.escape import printable

ROOT = Path(__file__).resolve().parent.parent

CLEAR_SCREEN = "\x1b[2J"
RIGHT_TO_LEFT_OVERRIDE = "\u202e"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"

# PRC001 flags the `tl.dot(...)` call and quotes it in its message: the string
# literal inside the call puts the payload into the message.
KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        c = tl.dot(a, b, acc=None if "PAYLOAD" else None)
        tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
''').replace("PAYLOAD", CLEAR_SCREEN + RIGHT_TO_LEFT_OVERRIDE)
HOSTILE_NAME = f"kern{CLEAR_SCREEN}{RIGHT_TO_LEFT_OVERRIDE}.py"


def finding(message: str, file: str = "kern.py", **evidence) -> Finding:
    return Finding("PRC001", "precision-downgrade", message, Location(file, 10, 9, 10, 21),
                   status=Status.CONFIRMED if evidence else Status.FLAGGED, evidence=evidence)


def unsafe(ch: str) -> bool:
    """What must never reach a terminal raw: controls, separators, bidi controls, surrogates."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch in BIDI


# printable


@pytest.mark.parametrize("raw, shown", [
    (CLEAR_SCREEN, "\\x1b[2J"),
    (RIGHT_TO_LEFT_OVERRIDE, "\\u202e"),
    ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
    ("\x9b31m", "\\x9b31m"),                        # the 8-bit CSI of C1
    ("a\rb", "a\\x0db"),                             # would overwrite the line so far
    ("one\ntwo\tthree", "one\\x0atwo\\x09three"),    # one finding stays one line
    ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),      # str.splitlines() breaks lines there
    ("kern\udc9b.py", "kern\\udc9b.py"),             # an undecodable byte of a file name
    ("\u2066\u2069\u200e\u200f\u061c", "\\u2066\\u2069\\u200e\\u200f\\u061c"),
])
def test_printable_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_printable_leaves_ordinary_text_alone() -> None:
    text = "`tl.dot(a, b)` in naïve_kernel — 行列 ≥ 1e-3 … \\x1b stays \\x1b"
    assert printable(text) == text


def test_a_multiline_block_keeps_its_newlines_and_tabs_only() -> None:
    assert printable("one\n\ttwo\r\x1b[A", multiline=True) == "one\n\ttwo\\x0d\\x1b[A"


def test_nothing_unsafe_survives_in_any_code_point() -> None:
    every = [chr(code) for code in range(0x110000)]
    assert {ch for ch in every if printable(ch) != ch} == {ch for ch in every if unsafe(ch)}
    assert not [ch for ch in printable("".join(every)) if unsafe(ch)]
    assert not [ch for ch in printable("".join(every), multiline=True) if unsafe(ch) and ch not in "\n\t"]


# The writers


def test_text_report_escapes_every_field_but_keeps_its_own_colours() -> None:
    hostile = CLEAR_SCREEN + RIGHT_TO_LEFT_OVERRIDE
    findings = [finding(f"`x = {hostile!s}`", file=f"{hostile}.py", gate_result=f"the candidate crashed: {hostile}"),
                finding("fine\nkern.py:1:1: PRC001 forged", file="b.py")]
    report = render_text(findings, color=True)
    own_colours = re.compile(r"\x1b\[[0-9;]*m")
    assert "\x1b" not in own_colours.sub("", report) and RIGHT_TO_LEFT_OVERRIDE not in report
    assert report.count("\\x1b[2J\\u202e") == 3  # the path, the message and the verdict
    assert len(report.splitlines()) == 4  # two findings, one verdict, the summary: no forged line
    assert "\x1b" not in render_statistics(findings, {"PRC001": f"name{CLEAR_SCREEN}"})


def test_text_report_shows_the_witness_path_escaped() -> None:
    hostile = finding("m")
    hostile.witness = Witness("PRC001", "dot-precision", path=f"w{CLEAR_SCREEN}.json")
    assert "w\\x1b[2J.json" in render_text([hostile])


def test_github_message_cannot_start_a_second_workflow_command() -> None:
    message = "x\n::warning file=a.py::forged\r::add-mask::%0A::error::also forged " + CLEAR_SCREEN
    report = render_github([finding(message, file="a,b:c.py")])
    lines = report.splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error title=kanalyze (PRC001),file=a%2Cb%3Ac.py,")
    assert "\r" not in report and "\x1b" not in report
    assert "%250A" in report  # a literal `%0A` in the message stays literal
    # Only the command's own `::` separates the properties from the message.
    assert lines[0].split("::", 2)[2].startswith("PRC001 [flagged] x\\x0a")


# End to end, through the command line


@pytest.fixture
def hostile_project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (tmp_path / HOSTILE_NAME).write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    return tmp_path


@pytest.mark.parametrize("extra", [[], ["--statistics"], ["--quiet"], ["--output-format", "github"]])
def test_cli_output_holds_no_raw_escape_or_bidi_control(hostile_project, capsys, extra) -> None:
    assert main(["check", ".", "--isolated", *extra]) == 1
    out = capsys.readouterr().out
    assert "PRC001" in out
    assert "\x1b" not in out and RIGHT_TO_LEFT_OVERRIDE not in out
    assert "kern\\x1b[2J\\u202e.py" in out  # the path, visibly
    assert '"\\x1b[2J\\u202e"' in out  # and the excerpt in the message


def test_cli_colours_are_the_only_escapes(hostile_project, capsys) -> None:
    assert main(["check", ".", "--isolated", "--color", "always"]) == 1
    out = capsys.readouterr().out
    assert "\x1b[1m" in out  # colour is on
    assert "\x1b[2J" not in out and RIGHT_TO_LEFT_OVERRIDE not in out


def test_an_undecodable_file_name_reaches_stdout_escaped(tmp_path: Path) -> None:
    """A name with byte 0x9b (the 8-bit CSI) is a lone surrogate in Python: unescaped, it
    would be written back to the terminal as that byte."""
    with open(os.fsencode(tmp_path) + b"/kern\x9b2J.py", "wb") as handle:
        handle.write(KERNEL.encode())
    done = subprocess.run([sys.executable, "-m", "kanalyze", "check", ".", "--isolated", "--no-cache"],
                          cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stderr
    assert b"\x9b" not in done.stdout and b"\x1b" not in done.stdout
    assert b"kern\\udc9b2J.py" in done.stdout
