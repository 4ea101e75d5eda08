"""PTX read back to source lines.

PTX carries its own debug lines: `.file 1 "/path/kernel.py"` names a file and
`.loc 1 24 26` says that the instructions after it come from line 24, column
26 of file 1.  Inlined code adds `, function_name $L__info_string0, inlined_at
1 24 26`: the location is inside a callee (a jit helper, Triton's
`standard.py`, a CUDA header) that was inlined at that call site.  Following
`inlined_at` up to the user's file gives every user line an instruction stands
for, innermost (the helper's line) first.

Triton emits these lines by default; nvcc emits them with `-lineinfo`.
Line 0 means "no single line" (LLVM merged instructions from several lines):
such instructions keep no row.  Inside an inline-asm block (Triton writes its
loads, atomics and matrix instructions as inline asm) LLVM numbers each line
of the asm string from the call's line; only the block's first `.loc` is real.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_LOC = re.compile(
    r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)"
    r"(?:\s*,\s*function_name\s+\S+\s*,\s*inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)?\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
_THREADS = re.compile(r"^\s*\.(reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_OPCODE = re.compile(r"^(?:@!?%\w+\s+)?([a-z][\w.:]*)")

Location = tuple[int, int, int]  # (file id, line, column)


@dataclass(frozen=True)
class PtxInstruction:
    line: int                  # 1-based line in the PTX text
    text: str                  # the instruction without its `;` and comments
    opcode: str                # e.g. "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16"
    function: str              # the .entry / .func it belongs to
    rows: tuple[int, ...]      # rows of the user's file, innermost first; () when unknown
    column: int = 0            # column of the innermost user row (1-based; 0 unknown)

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass
class PtxFunction:
    name: str
    is_entry: bool = True         # a kernel (.entry), not a device function (.func)
    threads: int | None = None    # product of .reqntid / .maxntid, when declared


@dataclass
class Ptx:
    instructions: list[PtxInstruction]
    functions: dict[str, PtxFunction]
    files: dict[int, str]


def parse_ptx(text: str, is_user_file: Callable[[str], bool]) -> Ptx:
    """Every instruction of `text` with the user rows it came from.
    `is_user_file(path)` says which `.file` paths are the user's source."""
    # LLVM and nvcc write the `.file` table at the end: read it first.
    files = {int(m.group(1)): m.group(2) for m in map(_FILE.match, text.splitlines()) if m}
    user_ids = {number for number, path in files.items() if is_user_file(path)}
    parent: dict[Location, Location] = {}  # inlined location → its call site, as last seen
    functions: dict[str, PtxFunction] = {}
    instructions: list[PtxInstruction] = []
    current: Location | None = None
    function = ""
    rows: tuple[int, ...] = ()
    column = 0

    def chain(location: Location) -> tuple[tuple[int, ...], int]:
        found: list[int] = []
        first_column = 0
        seen: set[Location] = set()
        here: Location | None = location
        while here is not None and here not in seen:
            seen.add(here)
            if here[0] in user_ids and here[1] > 0:
                if not found:
                    first_column = here[2]
                if here[1] not in found:
                    found.append(here[1])
            here = parent.get(here)
        return tuple(found), first_column

    in_asm = asm_located = False
    for number, raw in enumerate(text.splitlines(), start=1):
        if "//" in raw:
            comment = raw.split("//", 1)[1]
            if "begin inline asm" in comment:
                in_asm, asm_located = True, False
            elif "end inline asm" in comment:
                in_asm = False
            line = raw.split("//", 1)[0].strip()
        else:
            line = raw.strip()
        if not line:
            continue
        if line.startswith("."):
            match = _LOC.match(line)
            if match:
                # Inside an inline-asm block LLVM writes one `.loc` per line of the asm
                # string, counting up from the call's line: only the first is real.
                if in_asm and asm_located:
                    continue
                asm_located = in_asm
                current = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
                if match.group(4):
                    parent[current] = (int(match.group(4)), int(match.group(5)), int(match.group(6)))
                rows, column = chain(current)
                continue
            match = _ENTRY.match(line)
            if match:
                function = match.group(2)
                functions.setdefault(function, PtxFunction(function, match.group(1) == "entry"))
                rows, column = (), 0
                continue
            match = _THREADS.match(line)
            if match and function:
                dims = [int(g) for g in match.groups()[1:] if g]
                total = 1
                for d in dims:
                    total *= d
                functions[function].threads = total
            continue
        if line[0] in "{}$%" or line.endswith(":"):
            continue
        for piece in line.split(";"):
            piece = piece.strip().strip("{}").strip()
            match = _OPCODE.match(piece)
            if match is None:
                continue
            instructions.append(PtxInstruction(number, piece, match.group(1), function, rows, column))
    return Ptx(instructions, functions, files)
