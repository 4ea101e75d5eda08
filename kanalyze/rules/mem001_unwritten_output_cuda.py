"""MEM001 in CUDA C++: a `torch::empty` output the kernel's stores can leave partly unwritten."""

from __future__ import annotations

from typing import Iterator

import libcst as cst
import tree_sitter as ts

from kanalyze.analyzer.cuda.build import read_declaration
from kanalyze.analyzer.cuda.entities import CudaFunction, CudaLaunch
from kanalyze.analyzer.cuda.facts import bound_params, conditions_above, expr_taint, floor_divisions, grid_strides
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.cuda.values import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, expr_text, source
from kanalyze.rules.cuda_rule import CudaRule
from kanalyze.rules.mem001_unwritten_output import UnwrittenOutput

EMPTY = {"torch::empty", "at::empty", "torch::empty_like", "at::empty_like", "torch::empty_strided",
         "at::empty_strided"}
EMPTY_METHODS = {"new_empty", "new_empty_strided"}
PYTHON_EMPTY = {"torch.empty", "torch.empty_like", "torch.empty_strided"}
STORE_CALLS = {"__stcs", "__stcg", "__stwt", "__stwb", "memcpy", "memset", "atomicExch"}


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
        by_function: dict[int, dict[str, ts.Node]] = {}
        for declaration in cuda.find_words(["empty", "empty_like", "empty_strided", "new_empty",
                                            "new_empty_strided"], "declaration"):
            function = cuda.function_of(declaration)
            if function is not None and not function.is_device:
                by_function.setdefault(function.node.id, {}).update(_allocations(cuda, declaration))
        for function in cuda.functions:
            allocations = by_function.get(function.node.id)
            if not allocations:
                continue
            for name, allocation in allocations.items():
                found = self.unwritten(cuda, function, name)
                if found is None:
                    continue
                kernel, why = found
                text = cuda.text(allocation, 50)
                yield self.report_at(
                    cuda, allocation,
                    f"`{text}` is returned uninitialised where `{kernel}` does not write it: {why}; write every "
                    f"element (an `else` branch, a covering grid) or allocate with `torch::zeros`",
                    kernel=kernel, allocation=text)

    def check_host(self, host: TritonModule, extensions: list[Extension]) -> Iterator[Report]:
        """`out = torch.empty_like(x)` in Python, handed to an extension function whose kernel
        leaves part of it unwritten."""
        for ext in extensions:
            hosts = {f.name: (cuda, f) for cuda in ext.models for f in cuda.functions if not f.is_device}
            for site in host.calls:
                name = (dotted(site.node.func) or "").rpartition(".")[2]
                if site.function is None or name not in hosts or name not in ext.functions:
                    continue
                cuda, function = hosts[name]
                positional = [a.value for a in site.node.args if a.keyword is None and not a.star]
                for arg, param in zip(positional, function.params):
                    allocation = _python_allocation(host, site.function, arg)
                    if allocation is None:
                        continue
                    found = self.unwritten(cuda, function, param.name)
                    if found is None:
                        continue
                    kernel, why = found
                    text = expr_text(host, allocation)
                    yield self.report(allocation, f"`{text}` is returned uninitialised where `{kernel}` (through "
                                                  f"`{name}`) does not write it: {why}; write every element or "
                                                  f"allocate with `torch.zeros`", kernel=kernel, allocation=text)

    def unwritten(self, cuda: CudaModule, function: CudaFunction, name: str) -> tuple[str, str] | None:
        """(kernel, why) when the tensor `name` of host `function` goes to launches that can leave part
        of it unwritten; None when one of them writes it all, or no launch gets it."""
        launches = [l for l in cuda.launches if l.host is function and l.kernel is not None]
        passed = [(l, p) for l in launches for p, arg in bound_params(l).items() if _passes(cuda.text(arg), name)]
        if not passed:
            return None  # filled by ATen, or handed on: nothing to say here
        gaps = [self._gap(cuda, launch, param) for launch, param in passed]
        written = [g for g in gaps if g != _NO_STORE]
        if any(g is None for g in written):
            return None  # one launch writes every element
        why = written[0] if written else f"`{passed[0][0].kernel_name}` never stores through `{passed[0][1]}`"
        return passed[0][0].kernel_name, why

    def _gap(self, cuda: CudaModule, launch: CudaLaunch, param: str) -> str | None:
        """Why this launch can leave elements behind `param` unwritten; None when it writes them all."""
        kernel = launch.kernel
        if kernel is None or kernel.body is None:
            return _NO_STORE
        names = {param} | {v.name for v in kernel.locals.values() if v.ctype.pointers and v.init is not None
                           and any(n.type == "identifier" and cuda.text(n) == param for n in walk(v.init))}
        stores = list(_stores(cuda, kernel, names))
        if not stores:
            return _NO_STORE
        if not grid_strides(cuda, kernel) and floor_divisions(cuda, launch):
            division = floor_divisions(cuda, launch)[0][0]
            return f"the grid `{cuda.text(division, 40)}` rounds down, so the last elements get no thread"
        returns = _data_returns(cuda, kernel)
        store_ids = {s.id for s in stores}
        guards = []
        for store in stores:
            guard = next((c for c, statement in conditions_above(cuda, store, kernel)
                          if "data" in expr_taint(cuda, c, kernel)
                          and not _both_branches_store(statement, store_ids)), None)
            guard = guard or next((r for r in returns if r.end_byte <= store.start_byte), None)
            if guard is None:
                return None  # this store covers the element whatever the data says
            guards.append(guard)
        return f"every store through `{param}` depends on the data (`{cuda.text(guards[0], 40)}`)"


_NO_STORE = "no store"


def _python_allocation(host: TritonModule, function, arg: cst.BaseExpression) -> cst.Call | None:
    """The `torch.empty*(...)` call `arg` holds (directly or through a local assigned once)."""
    if isinstance(arg, cst.Name):
        defs = host.flow(function).defs_of(arg.value)
        arg = defs[0].value if len(defs) == 1 and defs[0].value is not None else arg
    if isinstance(arg, cst.Call):
        name = host.call_name(arg) or ""
        if name in PYTHON_EMPTY or (isinstance(arg.func, cst.Attribute) and arg.func.attr.value in EMPTY_METHODS):
            return arg
    return None


def _passes(argument: str, name: str) -> bool:
    """`y.data_ptr<float>()`, `(float*)y.data_ptr()`: the argument hands on tensor `name`."""
    index = argument.find(name + ".")
    return index >= 0 and (index == 0 or not (argument[index - 1].isalnum() or argument[index - 1] == "_"))


def _both_branches_store(statement: ts.Node, store_ids: set[int]) -> bool:
    """`if (x[i] > 0) y[i] = x[i]; else y[i] = 0;`: the test picks the value, not whether to write."""
    if statement.type != "if_statement":
        return False
    branches = [statement.child_by_field_name("consequence"), statement.child_by_field_name("alternative")]
    return all(b is not None and any(n.id in store_ids for n in walk(b)) for b in branches)


def _allocations(cuda: CudaModule, declaration: ts.Node) -> dict[str, ts.Node]:
    """Variable name → the `torch::empty*` call that initialises it."""
    found: dict[str, ts.Node] = {}
    for variable in read_declaration(cuda, declaration):
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
    for call in cuda.calls_named(*STORE_CALLS):
        if call.function is kernel and call.args and _base(cuda, call.args[0]) in names:
            yield call.node
    for node in cuda.find_words(tuple(sorted(names)), "assignment_expression"):
        if not kernel.contains(node):
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
    for node in cuda.find_words(("return",), "if_statement"):
        if not kernel.contains(node):
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
