"""ORD001 in CUDA C++: float atomics and PTX `red`/`atom` adds whose result depends on thread order."""

from __future__ import annotations

import re
from typing import Iterator

from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.types import FLOATS, possible_bases, type_of
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.ord001_float_atomic_order import FloatAtomicOrder

ATOMIC_ADDS = {"atomicAdd", "atomicAdd_block", "atomicAdd_system", "unsafeAtomicAdd", "atomicSub"}
FLOAT_TARGETS = FLOATS | {"float2", "float4"}
_PTX_ADD = re.compile(r"\b(?:red|atom)((?:\.[a-z0-9_]+)+)")
_PTX_FLOAT = {"f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "v2.f32", "v4.f32"}


class FloatAtomicOrderCuda(CudaRule, clause=FloatAtomicOrder):
    docs = """
    Flags `atomicAdd`, `atomicAdd_block`, `atomicAdd_system` and `unsafeAtomicAdd`
    whose target is `float`, `double`, `__half`, `__half2`, `__nv_bfloat16` (or a
    template parameter or `scalar_t` instantiated with one), and PTX `red`/`atom`
    adds on `.f16`, `.bf16`, `.f32`, `.f64` in inline `asm`. Integer atomics
    (counters, tickets) and `atomicMax`/`atomicCAS` are order-independent and
    not flagged.

    ```cuda
    atomicAdd(out, block_sum);                 // flagged: float partial sums
    partials[blockIdx.x] = block_sum;          // instead: reduce partials in a fixed order
    ```
    """
    VALID = [source("""
        __global__ void count_positive(const float* x, int* count, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n && x[i] > 0.0f) atomicAdd(count, 1);
        }
        """)]
    INVALID = [source("""
        __global__ void total(const float* x, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) atomicAdd(out, x[i]);
        }
        """), source("""
        __global__ void total(const float* x, float* out) {
            asm volatile("red.global.add.f32 [%0], %1;" :: "l"(out), "f"(x[threadIdx.x]));
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*ATOMIC_ADDS):
            if not call.args or call.function is None:
                continue
            function = call.function
            target = type_of(cuda, call.args[0], function)
            bases = possible_bases(cuda, target.element, function) if target.pointers else set()
            if not bases or bases == {"?"}:
                value = type_of(cuda, call.args[1], function) if len(call.args) > 1 else None
                bases = possible_bases(cuda, value, function) if value is not None else set()
            floats = sorted(bases & FLOAT_TARGETS)
            if not floats:
                continue
            text = cuda.text(call.node, 70)
            yield self.report_at(
                cuda, call.node,
                f"`{text}` adds {'/'.join(floats)} values in the order threads arrive, so the sum's rounding and its "
                f"bits change from run to run; write per-block partials and reduce them in a fixed order (a second "
                f"kernel or a tree reduction in one block)",
                kernel=kernel_name(cuda, function), expression=text, dtype=floats[0])
        for node in cuda.find_words(["red", "atom"], "gnu_asm_expression"):
            template = " ".join(cuda.text(c) for c in node.named_children if c.type in ("string_literal",
                                                                                        "concatenated_string"))
            for match in _PTX_ADD.finditer(template):
                parts = match.group(1).strip(".").split(".")
                dtype = next((p for p in parts if p in _PTX_FLOAT), None)
                if "add" not in parts or dtype is None:
                    continue
                instruction = match.group(0)
                yield self.report_at(
                    cuda, node,
                    f"inline PTX `{instruction}` is a float atomic add: the result depends on the order threads "
                    f"arrive and changes bits from run to run; reduce partials in a fixed order instead",
                    kernel=kernel_name(cuda, cuda.function_of(node)), expression=instruction, dtype=dtype)
                break
