"""CUDA C++ through nvcc: PTX with line information, a cubin through ptxas
(`-v` for registers, spills, stack and static shared memory), SASS from it.

The CUDA static pass hands over units of source: a `.cu` file, or the CUDA
string of a `load_inline(...)` in a Python file.  All this needs of a unit is
its text, the file it came from, the row its first line sits on there, and
the build flags the source declares (`extra_cuda_cflags=["--use_fast_math"]`):
`CudaSource`.  The unit is written to a scratch file below as many blank lines
as it sits from the top of its file, so the rows nvcc writes into `.loc` are
the user's rows.

nvcc runs in a scratch directory with a timeout; it only parses and compiles
(no code of the unit runs), so a plain subprocess is enough.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib.util import find_spec

from kanalyze.analyzer.ir.resources import parse_ptxas_log
from kanalyze.analyzer.ir.ptx import parse_ptx
from kanalyze.analyzer.ir.runner import describe_cubin
from kanalyze.analyzer.ir.targets import Target
from kanalyze.extras import importable

FAST_MATH_FLAGS = ("--use_fast_math", "-use_fast_math", "-ftz=true", "--ftz=true", "-prec-div=false",
                   "--prec-div=false", "-prec-sqrt=false", "--prec-sqrt=false")
_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:torch/|ATen/|c10/)', re.MULTILINE)
_NVCC_ERROR = re.compile(r"^(?P<file>.*?)\((?P<row>\d+)\): (?:catastrophic )?error: (?P<message>.*)$", re.MULTILINE)
_MANGLED = re.compile(r"^_Z(?:N\d+\w+?)?(\d+)")

NVCC_MISSING = ("nvcc was not found: CUDA sources were not compiled to PTX/SASS "
                "(install a CUDA toolkit, or `pip install nvidia-cuda-nvcc`, or set KANALYZE_NVCC)")


@dataclass(frozen=True)
class CudaSource:
    """One unit of CUDA source, as the CUDA static pass sees it."""

    text: str
    filename: str                  # the file it came from (.cu, or the .py holding it)
    origin_row: int = 1            # the row of its first line in `filename`
    flags: tuple[str, ...] = ()    # build flags the source declares
    name: str = ""                 # for messages: the file name, or the load_inline name
    # For a unit that is not one contiguous piece of its file (inline CUDA): the
    # file's row of each row of `text` (0: none); then `origin_row` is unused.
    row_map: tuple[int, ...] = ()

    def file_row(self, row: int | None) -> int | None:
        """The row in `filename` of a row nvcc reports (they coincide without a row map)."""
        if row is None or not self.row_map:
            return row
        return self.row_map[row - 1] or None if 0 < row <= len(self.row_map) else None

    @property
    def fast_math(self) -> bool:
        return any(flag in FAST_MATH_FLAGS for flag in self.flags)


@lru_cache(maxsize=None)
def find_nvcc() -> str | None:
    """KANALYZE_NVCC, $CUDA_HOME/bin, PATH, then the pip package `nvidia-cuda-nvcc`."""
    candidates = [os.environ.get("KANALYZE_NVCC")]
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(variable):
            candidates.append(os.path.join(os.environ[variable], "bin", "nvcc"))
    candidates.append(shutil.which("nvcc"))
    spec = find_spec("nvidia") if importable("nvidia") else None
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cuda_nvcc", "cu13", "cu12"):
            candidates.append(os.path.join(base, sub, "bin", "nvcc"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _ptxas_next_to(nvcc: str) -> str | None:
    candidate = os.path.join(os.path.dirname(nvcc), "ptxas")
    return candidate if os.path.isfile(candidate) else shutil.which("ptxas")


def _include_flags(unit: CudaSource) -> list[str]:
    flags = ["-I", os.path.dirname(os.path.abspath(unit.filename))]
    if _TORCH_INCLUDE.search(unit.text):
        spec = find_spec("torch") if importable("torch") else None
        for base in (spec.submodule_search_locations or []) if spec else []:
            include = os.path.join(base, "include")
            flags += ["-I", include, "-I", os.path.join(include, "torch", "csrc", "api", "include")]
        python_include = sysconfig.get_paths().get("include")
        if python_include:
            flags += ["-I", python_include]
        flags += ["-std=c++17"]
    return flags


def kernel_name(symbol: str) -> str:
    """`_Z5scalePKfPfif` → `scale` (without a demangler: the name is length-prefixed)."""
    match = _MANGLED.match(symbol)
    if match is None:
        return symbol
    length = int(match.group(1))
    start = match.end()
    return symbol[start:start + length] or symbol


def _error(unit: CudaSource, message: str, row: int | None = None) -> dict:
    return {"ok": False, "error": message, "row": row, "functions": [], "ptx": "", "sass": ""}


def compile_cuda(unit: CudaSource, target: Target, *, timeout_s: float = 120.0,
                 extra_flags: tuple[str, ...] = ()) -> dict:
    """One record for the unit on `target`: PTX, compact SASS, and per `__global__`
    function its name, row and resources; or the error."""
    nvcc = find_nvcc()
    if nvcc is None:
        return _error(unit, NVCC_MISSING)
    scratch = tempfile.mkdtemp(prefix="kanalyze-nvcc-")
    started = time.perf_counter()
    try:
        source = os.path.join(scratch, os.path.basename(unit.filename).replace(".py", "") + ".cu")
        with open(source, "w", encoding="utf-8") as handle:
            padding = 0 if unit.row_map else unit.origin_row - 1
            handle.write("\n" * padding + unit.text)
        ptx_path, cubin_path = source[:-3] + ".ptx", source[:-3] + ".cubin"
        arch = f"-arch=sm_{target.capability}{target.suffix}"
        command = [nvcc, arch, "-ptx", "-lineinfo", *unit.flags, *extra_flags, *_include_flags(unit),
                   "-o", ptx_path, source]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=scratch)
        except subprocess.TimeoutExpired:
            return _error(unit, f"nvcc did not finish within {timeout_s:g} s")
        if done.returncode != 0:
            match = _NVCC_ERROR.search(done.stderr)
            if match:
                return _error(unit, f"nvcc: error: {match.group('message').strip()}", int(match.group("row")))
            last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or [f"exit code {done.returncode}"]
            return _error(unit, f"nvcc: {last[0].strip()}")
        with open(ptx_path, encoding="utf-8", errors="replace") as handle:
            ptx = handle.read()
        ptxas = _ptxas_next_to(nvcc)
        log, cubin = "", b""
        if ptxas is not None:
            try:
                assembled = subprocess.run(
                    [ptxas, "-v", "-lineinfo", f"--gpu-name=sm_{target.capability}{target.suffix}", ptx_path,
                     "-o", cubin_path], capture_output=True, text=True, timeout=timeout_s, cwd=scratch)
                log = assembled.stderr
                if assembled.returncode == 0:
                    with open(cubin_path, "rb") as handle:
                        cubin = handle.read()
            except subprocess.TimeoutExpired:
                log = ""
        described = describe_cubin(cubin, source, "", {})
        logged = parse_ptxas_log(log)
        parsed = parse_ptx(ptx, lambda path: path == source)
        functions = []
        for symbol, function in parsed.functions.items():
            if not function.is_entry:
                continue
            rows = [i.rows[-1] for i in parsed.instructions if i.function == symbol and i.rows]
            resources = logged.get(symbol)
            data = resources.to_dict() if resources else {}
            if function.threads:
                data["threads"] = function.threads
            functions.append({"symbol": symbol, "kernel": kernel_name(symbol), "row": min(rows) if rows else unit.origin_row,
                              "resources": data})
        return {"ok": True, "error": None, "row": None, "ptx": ptx, "sass": described["sass"], "module": source,
                "functions": functions, "fast_math": unit.fast_math, "flags": list(unit.flags),
                "seconds": round(time.perf_counter() - started, 3)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
