"""Which accesses to `__shared__` memory in one device function can meet an access
by another thread with no barrier between (the race scan behind ORD002).

`SharedRaceScan(cuda, function, shared).races()` follows each shared array (and
pointers into `extern __shared__` memory) statement by statement through blocks,
branches and two passes of every loop body, and answers the pairs (earlier
access, later access) that other threads can interleave: a read of an element
another thread wrote, a write of an element other threads still read, two
writes of one element.  A barrier (`__syncthreads()`, `__syncwarp()`, a named
barrier) ends the interval.  Not a race:
  - two accesses one thread makes: both under one `if (threadIdx.x == 0)`, both
    pinned to the same thread (`if (tid == 0) s[0] = v; ... if (tid == 0) x = s[0];`),
    or `s[tid]` by every thread against `s[0]` pinned to thread 0: element 0 of
    `s[tid]` is thread 0's own (thread_pins.py);
  - a tree-reduction step under `if (tid < s)` on `s[tid]` and `s[tid + s]`;
  - a shared scalar every thread stores the same value into (`inv = s_sum[0];`
    right after a barrier, with no write to `s_sum` in the interval), read back
    after the store (thread_pins.py).
Rows, messages and the clause's docs are the rule's (rules/ord002_..._cuda.py).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.facts import expr_taint, is_barrier
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.thread_pins import (
    broadcast_sources, chain, same_thread, thread_pin, unique_thread_index,
)
from kanalyze.analyzer.cuda.values import walk

_NESTED = {"compound_statement", "if_statement", "for_statement", "while_statement", "do_statement",
           "switch_statement", "case_statement", "for_range_loop", "else_clause"}
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_LOOPS = {"for_statement", "while_statement", "do_statement", "for_range_loop"}
_ASM_BARRIER = re.compile(r"\b(?:bar|barrier)(?:\.cta)?\.(?:sync|arrive_and_wait|red)\b")


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
    pin: str | None = None     # only the thread whose index is this value makes it (`if (tid == 0)`)
    broadcast: bool = False    # a store of one value every thread computes alike, nothing racing its sources


@dataclass(eq=False)
class _Site:
    start: int
    node: ts.Node
    array: str
    index: str
    write: bool
    uniform: bool
    pin: str | None
    sources: frozenset[str] | None   # for a same-value store: the arrays its value is read from


def shared_names(cuda: CudaModule, function: CudaFunction) -> set[str]:
    """The `__shared__` arrays and scalars a function sees, and its pointers into them."""
    names = {v.name for v in cuda.shared if function.node.start_byte <= v.node.start_byte < function.node.end_byte}
    names |= {v.name for v in cuda.globals.values() if v.shared}
    if not names:
        return names
    for variable in function.locals.values():  # `float* a = smem + n;`: a pointer into shared memory
        if variable.ctype.pointers and variable.init is not None and \
                any(n.type == "identifier" and cuda.text(n) in names for n in walk(variable.init)):
            names.add(variable.name)
    return names


def named_barrier(cuda: CudaModule, node: ts.Node) -> bool:
    """A barrier over a named subset of the block: `NamedBarrier::sync(n, id)`,
    `NamedBarrier::arrive_and_wait`, inline PTX `bar.sync id, n`."""
    if node.type == "expression_statement" and node.named_children:
        node = node.named_children[0]
    if node.type == "call_expression":
        callee = cuda.text(node.child_by_field_name("function"))
        last = re.split(r"::|\.", callee)[-1]
        return "barrier" in callee.lower() and last in ("sync", "arrive_and_wait", "wait")
    if node.type == "gnu_asm_expression":
        return bool(_ASM_BARRIER.search(cuda.text(node)))
    return False


class SharedRaceScan:
    def __init__(self, cuda: CudaModule, function: CudaFunction, shared: set[str]) -> None:
        self.cuda, self.function, self.shared = cuda, function, shared
        self.reported: set[int] = set()
        self.found: list[tuple[Access, Access]] = []
        self.aliases = {v.name: cuda.text(v.init) for v in function.locals.values()
                        if v.init is not None and v.init.type in ("field_expression", "identifier")
                        and cuda.single_assignment(v, function)}
        self.unique = unique_thread_index(cuda, function)
        self.sites = self._sites()
        self.starts = [site.start for site in self.sites]

    def races(self) -> list[tuple[Access, Access]]:
        """(earlier, later) for each access that races an earlier one (one pair per later access)."""
        if self.function.body is not None and self.sites:
            self._scan(self.function.body, [], 1, None)
        return self.found

    # -- statements -----------------------------------------------------------

    def _scan(self, node: ts.Node, pending: list[Access], iteration: int, guard: int | None) -> list[Access]:
        kind = node.type
        if kind == "compound_statement" or kind == "else_clause":
            for child in node.named_children:
                pending = self._scan(child, pending, iteration, guard)
            return pending
        if is_barrier(self.cuda, node) or named_barrier(self.cuda, node):
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
        accesses = list(self._accesses(node, statement, iteration, guard, pending))
        # Reads first (a read of another thread's write is the race to name), one report per statement.
        for access in sorted(accesses, key=lambda a: a.write):
            earlier = next((e for e in pending if self._conflict(e, access)), None)
            if earlier is not None:
                if access.node.id not in self.reported:
                    self.reported.add(access.node.id)
                    self.found.append((earlier, access))
                break
        return pending + accesses

    def _conflict(self, earlier: Access, later: Access) -> bool:
        if earlier.array != later.array or not (earlier.write or later.write):
            return False
        if earlier.statement == later.statement and earlier.iteration == later.iteration:
            return False  # one statement, one instant: not ordered by a barrier anyway
        if earlier.guard is not None and earlier.guard == later.guard:
            return False  # both under the same `if (threadIdx.x == 0)`: one thread
        if self.unique and same_thread(earlier, later):
            return False  # element `pin` of `s[tid]` is the pinned thread's own
        if earlier.broadcast and not later.write and later.index == earlier.index and \
                later.node.start_byte > earlier.node.start_byte:
            return False  # every thread stored the same value before reading it back
        if earlier.guard != later.guard:
            return True
        if earlier.iteration == later.iteration and self._disjoint_halves(earlier, later):
            return False
        return earlier.index != later.index or earlier.uniform

    def _disjoint_halves(self, a: Access, b: Access) -> bool:
        """A tree-reduction step, `if (tid < s) { ... a[tid] ... a[tid + s] ... }`: the
        threads that pass touch `a[tid]` only below `s` and `a[tid + s]` only from `s`
        up, so one thread's `a[tid]` is never another's `a[tid + s]`."""
        for low, high in ((a, b), (b, a)):
            _, low_idx = chain(low.node)
            _, high_idx = chain(high.node)
            if len(low_idx) != 1 or len(high_idx) != 1:
                continue
            index, offset = low_idx[0], high_idx[0]
            if offset.type != "binary_expression" or self.cuda.text(offset.child_by_field_name("operator")) != "+":
                continue
            t = self.normal(index)
            sides = [self.normal(offset.child_by_field_name(f)) for f in ("left", "right")]
            if t not in sides or index.type not in ("identifier", "field_expression") or \
                    "tid" not in expr_taint(self.cuda, index, self.function):
                continue
            step = sides[1] if sides[0] == t else sides[0]
            if self._guarded_below(low.node, high.node, t, step):
                return True
        return False

    def _guarded_below(self, first: ts.Node, second: ts.Node, index: str, step: str) -> bool:
        """Are both inside one `if (index < step)`?"""
        node = first.parent
        while node is not None and node.id != self.function.node.id:
            if node.type == "if_statement" and node.start_byte <= second.start_byte < node.end_byte:
                condition = node.child_by_field_name("condition")
                while condition is not None and condition.type in ("condition_clause", "parenthesized_expression") \
                        and condition.named_children:
                    condition = condition.named_children[0]
                if condition is not None and condition.type == "binary_expression":
                    op = self.cuda.text(condition.child_by_field_name("operator"))
                    left = self.normal(condition.child_by_field_name("left"))
                    right = self.normal(condition.child_by_field_name("right"))
                    if (op == "<" and (left, right) == (index, step)) or (op == ">" and (left, right) == (step, index)):
                        return True
            node = node.parent
        return False

    # -- accesses -------------------------------------------------------------

    def _accesses(self, node: ts.Node, statement: ts.Node, iteration: int, guard: int | None,
                  pending: list[Access]):
        """The shared-memory accesses inside `node` (found once per function, by position)."""
        low = bisect_left(self.starts, node.start_byte)
        high = bisect_left(self.starts, node.end_byte)
        for site in self.sites[low:high]:
            broadcast = site.sources is not None and \
                not any(p.write and (p.array in site.sources or p.array == site.array) for p in pending)
            yield Access(site.array, site.index, site.node, site.write, statement.id, iteration, guard,
                         site.uniform, site.pin, broadcast)

    def _sites(self) -> list[_Site]:
        """Every access to a shared name in the function, in order."""
        cuda, function = self.cuda, self.function
        declared = [v.declaration for v in cuda.shared if v.declaration is not None and function.contains(v.declaration)]
        sites: list[_Site] = []
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
                sites.append(_Site(node.start_byte, node, array, "", written(cuda, node), True, None, None))
                continue
            if _address_only(cuda, node):
                continue  # `(int*)&s[blockDim.x]`: an address into shared memory, not a read of it
            _, indices = chain(node)
            index = " ][ ".join(self.normal(i) for i in indices)
            uniform = not any("tid" in expr_taint(cuda, i, function) for i in indices)
            sites.append(_Site(node.start_byte, node, array, index, written(cuda, node), uniform, None, None))
        sites.sort(key=lambda site: site.start)
        for site in sites:
            if self.unique:
                site.pin = thread_pin(self, site.node)
            if site.write and site.uniform:
                site.sources = broadcast_sources(self, site, sites)
        return sites

    def normal(self, index: ts.Node) -> str:
        text = self.cuda.text(index)
        if not self.aliases:
            return text
        return _NAME.sub(lambda m: self.aliases.get(m.group(0), m.group(0)), text)


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


def _address_only(cuda: CudaModule, node: ts.Node) -> bool:
    """`&s[i]` that is not handed to an atomic: the address is taken, nothing is read."""
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    return parent is not None and parent.type == "pointer_expression" and cuda.text(parent)[:1] == "&" \
        and not written(cuda, node)


def written(cuda: CudaModule, node: ts.Node) -> bool:
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
