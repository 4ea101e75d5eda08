"""CUDA sources: what a CUDA translation unit is and where its text came from.

A `CudaUnit` is one piece of CUDA C++ as a compiler would see it: a `.cu`
file, or the strings a Python file hands to `load_inline`, cupy's
`RawKernel`/`RawModule` (inline.py finds those).  Every unit keeps a
`SourceMap` from offsets in its text back to the file the user edits, so a
finding inside an inline string lands on the Python file's row and column
(where `# noqa` and the editor expect it).

Nothing here parses C++; model.py does.  Nothing here imports torch or
executes the Python it reads.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable

from kanalyze.analyzer.spelling import folded_text

CUDA_SUFFIXES = (".cu", ".cuh", ".cuda")

# A Python file can only build CUDA through one of these names.
_INLINE_HINT = re.compile(r"load_inline|RawKernel|RawModule|cpp_extension")
# `.cu` files named in a Python file that builds extensions (`load(sources=[...])`), with
# the literals joined in front of them: `os.path.join(here, "csrc", "k.cu")`, `root / "csrc" / "k.cu"`.
_NAMED_CUDA_FILE = re.compile(r"""((?:["'][^"'\n]*["']\s*[,/]\s*)*)["']([^"'\n]+\.(?:cu|cuh|cuda))["']""")
_LITERAL = re.compile(r"""["']([^"'\n]*)["']""")

# What `load_inline` puts in front of the user's strings (torch/utils/cpp_extension.py).
LOAD_INLINE_CPP_PRELUDE = "#include <torch/extension.h>"
LOAD_INLINE_CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>"

_LINE_END = re.compile(r"\r\n?|\n")
_LONE_CR = re.compile(r"\r(?!\n)")


def is_cuda_path(path: str) -> bool:
    return path.lower().endswith(CUDA_SUFFIXES)


def may_contain_inline_cuda(text: str) -> bool:
    """Cheap prefilter for Python files: no builder name, no inline CUDA (names
    searched as Python reads them too: `ｌｏａｄ_ｉｎｌｉｎｅ` is `load_inline`)."""
    if _INLINE_HINT.search(text) is not None:
        return True
    folded = folded_text(text)
    return folded is not text and _INLINE_HINT.search(folded) is not None


def cuda_files_named_in(path: str, text: str) -> list[str]:
    """Existing CUDA files that a Python file building extensions names in a
    string literal (`load(sources=[os.path.join(here, "k.cu")])`), resolved
    against the Python file's directory.  Text only: nothing is run."""
    if "cpp_extension" not in text and "cpp_extension" not in folded_text(text):
        return []
    here = os.path.dirname(path)
    found: list[str] = []
    for match in _NAMED_CUDA_FILE.finditer(text):
        parts, name = _LITERAL.findall(match.group(1)), match.group(2)
        for candidate in (os.path.join(here, *parts, name), os.path.join(here, name), name):
            candidate = os.path.normpath(candidate)
            if os.path.isfile(candidate) and candidate not in found:
                found.append(candidate)
                break
    return found


def compiler_lines(text: str) -> str:
    """`text` with each lone "\r" made a "\n", for tree-sitter and line-anchored regexes.

    nvcc, like any C compiler, ends a line at "\r\n", "\n" or a lone "\r"
    (old Mac line endings); tree-sitter only at "\n", so in a file with lone
    "\r"s the first `//` comment or `#include` would run to the end of the file
    and hide every kernel.  One character for one: lengths and offsets stay."""
    return _LONE_CR.sub("\n", text) if "\r" in text else text


def line_starts(text: str) -> list[int]:
    """Offsets where lines start ("\\r\\n", "\\n" or a lone "\\r" end a line)."""
    return [0] + [m.end() for m in _LINE_END.finditer(text)]


def row_column(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (row, column) of a character offset."""
    row = bisect_right(starts, offset)
    return row, offset - starts[row - 1] + 1


@dataclass
class Span:
    """Unit text [start, end) was read from `node` (a Python literal or
    expression): unit offset `u` sits `body + raw` characters after the
    node's first character, where `raw = offsets[first + u - start]` when
    escapes make the mapping uneven, else `first + u - start`."""

    start: int
    end: int
    node: Any
    body: int = 0
    first: int = 0
    offsets: list[int] | None = None

    def raw(self, unit_offset: int) -> int:
        local = self.first + unit_offset - self.start
        if self.offsets is None:
            return local
        if not self.offsets:
            return 0
        return self.offsets[min(local, len(self.offsets) - 1)]


class SourceMap:
    """Unit offset → character offset in the origin file.

    A `.cu` file is its own origin (identity).  An inline unit is a list of
    spans, each pointing into a Python node whose own offset is only known
    once the pipeline computes positions (only for files with findings);
    `resolve(node)` supplies it then.
    """

    def __init__(self, spans: list[Span] | None = None) -> None:
        self.spans = spans  # None: identity
        self._starts = [s.start for s in spans] if spans else []

    @classmethod
    def identity(cls) -> "SourceMap":
        return cls(None)

    def origin(self, unit_offset: int, resolve: Callable[[Any], int | None] | None = None) -> int:
        if self.spans is None:
            return unit_offset
        if not self.spans:
            return 0
        index = max(bisect_right(self._starts, unit_offset) - 1, 0)
        span = self.spans[index]
        if unit_offset >= span.end and span.end > span.start:
            unit_offset = span.end - 1  # a separator between spans: the end of the one before
        base = resolve(span.node) if resolve is not None else None
        return (base or 0) + span.body + span.raw(unit_offset)

    def nodes(self) -> list[Any]:
        return [s.node for s in self.spans or ()]


@dataclass(eq=False)
class Skipped:
    """A part of the source that could not be read (a non-constant piece of
    an inline string, a region tree-sitter could not parse)."""

    what: str
    node: Any = None         # a Python node (inline sources) or None
    unit_offset: int | None = None


@dataclass(eq=False)
class CudaUnit:
    """One CUDA/C++ translation unit, as its builder hands it to the compiler.

    `text` is the user's source; `compile_text` adds what the builder puts in
    front of it (load_inline's includes), which is what nvcc compiles.
    """

    path: str                  # the file findings are reported in
    text: str
    origin: str                # "file", "load_inline:cuda_sources", "load_inline:cpp_sources", "cupy.RawKernel", ...
    language: str = "cuda"     # "cuda" or "c++"
    source_map: SourceMap = field(default_factory=SourceMap.identity)
    extension: "Extension | None" = None
    skipped: list[Skipped] = field(default_factory=list)
    prelude: str = ""

    @property
    def compile_text(self) -> str:
        return f"{self.prelude}\n{self.text}" if self.prelude else self.text

    @property
    def inline(self) -> bool:
        return self.source_map.spans is not None


@dataclass(eq=False)
class Flag:
    """One compiler flag passed from Python (`extra_cuda_cflags=["--use_fast_math"]`)."""

    keyword: str
    value: str
    node: Any


@dataclass(eq=False)
class Extension:
    """A Python call that builds CUDA: load_inline, load, cupy.RawKernel/RawModule."""

    builder: str                       # "load_inline", "load", "RawKernel", "RawModule"
    call: Any                          # the libcst.Call
    name: str | None = None            # the extension's name
    functions: list[str] = field(default_factory=list)  # what Python can call on it
    bindings: set[str] = field(default_factory=set)     # names the result is bound to: "ext", "self.ext"
    flags: list[Flag] = field(default_factory=list)
    flags_folded: bool = True          # every flag argument folded to constants (no `**kwargs`)
    source_files: list[str] = field(default_factory=list)  # load(sources=[...]) that fold to paths
    units: list[CudaUnit] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)   # arguments that are not constant
    models: list = field(default_factory=list)  # the units' CudaModules, once the pipeline has parsed them
