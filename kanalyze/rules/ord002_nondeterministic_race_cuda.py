"""ORD002 in CUDA C++: shared memory read by other threads with no barrier after
the write, and barriers that only some threads of the block reach."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import BLOCK_BARRIERS, CudaFunction
from kanalyze.analyzer.cuda.facts import conditions_above, expr_taint, is_barrier
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.ord002_nondeterministic_race import NondeterministicRace

_NESTED = {"compound_statement", "if_statement", "for_statement", "while_statement", "do_statement",
           "switch_statement", "case_statement", "for_range_loop", "else_clause"}
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_LOOPS = {"for_statement", "while_statement", "do_statement", "for_range_loop"}


@dataclass(eq=False)
class Access:
    array: str
    index: str                 # normalised index text ("" for a scalar)
    node: ts.Node
    write: bool
    statement: int             # id of the statement it is in
    iteration: int             # 1 or 2: which simulated pass of the enclosing loop
    guard: int | None          # id of the innermost one-thread `if (threadIdx.x == 0)` around it
    uniform: bool              # the index is the same for every thread of the block


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

    ```cuda
    sdata[tid] = x[i];
    float right = sdata[tid + 1];     // flagged: no __syncthreads() between
    ```
    """
    VALID = [source("""
        __global__ void shift(const float* x, float* y) {
            __shared__ float tile[256];
            int tid = threadIdx.x;
            tile[tid] = x[blockIdx.x * 256 + tid];
            __syncthreads();
            y[blockIdx.x * 256 + tid] = tile[(tid + 1) % 256];
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
            shared = _shared_names(cuda, function)
            if shared:
                yield from _RaceScan(self, cuda, function, shared).run()

    def _divergent_barriers(self, cuda: CudaModule) -> Iterator[Report]:
        for call in cuda.calls_named(*BLOCK_BARRIERS):
            function = call.function
            if function is None or not function.is_device:
                continue
            for condition, statement in conditions_above(cuda, call.node, function):
                if "tid" not in expr_taint(cuda, condition, function):
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


def _shared_names(cuda: CudaModule, function: CudaFunction) -> set[str]:
    names = {v.name for v in cuda.shared if function.node.start_byte <= v.node.start_byte < function.node.end_byte}
    names |= {v.name for v in cuda.globals.values() if v.shared}
    if not names:
        return names
    for variable in function.locals.values():  # `float* a = smem + n;`: a pointer into shared memory
        if variable.ctype.pointers and variable.init is not None and \
                any(n.type == "identifier" and cuda.text(n) in names for n in walk(variable.init)):
            names.add(variable.name)
    return names


class _RaceScan:
    def __init__(self, rule: NondeterministicRaceCuda, cuda: CudaModule, function: CudaFunction,
                 shared: set[str]) -> None:
        self.rule, self.cuda, self.function, self.shared = rule, cuda, function, shared
        self.reported: set[int] = set()
        self.reports: list[Report] = []
        self.aliases = {v.name: cuda.text(v.init) for v in function.locals.values()
                        if v.init is not None and v.init.type in ("field_expression", "identifier")
                        and cuda.single_assignment(v, function)}
        self.sites = self._sites()
        self.starts = [site[0] for site in self.sites]

    def run(self) -> Iterator[Report]:
        if self.function.body is not None and self.sites:
            self._scan(self.function.body, [], 1, None)
        return iter(self.reports)

    # -- statements -----------------------------------------------------------

    def _scan(self, node: ts.Node, pending: list[Access], iteration: int, guard: int | None) -> list[Access]:
        kind = node.type
        if kind == "compound_statement" or kind == "else_clause":
            for child in node.named_children:
                pending = self._scan(child, pending, iteration, guard)
            return pending
        if is_barrier(self.cuda, node):
            return []
        if kind == "if_statement":
            condition = node.child_by_field_name("condition")
            pending = self._visit(condition, node, pending, iteration, guard)
            inner = node.id if _one_thread(self.cuda, condition, self.function) else guard
            taken = self._scan(node.child_by_field_name("consequence"), list(pending), iteration, inner)
            alternative = node.child_by_field_name("alternative")
            other = self._scan(alternative, list(pending), iteration, inner) if alternative is not None else pending
            return taken + [a for a in other if a not in taken]
        if kind in _LOOPS:
            for field in ("initializer", "condition"):
                pending = self._visit(node.child_by_field_name(field), node, pending, iteration, guard)
            body = node.child_by_field_name("body")
            if body is None:
                return pending
            update = node.child_by_field_name("update")
            first = self._scan(body, list(pending), 1, guard)
            first = self._visit(update, node, first, 1, guard)
            second = self._scan(body, pending + [a for a in first if a not in pending], 2, guard)
            return pending + [a for a in second if a not in pending]
        if kind in _NESTED:
            for child in node.named_children:
                if child.type in _NESTED or child.type.endswith("statement"):
                    pending = self._scan(child, pending, iteration, guard)
            return pending
        return self._visit(node, node, pending, iteration, guard)

    def _visit(self, node: ts.Node | None, statement: ts.Node, pending: list[Access], iteration: int,
               guard: int | None) -> list[Access]:
        if node is None:
            return pending
        accesses = list(self._accesses(node, statement, iteration, guard))
        # Reads first (a read of another thread's write is the race to name), one report per statement.
        for access in sorted(accesses, key=lambda a: a.write):
            earlier = next((e for e in pending if self._conflict(e, access)), None)
            if earlier is not None:
                self._report(earlier, access)
                break
        return pending + accesses

    def _conflict(self, earlier: Access, later: Access) -> bool:
        if earlier.array != later.array or not (earlier.write or later.write):
            return False
        if earlier.statement == later.statement and earlier.iteration == later.iteration:
            return False  # one statement, one instant: not ordered by a barrier anyway
        if earlier.guard is not None and earlier.guard == later.guard:
            return False  # both under the same `if (tid == 0)`: one thread
        if earlier.guard != later.guard:
            return True
        return earlier.index != later.index or earlier.uniform

    # -- accesses -------------------------------------------------------------

    def _accesses(self, node: ts.Node, statement: ts.Node, iteration: int, guard: int | None) -> Iterator[Access]:
        """The shared-memory accesses inside `node` (found once per function, by position)."""
        low = bisect_left(self.starts, node.start_byte)
        high = bisect_left(self.starts, node.end_byte)
        for _, access_node, array, index, write, uniform in self.sites[low:high]:
            yield Access(array, index, access_node, write, statement.id, iteration, guard, uniform)

    def _sites(self) -> list[tuple]:
        """(start, node, array, index, written, uniform) of every access to a shared name in the function."""
        cuda, function = self.cuda, self.function
        declared = [v.declaration for v in cuda.shared if v.declaration is not None and function.contains(v.declaration)]
        sites = []
        seen: set[int] = set()
        for name_node in cuda.find_words(tuple(sorted(self.shared)), "identifier"):
            if not function.contains(name_node) or any(d.start_byte <= name_node.start_byte < d.end_byte
                                                        for d in declared):
                continue
            node = name_node
            while node.parent is not None and node.parent.type == "subscript_expression" and \
                    node.parent.child_by_field_name("argument") == node:
                node = node.parent
            if node.id in seen:
                continue
            seen.add(node.id)
            array = cuda.text(name_node)
            if node is name_node:  # a scalar in shared memory
                variable = cuda.variable(array, function)
                if variable is None or variable.dims or variable.ctype.pointers or name_node.parent is None \
                        or name_node.parent.type in ("init_declarator", "pointer_declarator", "declaration"):
                    continue
                sites.append((node.start_byte, node, array, "", _written(cuda, node), True))
                continue
            _, indices = _chain(node)
            index = " ][ ".join(self._normal(i) for i in indices)
            uniform = not any("tid" in expr_taint(cuda, i, function) for i in indices)
            sites.append((node.start_byte, node, array, index, _written(cuda, node), uniform))
        sites.sort(key=lambda site: site[0])
        return sites

    def _normal(self, index: ts.Node) -> str:
        text = self.cuda.text(index)
        if not self.aliases:
            return text
        return _NAME.sub(lambda m: self.aliases.get(m.group(0), m.group(0)), text)

    def _report(self, earlier: Access, later: Access) -> None:
        if later.node.id in self.reported:
            return
        self.reported.add(later.node.id)
        cuda = self.cuda
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
        self.reports.append(self.rule.report_at(
            cuda, later.node,
            f"{what}{where} with no `__syncthreads()` between, so {effect}; put a `__syncthreads()` "
            f"(`__syncwarp()` within one warp) between the two accesses",
            kernel=kernel_name(cuda, self.function), array=later.array, expression=text, other=other))


def _one_thread(cuda: CudaModule, condition: ts.Node | None, function: CudaFunction) -> bool:
    """`threadIdx.x == 0`, `lane == 0`: a branch one thread (of a block or warp) takes."""
    if condition is None:
        return False
    for node in walk(condition):
        if node.type == "binary_expression" and cuda.text(node.child_by_field_name("operator")) == "==":
            sides = [expr_taint(cuda, node.child_by_field_name(f), function) for f in ("left", "right")]
            if any("tid" in s for s in sides) and any("tid" not in s for s in sides):
                return True
    return False


def _chain(node: ts.Node) -> tuple[ts.Node | None, list[ts.Node]]:
    """`a[i][j]` → (a, [i, j])."""
    indices: list[ts.Node] = []
    current = node
    while current is not None and current.type == "subscript_expression":
        found = current.child_by_field_name("indices")
        if found is not None and found.named_children:
            indices.append(found.named_children[0])
        current = current.child_by_field_name("argument")
    indices.reverse()
    return current, indices


def _is_array_base(node: ts.Node) -> bool:
    parent = node.parent
    return parent is not None and parent.type == "subscript_expression" and \
        parent.child_by_field_name("argument") == node


def _written(cuda: CudaModule, node: ts.Node) -> bool:
    """Is the access the target of an assignment, `++`/`--`, or an atomic?"""
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    if parent is None:
        return False
    if parent.type == "assignment_expression":
        return parent.child_by_field_name("left") == node
    if parent.type == "update_expression":
        return True
    if parent.type == "pointer_expression" and cuda.text(parent)[:1] == "&":
        call = parent.parent.parent if parent.parent is not None else None
        return call is not None and call.type == "call_expression" and \
            cuda.text(call.child_by_field_name("function")).startswith("atomic")
    return False
