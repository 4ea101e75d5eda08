"""Which thread makes a shared-memory access, and which stores write one value
in every thread: the facts that tell the race scan (shared_races.py) two
accesses cannot race.

  - `thread_pin`: the access sits under `if (threadIdx.x == c)` (or a local
    alias `tid == c`, in a conjunction): only thread `c` makes it.  Two accesses
    pinned to one `c` are one thread's, in program order; `s[tid]` by every
    thread touches element `c` only in thread `c`, so it never races `s[c]`
    pinned to `c`.  Only where the function never reads `threadIdx.y`/`.z`:
    threads that differ in `y` alone then run the same code on the same values.
  - `broadcast_sources`: `inv = s_sum[0];` as a statement of the function's
    body (every thread runs it, outside loops and branches), its value built
    from literals, parameters never assigned, template parameters, `blockIdx`/
    `blockDim`/`gridDim`, shared memory read at such indices and pure math calls:
    every thread computes the same value, as long as nothing writes the arrays
    it reads in the barrier interval.  This answers the arrays read (the scan
    checks the writes before it in the interval; the writes after it, up to the
    next `__syncthreads()` in the body, are checked here), or None.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.facts import expr_taint, is_barrier
from kanalyze.analyzer.cuda.model import CudaModule

if TYPE_CHECKING:
    from kanalyze.analyzer.cuda.shared_races import Access, SharedRaceScan, _Site

THREAD = "threadIdx.x"
_OTHER_AXES = re.compile(r"\bthreadIdx\s*\.\s*[yz]\b")
_UNIFORM_BUILTINS = ("blockIdx", "blockDim", "gridDim")
_PURE = frozenset({"sqrtf", "rsqrtf", "sqrt", "rsqrt", "expf", "exp", "__expf", "logf", "log", "__logf", "fabsf",
                   "fabs", "fmaxf", "fminf", "fmax", "fmin", "max", "min", "powf", "__powf", "__fdividef",
                   "__frsqrt_rn", "__fsqrt_rn", "__fdiv_rn", "tanhf", "static_cast"})
_OPERATORS = ("parenthesized_expression", "binary_expression", "unary_expression", "conditional_expression",
              "cast_expression")


def unique_thread_index(cuda: CudaModule, function: CudaFunction) -> bool:
    """Does `threadIdx.x` name one thread's work (the function reads no other axis)?"""
    return not _OTHER_AXES.search(cuda.text(function.node))


def thread_pin(scan: "SharedRaceScan", node: ts.Node) -> str | None:
    """`c` when `node` is inside the taken branch of an `if (threadIdx.x == c && ...)`."""
    child, parent = node, node.parent
    while parent is not None and parent.id != scan.function.node.id:
        if parent.type == "if_statement" and parent.child_by_field_name("consequence") == child:
            pin = _pinned(scan, parent.child_by_field_name("condition"))
            if pin is not None:
                return pin
        child, parent = parent, parent.parent
    return None


def _pinned(scan: "SharedRaceScan", condition: ts.Node | None) -> str | None:
    while condition is not None and condition.type in ("condition_clause", "parenthesized_expression") \
            and condition.named_children:
        condition = condition.named_children[-1]
    if condition is None or condition.type != "binary_expression":
        return None
    op = scan.cuda.text(condition.child_by_field_name("operator"))
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    if op == "&&":
        return _pinned(scan, left) or _pinned(scan, right)
    if op != "==" or left is None or right is None:
        return None
    for mine, other in ((left, right), (right, left)):
        if scan.normal(mine) == THREAD and "tid" not in expr_taint(scan.cuda, other, scan.function):
            return scan.normal(other)
    return None


def same_thread(a: "Access", b: "Access") -> bool:
    """Do the two accesses, wherever they touch one element, come from one thread?"""
    if a.pin is not None and a.pin == b.pin:
        return True
    return any(y.pin is not None and x.index == THREAD and y.index == y.pin for x, y in ((a, b), (b, a)))


def broadcast_sources(scan: "SharedRaceScan", site: "_Site", sites: list["_Site"]) -> frozenset[str] | None:
    """The shared arrays the value of a same-value store is read from, or None."""
    cuda, function = scan.cuda, scan.function
    assignment = site.node.parent
    if assignment is None or assignment.type != "assignment_expression" or \
            assignment.child_by_field_name("left") != site.node or \
            cuda.text(assignment.child_by_field_name("operator")) != "=":
        return None
    statement = assignment.parent
    if statement is None or statement.type != "expression_statement" or function.body is None or \
            statement.parent is None or statement.parent.id != function.body.id:
        return None
    reads: set[str] = set()
    if not _uniform(scan, assignment.child_by_field_name("right"), reads) or site.array in reads:
        return None
    if any(_is_pointer(scan, name) for name in scan.shared):  # views of one buffer: any write may alias
        reads = set(scan.shared)
    end = function.body.end_byte
    for sibling in function.body.named_children:
        if sibling.start_byte > statement.start_byte and is_barrier(cuda, sibling, warp=False):
            end = sibling.start_byte
            break
    if any(s.write and s.array in reads and statement.end_byte <= s.start < end for s in sites):
        return None
    return frozenset(reads)


def _is_pointer(scan: "SharedRaceScan", name: str) -> bool:
    variable = scan.function.locals.get(name)
    return variable is not None and bool(variable.ctype.pointers)


def _uniform(scan: "SharedRaceScan", node: ts.Node | None, reads: set[str]) -> bool:
    """Does `node` have one value in every thread (given no write to `reads` meanwhile)?"""
    if node is None:
        return False
    cuda, function, kind = scan.cuda, scan.function, node.type
    if kind in ("number_literal", "true", "false"):
        return True
    if kind in _OPERATORS:
        return all(_uniform(scan, c, reads) for c in node.named_children if c.type != "type_descriptor")
    if kind == "field_expression":
        base = node.child_by_field_name("argument")
        return base is not None and base.type == "identifier" and cuda.text(base) in _UNIFORM_BUILTINS
    if kind == "identifier":
        name = cuda.text(node)
        if name in scan.shared:
            variable = cuda.variable(name, function)
            if variable is None or variable.dims or variable.ctype.pointers:
                return False
            reads.add(name)
            return True
        if name in function.template_params:
            return True
        return name not in function.locals and any(p.name == name for p in function.params) \
            and not function.assignments(name)
    if kind == "subscript_expression":
        base, indices = chain(node)
        if base is None or base.type != "identifier" or cuda.text(base) not in scan.shared:
            return False
        reads.add(cuda.text(base))
        return all(_uniform(scan, i, reads) for i in indices)
    if kind == "call_expression":
        callee = node.child_by_field_name("function")
        arguments = node.child_by_field_name("arguments")
        name = cuda.text(callee) if callee is not None else ""
        return (name in _PURE or name.startswith("static_cast<")) and arguments is not None and \
            all(_uniform(scan, a, reads) for a in arguments.named_children)
    return False


def chain(node: ts.Node) -> tuple[ts.Node | None, list[ts.Node]]:
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
