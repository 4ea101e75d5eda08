"""MEM001 in CUDA C++: a `torch::empty` output the kernel's stores can leave partly unwritten."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda_facts import bound_params, conditions_above, expr_taint, floor_divisions, grid_strides
from kanalyze.analyzer.cuda_model import CudaFunction, CudaLaunch, CudaModule, walk
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule
from kanalyze.rules.mem001_unwritten_output import UnwrittenOutput

EMPTY = {"torch::empty", "at::empty", "torch::empty_like", "at::empty_like", "torch::empty_strided",
         "at::empty_strided"}
EMPTY_METHODS = {"new_empty", "new_empty_strided"}


class UnwrittenOutputCuda(CudaRule, clause=UnwrittenOutput):
    docs = """
    Follows each `torch::empty`, `torch::empty_like`, `at::empty` and
    `x.new_empty` tensor of a host function into the kernel launch that gets
    its `data_ptr`, and flags the allocation when that kernel can leave part
    of it unwritten: no store through the pointer, every store under a
    condition on the data (`if (x[i] > 0) out[i] = x[i];` with no `else`), an
    early `return` on the data before the store, or a grid computed by floor
    division (`n / threads`) for a kernel that does not stride over the grid.

    ```cpp
    auto out = torch::empty_like(x);      // flagged: only positive elements are written
    // kernel: if (x[i] > 0.0f) out[i] = x[i];
    auto out = torch::zeros_like(x);      // or write every element in the kernel
    ```
    """
    VALID = [source("""
        #include <torch/extension.h>
        __global__ void relu_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        }
        torch::Tensor relu(torch::Tensor x) {
            auto y = torch::empty_like(x);
            int n = x.numel();
            relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """)]
    INVALID = [source("""
        #include <torch/extension.h>
        __global__ void relu_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n && x[i] > 0.0f) y[i] = x[i];
        }
        torch::Tensor relu(torch::Tensor x) {
            auto y = torch::empty_like(x);
            int n = x.numel();
            relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        for function in cuda.functions:
            if function.is_device or function.body is None:
                continue
            allocations = _allocations(cuda, function)
            if not allocations:
                continue
            for launch in (l for l in cuda.launches if l.host is function and l.kernel is not None):
                for param, arg in bound_params(launch).items():
                    name = next((n for n in allocations if re.search(rf"\b{re.escape(n)}\s*\.", cuda.text(arg))),
                                None)
                    if name is None:
                        continue
                    why = self._gap(cuda, launch, param)
                    if why is None:
                        continue
                    allocation = allocations[name]
                    text = cuda.text(allocation, 50)
                    yield self.report_at(
                        cuda, allocation,
                        f"`{text}` is returned uninitialised where `{launch.kernel_name}` does not write it: {why}; "
                        f"write every element (an `else` branch, a covering grid) or allocate with `torch::zeros`",
                        kernel=launch.kernel_name, allocation=text, parameter=param)
                    break

    def _gap(self, cuda: CudaModule, launch: CudaLaunch, param: str) -> str | None:
        kernel = launch.kernel
        if kernel is None or kernel.body is None:
            return None
        if not grid_strides(cuda, kernel) and floor_divisions(cuda, launch):
            division = floor_divisions(cuda, launch)[0][0]
            return f"the grid `{cuda.text(division, 40)}` rounds down, so the last elements get no thread"
        names = {param} | {v.name for v in kernel.locals.values() if v.ctype.pointers and v.init is not None
                           and any(n.type == "identifier" and cuda.text(n) == param for n in walk(v.init))}
        stores = [s for s in _stores(cuda, kernel, names)]
        if not stores:
            return f"it never stores through `{param}`"
        returns = _data_returns(cuda, kernel)
        guards = []
        for store in stores:
            guard = next((c for c, _ in conditions_above(cuda, store, kernel)
                          if "data" in expr_taint(cuda, c, kernel)), None)
            guard = guard or next((r for r in returns if r.end_byte <= store.start_byte), None)
            if guard is None:
                return None  # this store covers the element whatever the data says
            guards.append(guard)
        return f"every store through `{param}` depends on the data (`{cuda.text(guards[0], 40)}`)"


def _allocations(cuda: CudaModule, function: CudaFunction) -> dict[str, ts.Node]:
    found: dict[str, ts.Node] = {}
    for variable in function.locals.values():
        init = variable.init
        if init is None or init.type != "call_expression":
            continue
        callee = init.child_by_field_name("function")
        name = cuda.text(callee)
        method = cuda.text(callee.child_by_field_name("field")) if callee is not None and \
            callee.type == "field_expression" else ""
        if name in EMPTY or method in EMPTY_METHODS:
            found[variable.name] = init
    return found


def _stores(cuda: CudaModule, kernel: CudaFunction, names: set[str]) -> Iterator[ts.Node]:
    for node in walk(kernel.body):
        if node.type not in ("assignment_expression", "call_expression"):
            continue
        if node.type == "call_expression":
            callee = cuda.text(node.child_by_field_name("function"))
            if callee.startswith(("__st", "memcpy", "memset")) or callee.startswith("atomicExch"):
                arguments = node.child_by_field_name("arguments")
                if arguments is not None and arguments.named_children and _base(cuda, arguments.named_children[0]) \
                        in names:
                    yield node
            continue
        left = node.child_by_field_name("left")
        if left is not None and cuda.text(node.child_by_field_name("operator")) == "=" and \
                _base(cuda, left) in names:
            yield node


def _base(cuda: CudaModule, node: ts.Node) -> str | None:
    """The pointer an access goes through: `out[i]`, `*(out + i)`, `&out[i]`, `reinterpret_cast<float4*>(out)[i]`."""
    for inner in walk(node):
        if inner.type == "identifier":
            return cuda.text(inner)
    return None


def _data_returns(cuda: CudaModule, kernel: CudaFunction) -> list[ts.Node]:
    """Conditions of `if (...) return;` whose test reads the data."""
    found = []
    for node in walk(kernel.body):
        if node.type != "if_statement":
            continue
        consequence = node.child_by_field_name("consequence")
        if consequence is None or not (consequence.type == "return_statement" or (
                consequence.type == "compound_statement" and consequence.named_children
                and consequence.named_children[-1].type == "return_statement")):
            continue
        condition = node.child_by_field_name("condition")
        if condition is not None and "data" in expr_taint(cuda, condition, kernel):
            found.append(condition)
    return found
