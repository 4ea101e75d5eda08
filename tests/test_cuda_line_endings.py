"""CUDA files read with the compiler's line breaks: "\\r\\n", "\\n" and a lone "\\r" (old Mac).

nvcc ends a line at a lone "\\r"; tree-sitter does not, so before the fix the first
`//` comment of a CR-only file ran to the end of the file and hid every kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.analyzer.cuda.sources import compiler_lines
from kanalyze.check import analyze_source

CUDA_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"
LF_FILES = sorted(p for p in CUDA_DIR.glob("*.cu") if b"\r" not in p.read_bytes())


def located(path: str, text: str) -> list[tuple]:
    findings, suppressed = analyze_source(path, text)
    return [(f.code, f.location.row, f.location.column, f.location.end_row, f.location.end_column, f.message)
            for f in findings] + [("suppressed", suppressed)]


def test_compiler_lines_turns_only_lone_carriage_returns_into_newlines() -> None:
    assert compiler_lines("a\rb\r\nc\nd\r") == "a\nb\r\nc\nd\n"
    assert len(compiler_lines("x\r" * 50)) == 100


@pytest.mark.parametrize("path", LF_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("newline", ["\r", "\r\n"], ids=["cr", "crlf"])
def test_every_cuda_fixture_reads_the_same_with_other_line_endings(path: Path, newline: str) -> None:
    text = path.read_bytes().decode("utf-8")
    expected = located("k.cu", text)
    assert any(code != "suppressed" for code, *_ in expected), "each .cu fixture has a finding to compare"
    assert located("k.cu", text.replace("\n", newline)) == expected


def test_the_cr_fixture_is_stored_with_lone_carriage_returns() -> None:
    # .gitattributes marks it `-text`, so that no checkout turns it into another file.
    data = (CUDA_DIR / "exc001_cr_line_endings.cu").read_bytes()
    assert b"\n" not in data and data.count(b"\r") > 20


def test_nolint_and_file_wide_noqa_read_cr_lines() -> None:
    kernel = ("// header\r#include <math.h>\r__global__ void relu(const float* x, float* y) {\r"
              "    y[0] = fmaxf(x[0], 0.0f);{}\r}\r")
    assert [f[:2] for f in located("k.cu", kernel.replace("{}", ""))] == [("EXC001", 4), ("suppressed", 0)]
    assert located("k.cu", kernel.replace("{}", "  // NOLINT(EXC001)")) == [("suppressed", 1)]
    assert located("k.cu", "// kanalyze: noqa: EXC001\r" + kernel.replace("{}", "")) == [("suppressed", 1)]
