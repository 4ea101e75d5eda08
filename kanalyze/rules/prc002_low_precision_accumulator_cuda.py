"""PRC002 in CUDA C++: sums kept in half or bfloat16 across a loop, half wmma accumulators, f16 PTX mma."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.facts import LOOPS
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.types import LOW_PRECISION, normalize, possible_bases, type_of
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.prc002_low_precision_accumulator import LowPrecisionAccumulator

ACCUMULATING = {"__hadd", "__hadd2", "__hfma", "__hfma2", "__hadd_sat", "__hfma_sat", "__hadd_rn", "__hsub",
                "__hsub2", "__hfma_relu"}
_MMA = re.compile(r"\b(w?mma)((?:\.[a-z0-9_]+)+)")
_PTX_TYPES = {"f16", "bf16", "f32", "f64", "tf32", "s32", "e4m3", "e5m2", "s8", "u8"}


class LowPrecisionAccumulatorCuda(CudaRule, clause=LowPrecisionAccumulator):
    docs = """
    Flags a `half`/`__half`/`__nv_bfloat16`/`half2` value (also a template
    parameter or `scalar_t` instantiated with one) that a loop accumulates
    into: `acc += ...`, `acc = __hadd(acc, ...)`, `acc = __hfma(a, b, acc)`,
    `acc = acc + ...`, including shared or global elements of such a type;
    `wmma::fragment<wmma::accumulator, M, N, K, half>`; and PTX `mma`/`wgmma`
    whose accumulator type is `.f16`/`.bf16`. Half loads summed into a `float`
    accumulator are the fix, not a finding.

    ```cuda
    __half acc = __float2half(0.f);
    for (int k = 0; k < K; ++k) acc = __hfma(a[k], b[k], acc);        // flagged
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += __half2float(a[k]) * __half2float(b[k]);  // instead
    ```
    """
    VALID = [source("""
        #include <cuda_fp16.h>
        __global__ void dot(const __half* a, const __half* b, float* out, int n) {
            float acc = 0.0f;
            for (int k = 0; k < n; ++k) acc += __half2float(a[k]) * __half2float(b[k]);
            out[0] = acc;
        }
        """)]
    INVALID = [source("""
        #include <cuda_fp16.h>
        __global__ void dot(const __half* a, const __half* b, __half* out, int n) {
            __half acc = __float2half(0.0f);
            for (int k = 0; k < n; ++k) acc = __hfma(a[k], b[k], acc);
            out[0] = acc;
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        lowered = cuda.source.lower()
        if b"half" not in lowered and b"bfloat16" not in lowered and b"mma" not in lowered:
            return  # no 16-bit float type anywhere: nothing can accumulate in one
        seen: set[tuple[int, str]] = set()
        assignments = [(f, n) for f in cuda.device_code() for n in cuda.nodes_in(f, "assignment_expression")]
        for function, node in assignments:
            target = _accumulated(cuda, node)
            if target is None:
                continue
            loop = _loop_around(node, function)
            if loop is None or not _declared_outside(cuda, target, loop, function):
                continue
            bases = possible_bases(cuda, type_of(cuda, target, function), function) & LOW_PRECISION
            name = cuda.text(target)
            if not bases or (function.node.id, name) in seen:
                continue
            seen.add((function.node.id, name))
            text = cuda.text(node, 60)
            dtype = sorted(bases)[0]
            yield self.report_at(
                cuda, node,
                f"`{text}` accumulates in {dtype} across the loop: each add rounds to {_bits(dtype)} bits of "
                f"mantissa, so long sums drift and stall; keep `{name}` in `float` (convert the inputs with "
                f"`__half2float`/`__bfloat162float`) and round once at the store",
                kernel=kernel_name(cuda, function), accumulator=name, dtype=dtype, expression=text)
        for node in cuda.find_words(["accumulator"], "declaration"):
            type_text = cuda.text(node.child_by_field_name("type"))
            if "fragment" not in type_text or "accumulator" not in type_text:
                continue
            last = type_text.rstrip(">").rsplit(",", 1)[-1]
            dtype = normalize(last.strip())
            if dtype in LOW_PRECISION:
                function = cuda.function_of(node)
                yield self.report_at(
                    cuda, node,
                    f"`{cuda.text(node, 70)}` keeps the tensor-core accumulator in {dtype}: every k-step rounds "
                    f"the partial sums to {_bits(dtype)} bits; declare the accumulator fragment `float`",
                    kernel=kernel_name(cuda, function), dtype=dtype, expression=cuda.text(node, 70))
        for node in cuda.find_words(["mma", "wgmma"], "gnu_asm_expression"):
            template = " ".join(cuda.text(c) for c in node.named_children if c.type in ("string_literal",
                                                                                        "concatenated_string"))
            for match in _MMA.finditer(template):
                types = [p for p in match.group(2).split(".") if p in _PTX_TYPES]
                if types and types[0] in ("f16", "bf16"):
                    yield self.report_at(
                        cuda, node,
                        f"inline PTX `{match.group(0)}` accumulates in .{types[0]}: the first type is the "
                        f"accumulator's; use an .f32 accumulator (`...f32.f16.f16.f32`)",
                        kernel=kernel_name(cuda, cuda.function_of(node)), dtype=types[0],
                        expression=match.group(0))
                    break


def _bits(dtype: str) -> int:
    return 7 if dtype.startswith("bfloat16") else 10


def _accumulated(cuda: CudaModule, node: ts.Node) -> ts.Node | None:
    """The target of `t += e`, `t = __hadd(t, e)`, `t = __hfma(a, b, t)`, `t = t + e`."""
    left = node.child_by_field_name("left")
    right = node.child_by_field_name("right")
    operator = cuda.text(node.child_by_field_name("operator"))
    if left is None or right is None:
        return None
    if operator in ("+=", "-="):
        return left
    if operator != "=":
        return None
    name = cuda.text(left)
    if right.type == "call_expression" and cuda.text(right.child_by_field_name("function")) in ACCUMULATING:
        arguments = right.child_by_field_name("arguments")
        if arguments is not None and any(cuda.text(a) == name for a in arguments.named_children):
            return left
    if right.type == "binary_expression" and cuda.text(right.child_by_field_name("operator")) in ("+", "-"):
        if name in (cuda.text(right.child_by_field_name("left")), cuda.text(right.child_by_field_name("right"))):
            return left
    return None


def _loop_around(node: ts.Node, function: CudaFunction) -> ts.Node | None:
    current = node.parent
    while current is not None and current.id != function.node.id:
        if current.type in LOOPS:
            return current
        current = current.parent
    return None


def _declared_outside(cuda: CudaModule, target: ts.Node, loop: ts.Node, function: CudaFunction) -> bool:
    """A scalar declared before the loop, or a memory element (shared or global)."""
    if target.type != "identifier":
        return True
    variable = cuda.variable(cuda.text(target), function)
    return variable is None or not (loop.start_byte <= variable.node.start_byte < loop.end_byte)
