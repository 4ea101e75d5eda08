"""PRC001 in CUDA C++: fp32 data narrowed to half before it is computed with, TF32 tensor cores and switches."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.facts import expr_taint
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.types import LOW_PRECISION, normalize, type_of
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.prc001_precision_downgrade import PrecisionDowngrade

NARROWING = {"__float2half", "__float2half_rn", "__float2half_rz", "__float2half_rd", "__float2half_ru",
             "__float2bfloat16", "__float2bfloat16_rn", "__float2bfloat16_rz", "__floats2half2_rn",
             "__float22half2_rn", "__float2half2_rn", "__floats2bfloat162_rn", "__float22bfloat162_rn",
             "__double2half", "__double2bfloat16"}
HALF_DTYPES = re.compile(r"\b(?:k(?:Half|Float16|BFloat16)|ScalarType::(?:Half|BFloat16))\b")
TF32_MODES = re.compile(r"\b(CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_TF32|CUBLAS_COMPUTE_32F_FAST_16F|"
                        r"CUBLAS_COMPUTE_32F_FAST_16BF|CUBLASLT_[A-Z_]*TF32\w*)\b")
CASTS = {"static_cast", "__half", "__nv_bfloat16"}
HOST_CONVERSIONS = {"half", "bfloat16", "to", "toType", "type", "reinterpret_cast"}
TF32_CALLS = {"setAllowTF32CuBLAS", "setAllowTF32CuDNN", "setFloat32MatmulPrecision", "__float_to_tf32"}
TF32_MODES_BYTES = re.compile(TF32_MODES.pattern.encode())
_PTX_TF32 = re.compile(r"\b(?:w?mma)(?:\.[a-z0-9_]+)*\.tf32\b")


class PrecisionDowngradeCuda(CudaRule, clause=PrecisionDowngrade):
    docs = """
    In device code, flags fp32 data narrowed to half or bfloat16 before it is
    computed with (`__float2half(x[i])`, `(__half)v`, `static_cast<__nv_bfloat16>(v)`
    feeding arithmetic; narrowing only to store a half output is not flagged).
    In host code, flags tensors converted to half (`x.to(torch::kHalf)`,
    `x.half()`, `x.to(at::kBFloat16)`) and fp32 storage reinterpreted as half
    (`reinterpret_cast<__half*>(x.data_ptr<float>())`). Flags TF32 tensor-core
    math: `wmma::precision::tf32` fragments, `__float_to_tf32`, PTX `mma ... .tf32`,
    `setAllowTF32CuBLAS(true)`, `CUBLAS_TF32_TENSOR_OP_MATH`,
    `CUBLAS_COMPUTE_32F_FAST_TF32`.

    ```cuda
    __half a = __float2half(x[i]);  y[i] = __half2float(__hmul(a, a));   // flagged
    float a = x[i];  y[i] = a * a;                                        // instead
    ```
    """
    VALID = [source("""
        #include <cuda_fp16.h>
        __global__ void square(const float* x, __half* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __float2half(x[i] * x[i]);
        }
        """)]
    INVALID = [source("""
        #include <cuda_fp16.h>
        __global__ void square(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) {
                __half a = __float2half(x[i]);
                y[i] = __half2float(__hmul(a, a));
            }
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*NARROWING, *CASTS, *HOST_CONVERSIONS, *TF32_CALLS):
            function = call.function
            if function is None:
                continue
            if function.is_device and call.name in NARROWING and call.args:
                report = self._narrowing(cuda, call.node, call.args[0], function, call.name)
                if report is not None:
                    yield report
            elif function.is_device and call.name in CASTS and \
                    call.args and (call.template_args or call.name != "static_cast"):
                target = normalize(call.template_args[0]) if call.template_args else normalize(call.name)
                if target in LOW_PRECISION:
                    report = self._narrowing(cuda, call.node, call.args[0], function, cuda.text(call.node, 30))
                    if report is not None:
                        yield report
            elif call.method in ("half", "bfloat16") and not call.args or \
                    call.method in ("to", "toType", "type") and any(HALF_DTYPES.search(cuda.text(a)) for a in call.args):
                text = cuda.text(call.node, 60)
                yield self.report_at(cuda, call.node, f"`{text}` converts the tensor to 16-bit floats on the host: "
                                                      f"an fp32 input loses 13 bits of mantissa before the kernel "
                                                      f"runs; keep fp32 (`data_ptr<float>()`)",
                                     kernel=kernel_name(cuda, function), expression=text)
            elif call.name in ("reinterpret_cast",) and call.template_args and call.args and \
                    normalize(call.template_args[0].replace("*", "")) in LOW_PRECISION and \
                    "data_ptr<float>" in cuda.text(call.args[0]).replace(" ", ""):
                text = cuda.text(call.node, 60)
                yield self.report_at(cuda, call.node, f"`{text}` reads fp32 storage as 16-bit floats: every "
                                                      f"value is garbage; convert with `.to(torch::kHalf)` or keep "
                                                      f"`float`", kernel=kernel_name(cuda, function), expression=text)
            elif call.method in ("setAllowTF32CuBLAS", "setAllowTF32CuDNN") and call.args and \
                    cuda.text(call.args[0]) == "true" or call.method == "setFloat32MatmulPrecision" and call.args \
                    and re.search(r"high|medium|High|Medium", cuda.text(call.args[0])):
                yield self._tf32(cuda, call.node, function)
            elif call.name in ("__float_to_tf32", "wmma::__float_to_tf32", "nvcuda::wmma::__float_to_tf32"):
                yield self._tf32(cuda, call.node, function)
        for node in cuda.find_words(["tf32"], "declaration"):
            if "precision::tf32" in cuda.text(node.child_by_field_name("type")):
                yield self._tf32(cuda, node, cuda.function_of(node))
        modes = {m.decode() for m in TF32_MODES_BYTES.findall(cuda.source)} if b"FAST_" in cuda.source or \
            b"TF32" in cuda.source else set()
        for node in cuda.find_words(modes, "call_expression"):
            arguments = node.child_by_field_name("arguments")
            if arguments is not None and TF32_MODES.search(cuda.text(arguments)):
                yield self._tf32(cuda, node, cuda.function_of(node))
        for node in cuda.find_words(["tf32"], "gnu_asm_expression"):
            if _PTX_TF32.search(cuda.text(node)):
                yield self._tf32(cuda, node, cuda.function_of(node))

    def _narrowing(self, cuda: CudaModule, node: ts.Node, argument: ts.Node, function: CudaFunction,
                   what: str) -> Report | None:
        if type_of(cuda, argument, function).base not in ("float", "double"):
            return None
        if "data" not in expr_taint(cuda, argument, function) and "param" not in expr_taint(cuda, argument, function):
            return None  # a constant (`__float2half(0.0f)`) loses nothing
        if _only_stored(cuda, node):
            return None
        text = cuda.text(node, 60)
        bf16 = "bfloat16" in what or "bf16" in what
        loss = "8 bits of mantissa, ~2 significant digits" if bf16 else "11 bits of mantissa, max 65504"
        return self.report_at(
            cuda, node,
            f"`{text}` narrows fp32 data to {'bfloat16' if bf16 else 'half'} ({loss}) before computing with it; "
            f"compute in `float` and convert only the value you store, or keep the output fp32",
            kernel=kernel_name(cuda, function), expression=text, conversion=what)

    def _tf32(self, cuda: CudaModule, node: ts.Node, function: CudaFunction | None) -> Report:
        text = cuda.text(node, 70)
        return self.report_at(cuda, node, f"`{text}` runs fp32 matrix math in TF32 (10-bit mantissa, ~1e-3 "
                                          f"relative error) against an IEEE fp32 reference; use fp32 fragments/"
                                          f"`CUBLAS_DEFAULT_MATH`, or keep TF32 off",
                              kernel=kernel_name(cuda, function), expression=text)


def _only_stored(cuda: CudaModule, node: ts.Node) -> bool:
    """`y[i] = __float2half(v)` or `return __float2half(v)`: the narrowing is the output's dtype."""
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    if parent is None:
        return False
    if parent.type == "return_statement":
        return True
    if parent.type == "assignment_expression" and cuda.text(parent.child_by_field_name("operator")) == "=":
        left = parent.child_by_field_name("left")
        return left is not None and left.type in ("subscript_expression", "pointer_expression", "field_expression")
    return False
