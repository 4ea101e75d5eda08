"""EXC002 in CUDA C++: fast-math and flush-to-zero flags, SFU intrinsics and `.ftz` PTX on fp32."""

from __future__ import annotations

import re
from typing import Iterator

from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.exc002_subnormal_flush import SubnormalFlush

INTRINSICS = {"__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__powf", "__fdividef", "__sinf", "__cosf",
              "__tanf", "__sincosf"}
FAST_MATH = {"--use_fast_math", "-use_fast_math"}
_FTZ_ON = re.compile(r"^--?ftz(?:=|\s*)true$")
_PTX_FTZ = re.compile(r"\b[a-z][a-z0-9]*(?:\.[a-z0-9]+)*\.ftz(?:\.[a-z0-9]+)*\.f32\b")


class SubnormalFlushCuda(CudaRule, clause=SubnormalFlush):
    docs = """
    Flags `--use_fast_math` / `-use_fast_math` (which implies `-ftz=true`) and
    `-ftz=true` in `extra_cuda_cflags`, `extra_cflags` or cupy `options`; the
    fast-math intrinsics `__expf`, `__logf`, `__powf`, `__fdividef`, `__sinf`,
    `__cosf`, `__tanf` and friends on fp32 values; and inline PTX with `.ftz`
    on `.f32` arithmetic. Each one flushes subnormal inputs or results to zero.

    ```python
    load_inline(..., extra_cuda_cflags=["-O3", "--use_fast_math"])   # flagged
    load_inline(..., extra_cuda_cflags=["-O3"])                      # instead
    ```
    """
    VALID = [source("""
        __global__ void act(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = expf(x[i]) / (1.0f + expf(x[i]));
        }
        """)]
    INVALID = [source("""
        __global__ void act(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __fdividef(__expf(x[i]), 1.0f + __expf(x[i]));
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*INTRINSICS):
            if call.function is not None and call.function.is_device:
                text = cuda.text(call.node, 60)
                accurate = call.name[2:].replace("fdividef", "x / y (IEEE division)")
                yield self.report_at(
                    cuda, call.node,
                    f"`{text}` is a fast-math intrinsic: it flushes subnormal inputs and results to zero and "
                    f"trades accuracy for speed, where the fp32 reference keeps them; use `{accurate}`",
                    kernel=kernel_name(cuda, call.function), expression=text, intrinsic=call.name)
        for node in cuda.find_words(["ftz"], "gnu_asm_expression"):
            template = " ".join(cuda.text(c) for c in node.named_children if c.type in ("string_literal",
                                                                                        "concatenated_string"))
            match = _PTX_FTZ.search(template)
            if match:
                yield self.report_at(
                    cuda, node,
                    f"inline PTX `{match.group(0)}` flushes fp32 subnormals to zero; drop `.ftz`",
                    kernel=kernel_name(cuda, cuda.function_of(node)), expression=match.group(0))

    host_reads_python = False  # check_host reads the build flags only

    def check_host(self, host: TritonModule, extensions: list[Extension]) -> Iterator[Report]:
        for ext in extensions:
            for flag in ext.flags:
                value = flag.value.split("=", 1)[-1] if flag.value.startswith("-Xcompiler") else flag.value
                if value in FAST_MATH:
                    why = "implies `-ftz=true`: nvcc flushes fp32 subnormals to zero in every kernel"
                elif _FTZ_ON.match(value):
                    why = "flushes fp32 subnormal inputs and results to zero in every kernel"
                else:
                    continue
                yield self.report(flag.node, f"`{flag.value}` in `{flag.keyword}` {why}, where the reference keeps "
                                             f"them; drop the flag", flag=flag.value, keyword=flag.keyword)
