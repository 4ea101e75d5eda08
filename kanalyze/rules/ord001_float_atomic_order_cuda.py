"""ORD001 in CUDA C++: float atomics and PTX `red`/`atom` adds whose result depends on thread order."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.facts import LOOPS
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk
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
    not flagged, nor are adds no two threads share: on the thread's own local
    variable (`atomicAdd(&sum, v)`), or where each address surely gets one
    add per launch (in a kernel, outside loops, `&out[i]` with `i` the 1-D
    global index `blockIdx.x * blockDim.x + threadIdx.x`, or `&out[blockIdx.x]`
    under `threadIdx.x == 0`, every launch here 1-D in grid and block, and
    no other atomic on `out`).

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
        """), source("""
        __global__ void block_sums(const float* x, float* partial, int n) {
            __shared__ float s[256];
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            s[threadIdx.x] = i < n ? x[i] : 0.0f;
            __syncthreads();
            for (int k = 128; k > 0; k >>= 1) {
                if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
                __syncthreads();
            }
            if (threadIdx.x == 0) atomicAdd(&partial[blockIdx.x], s[0]);
        }
        void launch(const float* x, float* partial, int n) {
            block_sums<<<(n + 255) / 256, 256>>>(x, partial, n);
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
            if _thread_private(cuda, call.args[0], function) or _one_add_per_address(cuda, call, function):
                continue  # no two threads add to the same address: nothing to reorder
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


# -- atomics no two threads share ---------------------------------------------------

_GLOBAL_ID = frozenset({"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
                        "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"})


def _thread_private(cuda: CudaModule, address: ts.Node, function) -> bool:
    """`atomicAdd(&sum, v)` on a local (a register or the thread's stack, not `__shared__`):
    only the thread itself can add to it."""
    node = address
    while node is not None and node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node is None or node.type != "pointer_expression" or cuda.text(node.child_by_field_name("operator")) != "&":
        return False
    target = node.child_by_field_name("argument")
    through = False
    while target is not None and target.type in ("subscript_expression", "field_expression"):
        if target.type == "field_expression" and cuda.text(target.child_by_field_name("operator")) == "->":
            return False
        through = through or target.type == "subscript_expression"
        target = target.child_by_field_name("argument")
    if target is None or target.type != "identifier":
        return False
    name = cuda.text(target)
    if any(p.name == name for p in function.params):
        return False
    variable = function.variable(name)
    if variable is None or variable.shared or (through and variable.ctype.pointers):
        return False
    return variable.ctype.pointers == 0 or not through


def _one_add_per_address(cuda: CudaModule, call, function) -> bool:
    """Does each address get at most one add per launch?  Decided only where it is certain:
    in a kernel, outside any loop, on `&out[i]` (or `out + i`) where `i` is the 1-D global
    thread index `blockIdx.x * blockDim.x + threadIdx.x`, or `blockIdx.x` under
    `threadIdx.x == 0`, every launch of the kernel here has a 1-D grid and block, and no
    other atomic of the kernel writes to `out`."""
    if not function.is_kernel or function.body is None:
        return False
    current = call.node.parent
    while current is not None and current.id != function.node.id:
        if current.type in LOOPS:
            return False
        current = current.parent
    split = _array_index(cuda, call.args[0])
    if split is None:
        return False
    array, index = split
    if not any(p.name == array for p in function.params):
        return False
    others = [c for c in cuda.calls_in(function, *_ALL_ATOMICS) if c.node.id != call.node.id and c.args]
    if any((_array_index(cuda, c.args[0]) or (cuda.text(c.args[0]),))[0] == array or
           cuda.text(c.args[0]).lstrip("&").startswith(array) for c in others):
        return False
    launches = [l for l in cuda.launches if l.kernel is function]
    if not launches or not all(_one_dimensional(cuda, l) for l in launches):
        return False
    form = _flat(cuda, index, function)
    if form in _GLOBAL_ID:
        return True
    return form == "blockIdx.x" and _first_thread_only(cuda, call.node, function)


_ALL_ATOMICS = ("atomicAdd", "atomicAdd_block", "atomicAdd_system", "unsafeAtomicAdd", "atomicSub", "atomicExch",
                "atomicMax", "atomicMin", "atomicCAS")


def _array_index(cuda: CudaModule, address: ts.Node) -> tuple[str, ts.Node] | None:
    """`&out[i]` or `out + i` → ("out", i)."""
    node = address
    while node is not None and node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node is None:
        return None
    if node.type == "pointer_expression" and cuda.text(node.child_by_field_name("operator")) == "&":
        inner = node.child_by_field_name("argument")
        if inner is not None and inner.type == "subscript_expression":
            base = inner.child_by_field_name("argument")
            indices = inner.child_by_field_name("indices")
            if base is not None and base.type == "identifier" and indices is not None and \
                    len(indices.named_children) == 1:
                return cuda.text(base), indices.named_children[0]
        return None
    if node.type == "binary_expression" and cuda.text(node.child_by_field_name("operator")) == "+":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is not None and left.type == "identifier" and right is not None:
            return cuda.text(left), right
    return None


def _flat(cuda: CudaModule, node: ts.Node, function, depth: int = 0) -> str:
    """The index with single-assignment locals replaced by their values, without spaces or parentheses."""
    if depth > 4:
        return "?"
    if node.type == "identifier":
        resolved = cuda.resolve(node, function, depth=1)
        if resolved is not None and resolved.id != node.id:
            return _flat(cuda, resolved, function, depth + 1)
        return cuda.text(node)
    if node.type == "parenthesized_expression" and node.named_children:
        return _flat(cuda, node.named_children[0], function, depth + 1)
    if node.type == "binary_expression":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None:
            return "?"
        return _flat(cuda, left, function, depth + 1) + cuda.text(node.child_by_field_name("operator")) + \
            _flat(cuda, right, function, depth + 1)
    return "".join(cuda.text(node).split())


def _one_dimensional(cuda: CudaModule, launch) -> bool:
    for position in (0, 1):
        dims = cuda.dims(launch.config_at(position), launch.host)
        if dims is None or any(d != 1 for d in dims[1:]):
            return False
    return True


def _first_thread_only(cuda: CudaModule, node: ts.Node, function) -> bool:
    """Is `node` under `if (threadIdx.x == 0)` (or a local holding `threadIdx.x`)?"""
    child, current = node, node.parent
    while current is not None and current.id != function.node.id:
        consequence = current.child_by_field_name("consequence") if current.type == "if_statement" else None
        if consequence is not None and consequence.id == child.id:
            condition = current.child_by_field_name("condition")
            for test in walk(condition) if condition is not None else ():
                if test.type == "binary_expression" and cuda.text(test.child_by_field_name("operator")) == "==":
                    sides = [test.child_by_field_name("left"), test.child_by_field_name("right")]
                    texts = sorted(_flat(cuda, s, function) if s is not None else "?" for s in sides)
                    if texts == ["0", "threadIdx.x"] and "||" not in cuda.text(condition):
                        return True
        child, current = current, current.parent
    return False
