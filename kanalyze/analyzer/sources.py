"""Finding the files to check and reading them safely.

Reading never executes anything.  A file that cannot be read as text becomes a
`SourceError` (reported as KAN000 by the pipeline); the run goes on.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from kanalyze.analyzer.cuda.sources import CUDA_SUFFIXES
from kanalyze.analyzer.spelling import folded_text

PYTHON_SUFFIXES = (".py", ".pyi")

# Directories nobody wants linted (the same spirit as ruff's default excludes).
DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", ".kanalyze_cache", "__pycache__",
    "node_modules", "build", "dist", "site-packages", ".eggs",
)

MAX_FILE_BYTES = 10 * 1024 * 1024

# A file that cannot contain a Triton kernel is not parsed at all: a kernel
# needs both the word `triton` (an import) and `jit` (its decorator).
_TRITON_HINT = re.compile(r"\btriton\b")
_JIT_HINT = re.compile(r"\bjit\b")
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)


@dataclass(frozen=True)
class SourceText:
    path: str
    text: str


@dataclass(frozen=True)
class SourceError:
    path: str
    reason: str
    row: int = 1
    column: int = 0


# CPython refuses more than 200 nested brackets; LibCST's native parser
# overflows its stack (a segfault, not an exception) far beyond that.
MAX_NESTING = 200
_BRACKET = re.compile(r"[()\[\]{}]")


def too_deeply_nested(text: str, limit: int = MAX_NESTING) -> bool:
    """More than `limit` brackets open at once (brackets in strings count too:
    a cheap, conservative guard that runs before any parser sees the text)."""
    depth = 0
    for match in _BRACKET.finditer(text):
        if match.group() in "([{":
            depth += 1
            if depth > limit:
                return True
        elif depth:
            depth -= 1
    return False


def may_contain_triton(text: str) -> bool:
    """Cheap prefilter: no `triton` and `jit` in the text, no kernel to analyze.

    Python reads `@triton.ｊｉｔ` (fullwidth letters) as `@triton.jit`, so a text
    that is not ASCII is also searched folded the way Python folds names."""
    if _TRITON_HINT.search(text) is not None and _JIT_HINT.search(text) is not None:
        return True
    folded = folded_text(text)
    return folded is not text and _TRITON_HINT.search(folded) is not None and _JIT_HINT.search(folded) is not None


def read_source(path: str, *, explicit: bool = False) -> SourceText | SourceError | None:
    """Read `path` as Python source text.

    Returns None for a file that is fine but has nothing to analyze (an empty
    file found while walking a directory, or an empty `__init__.py`).
    """
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            return SourceError(path, f"file too large to analyze ({size} bytes; the limit is {MAX_FILE_BYTES})")
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return SourceError(path, f"cannot read file: {exc.strerror or exc}")
    if not data.strip():
        if explicit and os.path.basename(path) != "__init__.py":
            return SourceError(path, "empty file: there is no kernel to analyze")
        return None
    if b"\x00" in data:
        return SourceError(path, "binary file: it contains NUL bytes, so it is not source code")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except (SyntaxError, LookupError) as exc:
        # detect_encoding also fails on undecodable first lines with no
        # declaration: say what is wrong with the bytes when that is the case.
        if _CODING_COOKIE.search(data[:200]) is not None:
            return SourceError(path, f"unknown source encoding: {exc}")
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        row = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
        return SourceError(path, f"not valid {exc.encoding}: byte 0x{data[exc.start]:02x} at offset {exc.start}", row, column)
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceText(path, text)


def _matches(path: str, patterns: Iterable[str], *, any_ancestor: bool = False) -> bool:
    """Does `path` (relative to the project root) match an exclude pattern?

    As in ruff: a pattern without a slash matches an entry's own name
    (`fixtures` excludes every directory called fixtures met while walking),
    one with a slash matches the relative path.  A walk tests each entry as it
    meets it, so a directory named on the command line is walked even when its
    own name is excluded; `any_ancestor` (for --force-exclude) tests every
    component of an explicit path instead.
    """
    normalized = path.replace(os.sep, "/")
    names = Path(path).parts if any_ancestor else Path(path).parts[-1:]
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatch(normalized, pattern) or fnmatch.fnmatch(normalized, pattern + "/*"):
                return True
        elif any(fnmatch.fnmatch(name, pattern) for name in names):
            return True
    return False


def discover(
    paths: Iterable[str],
    exclude: Iterable[str] = (),
    *,
    force_exclude: bool = False,
    root: str | None = None,
) -> Iterator[tuple[str, bool]]:
    """Yield `(path, explicit)` for every file to check, in a stable order.

    Directories are walked for Python and CUDA files; files named on the command line
    are checked whatever their suffix (`explicit=True`), unless `force_exclude`
    is set and they match an exclude pattern (as ruff's `--force-exclude`).
    """
    exclude = tuple(exclude)
    seen: set[str] = set()

    def relative(path: str) -> str:
        if root:
            try:
                return os.path.relpath(path, root)
            except ValueError:
                return path
        return path

    for given in paths:
        if os.path.isdir(given):
            for dirpath, dirnames, filenames in os.walk(given):
                dirnames[:] = sorted(
                    d for d in dirnames
                    if d not in DEFAULT_EXCLUDES and not _matches(relative(os.path.join(dirpath, d)), exclude)
                )
                for name in sorted(filenames):
                    if not (name.endswith(PYTHON_SUFFIXES) or name.lower().endswith(CUDA_SUFFIXES)):
                        continue
                    path = os.path.join(dirpath, name)
                    if _matches(relative(path), exclude) or path in seen:
                        continue
                    seen.add(path)
                    yield path, False
        else:
            if force_exclude and _matches(relative(given), exclude, any_ancestor=True):
                continue
            if given not in seen:
                seen.add(given)
                yield given, True
