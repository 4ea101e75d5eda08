"""A file that does not parse gets one KAN000 where Python itself says the error is.

Each case is a kernel file with one syntax error at a known line.  The finding's
row and column must be Python's SyntaxError lineno and offset (both 1-based, as
kanalyze's rows and columns are), the line the case marks, and the position its
message names; through the CLI's every format and through the editor too.  Also
the CUDA side: a `.cu` file's KAN000 is at its first ERROR or MISSING node.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import CudaUnit
from kanalyze.analyzer.syntax_errors import locate_parse_error
from kanalyze.check import analyze_source
from kanalyze.cli import main
from test_lsp import Editor, run, workspace  # noqa: F401  (the fixture is used by name)

HEAD = "import triton\nimport triton.language as tl\n\n\n"
KERNEL = ("@triton.jit\ndef kernel(x_ptr, n):\n    offs = tl.arange(0, 128)\n"
          "    x = tl.load(x_ptr + offs, mask=offs < n)\n    tl.store(x_ptr + offs, x + 1, mask=offs < n)\n")
TAIL = "\n\ndef launch(x):\n    kernel[(1,)](x, x.numel())\n    return x\n"
MARK = "  # <- here"   # ends the line the error is on (a comment: it changes no error)


CASES = {
    "mid-file": HEAD + KERNEL + "\n\nx = = 1" + MARK + "\ny = 2\n" + TAIL,
    "an unclosed bracket, more lines after": HEAD + KERNEL + "\n\nsizes = (1," + MARK + "\nblock = 128\n" + TAIL,
    "an unexpected indent": HEAD + KERNEL + "\n\nblock = 128\n    grid = 4" + MARK + "\n" + TAIL,
    "a dedent to no outer level": HEAD + "if True:\n    a = 1\n  b = 2" + MARK + "\n" + KERNEL + TAIL,
    "the first line": "import triton as = tl" + MARK + "\n" + HEAD + KERNEL + TAIL,
    "the last line, no newline": HEAD + KERNEL + TAIL + "y = = 2" + MARK,
    "inside a @triton.jit kernel": HEAD + KERNEL.replace("    x = tl.load", "    y = = 0" + MARK + "\n    x = tl.load")
    + TAIL,
    "CRLF line ends": (HEAD + KERNEL + "\n\nx = = 1" + MARK + "\ny = 2\n" + TAIL).replace("\n", "\r\n"),
    "lone CR line ends": (HEAD + KERNEL + "\n\nx = = 1" + MARK + "\ny = 2\n" + TAIL).replace("\n", "\r"),
    "a BOM": "\ufeff" + HEAD + KERNEL + "\n\nx = = 1" + MARK + "\n" + TAIL,
    "a BOM, the first line": "\ufeffx = = 1" + MARK + "\n" + HEAD + KERNEL + TAIL,
    "tab indents": (HEAD + KERNEL.replace("    x = tl.load", "    y = = 0" + MARK + "\n    x = tl.load") + TAIL
                    ).replace("    ", "\t"),
    "tabs and spaces mixed": HEAD + KERNEL.replace("    x = tl.load", "\ty = 0" + MARK + "\n    x = tl.load") + TAIL,
    "an unterminated string after non-ASCII text": HEAD + KERNEL + "\nname = 'é'; s = 'abc" + MARK + "\n" + TAIL,
    "an unterminated triple-quoted string": HEAD + KERNEL + '\ndoc = """abc' + MARK + "\n" + TAIL,
    "a character Python does not know": HEAD + KERNEL + "\nn = 'é'; x = 1 $ 2" + MARK + "\n" + TAIL,
    "a block that never starts, at the end": HEAD + KERNEL + TAIL + "if True:" + MARK + "\n",
}


def marked_row(text: str) -> int:
    """The 1-based row of the line that ends with MARK (Python's line ends: \\r\\n, \\r, \\n)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    [row] = [n for n, line in enumerate(lines, start=1) if line.endswith(MARK)]
    return row


# Where the column of some cases points: the text that starts there.
POINTS_AT = {
    "mid-file": "= 1", "the first line": "= tl", "the last line, no newline": "= 2",
    "inside a @triton.jit kernel": "= 0", "CRLF line ends": "= 1", "lone CR line ends": "= 1", "a BOM": "= 1",
    "tab indents": "= 0", "a character Python does not know": "$", "an unclosed bracket, more lines after": "(1,",
    "an unterminated string after non-ASCII text": "'abc", "an unterminated triple-quoted string": '"""abc',
}


def python_error(text: str) -> SyntaxError:
    """What Python's own parser says about the text, read as `kanalyze check` reads a file: without
    its BOM.  (Parsing the bytes instead, Python 3.11 gives some offsets in bytes, not characters.)"""
    with pytest.raises(SyntaxError) as raised:
        compile(text.removeprefix("\ufeff"), "k.py", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    return raised.value


def only_parse_error(text: str):
    findings, _ = analyze_source("k.py", text)
    assert [f.code for f in findings] == ["KAN000"], [(f.code, f.message) for f in findings]
    return findings[0]


@pytest.mark.parametrize("name", CASES)
def test_the_parse_error_is_where_python_says(name: str) -> None:
    text = CASES[name]
    error = python_error(text)
    finding = only_parse_error(text)
    assert error.lineno == marked_row(text), "the case itself: Python names the marked line"
    assert finding.location.row == error.lineno
    bom = 1 if text.startswith("\ufeff") and error.lineno == 1 else 0  # a BOM kept in the text is a character
    assert finding.location.column == error.offset + bom
    assert finding.message.endswith(f"(line {finding.location.row}, column {finding.location.column})")
    assert finding.message.startswith(f"cannot parse: {error.msg}")
    if name in POINTS_AT:
        line = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")[error.lineno - 1]
        assert line[error.offset - 1:].startswith(POINTS_AT[name]), line


def test_an_unclosed_bracket_is_reported_at_the_bracket() -> None:
    """Python names the bracket that was never closed, not the line where it noticed."""
    finding = only_parse_error(CASES["an unclosed bracket, more lines after"])
    line = CASES["an unclosed bracket, more lines after"].splitlines()[finding.location.row - 1]
    assert line.startswith("sizes = (1,") and line[finding.location.column - 1] == "("
    assert "'(' was never closed" in finding.message


def test_an_error_inside_an_f_string_is_at_its_expression() -> None:
    """Before 3.12 Python counts such an offset from the expression; the finding is in the line."""
    text = HEAD + KERNEL + "\nlabel = f'{a b}'" + MARK + "\n" + TAIL
    finding = only_parse_error(text)
    assert finding.location.row == marked_row(text) == python_error(text).lineno
    line = text.splitlines()[finding.location.row - 1]
    assert finding.location.column == line.index("a b") + 1
    if sys.version_info >= (3, 12):
        assert finding.location.column == python_error(text).offset


def test_a_file_that_builds_cuda_reports_python_errors_where_python_says() -> None:
    """No Triton kernel: the CUDA pass reads the Python side (check/cuda.py) and reports its error."""
    text = ("from torch.utils.cpp_extension import load_inline\n\nsource = '__global__ void k(float *x) {}'\n"
            "module = load_inline(name='m', cpp_sources='', cuda_sources=source, functions=['k'])\n"
            "x = = 1" + MARK + "\ny = 2\n")
    assert "triton" not in text
    error = python_error(text)
    finding = only_parse_error(text)
    assert (finding.location.row, finding.location.column) == (error.lineno, error.offset) == (marked_row(text), 5)


def test_libcst_position_when_python_has_none() -> None:
    """The fallback for text only LibCST refuses: the line its message names, not the
    next one (`raw_line`).  Measured here on text both refuse, LibCST's error alone."""
    import libcst as cst

    text = CASES["mid-file"]
    with pytest.raises(cst.ParserSyntaxError) as raised:
        cst.parse_module(text)
    assert raised.value.raw_line == marked_row(text) + 1  # LibCST's own row: the next line
    from kanalyze.analyzer import syntax_errors

    reason, row, column = syntax_errors._libcst_position(raised.value, text.split("\n"))
    assert row == marked_row(text) and "error at" not in reason and "expected one of" in reason
    assert 1 <= column <= len(text.split("\n")[row - 1]) + 1


def test_the_reason_names_the_position_it_is_at() -> None:
    import libcst as cst

    text = CASES["inside a @triton.jit kernel"]
    with pytest.raises(cst.ParserSyntaxError) as raised:
        cst.parse_module(text)
    reason, row, column = locate_parse_error(text, raised.value)
    assert (row, column) == (marked_row(text), text.splitlines()[row - 1].index("= = 0") + 3)
    assert reason == f"invalid syntax (line {row}, column {column})"


# --- every output format -----------------------------------------------------------

def test_every_cli_format_reports_the_row_python_reports(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    text = CASES["mid-file"]
    (tmp_path / "broken.py").write_bytes(("\ufeff" + text).replace("\n", "\r\n").encode())  # as a file on disk
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    error = python_error(text)
    row, column = error.lineno, error.offset

    def check(fmt: str) -> str:
        code = main(["check", "broken.py", "--no-cache", "--output-format", fmt])
        out, _ = capsys.readouterr()
        assert code == 1
        return out

    [item] = json.loads(check("json"))
    assert (item["code"], item["location"]["row"], item["location"]["column"]) == ("KAN000", row, column)
    [result] = json.loads(check("sarif"))["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (result["ruleId"], region["startLine"], region["startColumn"]) == ("KAN000", row, column)
    assert f"file=broken.py,line={row},col={column}," in check("github")
    assert f"broken.py:{row}:{column}: KAN000" in check("concise")


def test_the_editor_underlines_the_line_python_reports(workspace: Path) -> None:  # noqa: F811
    uri = (workspace / "broken.py").as_uri()
    text = CASES["inside a @triton.jit kernel"]
    crlf = CASES["CRLF line ends"]

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        try:
            editor.open(uri, text)
            [diagnostic] = await editor.diagnostics(uri, 1)
            assert diagnostic.code == "KAN000"
            assert diagnostic.range.start.line == python_error(text).lineno - 1  # LSP counts lines from 0
            assert diagnostic.range.start.character == python_error(text).offset - 1
            editor.change(uri, 2, crlf)
            [diagnostic] = await editor.diagnostics(uri, 2)
            assert diagnostic.range.start.line == python_error(crlf).lineno - 1
        finally:
            await editor.stop()

    run(scenario)


# --- CUDA: tree-sitter's error nodes ------------------------------------------------

CUDA_CASES = {
    "a missing semicolon": "__global__ void k(float *x) {\n    int i = threadIdx.x\n    x[i] = 1.0f;\n}\n",
    "a stray token mid-file": ("__global__ void k(float *x) {\n    int i = threadIdx.x;\n    x[i] = = 1.0f;\n"
                               "    x[0] = 2.0f;\n}\n"),
    "an unclosed parenthesis": "__global__ void k(float *x) {\n    x[0] = (1.0f;\n}\n",
    "an unclosed brace at the end": "__global__ void k(float *x) {\n    x[0] = 1.0f;\n\n",
    "the first line": "@@@ bad\n__global__ void k(float *x) {\n    x[0] = 1.0f;\n}\n",
    "CRLF, non-ASCII": "// é\r\n__global__ void k(float *x) {\r\n    /* ü */ x[0] = = 1.0f;\r\n}\r\n",
}


@pytest.mark.parametrize("name", CUDA_CASES)
def test_a_cuda_parse_error_is_at_its_first_error_node(name: str) -> None:
    text = CUDA_CASES[name]
    model = CudaModule.parse(CudaUnit("k.cu", text, "file"))
    first = model.errors[0]
    row = first.start_point.row + 1
    line = text.replace("\r\n", "\n").split("\n")[row - 1].encode()
    column = len(line[: first.start_point.column].decode()) + 1   # tree-sitter counts bytes
    findings, _ = analyze_source("k.cu", text)
    assert [(f.code, f.location.row, f.location.column) for f in findings] == [("KAN000", row, column)]
    assert f"could not parse line {row}" in findings[0].message or f"could not parse lines {row}" in \
        findings[0].message
