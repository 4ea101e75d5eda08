"""Scanners: compiled code → facts for the clauses of the catalog, on source rows.

  - PRC002 low-precision accumulator: a `tt.dot` whose accumulator is fp16/bf16
    (Triton's TTIR; the PTX shows the matrix instruction it became, e.g.
    `wgmma.mma_async...m64n64k16.f16.f16.f16`), or an `mma`/`wgmma`/`wmma`
    instruction with an f16/bf16 destination (CUDA);
  - PRC001 TF32: a `tt.dot` on fp32 operands at input precision `tf32` that
    became a TF32 tensor-core instruction (`tf32x3` and `ieee` are fp32-exact
    enough and are not flagged), or a `.tf32` matrix instruction (CUDA);
  - ORD001 float atomics: `atom`/`red` adds on f16/bf16/f32/f64;
  - EXC002 subnormal flush: `.ftz` on plain fp32 arithmetic, or anywhere the
    source asked for fast math (a `fast_*`/`__expf`-style call on that row, or
    a CUDA unit built with `--use_fast_math`);
  - EXC001 approximate math: `.approx`/`.full` instructions where the source
    asked for fast math.
Triton lowers `tl.exp` to `ex2.approx.f32` and libdevice functions with
flush-to-zero as its normal code: on a row whose source calls a math
function, `.ftz` and `.approx` are the library's and are not flagged.

Scanners know no rules: they return `IRHit`s (a code, rows and the facts); the
pipeline turns them into findings and merges them with the source findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kanalyze.analyzer.ir.mlir import DTYPE_NAMES, Dot, parse_dots
from kanalyze.analyzer.ir.ptx import PtxInstruction, parse_ptx
from kanalyze.analyzer.ir.sass import SassInstruction, parse_compact

LOW_PRECISION = {"f16", "bf16"}
_FLOAT_TYPES = {"f16", "bf16", "f32", "f64", "f16x2", "bf16x2", "v2", "v4", "v8"}
_MMA = re.compile(r"^(w?gmma\.mma_async|mma\.sync|wmma\.mma\.sync|mma\.sp|tcgen05\.mma)")
_SHAPE = re.compile(r"^m\d+n\d+k\d+$")
_ARITHMETIC = {"add", "sub", "mul", "fma", "mad", "div", "neg", "abs", "min", "max", "rcp", "sqrt", "cvt", "setp",
               "testp", "copysign"}
_FAST_CALL = re.compile(r"\b(?:fast_\w+|__(?:expf|exp10f|logf|log2f|log10f|sinf|cosf|tanf|sincosf|powf|fdividef|"
                        r"fdiv_r\w|frcp_r\w|fsqrt_r\w|frsqrt_rn|saturatef|tanhf))\s*\(|approx\s*=\s*True")
_MATH_CALL = re.compile(
    r"\b(?:libdevice\.\w+|(?:tl|math|triton\.language)\.\w+|__\w+|(?:exp|exp2|exp10|expm1|log|log2|log10|log1p|"
    r"sqrt|rsqrt|cbrt|sin|cos|tan|sinh|cosh|tanh|asin|acos|atan|atan2|erf|erfc|erfinv|pow|sigmoid|softmax|gelu|"
    r"silu|hypot|lgamma|tgamma|fmod|remainder|norm\w*)f?)\s*\(")
_PLAIN_TRITON = re.compile(r"\b(?:tl|triton\.language)\.(?:load|store|arange|program_id|zeros|full|where|sum|max|min|"
                           r"maximum|minimum|dot|cast|cdiv|multiple_of|max_contiguous|num_programs|reshape|trans|"
                           r"broadcast_to|expand_dims|static_range|range|atomic_\w+|float\w*|int\w*|bfloat16)\b")

MAX_EVIDENCE = 4

# What to do about each kind of fact, for the finding's message.
FIXES = {
    "fp16-accumulator": "accumulate in fp32 (`out_dtype=tl.float32`, an fp32 accumulator) and cast once at the end",
    "tf32": 'pass `input_precision="ieee"` (or "tf32x3") to match an IEEE fp32 reference',
    "float-atomic": "reduce in a fixed order (per-block partial sums, then a second pass) instead of a float atomic",
    "ftz": "build without fast math / flush-to-zero, or state the flush in the kernel's contract",
    "approx": "use the IEEE functions (no `fast_*`, `__expf`-style intrinsics or `--use_fast_math`)",
}


@dataclass
class IRHit:
    """One fact of one compiled kernel, on a source row."""

    code: str
    kind: str                      # fp16-accumulator | tf32 | float-atomic | ftz | approx
    row: int                       # innermost user row
    column: int
    rows: tuple[int, ...]          # every user row it stands for (helper line, then call sites)
    instruction: str               # the telling instruction (PTX, or TTIR for a dot)
    detail: str                    # what it means, for the message
    ptx: list[str] = field(default_factory=list)   # "ptx:123: wgmma..." evidence lines
    sass: list[str] = field(default_factory=list)  # SASS instructions on the same row


def _dtype_tokens(opcode: str) -> list[str]:
    return [p for p in opcode.split(".") if p in ("f16", "bf16", "f32", "f64", "tf32", "s32", "s8", "u8", "e4m3", "e5m2")]


def mma_types(opcode: str) -> tuple[str | None, bool]:
    """(destination element type, uses TF32) of a matrix instruction."""
    parts = opcode.split(".")
    tf32 = "tf32" in parts or "kind::tf32" in opcode
    types = _dtype_tokens(opcode)
    if opcode.startswith("tcgen05.mma"):
        return None, tf32  # types live in the instruction descriptor
    if opcode.startswith("wmma.mma"):
        return (types[0] if types else None), tf32
    # mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 / wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16
    return (types[0] if types else None), tf32


def _source_line(lines: list[str], row: int) -> str:
    return lines[row - 1] if 0 < row <= len(lines) else ""


def _math_on_row(line: str) -> bool:
    code = line.split("#", 1)[0].split("//", 1)[0]
    return bool(_MATH_CALL.search(_PLAIN_TRITON.sub("", code)))


def _fast_on_row(line: str) -> bool:
    return bool(_FAST_CALL.search(line.split("#", 1)[0].split("//", 1)[0]))


class Scanner:
    """The facts of one compiled kernel (one configuration on one target)."""

    def __init__(self, record: dict, lines: list[str], *, fast_math: bool = False, function: str | None = None,
                 user_path: str | None = None) -> None:
        user = user_path or record["module"]
        is_user = lambda path: path == user  # noqa: E731
        self.lines = lines
        self.fast_math = fast_math
        self.function = function
        self.ptx = [i for i in parse_ptx(record.get("ptx", ""), is_user).instructions
                    if function is None or i.function == function]
        self.sass = [s for s in parse_compact(record.get("sass", "")) if function is None or s.function == function]
        self.dots = parse_dots(record.get("ttir", ""), is_user) if record.get("ttir") else []

    # --- evidence -------------------------------------------------------------

    def _ptx_at(self, rows: tuple[int, ...], want) -> list[PtxInstruction]:
        return [i for i in self.ptx if i.rows and i.rows[0] in rows[:1] and want(i)] or \
               [i for i in self.ptx if set(i.rows) & set(rows) and want(i)]

    def _sass_at(self, rows: tuple[int, ...], want=lambda s: True) -> list[str]:
        """SASS on the innermost row; else on any row of the chain (ptxas keeps
        no inlining information for some instructions)."""
        if not rows:
            return []
        found = [s.text for s in self.sass if s.rows and s.rows[0] == rows[0] and want(s)] or \
                [s.text for s in self.sass if set(s.rows) & set(rows) and want(s)]
        return [_clip(t) for t in _unique(found)][:MAX_EVIDENCE]

    @staticmethod
    def _ptx_lines(found: list[PtxInstruction]) -> list[str]:
        return _unique(f"ptx:{i.line}: {_clip(i.text)}" for i in found)[:MAX_EVIDENCE]

    def _hit(self, code, kind, rows, column, instruction, detail, ptx_found=(), sass_want=lambda s: True) -> IRHit:
        return IRHit(code, kind, rows[0], column, rows, instruction, detail,
                     self._ptx_lines(list(ptx_found)), self._sass_at(rows, sass_want))

    # --- scanners -------------------------------------------------------------

    def scan(self) -> list[IRHit]:
        hits = self.dot_hits() if self.dots else self.mma_hits()
        return hits + self.atomic_hits() + self.flush_hits()

    def dot_hits(self) -> list[IRHit]:
        """Triton: what each `tt.dot` accumulates in, and whether it became TF32."""
        hits = []
        mma = [i for i in self.ptx if _MMA.match(i.opcode)]
        tf32_mma = [i for i in mma if mma_types(i.opcode)[1]]
        for dot in self.dots:
            if not dot.rows:
                continue
            at_row = self._ptx_at(dot.rows, lambda i: _MMA.match(i.opcode) is not None) or mma
            sass_mma = lambda s: "MMA" in s.text or "GMMA" in s.text or "UTC" in s.text  # noqa: E731
            if dot.acc_type in LOW_PRECISION:
                name = DTYPE_NAMES[dot.acc_type]
                shown = at_row[0].opcode if at_row else _short_dot(dot)
                hits.append(self._hit("PRC002", "fp16-accumulator", dot.rows, dot.column, shown,
                                      f"the product accumulates in {name}", at_row, sass_mma))
            if dot.a_type == "f32" and dot.b_type == "f32" and dot.precision == "tf32" and tf32_mma:
                tf32_at_row = [i for i in at_row if mma_types(i.opcode)[1]] or tf32_mma
                hits.append(self._hit("PRC001", "tf32", dot.rows, dot.column, tf32_at_row[0].opcode,
                                      "fp32 operands are rounded to TF32 (10-bit mantissa)", tf32_at_row, sass_mma))
        return hits

    def mma_hits(self) -> list[IRHit]:
        """CUDA (or PTX without TTIR): matrix instructions with f16/bf16 destinations or TF32 inputs."""
        hits = []
        for rows, group in _by_rows(i for i in self.ptx if _MMA.match(i.opcode)):
            first = group[0]
            destination, tf32 = mma_types(first.opcode)
            if destination in LOW_PRECISION:
                hits.append(self._hit("PRC002", "fp16-accumulator", rows, first.column, first.opcode,
                                      f"the product accumulates in {DTYPE_NAMES[destination]}", group))
            if tf32:
                hits.append(self._hit("PRC001", "tf32", rows, first.column, first.opcode,
                                      "fp32 operands are rounded to TF32 (10-bit mantissa)", group))
        return hits

    def atomic_hits(self) -> list[IRHit]:
        hits = []
        atomics = [i for i in self.ptx if _is_float_atomic_add(i.opcode)]
        for rows, group in _by_rows(atomics):
            first = group[0]
            hits.append(self._hit("ORD001", "float-atomic", rows, first.column, first.opcode,
                                  "a floating-point atomic add: the order of the additions follows the "
                                  "scheduling of threads, so the rounding (and the result) changes from run to run",
                                  group, lambda s: s.text.startswith(("RED", "ATOM"))))
        return hits

    def flush_hits(self) -> list[IRHit]:
        hits = []
        flagged: list[PtxInstruction] = []
        approximate: list[PtxInstruction] = []
        for i in self.ptx:
            if not i.rows or "f32" not in i.parts:
                continue
            line = _source_line(self.lines, i.rows[0])
            asked = self.fast_math or _fast_on_row(line)
            if ".ftz" in i.opcode and (asked or (i.parts[0] in _ARITHMETIC and not _math_on_row(line))):
                flagged.append(i)
            if (".approx" in i.opcode or ".full" in i.opcode) and asked:
                approximate.append(i)
        why = "the build asked for fast math" if self.fast_math else "the source asked for fast math"
        for rows, group in _by_rows(flagged):
            first = group[0]
            hits.append(self._hit("EXC002", "ftz", rows, first.column, first.opcode,
                                  "flush-to-zero: subnormal inputs and results become 0"
                                  + (f" ({why})" if self.fast_math or _fast_on_row(_source_line(self.lines, rows[0])) else ""),
                                  group, lambda s: ".FTZ" in s.text))
        for rows, group in _by_rows(approximate):
            first = group[0]
            hits.append(self._hit("EXC001", "approx", rows, first.column, first.opcode,
                                  f"approximate math ({why}): overflow, underflow and special values "
                                  "differ from the IEEE functions of the reference", group,
                                  lambda s: s.text.startswith("MUFU")))
        return hits


def _is_float_atomic_add(opcode: str) -> bool:
    parts = opcode.split(".")
    if not (parts[0] in ("atom", "red") or opcode.startswith(("multimem.red", "cp.reduce.async"))):
        return False
    return "add" in parts and any(p in ("f16", "bf16", "f32", "f64", "f16x2", "bf16x2") for p in parts)


def _by_rows(instructions) -> list[tuple[tuple[int, ...], list[PtxInstruction]]]:
    groups: dict[int, list[PtxInstruction]] = {}
    for i in instructions:
        if i.rows:
            groups.setdefault(i.rows[0], []).append(i)
    return [(group[0].rows, group) for _, group in sorted(groups.items())]


def _short_dot(dot: Dot) -> str:
    return f"tt.dot {DTYPE_NAMES.get(dot.a_type, dot.a_type)} x {DTYPE_NAMES.get(dot.b_type, dot.b_type)} -> " \
           f"{DTYPE_NAMES.get(dot.acc_type, dot.acc_type)}"


def _clip(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unique(items) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


__all__ = ["IRHit", "Scanner", "SassInstruction", "mma_types"]
