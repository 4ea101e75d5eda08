"""Triton's TTIR read back to source lines: the `tt.dot` operations.

TTIR is Triton's IR after jit helpers are inlined and constexprs resolved,
before any lowering: each `tt.dot` shows the operand and accumulator element
types and the input precision the source asked for (or got by default), which
the matrix instruction alone does not always show (Blackwell's `tcgen05.mma`
keeps its types in a runtime descriptor).

    %acc = tt.dot %a, %b, %c, inputPrecision = tf32x3 : tensor<64x32xf32> * tensor<32x64xf32> -> tensor<64x64xf32> loc(#loc33)
    #loc33 = loc("acc"(#loc14))
    #loc14 = loc("/path/kernel.py":14:16)
    #loc40 = loc(callsite(#loc12 at #loc30))      (a line inside an inlined helper)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_LOC_DEF = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_FILE_LOC = re.compile(r'^"([^"]*)":(\d+):(\d+)')
_NAMED = re.compile(r'^"[^"]*"\((#loc\d*)\)$')
_CALLSITE = re.compile(r"^callsite\((#loc\d*)\s+at\s+(#loc\d*)\)$")
_FUSED = re.compile(r"^fused\[(.*)\]$")
_DOT = re.compile(
    r"\btt\.dot\s+(?P<operands>[^:]*?)(?:,\s*inputPrecision\s*=\s*(?P<precision>\w+))?"
    r"(?:,\s*maxNumImpreciseAcc\s*=\s*\d+)?\s*:\s*tensor<(?P<a>[^>]*)>\s*\*\s*tensor<(?P<b>[^>]*)>"
    r"\s*->\s*tensor<(?P<c>[^>]*)>\s*loc\((?P<loc>[^)]*)\)")
_INLINE_LOC = re.compile(r'^"([^"]*)":(\d+):(\d+)$')

# TTIR spells element types as MLIR does; the messages use Triton's names.
DTYPE_NAMES = {
    "f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "i8": "int8", "i32": "int32",
    "f8E4M3FN": "fp8e4nv", "f8E5M2": "fp8e5", "f8E4M3FNUZ": "fp8e4b8", "f8E5M2FNUZ": "fp8e5b16",
}


@dataclass(frozen=True)
class Dot:
    a_type: str          # element types, MLIR spelling: f16, bf16, f32, ...
    b_type: str
    acc_type: str
    precision: str       # tf32 (Triton's default for fp32 operands), tf32x3, ieee, ...
    rows: tuple[int, ...]
    column: int
    text: str            # the operation, shortened


def _element(tensor: str) -> str:
    return tensor.split(",")[0].rsplit("x", 1)[-1].strip()


class _Locations:
    def __init__(self, text: str, is_user_file: Callable[[str], bool]) -> None:
        self.defs: dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("#loc"):
                match = _LOC_DEF.match(line)
                if match:
                    self.defs[match.group(1)] = match.group(2).strip()
        self.is_user_file = is_user_file
        self.memo: dict[str, list[tuple[int, int]]] = {}

    def rows(self, ref: str, depth: int = 0) -> list[tuple[int, int]]:
        """(row, column) pairs in the user's file, innermost first."""
        if ref in self.memo:
            return self.memo[ref]
        found: list[tuple[int, int]] = []
        body = self.defs.get(ref, ref) if ref.startswith("#loc") else ref
        if depth < 32:
            match = _FILE_LOC.match(body)
            if match:
                if self.is_user_file(match.group(1)) and int(match.group(2)) > 0:
                    found = [(int(match.group(2)), int(match.group(3)))]
            elif (named := _NAMED.match(body)) is not None:
                found = self.rows(named.group(1), depth + 1)
            elif (call := _CALLSITE.match(body)) is not None:
                found = self.rows(call.group(1), depth + 1) + self.rows(call.group(2), depth + 1)
            elif (fused := _FUSED.match(body)) is not None:
                for part in fused.group(1).split(","):
                    found += self.rows(part.strip(), depth + 1)
        self.memo[ref] = found
        return found


def parse_dots(ttir: str, is_user_file: Callable[[str], bool]) -> list[Dot]:
    """Every `tt.dot` of a TTIR module with the user rows it came from."""
    locations = _Locations(ttir, is_user_file)
    dots: list[Dot] = []
    for line in ttir.splitlines():
        if "tt.dot " not in line:
            continue
        match = _DOT.search(line)
        if match is None:
            continue
        pairs = locations.rows(match.group("loc").strip())
        rows: list[int] = []
        for row, _ in pairs:
            if row not in rows:
                rows.append(row)
        text = line.strip()
        text = text[: text.rfind(" loc(")] if " loc(" in text else text
        dots.append(Dot(
            a_type=_element(match.group("a")), b_type=_element(match.group("b")),
            acc_type=_element(match.group("c")), precision=match.group("precision") or "tf32",
            rows=tuple(rows), column=pairs[0][1] if pairs else 0, text=text,
        ))
    return dots
