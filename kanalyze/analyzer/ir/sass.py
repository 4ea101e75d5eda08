"""SASS, the GPU's own machine code, from a cubin, with the disassembler and
object dumper that Triton's package ships (`nvdisasm`, `cuobjdump`), or those
of a CUDA toolkit on PATH.

`nvdisasm -c -gi` prints the code with `//## File "k.py", line 24` comments
(from the line table that `-lineinfo` put in the cubin; `inlined at` names the
call site of inlined code), so SASS instructions map back to source rows just
as PTX does.  `cuobjdump -res-usage` prints the per-kernel resources:
registers, stack, static shared memory, local memory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

_LINE_INFO = re.compile(r'^\s*//## File "([^"]*)", line (\d+)(?: inlined at "([^"]*)", line (\d+))?')
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_SECTION = re.compile(r"^\s*\.section\s+\.text\.([\w$]+)")
_RES_FUNCTION = re.compile(r"^\s*Function\s+([\w$]+):")
_RES_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")

TOOL_TIMEOUT_S = 60


@dataclass(frozen=True)
class SassInstruction:
    text: str                 # e.g. "HGMMA.64x64x16.F16 R24, gdesc[UR4], RZ, !UPT, gsb0"
    function: str
    rows: tuple[int, ...]     # user rows, innermost first


@lru_cache(maxsize=None)
def find_tool(name: str) -> str | None:
    """`nvdisasm` / `cuobjdump`: Triton's copy first (it matches Triton's ptxas),
    then a CUDA toolkit on PATH.  Found without importing triton."""
    from importlib.util import find_spec

    spec = find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidate = os.path.join(base, "backends", "nvidia", "bin", name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return shutil.which(name)


def _run(tool: str, args: list[str], cubin: bytes) -> str | None:
    path = find_tool(tool)
    if path is None:
        return None
    fd, name = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(cubin)
        done = subprocess.run([path, *args, name], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        return done.stdout if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        os.unlink(name)


def disassemble(cubin: bytes) -> str | None:
    """SASS text with line information, or None when no disassembler works."""
    return _run("nvdisasm", ["-c", "-gi"], cubin)


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage`: function → {"REG": 64, "STACK": 0, "SHARED": 0, "LOCAL": 0, ...}."""
    text = _run("cuobjdump", ["-res-usage"], cubin) or ""
    usage: dict[str, dict[str, int]] = {}
    function = None
    for line in text.splitlines():
        match = _RES_FUNCTION.match(line)
        if match:
            function = match.group(1)
            continue
        if function is not None and "REG:" in line:
            usage[function] = {k: int(v) for k, v in _RES_FIELD.findall(line)}
            function = None
    return usage


def compact(sass: str, is_user_file: Callable[[str], bool]) -> str:
    """Keep what the scanners and the evidence need: one `function<TAB>rows<TAB>instruction`
    line per instruction (rows comma-separated, innermost first).  A tenth of the size."""
    out: list[str] = []
    function = ""
    rows: tuple[int, ...] = ()
    for line in sass.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            out.append(f"{function}\t{','.join(map(str, rows))}\t{match.group(1)}")
            continue
        match = _LINE_INFO.match(line)
        if match:
            found = []
            if is_user_file(match.group(1)):
                found.append(int(match.group(2)))
            if match.group(3) and is_user_file(match.group(3)) and int(match.group(4)) not in found:
                found.append(int(match.group(4)))
            rows = tuple(r for r in found if r > 0)
            continue
        match = _SECTION.match(line)
        if match:
            function, rows = match.group(1), ()
    return "\n".join(out)


def parse_compact(text: str) -> list[SassInstruction]:
    instructions = []
    for line in text.splitlines():
        function, rows, instruction = line.split("\t", 2)
        instructions.append(SassInstruction(instruction, function, tuple(int(r) for r in rows.split(",") if r)))
    return instructions
