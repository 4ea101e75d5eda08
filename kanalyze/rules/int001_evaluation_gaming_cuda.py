"""INT001 in CUDA C++: side streams never joined to the current stream, host threads."""

from __future__ import annotations

from typing import Iterator

from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule
from kanalyze.rules.int001_evaluation_gaming import EvaluationGaming

STREAMS = {"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
           "at::cuda::getStreamFromPool", "c10::cuda::getStreamFromPool", "getStreamFromPool"}
JOINS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent", "cudaEventSynchronize",
         "at::cuda::stream_synchronize", "c10::cuda::stream_synchronize", "cudaThreadSynchronize"}
THREADS = {"std::thread", "std::async", "pthread_create", "std::jthread"}


class EvaluationGamingCuda(CudaRule, clause=EvaluationGaming):
    docs = """
    In C++ host code, flags side streams (`cudaStreamCreate*`,
    `at::cuda::getStreamFromPool`) in a function that never joins them to the
    caller (no `cudaStreamSynchronize`, `cudaStreamWaitEvent`,
    `cudaDeviceSynchronize` or `stream.synchronize()` there), and host threads
    (`std::thread`, `std::async`, `pthread_create`). The Python side
    (`torch.cuda.Stream`, threads, patches, cached outputs) is read by the
    clause's Python detectors.

    ```cpp
    auto side = c10::cuda::getStreamFromPool();
    kernel<<<grid, block, 0, side>>>(...);
    return out;                                 // flagged: nothing waits for `side`
    ```
    """
    VALID = [source("""
        #include <torch/extension.h>
        #include <c10/cuda/CUDAStream.h>
        __global__ void fill(float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 1.0f;
        }
        torch::Tensor ones(torch::Tensor y) {
            auto side = c10::cuda::getStreamFromPool();
            int n = y.numel();
            fill<<<(n + 255) / 256, 256, 0, side>>>(y.data_ptr<float>(), n);
            cudaStreamSynchronize(side);
            return y;
        }
        """)]
    INVALID = [source("""
        #include <torch/extension.h>
        #include <c10/cuda/CUDAStream.h>
        __global__ void fill(float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 1.0f;
        }
        torch::Tensor ones(torch::Tensor y) {
            auto side = c10::cuda::getStreamFromPool();
            int n = y.numel();
            fill<<<(n + 255) / 256, 256, 0, side>>>(y.data_ptr<float>(), n);
            return y;
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*STREAMS, *THREADS):
            function = call.function
            if function is None or function.is_device:
                continue
            if call.name in STREAMS:
                joined = bool(cuda.calls_in(function, *JOINS, "synchronize"))
                if joined:
                    continue
                text = cuda.text(call.node, 60)
                yield self.report_at(
                    cuda, call.node,
                    f"`{text}` in `{function.name}` puts work on a side stream that is never joined to the "
                    f"caller's: the benchmark's CUDA events time the current stream, so that work escapes the "
                    f"timer and may finish after the output is read; launch on `c10::cuda::getCurrentCUDAStream()` "
                    f"or make the current stream wait (`cudaStreamWaitEvent`)",
                    expression=text, function=function.name)
            elif call.name in THREADS:
                text = cuda.text(call.node, 60)
                yield self.report_at(
                    cuda, call.node,
                    f"`{text}` in `{function.name}` runs work on another host thread: the call can return before "
                    f"the work is done; launch from the calling thread", expression=text, function=function.name)
        for node in cuda.find_words(["thread", "jthread"], "declaration"):
            type_text = cuda.text(node.child_by_field_name("type"))
            function = cuda.function_of(node)
            if type_text in THREADS and function is not None:
                text = cuda.text(node, 60)
                yield self.report_at(
                    cuda, node,
                    f"`{text}` in `{function.name}` runs work on another host thread: the call can return before "
                    f"the work is done; launch from the calling thread", expression=text, function=function.name)
