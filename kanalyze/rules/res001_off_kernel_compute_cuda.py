"""RES001 for CUDA extensions: ATen or PyTorch doing the work, host round trips,
fallbacks, and kernels or extension functions nothing calls."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import body_nodes, walk
from kanalyze.analyzer.cuda.forward_paths import OnGpu
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.host_compute import host_trips, module_attrs
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import NEVER_LAUNCHED, Report, expr_text, source
from kanalyze.rules.cuda_rule import CudaRule
from kanalyze.rules.res001_off_kernel_compute import OffKernelCompute

ATEN_OPS = set("matmul mm bmm addmm addbmm baddbmm addmv mv dot einsum tensordot linear bilinear conv1d conv2d "
               "conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution softmax log_softmax layer_norm "
               "group_norm batch_norm instance_norm rms_norm relu gelu silu sigmoid tanh elu leaky_relu hardtanh "
               "cdist scaled_dot_product_attention max_pool2d avg_pool2d adaptive_avg_pool2d embedding".split())
ATEN_NAMESPACES = ("torch::", "at::", "torch::nn::functional::", "F::", "at::native::")
# Ops that also appear on bookkeeping values: flagged when they read an input tensor of the function.
LIGHT_OPS = set("add sub mul div sum mean max min amax amin prod exp log sqrt rsqrt abs pow clamp where maximum "
                "minimum erf sin cos cumsum sort topk var std norm".split())
HOST_TRIPS = {"cpu": "moves the tensor to the host", "item": "copies a value to the host",
              "tolist": "copies the tensor to the host"}


class OffKernelComputeCuda(CudaRule, clause=OffKernelCompute):
    docs = """
    In the C++ host code of an extension, flags ATen doing the computation
    (`torch::matmul`, `at::conv2d`, `torch::softmax`, `x.mm(w)`, ...), host
    round trips (`.cpu()`, `.item()`, `cudaMemcpy` to the host) and
    `__global__` kernels that nothing in the extension launches. In the Python
    file that builds it, flags `forward` paths that compute with PyTorch
    beside or instead of the extension, `.cpu()`/`.item()` round trips,
    `try`/`except` fallbacks to PyTorch, and extensions whose functions the
    forward path never calls (a function stored in `__init__`,
    `self.act = ext.act_cuda`, and called as `self.act(x)` is called).
    PyTorch on a branch a GPU run never takes is not flagged: the CPU path
    of `if x.is_cuda: return ext(...)` or `if not x.is_cuda:`, an
    `if self.ext is None` (or stream, or build flag set only in the `except`
    of the build) fallback, the `else` of `if torch.cuda.is_available()`, the
    training branch of a model whose `__init__` calls `self.eval()`; nor
    is `nn.Dropout(p=0.0)`, which returns its input.

    ```cpp
    torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
        return torch::matmul(a, b);        // flagged: cuBLAS does the work
    }
    ```
    """
    VALID = [source("""
        #include <torch/extension.h>
        __global__ void double_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i];
        }
        torch::Tensor double_it(torch::Tensor x) {
            auto y = torch::empty_like(x);
            int n = x.numel();
            double_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """)]
    INVALID = [source("""
        #include <torch/extension.h>
        __global__ void double_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i];
        }
        torch::Tensor double_it(torch::Tensor x) {
            return torch::mul(x, 2.0) + torch::relu(x) * 0;
        }
        """)]

    # -- C++ ----------------------------------------------------------------

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        builds = cuda.unit.extension is not None and cuda.unit.extension.builder in ("load_inline", "load")
        hosts = [f for f in cuda.functions if f.is_host and not f.is_device and f.body is not None]
        if not cuda.kernels and not builds:
            return  # C++ with no kernel and no extension: nothing claims to run on the GPU
        kernel_names = sorted(cuda.kernels)
        for call in cuda.calls_named(*ATEN_OPS, *LIGHT_OPS, *HOST_TRIPS, "to", "cudaMemcpy"):
            function = call.function
            if function is None or function.is_device:
                continue
            last = call.name.rsplit("::", 1)[-1]
            aten = call.name.startswith(ATEN_NAMESPACES) and last in ATEN_OPS or \
                call.method in ATEN_OPS and call.receiver is not None and call.method not in ("relu",) or \
                call.method == "relu" and not call.args
            if not aten and (call.name.startswith(ATEN_NAMESPACES) and last in LIGHT_OPS or
                             call.method in LIGHT_OPS and call.receiver is not None):
                inputs = {p.name for p in function.params if "Tensor" in p.ctype.base}
                operands = call.args + ([call.receiver] if call.receiver is not None else [])
                aten = any(o.type == "identifier" and cuda.text(o) in inputs for o in operands)
            if aten:
                text = cuda.text(call.node, 60)
                launched = [l.kernel_name for l in cuda.launches if l.host is function]
                advice = f"move the work into `{launched[0]}`" if launched else (
                    "compute it in a kernel of the extension" if kernel_names else "write it as a kernel")
                yield self.report_at(cuda, call.node,
                                     f"`{text}` in `{function.name}` computes with ATen (cuBLAS/cuDNN) instead of a "
                                     f"kernel of the extension; {advice}",
                                     kernel=launched[0] if launched else None, expression=text,
                                     function=function.name)
            elif call.method in HOST_TRIPS or (call.method == "to" and any(
                    re.search(r"\bk?CPU\b", cuda.text(a)) for a in call.args)) or \
                    (call.name == "cudaMemcpy" and "DeviceToHost" in cuda.text(call.node)):
                text = cuda.text(call.node, 60)
                what = HOST_TRIPS.get(call.method or "", "moves the data to the host")
                yield self.report_at(cuda, call.node, f"`{text}` in `{function.name}` {what} and synchronises the "
                                                      f"device on every call; keep the data on the GPU",
                                     expression=text, function=function.name)
        if builds or cuda.launches or hosts:
            yield from self._dead_kernels(cuda)

    def _dead_kernels(self, cuda: CudaModule) -> Iterator[Report]:
        ext = cuda.unit.extension
        if ext is not None and ext.builder not in ("load_inline",):
            return
        texts = [u.text for u in ext.units] if ext is not None else [cuda.unit.text]
        launched = [l.kernel_name.rsplit("::", 1)[-1] for l in cuda.launches]
        for name, kernel in cuda.kernels.items():
            if name in launched:
                continue
            uses = sum(len(re.findall(rf"\b{re.escape(name)}\b", t)) for t in texts)
            if uses > 1 + len(cuda.instantiations.get(name, ())):
                continue  # launched elsewhere: cudaLaunchKernel(&k), a function pointer, another unit
            tail = f"`{launched[0]}` is launched instead" if launched else "the result comes from elsewhere"
            # An inline extension holds every source that could launch it: the other clauses then
            # say nothing of this kernel (check/dead_kernels.py); a .cu file's may launch from another,
            # and a kernel bound to Python by name (`functions=["k"]`) is called from there.
            dead = ext is not None and name not in (ext.functions or ())
            yield self.report_at(cuda, kernel.name_node, f"`{name}` is never launched: {tail}; launch it or delete it",
                                 kernel=name, **({NEVER_LAUNCHED: True} if dead else {}))

    # -- Python ---------------------------------------------------------------

    def check_host(self, host: TritonModule, extensions: list[Extension]) -> Iterator[Report]:
        if host.jit or host.imports.refers_to_triton():
            return  # the Triton rule reads this file's Python side
        path = candidate_functions(host)
        built = [e for e in extensions if e.functions or e.builder == "RawKernel"]
        if not path or not built:
            return
        on_path = {id(f.node) for f in path}
        calls = [c for c in host.calls if c.function is not None and id(c.function.node) in on_path]
        aliases = _aliases(host, built)
        used = {e for e in built for c in calls if _calls_extension(c.node, e, aliases)}
        for ext in built:
            if ext in used:
                continue
            what = ", ".join(f"`{f}`" for f in ext.functions) or "its kernel"
            text = expr_text(host, ext.call.func)
            yield self.report(ext.call, f"`{text}(...)` builds {what}, but the forward path never calls it; the "
                                        f"result comes from PyTorch. Call the extension from `forward`",
                              functions=ext.functions, extension=ext.name or "")
        rule = OffKernelCompute()
        tensors, layers = module_attrs(host)
        computing = {id(f.node): list(rule.torch_compute(host, f, tensors, layers)) for f in path}
        called = sorted({(dotted(c.node.func) or "").rpartition(".")[2] for c in calls for e in used
                         if _calls_extension(c.node, e, aliases)}) or ["the extension"]
        gpu = OnGpu(host, built)
        for function in path:
            dead = gpu.dead(function)
            handled: set[int] = set()
            for handler in (n for n in body_nodes(function.node) if isinstance(n, cst.ExceptHandler)):
                if any(id(a) in dead for a in host.ancestors(handler)):
                    continue
                report = rule.fallback(host, handler, function, computing, path)
                if report is not None:
                    handled.add(id(handler))
                    yield self.report(report.node, report.message, **report.evidence)
            trips = host_trips(function, host)
            for node, what in computing[id(function.node)]:
                if any(id(a) in handled or id(a) in trips for a in host.ancestors(node)):
                    continue
                if id(node) in dead or any(id(a) in dead for a in host.ancestors(node)):
                    continue  # a branch a CUDA input never takes (`if not x.is_cuda:`, `if ext is None:`)
                if gpu.identity(function, node):
                    continue  # `nn.Dropout(p=0.0)` returns its input
                text = expr_text(host, node)
                yield self.report(node, f"`{text}` in `{function.qualname}` computes with PyTorch ({what}) instead "
                                        f"of the CUDA extension; move the work into `{called[0]}`",
                                  expression=text, function=function.qualname)
            for call, effect in trips.values():
                if any(id(a) in trips for a in host.ancestors(call)):
                    continue
                text = expr_text(host, call)
                yield self.report(call, f"`{text}` in `{function.qualname}` {effect} and synchronises the device on "
                                        f"every call; keep the data on the GPU", expression=text,
                                  function=function.qualname)


def _calls_extension(call: cst.Call, ext: Extension, aliases: dict[int, set[str]] | None = None) -> bool:
    name = dotted(call.func) or ""
    if aliases and name in aliases.get(id(ext), ()):
        return True  # `self.act = ext.act_cuda` in `__init__`, `self.act(x)` in `forward`
    if ext.builder == "RawKernel":
        return name in ext.bindings
    head, _, attr = name.rpartition(".")
    return attr in ext.functions and (not ext.bindings or head in ext.bindings or bool(head))


def _aliases(host: TritonModule, extensions: list[Extension]) -> dict[int, set[str]]:
    """Names an extension's functions are stored under: `self.act = ext.act_cuda`,
    `act = ext.act_cuda` (per extension, by id)."""
    found: dict[int, set[str]] = {}
    for node in walk(host.module):
        if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Attribute):
            continue
        value = dotted(node.value) or ""
        head, _, attr = value.rpartition(".")
        for ext in extensions:
            if head and attr in ext.functions and (not ext.bindings or head in ext.bindings or
                                                   head.removeprefix("self.") in ext.bindings):
                found.setdefault(id(ext), set()).update(
                    t for t in (dotted(target.target) for target in node.targets) if t)
    return found
