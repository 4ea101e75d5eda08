"""EXC002 in CUDA C++: flush-to-zero build flags, the fast intrinsics that flush
under them (and those that flush anyway), and `.ftz` PTX on fp32."""

from __future__ import annotations

import re
from typing import Iterator

from kanalyze.analyzer.cuda.exp_minus_one import exp_minus_ones
from kanalyze.analyzer.cuda.lower_bounds import at_least_one
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.exc002_subnormal_flush import SubnormalFlush

# What each intrinsic flushes.  Measured on an H200 (sm_90, CUDA 13), built with and
# without `-ftz=true`: without it `__expf(-88)` is the subnormal 6.05e-39 like `expf`,
# `__logf(1e-39)` is -89.8, `__powf(1e-20, 2)` and `__fdividef(1e-30, 1e10)` are
# subnormal; with it all four give 0 or -inf.  `__sinf(1e-39)` and `__tanf(1e-39)`
# are 0 either way, and `__fdividef(1, 1e38)` is 0 either way (the divisor is above 2^126).
FLUSH_UNDER_FTZ = {
    "__expf": "returns 0 where the result is subnormal (an argument below about -87.3)",
    "__exp10f": "returns 0 where the result is subnormal (an argument below about -37.9)",
    "__logf": "reads a subnormal argument as 0 and returns -inf",
    "__log2f": "reads a subnormal argument as 0 and returns -inf",
    "__log10f": "reads a subnormal argument as 0 and returns -inf",
    "__powf": "flushes subnormal arguments and results to zero",
}
FLUSH_ALWAYS = {"__sinf", "__tanf", "__sincosf"}
INTRINSICS = set(FLUSH_UNDER_FTZ) | FLUSH_ALWAYS | {"__fdividef"}
LOGS = {"__logf", "__log2f", "__log10f"}
FAST_MATH = {"--use_fast_math", "-use_fast_math"}
DEVICE_FLAGS = ("extra_cuda_cflags", "options")  # what reaches nvcc / NVRTC (`extra_cflags` goes to the host compiler)
_FTZ = re.compile(r"^--?ftz(?:=(true|false))?$")
_PTX_FTZ = re.compile(r"\b[a-z][a-z0-9]*(?:\.[a-z0-9]+)*\.ftz(?:\.[a-z0-9]+)*\.f32\b")
_UNKNOWN = "if the unit is built with `-ftz=true` or `--use_fast_math` (its build flags are not known here)"


def ftz_flag(values: list[str]) -> str | None:
    """The flag that turns flush-to-zero on for device code, or None when it stays off
    (nvcc and NVRTC: `--use_fast_math` implies `-ftz=true`; an explicit `-ftz=...`
    wins whatever its position, the last one if several)."""
    fast: str | None = None
    explicit: str | None = None   # the flag that set it on, "" when set off
    for i, value in enumerate(values):
        if value in FAST_MATH and fast is None:
            fast = value
        match = _FTZ.match(value)
        if match:
            setting = match.group(1) or (values[i + 1] if i + 1 < len(values) else "")
            if setting == "true":
                explicit = value if match.group(1) else f"{value} {setting}"
            elif setting == "false":
                explicit = ""
    if explicit is not None:
        return explicit or None
    return fast


class SubnormalFlushCuda(CudaRule, clause=SubnormalFlush):
    docs = """
    Flags `--use_fast_math` / `-use_fast_math` (which implies `-ftz=true`) and
    `-ftz=true` in `extra_cuda_cflags` or cupy `options`, unless a `-ftz=false`
    overrides them; inline PTX with `.ftz` on `.f32` arithmetic; and the fast
    intrinsics by what they flush:
      - `__sinf`, `__tanf`, `__sincosf` return 0 for a subnormal argument with
        or without `-ftz`; `__fdividef(x, y)` returns 0 for |y| above 2^126;
      - `__expf`, `__exp10f`, `__logf`, `__log2f`, `__log10f`, `__powf` (and
        `__fdividef` on subnormals) flush only under flush-to-zero: they are
        flagged when the build turns it on, and said to flush *if* it is on
        where the flags are not known (a `.cu` file, flags that are not
        constant); a `load_inline` built without it keeps their subnormals
        (they are still less accurate than `expf`: not this clause).
    And `expf(x) - 1` where it stands for `expm1f(x)` (an ELU's negative branch
    under a test of x against 0, `fminf(0, ...)`, a tanh's `(e - 1) / (e + 1)`):
    0 for every |x| below 2^-24, where torch's ELU, SELU, CELU and tanh keep x.
    A log whose argument is provably at least 1 (`__logf(1.0f + __expf(x))`, a
    sum of exponentials holding exp(max - max) = 1, also softmax's normaliser
    combined across a block or a warp through shared memory and shuffles, with
    the maximum taken over the same loop) never sees a subnormal and is not
    flagged; nor is `__cosf` (cos of a subnormal is 1 either way).

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
        """), source("""
        __global__ void softplus(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __logf(1.0f + expf(x[i]));
        }
        """)]
    INVALID = [source("""
        __global__ void act(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __fdividef(__expf(x[i]), 1.0f + __expf(x[i]));
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        known, flag = _build_ftz(cuda)
        for call in cuda.calls_named(*INTRINSICS):
            function = call.function
            if function is None or not function.is_device:
                continue
            if call.name in FLUSH_UNDER_FTZ and known and flag is None:
                continue  # built without flush-to-zero: subnormals kept
            if call.name in LOGS and call.args and at_least_one(cuda, function, call.args[0]):
                continue  # an argument >= 1 is never subnormal, and neither is its log
            text = cuda.text(call.node, 60)
            yield self.report_at(cuda, call.node, _message(call.name, text, known, flag),
                                 kernel=kernel_name(cuda, function), expression=text, intrinsic=call.name,
                                 ftz=flag if known else "unknown")
        for found in exp_minus_ones(cuda):
            text, argument = cuda.text(found.node, 60), cuda.text(found.call.args[0], 40)
            fix = f"{'-' if found.negated else ''}expm1f({argument})"
            yield self.report_at(cuda, found.node,
                                 f"`{text}` is 0 wherever |{argument}| is below about 2^-24 (its exponential rounds "
                                 f"to 1), so tiny and subnormal inputs come back as 0 where torch (expm1, ELU, SELU, "
                                 f"CELU, tanh) keeps them; use `{fix}`",
                                 kernel=kernel_name(cuda, found.call.function), expression=text,
                                 pattern="exp-minus-one")
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
            device = [flag for flag in ext.flags if flag.keyword in DEVICE_FLAGS]
            if ftz_flag([flag.value for flag in device]) is None:
                continue  # no flush-to-zero, or a `-ftz=false` that overrides fast math
            for flag in device:
                if flag.value in FAST_MATH:
                    why = "implies `-ftz=true`: nvcc flushes fp32 subnormals to zero in every kernel"
                elif _FTZ.match(flag.value) and "false" not in flag.value:
                    why = "flushes fp32 subnormal inputs and results to zero in every kernel"
                else:
                    continue
                yield self.report(flag.node, f"`{flag.value}` in `{flag.keyword}` {why}, where the reference keeps "
                                             f"them; drop the flag", flag=flag.value, keyword=flag.keyword)


def _build_ftz(cuda: CudaModule) -> tuple[bool, str | None]:
    """(are the unit's device build flags known, the flag turning flush-to-zero on)."""
    ext = cuda.unit.extension
    if ext is None or not ext.flags_folded:
        return False, None
    return True, ftz_flag([flag.value for flag in ext.flags if flag.keyword in DEVICE_FLAGS])


def _message(name: str, text: str, known: bool, flag: str | None) -> str:
    accurate = name[2:]
    if name in FLUSH_ALWAYS:
        return (f"`{text}` returns 0 for a subnormal argument (with or without `-ftz`), where `{accurate}` in "
                f"the fp32 reference returns the argument; use `{accurate}`")
    under = f"under the build's `{flag}` (flush-to-zero)" if known else _UNKNOWN
    fix = f"drop `{flag}` and use `{accurate}`" if known else f"use `{accurate}` and build without flush-to-zero"
    if name == "__fdividef":
        flush = f", and flushes subnormal arguments and results to zero {under}" if flag or not known else ""
        return (f"`{text}` returns 0 when the divisor's magnitude is above 2^126 (`__fdividef(1, 1e38)` is 0, "
                f"`1 / 1e38` the subnormal 1e-38){flush}, where IEEE division returns the quotient; use `x / y`")
    return f"`{text}` {FLUSH_UNDER_FTZ[name]} {under}, where the fp32 reference keeps subnormals; {fix}"
