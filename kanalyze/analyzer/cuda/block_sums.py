"""Softmax's normaliser across a thread block or a warp: a sum that holds exp(0) = 1.

    float m = -INFINITY;                                       // the maximum ...
    for (int i = tid; i < n; i += blockDim.x) m = max(m, row[i]);
    m = warp_reduce_max(m);  if (lane == 0) s[warp] = m;  __syncthreads();  ...  m = s[0];
    float t = 0;                                               // ... and the sum
    for (int i = tid; i < n; i += blockDim.x) t += __expf(row[i] - m);
    t = warp_reduce_sum(t);  if (lane == 0) s[warp] = t;  __syncthreads();  ...  sum = s[0];
    __logf(sum);

`block_sum_with_one(bounds, function, name, use)` answers yes when `name`, read at `use`,
holds a sum combined across threads (its last definition before `use` reads shared
memory, or a warp-shuffle helper's result) of non-negative terms `expf(v - m)`, where
`m`, combined across threads the same way, is the maximum of the same `v` over a loop of
the same header: the element that attains the maximum adds exp(0) = 1, every other term is
>= 0, so the sum is at least 1 (or NaN), never subnormal.

Values are followed through every definition of a local (plain, never aliased), through
device helpers of one by-value parameter that only combine it with warp shuffles of itself
(`val += __shfl_xor_sync(mask, val, o)`; `val = max(val, __shfl_down_sync(...))`), and
through a shared array: a read `s[k]` takes the stores to `s` of the phase before its own
(between the two barriers before it) and of its own phase before it.  Every definition on
the way must be of the same kind (a sum: 0, `+=` of an exponential difference or of a
shuffle; a maximum: -INFINITY, `max(m, v)`).

What it takes on trust: that the reductions combine every thread's partial.  A reduction
that drops a warp computes a wrong normaliser, which is a wrong result (CMP001), not a
subnormal.
"""

from __future__ import annotations

import re
from typing import Protocol

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk
from kanalyze.analyzer.cuda.warp_shuffles import MAXIMA, bare as _bare, reducer_kind, shuffle_of

_LOWEST = frozenset({"-INFINITY", "-FLT_MAX", "-HUGE_VALF", "-CUDART_INF_F", "-1e38f", "-3.402823466e38f"})
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_BARRIERS = frozenset({"__syncthreads"})


class Bounds(Protocol):
    """What this module borrows from lower_bounds: its reading of calls, locals and exponentials."""

    cuda: CudaModule

    def plain_local(self, function: CudaFunction, name: str) -> bool: ...
    def declarations(self, function: CudaFunction, name: str) -> list[tuple[ts.Node, ts.Node | None]]: ...
    def exponential(self, name: str) -> bool: ...
    def call(self, node: ts.Node) -> tuple[str, list[ts.Node]]: ...


def block_sum_with_one(bounds: Bounds, function: CudaFunction, name: str, use: ts.Node) -> bool:
    """Does `name`, read at `use`, hold softmax's normaliser combined across threads (above)?"""
    reader = _Flow(bounds, function)
    if not reader.combined_before(name, use):
        return False
    sums = reader.terms(name, "sum")
    if not sums:
        return False
    for m in {m for _, _, m in sums}:
        summed = {(header, v) for header, v, mm in sums if mm == m}
        if not reader.combined_before(m, _first_term(bounds, function, m)):
            continue
        maxima = reader.terms(m, "max")
        if maxima and {(h, v) for h, v, _ in maxima} <= summed and reader.same_values(maxima):
            return True
    return False


def _first_term(bounds: Bounds, function: CudaFunction, m: str) -> int:
    """Where the first `expf(v - m)` starts."""
    return min((node.start_byte for node in walk(function.body) if node.type == "call_expression"
                and (_difference(bounds, node) or ("", ""))[1] == m), default=0)


class _Flow:
    def __init__(self, bounds: Bounds, function: CudaFunction) -> None:
        self.bounds, self.function, self.cuda = bounds, function, bounds.cuda
        self.barriers = sorted(c.node.start_byte for c in self.cuda.calls_in(function, *_BARRIERS))

    # -- where the last definition came from -----------------------------------------

    def combined_before(self, name: str, use: ts.Node | int) -> bool:
        """Is the last definition of `name` before `use` a combination across threads
        (a shared read, a shuffle helper's result), in a block around `use`?"""
        at = use if isinstance(use, int) else use.start_byte
        definitions = [(n, value) for n, value in self._definitions(name) if n.end_byte <= at]
        if not definitions:
            return False
        node, value = max(definitions, key=lambda d: d[0].start_byte)
        statement = node if node.type == "declaration" else node.parent
        if statement is None or not _encloses(statement.parent, at):
            return False
        value = _bare(value)
        if value is None:
            return False
        if value.type == "subscript_expression":
            return self._shared(value) is not None
        if value.type == "call_expression":
            if shuffle_of(self.bounds, value, name):
                return self.combined_before(name, node.start_byte)   # a broadcast of what it held
            callee, _ = self.bounds.call(value)
            return reducer_kind(self.bounds, callee) is not None
        return False

    # -- the terms a value is made of --------------------------------------------------

    def terms(self, name: str, kind: str) -> set[tuple[str, str, str]] | None:
        """Every (loop header, v, m) of `expf(v - m)` (kind "sum"; m "" for "max") the
        value of `name` may be made of; None where any definition is of another kind."""
        found: set[tuple[str, str, str]] = set()
        seen: set[tuple] = set()
        work: list[tuple[str, object]] = [("local", name)]
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            if len(seen) > 64:
                return None
            what, where = item
            if what == "local":
                if not self.bounds.plain_local(self.function, where):
                    return None
                pairs = [(n, v, op) for n, v, op in self._definitions_with_ops(where)]
            else:
                pairs = [(n, v, "=") for n, v in self._stores_reaching(*where)]
            if not pairs:
                return None
            for node, value, op in pairs:
                step = self._step(what == "local" and where, node, value, op, kind)
                if step is None:
                    return None
                terms, more = step
                found |= terms
                work.extend(more)
        return found

    def _step(self, own: str | bool, node: ts.Node, value: ts.Node | None, op: str, kind: str):
        """One definition: (terms it adds, values to follow), or None for another kind."""
        cuda, value = self.cuda, _bare(value)
        if value is None:
            return None
        text = cuda.text(value)
        if op == "+=" and kind == "sum":
            if value.type == "call_expression":
                if own and shuffle_of(self.bounds, value, own):
                    return set(), []
                difference = _difference(self.bounds, value)
                if difference is not None:
                    header = self._loop_header(node)
                    return ({(header, difference[0], difference[1])}, []) if header else None
            return None
        if op != "=":
            return None
        if kind == "sum" and value.type == "number_literal" and text.rstrip("fF") in ("0", "0.0", "0."):
            return set(), []
        if kind == "max" and text.replace(" ", "") in _LOWEST:
            return set(), []
        if value.type == "identifier":
            return set(), [("local", text)]
        if value.type == "subscript_expression":
            shared = self._shared(value)
            return (set(), [("shared", (shared, value.start_byte))]) if shared else None
        if value.type == "call_expression":
            callee, args = self.bounds.call(value)
            if own and shuffle_of(self.bounds, value, own):
                return set(), []                                          # a broadcast
            if reducer_kind(self.bounds, callee) == kind and len(args) == 1 and _bare(args[0]) is not None \
                    and _bare(args[0]).type == "identifier":
                return set(), [("local", cuda.text(_bare(args[0])))]
            if kind == "max" and callee in MAXIMA and len(args) == 2 and own:
                others = [a for a in args if cuda.text(a) != own]
                if len(others) != 1:
                    return None
                if shuffle_of(self.bounds, others[0], own):
                    return set(), []
                header = self._loop_header(node)
                return ({(header, cuda.text(others[0]), "")}, []) if header else None
        return None

    # -- definitions, loops, shared memory ---------------------------------------------

    def _definitions(self, name: str) -> list[tuple[ts.Node, ts.Node | None]]:
        return [(n, v) for n, v, op in self._definitions_with_ops(name) if op == "="]

    def _definitions_with_ops(self, name: str) -> list[tuple[ts.Node, ts.Node | None, str]]:
        found = [(declaration, init, "=") for declaration, init in self.bounds.declarations(self.function, name)]
        for node in self.function.assignments(name):
            if node.type != "assignment_expression":
                found.append((node, None, "?"))
                continue
            found.append((node, node.child_by_field_name("right"),
                          self.cuda.text(node.child_by_field_name("operator"))))
        return found

    def _loop_header(self, node: ts.Node) -> str | None:
        """The text of the `for` header the statement runs in, directly or in its body's block."""
        parent = node.parent
        while parent is not None and parent.type in ("expression_statement", "compound_statement"):
            parent = parent.parent
        if parent is None or parent.type != "for_statement":
            return None
        body = parent.child_by_field_name("body")
        return self.cuda.text(parent)[: body.start_byte - parent.start_byte].strip() if body is not None else None

    def _shared(self, read: ts.Node) -> str | None:
        """The shared array `s` of a read `s[k]`: a `__shared__` array, or a pointer local set
        once from dynamic shared memory, used only through subscripts."""
        base = _bare(read.child_by_field_name("argument"))
        if base is None or base.type != "identifier":
            return None
        name = self.cuda.text(base)
        variable = self.function.variable(name)
        if variable is None:
            return None
        if not variable.shared:
            source = _bare(variable.init) if variable.init is not None else None
            holder = _pointer_source(self.cuda, source)
            if holder is None or self.function.assignments(name):
                return None
            held = self.function.variable(holder) or self.cuda.globals.get(holder)
            if held is None or not held.shared or self._mentions(holder) != 1:
                return None
        if self._mentions(name, only_subscripts=True) is None:
            return None
        if any(self._in_loop(b) for b in self.barriers):
            return None
        return name

    def _mentions(self, name: str, only_subscripts: bool = False) -> int | None:
        """How often `name` is read in the body; None if `only_subscripts` and one read is not `name[...]`."""
        count = 0
        for node in walk(self.function.body):
            if node.type != "identifier" or self.cuda.text(node) != name:
                continue
            parent = node.parent
            if parent is not None and parent.type in ("init_declarator", "array_declarator", "pointer_declarator"):
                continue
            count += 1
            argument = parent.child_by_field_name("argument") if parent is not None else None
            if only_subscripts and (parent is None or parent.type != "subscript_expression"
                                    or argument is None or argument.id != node.id
                                    or (parent.parent is not None and parent.parent.type == "pointer_expression")):
                return None
        return count

    def _in_loop(self, at: int) -> bool:
        node = self.function.body.descendant_for_byte_range(at, at) if self.function.body is not None else None
        while node is not None and node.id != self.function.body.id:
            if node.type in _LOOPS:
                return True
            node = node.parent
        return False

    def _stores_reaching(self, array: str, at: int) -> list[tuple[ts.Node, ts.Node | None]]:
        """The stores `array[k] = v` of the phase before `at`'s and of its own before it."""
        before = [b for b in self.barriers if b < at]
        if not before:
            return []
        start = before[-2] if len(before) >= 2 else (self.function.body.start_byte if self.function.body else 0)
        stores = []
        for node in walk(self.function.body):
            if node.type not in ("assignment_expression", "update_expression"):
                continue
            target = _bare(node.child_by_field_name("left") or node.child_by_field_name("argument"))
            if target is None or target.type != "subscript_expression":
                continue
            base = _bare(target.child_by_field_name("argument"))
            if base is None or self.cuda.text(base) != array:
                continue
            if node.type != "assignment_expression" or self.cuda.text(node.child_by_field_name("operator")) != "=":
                return []
            if start < node.start_byte < at:
                stores.append((node, node.child_by_field_name("right")))
        return stores

    # -- the same values in both loops --------------------------------------------------

    def same_values(self, terms: set[tuple[str, str, str]]) -> bool:
        """Does each `v` mean the same in every loop of its header?  Its names are the loop's
        counter, locals declared in the loop's body the same way in every such loop, or
        names nothing assigns; what it reads through a subscript, nothing writes."""
        loops: dict[str, list[ts.Node]] = {}
        for node in walk(self.function.body):
            if node.type == "for_statement":
                body = node.child_by_field_name("body")
                if body is not None:
                    loops.setdefault(self.cuda.text(node)[: body.start_byte - node.start_byte].strip(), []).append(node)
        written = self._written_bases()
        for header, v, _ in terms:
            for name in _names_in(v):
                if name in written:
                    return False
                declared = {self._declared_text(loop, name) for loop in loops.get(header, [])}
                if declared == {None}:
                    if self.function.assignments(name) and name not in _names_in(header):
                        return False
                elif len(declared) != 1 or None in declared:
                    return False
        return True

    def _declared_text(self, loop: ts.Node, name: str) -> str | None:
        body = loop.child_by_field_name("body")
        for node in walk(body) if body is not None else ():
            if node.type == "declaration" and any(v.name == name for v in self.cuda.read_declaration(node)):
                return self.cuda.text(node)
        return None

    def _written_bases(self) -> set[str]:
        written = set()
        for node in walk(self.function.body):
            if node.type in ("assignment_expression", "update_expression"):
                target = _bare(node.child_by_field_name("left") or node.child_by_field_name("argument"))
                while target is not None and target.type in ("subscript_expression", "field_expression",
                                                             "pointer_expression"):
                    if target.type != "field_expression":
                        written.add(self.cuda.text(_bare(target.child_by_field_name("argument")) or target))
                    target = _bare(target.child_by_field_name("argument"))
        return written


def _difference(bounds: Bounds, call: ts.Node) -> tuple[str, str] | None:
    """`expf(v - m)` → (v, m), `m` a name."""
    callee, args = bounds.call(call)
    if not bounds.exponential(callee) or len(args) != 1:
        return None
    difference = _bare(args[0])
    if difference is None or difference.type != "binary_expression" or \
            bounds.cuda.text(difference.child_by_field_name("operator")) != "-":
        return None
    left, right = difference.child_by_field_name("left"), _bare(difference.child_by_field_name("right"))
    if left is None or right is None or right.type != "identifier":
        return None
    return bounds.cuda.text(left), bounds.cuda.text(right)


def _pointer_source(cuda: CudaModule, node: ts.Node | None) -> str | None:
    """`reinterpret_cast<float*>(smem)` or `(float*)smem` → "smem"."""
    if node is None:
        return None
    if node.type == "cast_expression":
        node = _bare(node.child_by_field_name("value"))
    elif node.type == "call_expression" and cuda.text(node.child_by_field_name("function")).startswith(
            ("reinterpret_cast", "static_cast")):
        arguments = node.child_by_field_name("arguments")
        node = _bare(arguments.named_children[0]) if arguments is not None and arguments.named_children else None
    return cuda.text(node) if node is not None and node.type == "identifier" else None


def _names_in(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _encloses(block: ts.Node | None, at: int) -> bool:
    """Is `at` inside `block`, with no `if` between the definition and the block?"""
    return block is not None and block.type == "compound_statement" and block.start_byte <= at < block.end_byte
