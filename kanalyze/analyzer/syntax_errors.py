"""Where a Python file that does not parse is wrong: the reason, row and column of its KAN000.

LibCST's native parser places its `ParserSyntaxError` on the token after the
error: `raw_line` is often the next line, and its tokenizer errors (an
unterminated string, a bad indent) say line 1.  So when LibCST refuses a
text, Python's own parser is asked where the text is wrong, and its
SyntaxError gives the reason and the position.  `compile` with
`PyCF_ONLY_AST` only parses; it executes nothing.

Python accepts some text LibCST refuses (LibCST's grammar can lag behind a
new Python).  Then LibCST's error is reported, at the position its message
names ("error at 5:6"), which lies on the right line, or at `raw_line` when
that position is past the text.

Rows and columns are 1-based; a column counts characters (code points), as
Python's SyntaxError.offset does for text.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings

_LINE_BREAK = re.compile(r"\r\n|\r|\n")   # what ends a line for Python, LibCST and the editor
_LIBCST_AT = re.compile(r"error at (\d+):(\d+): ")
_BOM = "\ufeff"


def locate_parse_error(text: str, error: Exception) -> tuple[str, int, int]:
    """(reason, row, column) of the one KAN000 of `text`, which LibCST refused with `error`
    (a ParserSyntaxError).  The reason names the same row and column."""
    lines = _LINE_BREAK.split(text)
    python = python_syntax_error(text)
    if python is not None and python.lineno:
        reason = python.msg
        row, column = _python_position(python, lines)
    else:
        reason, row, column = _libcst_position(error, lines)
    if row == 1 and text.startswith(_BOM):  # Python read the text without its BOM; LibCST counts it
        column += 1
    return f"{reason} (line {row}, column {column})", row, column


def python_syntax_error(text: str) -> SyntaxError | None:
    """The SyntaxError Python's parser raises on `text`, or None when it parses
    (or fails without a position: a RecursionError, a MemoryError)."""
    body = text[1:] if text.startswith(_BOM) else text  # in a str, Python calls a BOM a bad character
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape warns; under `-W error` it would raise
            compile(body, "<kanalyze>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError too
        return exc
    except Exception:
        return None
    return None


def _python_position(error: SyntaxError, lines: list[str]) -> tuple[int, int]:
    row = _clamp(error.lineno, len(lines))
    line = lines[row - 1]
    column = error.offset or 1
    fragment = (error.text or "").rstrip("\r\n")
    if sys.version_info < (3, 12) and error.msg.startswith("f-string") and fragment.startswith("(") \
            and fragment != line:
        # Before 3.12 an f-string's expressions are parsed apart, as "(expression)": the
        # offset counts from that "(".  The expression is found in the line instead.
        start = line.find(fragment[1:-1])
        column = start + max(column - 1, 1) if start >= 0 else 1
    return row, _clamp(column, len(line) + 1)


def _libcst_position(error: Exception, lines: list[str]) -> tuple[str, int, int]:
    message = " ".join(str(getattr(error, "message", error)).split())
    named = _LIBCST_AT.search(message)
    if named is not None and 1 <= int(named.group(1)) <= len(lines):
        row, column = int(named.group(1)), int(named.group(2)) + 1
    else:
        row, column = getattr(error, "raw_line", 1), getattr(error, "raw_column", 0) + 1
    row = _clamp(row, len(lines))
    return _LIBCST_AT.sub("", message), row, _clamp(column, len(lines[row - 1]) + 1)


def _clamp(value: int, highest: int) -> int:
    return max(1, min(value, highest))
