"""CUDA units for nvcc: a `.cu` file as it is, and the CUDA strings of a Python
file (`load_inline(cuda_sources=...)`, `cupy.RawKernel`) as the CUDA static
pass reads them (kanalyze.analyzer.cuda.inline).

An inline unit is not one contiguous piece of the file (it may be a
concatenation, with escapes), so each row nvcc compiles is mapped back to
the file's row through the unit's source map: `CudaSource.row_map`.
"""

from __future__ import annotations

import os

from kanalyze.analyzer.cuda.sources import is_cuda_path
from kanalyze.analyzer.ir.nvcc import CudaSource


def file_unit(path: str, text: str) -> CudaSource:
    return CudaSource(text, path, 1, (), os.path.basename(path))


def inline_units(path: str, text: str) -> list[CudaSource]:
    """The CUDA sources a Python file builds, with their flags and row maps."""
    import libcst as cst

    from kanalyze.analyzer.cstwalk import cached_children
    from kanalyze.analyzer.cuda.inline import find_extensions
    from kanalyze.analyzer.cuda.sources import line_starts, row_column
    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.triton.model import TritonModule

    units: list[CudaSource] = []
    try:
        with cached_children():
            host = TritonModule.from_source(path, text)
            extensions = find_extensions(host)
            if not any(ext.units for ext in extensions):
                return []
            positions = Positions(host.module, text)
            starts = line_starts(text)

            def resolve(node) -> int | None:
                span = positions.offsets(node)
                return span[0] if span else None

            for ext in extensions:
                flags = tuple(flag.value for flag in ext.flags)
                for unit in ext.units:
                    if unit.language != "cuda" or is_cuda_path(unit.path) and unit.path != path:
                        continue
                    compile_text = unit.compile_text
                    shift = len(compile_text) - len(unit.text)  # the prelude and its newline
                    row_map = []
                    for start in line_starts(compile_text):
                        offset = start - shift
                        if offset < 0 or offset >= max(len(unit.text), 1):
                            row_map.append(0)
                            continue
                        row_map.append(row_column(starts, unit.source_map.origin(offset, resolve))[0])
                    name = f"{ext.builder}({ext.name or unit.origin})"
                    units.append(CudaSource(compile_text, path, 1, flags, name, tuple(row_map)))
    except (cst.ParserSyntaxError, RecursionError, MemoryError, ValueError, AttributeError, TypeError):
        return []  # the static pass reports what it cannot read
    return units


def cuda_units(path: str, text: str) -> list[CudaSource]:
    """Every CUDA unit of a file: the file itself for `.cu`/`.cuh`/`.cuda`, the
    inline sources of a Python file."""
    if is_cuda_path(path):
        return [file_unit(path, text)]
    from kanalyze.analyzer.cuda.sources import may_contain_inline_cuda

    return inline_units(path, text) if may_contain_inline_cuda(text) else []
