"""ORD002 in CUDA C++: shared memory read by other threads with no barrier after
the write, and barriers that only some threads of the block reach."""

from __future__ import annotations

from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import BLOCK_BARRIERS, CudaFunction
from kanalyze.analyzer.cuda.facts import BUILTINS, conditions_above, leaf_taint, name_taint
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.shared_races import Access, SharedRaceScan, shared_names
from kanalyze.analyzer.cuda.values import walk
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.ord002_nondeterministic_race import NondeterministicRace

_COOPERATIVE = ("cg::", "cooperative_groups::")


class NondeterministicRaceCuda(CudaRule, clause=NondeterministicRace):
    docs = """
    In every kernel and `__device__` function, follows each `__shared__` array
    (and pointers into `extern __shared__` memory) statement by statement
    through blocks, branches and two passes of every loop body, and flags an
    access that meets an earlier one by other threads with no `__syncthreads()`
    (or `__syncwarp()`) between: a read of an element another thread wrote
    (`s[tid + 16]` after `s[tid] = ...`), a write of an element other threads
    are still reading in the previous iteration, a value one thread wrote
    under `if (threadIdx.x == 0)` read by all. It also flags a
    `__syncthreads()` inside a branch or loop whose condition depends on the
    thread index: the threads that skip it never arrive.

    Not flagged: `&s[blockDim.x]` (an address, not a read), a tree-reduction
    step under `if (tid < s)` that touches `s[tid]` and `s[tid + s]` between
    two barriers (the two halves are disjoint), and named barriers
    (`cutlass::arch::NamedBarrier::sync(n, id)`, PTX `bar.sync id, n`), which
    order the accesses around them and which warp-group branches reach by
    design. Loop counters are the declaration in scope: a second
    `for (int m = start; ...)` does not inherit a first `m`'s thread index.
    Where the kernel reads no `threadIdx.y`/`.z`, accesses one thread makes
    are not flagged against each other: `if (tid == 0) s[0] = v;` after
    `s[tid]` by every thread (element 0 is thread 0's own), or two separate
    `if (tid == 0)` blocks; nor is a shared scalar every thread stores the
    same value into (`inv = s_sum[0];` in the kernel's body, nothing writing
    `s_sum` up to the next barrier) read back after the store.

    ```cuda
    sdata[tid] = x[i];
    float right = sdata[tid + 1];     // flagged: no __syncthreads() between
    ```
    """
    VALID = [source("""
        __global__ void broadcast_max(const float* x, float* y) {
            __shared__ float s[256];
            int tid = threadIdx.x;
            s[tid] = x[blockIdx.x * 256 + tid];
            __syncthreads();
            float v = s[tid];
            if (tid == 0) s[0] = fmaxf(v, s[255]);
            __syncthreads();
            y[blockIdx.x * 256 + tid] = s[0];
        }
        """), source("""
        __global__ void shift(const float* x, float* y) {
            __shared__ float tile[256];
            int tid = threadIdx.x;
            tile[tid] = x[blockIdx.x * 256 + tid];
            __syncthreads();
            y[blockIdx.x * 256 + tid] = tile[(tid + 1) % 256];
        }
        """), source("""
        __global__ void argmax(const float* x, int* out) {
            extern __shared__ float vals[];
            int* idx = (int*)&vals[blockDim.x];
            int tid = threadIdx.x;
            vals[tid] = x[blockIdx.x * blockDim.x + tid];
            idx[tid] = tid;
            __syncthreads();
            for (int s = blockDim.x / 2; s > 0; s >>= 1) {
                if (tid < s) {
                    if (vals[tid + s] > vals[tid]) {
                        vals[tid] = vals[tid + s];
                        idx[tid] = idx[tid + s];
                    }
                }
                __syncthreads();
            }
            if (tid == 0) out[blockIdx.x] = idx[0];
        }
        """)]
    INVALID = [source("""
        __global__ void shift(const float* x, float* y) {
            __shared__ float tile[256];
            int tid = threadIdx.x;
            tile[tid] = x[blockIdx.x * 256 + tid];
            y[blockIdx.x * 256 + tid] = tile[(tid + 1) % 256];
        }
        """), source("""
        __global__ void reduce(float* x) {
            if (threadIdx.x < 128) {
                x[threadIdx.x] += x[threadIdx.x + 128];
                __syncthreads();
            }
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        yield from self._divergent_barriers(cuda)
        if not cuda.has_word("__shared__"):
            return
        for function in cuda.device_code():
            shared = shared_names(cuda, function)
            if shared:
                for earlier, later in SharedRaceScan(cuda, function, shared).races():
                    yield self._race(cuda, function, earlier, later)

    def _race(self, cuda: CudaModule, function: CudaFunction, earlier: Access, later: Access) -> Report:
        text, other = cuda.text(later.node, 50), cuda.text(earlier.node, 50)
        if later.write and not earlier.write:
            what = f"`{text}` writes shared `{later.array}` while other threads may still read `{other}`"
        elif earlier.write and later.write:
            what = f"`{text}` writes shared `{later.array}` that other threads also write (`{other}`)"
        else:
            what = f"`{text}` reads shared `{later.array}` that other threads write (`{other}`)"
        where = " in the previous loop iteration" if later.iteration != earlier.iteration else ""
        effect = "a slower thread may read the new value" if later.write and not earlier.write \
            else "the value read depends on which warp runs first"
        return self.report_at(
            cuda, later.node,
            f"{what}{where} with no `__syncthreads()` between, so {effect}; put a `__syncthreads()` "
            f"(`__syncwarp()` within one warp) between the two accesses",
            kernel=kernel_name(cuda, function), array=later.array, expression=text, other=other)

    def _divergent_barriers(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*BLOCK_BARRIERS):
            function = call.function
            if function is None or not function.is_device or not _block_wide(call):
                continue
            for condition, statement in conditions_above(cuda, call.node, function):
                if "tid" not in _scoped_taint(cuda, function, condition):
                    continue
                where = {"if_statement": "a branch on", "conditional_expression": "a branch on"}.get(
                    statement.type, "a loop whose trip count depends on")
                text = cuda.text(condition, 50)
                yield self.report_at(
                    cuda, call.node,
                    f"`{call.name}()` inside {where} `{text}`, which differs between the threads of a block: "
                    f"threads that skip it never arrive, so the block hangs or the barrier is undefined "
                    f"behaviour; move the barrier where every thread reaches it",
                    kernel=kernel_name(cuda, function), barrier=call.name, condition=text)
                break


def _block_wide(call) -> bool:
    """A barrier every thread of the block must reach: `__syncthreads()`, a cooperative
    group's `.sync()`; not a named barrier over some of the threads
    (`cutlass::arch::NamedBarrier::sync(n, id)`), which warp-group branches use by design."""
    if call.name in BLOCK_BARRIERS and (call.name.startswith("__") or call.name.startswith(_COOPERATIVE)):
        return True
    if "::" in call.name and not call.name.startswith(_COOPERATIVE):
        return False
    return call.last == "sync" and not call.args


def _variable_taint(cuda: CudaModule, function: CudaFunction, name: str, declarator: ts.Node,
                    value: ts.Node | None, scope: ts.Node, depth: int) -> frozenset[str]:
    """What one declared local can hold: its initialiser and the assignments in its scope
    (computed once; a variable met again while it is computed adds nothing more)."""
    cache = cuda.__dict__.setdefault("_ord002_scoped", {})
    known = cache.get(declarator.id)
    if known is not None:
        return known
    cache[declarator.id] = frozenset()  # in progress
    kinds: set[str] = set()
    if value is not None:
        kinds |= _scoped_taint(cuda, function, value, depth - 1)
    for assignment in walk(scope):
        if assignment.type == "assignment_expression":
            left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
            if left is not None and left.type == "identifier" and cuda.text(left) == name and right is not None:
                kinds |= _scoped_taint(cuda, function, right, depth - 1)
    result = cache[declarator.id] = frozenset(kinds)
    return result


def _scoped_taint(cuda: CudaModule, function: CudaFunction, node: ts.Node, depth: int = 8) -> set[str]:
    """`expr_taint`, where each local is the declaration in scope at its use: two loops
    that both declare `m` (`for (int m = start + warp; ...)`, then `for (int m = start; ...)`)
    are two variables, and only the first depends on the thread index."""
    kinds: set[str] = set()
    for inner in walk(node):
        kind = inner.type
        if kind == "identifier":
            parent = inner.parent
            if parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == inner:
                continue
            name = cuda.text(inner)
            if name in BUILTINS:
                kinds.add(BUILTINS[name])
                continue
            found = _declaration_in_scope(cuda, function, inner, name)
            if found is None or depth <= 0:
                kinds |= name_taint(cuda, function, name)
                continue
            kinds |= _variable_taint(cuda, function, name, *found, depth)
        else:
            kinds |= leaf_taint(cuda, inner)
    return kinds


def _declaration_in_scope(cuda: CudaModule, function: CudaFunction, use: ts.Node,
                          name: str) -> tuple[ts.Node, ts.Node | None, ts.Node] | None:
    """(declarator, initial value, scope) of the local `name` that `use` refers to."""
    current = use
    while current is not None and current.id != function.node.id:
        scope = current.parent
        if scope is None:
            return None
        if scope.type in ("compound_statement", "for_statement", "for_range_loop"):
            hit = _last_declaration(cuda, scope, use, name)
            if hit is not None:
                return hit
        current = scope
    return None


def _last_declaration(cuda: CudaModule, scope: ts.Node, use: ts.Node,
                      name: str) -> tuple[ts.Node, ts.Node | None, ts.Node] | None:
    found = None
    for child in scope.named_children:
        if child.start_byte >= use.start_byte:
            break
        if child.type != "declaration" or child.end_byte > use.start_byte:
            continue
        for declarator in child.children_by_field_name("declarator"):
            value, target = None, declarator
            if target.type == "init_declarator":
                value = target.child_by_field_name("value")
                target = target.child_by_field_name("declarator")
            if target is not None and target.type == "identifier" and cuda.text(target) == name:
                found = (target, value, scope)
    return found
