"""A generated corpus of CUDA sources for bench_cuda.py.

KernelBench-style solutions, the shape LLM-written CUDA takes: one kernel family
per file (elementwise ops, grid-stride binaries, row reductions with warp
shuffles, softmax, tiled matmul, layernorm), float inputs, a host function that
allocates, launches and returns; 60% as load_inline Python files, 40% as `.cu`
files with their host code; random names, block sizes and ops.  A share of the
files are copies of fixtures/cuda/, which are dense with findings.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KERNELS = {
    "elementwise": """
__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, int size) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {{
        float v = x[idx];
        y[idx] = {expr};
    }}
}}

torch::Tensor {name}_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int size = x.numel();
    const int block_size = {block};
    const int num_blocks = (size + block_size - 1) / block_size;
    {name}_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), y.data_ptr<float>(), size);
    return y;
}}
""",
    "binary": """
__global__ void {name}_kernel(const float* a, const float* b, float* out, int size, float alpha) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = idx; i < size; i += blockDim.x * gridDim.x) {{
        out[i] = alpha * a[i] + b[i] * {const}f;
    }}
}}

torch::Tensor {name}_cuda(torch::Tensor a, torch::Tensor b, double alpha) {{
    auto out = torch::empty_like(a);
    int size = a.numel();
    int threads = {block};
    int blocks = std::min((size + threads - 1) / threads, 4096);
    {name}_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size,
                                       (float)alpha);
    return out;
}}
""",
    "row_mean": """
__device__ float warp_reduce_sum_{name}(float val) {{
    for (int offset = 16; offset > 0; offset /= 2) val += __shfl_down_sync(0xffffffff, val, offset);
    return val;
}}

__global__ void {name}_kernel(const float* x, float* out, int rows, int cols) {{
    extern __shared__ float shared[];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int j = tid; j < cols; j += blockDim.x) sum += x[row * cols + j];
    sum = warp_reduce_sum_{name}(sum);
    if ((tid & 31) == 0) shared[tid / 32] = sum;
    __syncthreads();
    if (tid < 32) {{
        sum = tid < (blockDim.x + 31) / 32 ? shared[tid] : 0.0f;
        sum = warp_reduce_sum_{name}(sum);
        if (tid == 0) out[row] = sum / cols;
    }}
}}

torch::Tensor {name}_cuda(torch::Tensor x) {{
    int rows = x.size(0);
    int cols = x.size(1);
    auto out = torch::empty({{rows}}, x.options());
    int threads = {block};
    {name}_kernel<<<rows, threads, (threads / 32) * sizeof(float)>>>(x.data_ptr<float>(), out.data_ptr<float>(),
                                                                       rows, cols);
    return out;
}}
""",
    "softmax": """
__global__ void {name}_kernel(const float* input, float* output, int batch, int dim) {{
    __shared__ float buffer[{block}];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    const float* in_row = input + row * dim;
    float* out_row = output + row * dim;
    float max_val = -INFINITY;
    for (int i = tid; i < dim; i += blockDim.x) max_val = fmaxf(max_val, in_row[i]);
    buffer[tid] = max_val;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (tid < s) buffer[tid] = fmaxf(buffer[tid], buffer[tid + s]);
        __syncthreads();
    }}
    max_val = buffer[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = tid; i < dim; i += blockDim.x) {{
        float e = expf(in_row[i] - max_val);
        out_row[i] = e;
        sum += e;
    }}
    buffer[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (tid < s) buffer[tid] += buffer[tid + s];
        __syncthreads();
    }}
    sum = buffer[0];
    for (int i = tid; i < dim; i += blockDim.x) out_row[i] /= sum;
}}

torch::Tensor {name}_cuda(torch::Tensor input) {{
    int batch = input.size(0);
    int dim = input.size(1);
    auto output = torch::empty_like(input);
    {name}_kernel<<<batch, {block}>>>(input.data_ptr<float>(), output.data_ptr<float>(), batch, dim);
    return output;
}}
""",
    "matmul": """
#define TILE_{upper} {tile}

__global__ void {name}_kernel(const float* A, const float* B, float* C, int M, int N, int K) {{
    __shared__ float As[TILE_{upper}][TILE_{upper}];
    __shared__ float Bs[TILE_{upper}][TILE_{upper}];
    int row = blockIdx.y * TILE_{upper} + threadIdx.y;
    int col = blockIdx.x * TILE_{upper} + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE_{upper} - 1) / TILE_{upper}; ++t) {{
        int a_col = t * TILE_{upper} + threadIdx.x;
        int b_row = t * TILE_{upper} + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE_{upper}; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }}
    if (row < M && col < N) C[row * N + col] = acc;
}}

torch::Tensor {name}_cuda(torch::Tensor A, torch::Tensor B) {{
    int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::zeros({{M, N}}, A.options());
    dim3 block(TILE_{upper}, TILE_{upper});
    dim3 grid((N + TILE_{upper} - 1) / TILE_{upper}, (M + TILE_{upper} - 1) / TILE_{upper});
    {name}_kernel<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    return C;
}}
""",
    "layernorm": """
__global__ void {name}_kernel(const float* x, const float* gamma, const float* beta, float* y, int n, float eps) {{
    __shared__ float s_mean;
    __shared__ float s_var;
    __shared__ float partial[{block}];
    int row = blockIdx.x, tid = threadIdx.x;
    const float* xr = x + (long)row * n;
    float local = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) local += xr[i];
    partial[tid] = local;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }}
    if (tid == 0) s_mean = partial[0] / n;
    __syncthreads();
    local = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) {{
        float d = xr[i] - s_mean;
        local += d * d;
    }}
    partial[tid] = local;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }}
    if (tid == 0) s_var = partial[0] / n;
    __syncthreads();
    float inv = rsqrtf(s_var + eps);
    for (int i = tid; i < n; i += blockDim.x) y[(long)row * n + i] = (xr[i] - s_mean) * inv * gamma[i] + beta[i];
}}

torch::Tensor {name}_cuda(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {{
    int rows = x.size(0), n = x.size(1);
    auto y = torch::empty_like(x);
    {name}_kernel<<<rows, {block}>>>(x.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                     y.data_ptr<float>(), n, (float)eps);
    return y;
}}
""",
}

EXPRESSIONS = [
    "v > 0.0f ? v : 0.0f", "1.0f / (1.0f + expf(-v))", "tanhf(v)", "v * 0.5f * (1.0f + erff(v * 0.70710678f))",
    "v / (1.0f + expf(-v))", "v > 0.0f ? v : 0.01f * v", "fminf(fmaxf(v, -1.0f), 1.0f)",
]

PYTHON = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{name}_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
{kernel}"""

{name}_cpp_source = "{signature};"

{name}_module = load_inline(
    name="{name}",
    cpp_sources={name}_cpp_source,
    cuda_sources={name}_source,
    functions=["{name}_cuda"],
    verbose=False,
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = {name}_module

    def forward(self, {params}):
        return self.op.{name}_cuda({params})
'''


def solution(rng: random.Random, index: int, family: str | None = None, expr: str | None = None,
             suffix: str | None = None) -> tuple[str, str]:
    """(suffix, text) of one generated solution; `family`, `expr` and `suffix` fix what is otherwise drawn."""
    family = family or rng.choice(sorted(KERNELS))
    name = f"{family}_{index}"
    kernel = KERNELS[family].format(name=name, upper=name.upper(), block=rng.choice([128, 256, 512]),
                                    tile=rng.choice([16, 32]), expr=expr or rng.choice(EXPRESSIONS),
                                    const=rng.choice(["1.0", "0.5", "2.0"]))
    signature = re.search(r"torch::Tensor \w+_cuda\([^)]*\)", kernel).group(0)
    params = re.findall(r"(?:torch::Tensor|double) (\w+)", signature.split("(", 1)[1])
    if suffix == ".cu" or (suffix is None and rng.random() < 0.4):
        return ".cu", "#include <torch/extension.h>\n#include <cuda_runtime.h>\n" + kernel
    return ".py", PYTHON.format(name=name, kernel=kernel, signature=signature, params=", ".join(params))


def build_corpus(target: Path, size_mb: float, seed: int, fixtures_share: float = 0.1) -> list[Path]:
    rng = random.Random(seed)
    fixtures = [(p.suffix, p.read_text()) for p in sorted((ROOT / "fixtures" / "cuda").iterdir())
                if p.suffix in (".cu", ".py")]
    budget = int(size_mb * 1024 * 1024)
    files: list[Path] = []
    written = index = 0
    while written < budget:
        if rng.random() < fixtures_share:
            suffix, text = rng.choice(fixtures)
            tag = f"_{index}"
            text = re.sub(r"\b(__global__ void|__device__ \w+|torch::Tensor) (\w+)\(",
                          lambda m: f"{m.group(1)} {m.group(2)}{tag}(", text)
        else:
            suffix, text = solution(rng, index)
        path = target / ("csrc" if suffix == ".cu" else "models") / f"d{index // 100}" / f"solution_{index}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append(path)
        written += len(text.encode())
        index += 1
    return files
