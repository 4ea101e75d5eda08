"""Is an fp32 argument provably at least 1 (or NaN)?  Then no subnormal can reach
it: a log of it (`__logf(1.0f + expf(x))`, log-sum-exp) never sees one.

`at_least_one(cuda, function, node)` answers yes for:
  - a literal >= 1; `a + b` with one side >= 1 and the other >= 0; `a * b` with
    both >= 1; `fmaxf(a, 1.0f)`; a cast of such a value;
  - a local every definition of which keeps the bound (`float d = 1.0f + e;`,
    `+=` of values >= 0 after that), its address never taken;
  - a sum of exponentials that holds exp(0) = 1: `m` the maximum of `a`, `b`, ...
    (`m = a; m = fmaxf(m, b);`) and `s = 0; s += expf(a - m); s += expf(b - m);`
    for every one of them, straight-line in one block, `a`, `b`, ... locals
    never assigned after their declaration, the sum read after the last term;
  - the same sum combined across a block or a warp through shared memory and warp
    shuffles (block_sums.py);
  - a by-value parameter of a `__device__` helper every call of which passes
    such a value (`fast_log(sum_exp)` into `__logf(x)`).
`non_negative` answers >= 0 (or NaN): exponentials, `fabsf`, `sqrtf`, `x * x`,
sums and products of such values.  Rounding keeps both bounds (1 + y >= 1 for
y >= 0 in round-to-nearest, and with flush-to-zero), and NaN is no subnormal.
"""

from __future__ import annotations

import tree_sitter as ts

from kanalyze.analyzer.cuda.block_sums import block_sum_with_one
from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk
from kanalyze.analyzer.cuda.warp_shuffles import MAXIMA

EXPONENTIALS = frozenset({"expf", "exp", "__expf", "exp2f", "exp2", "exp10f", "__exp10f"})
_NON_NEGATIVE = EXPONENTIALS | {"fabsf", "fabs", "sqrtf", "sqrt", "__fsqrt_rn"}
_WRAPPERS = ("parenthesized_expression", "cast_expression")
_FLOATS = ("float", "double")


def at_least_one(cuda: CudaModule, function: CudaFunction, node: ts.Node | None) -> bool:
    return _Bounds(cuda).at_least_one(function, node)


class _Bounds:
    def __init__(self, cuda: CudaModule) -> None:
        self.cuda = cuda
        self.visiting: set[tuple[int, str, str]] = set()

    def at_least_one(self, function: CudaFunction, node: ts.Node | None) -> bool:
        node = _unwrap(node)
        if node is None:
            return False
        cuda, kind = self.cuda, node.type
        if kind == "number_literal":
            return (_literal(cuda.text(node)) or 0.0) >= 1.0
        if kind == "binary_expression":
            op = cuda.text(node.child_by_field_name("operator"))
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if op == "+":
                return (self.at_least_one(function, left) and self.non_negative(function, right)) or \
                    (self.non_negative(function, left) and self.at_least_one(function, right))
            if op == "*":
                return self.at_least_one(function, left) and self.at_least_one(function, right)
            return False
        if kind == "call_expression":
            name, args = self.call(node)
            return name in MAXIMA and len(args) == 2 and \
                any((_literal(cuda.text(a)) or 0.0) >= 1.0 for a in args if a.type == "number_literal")
        if kind == "identifier":
            name = cuda.text(node)
            if name in function.locals:
                return self._local(function, name, "one") or self._sum_with_one(function, name, node) or \
                    block_sum_with_one(self, function, name, node)
            return self._parameter(function, name)
        return False

    def non_negative(self, function: CudaFunction, node: ts.Node | None) -> bool:
        node = _unwrap(node)
        if node is None:
            return False
        if self.at_least_one(function, node):
            return True
        cuda, kind = self.cuda, node.type
        if kind == "number_literal":
            value = _literal(cuda.text(node))
            return value is not None and value >= 0.0
        if kind == "binary_expression":
            op = cuda.text(node.child_by_field_name("operator"))
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if op == "*" and left is not None and right is not None and cuda.text(left) == cuda.text(right):
                return left.type in ("identifier", "field_expression")  # x * x
            return op in ("+", "*") and self.non_negative(function, left) and self.non_negative(function, right)
        if kind == "call_expression":
            name, args = self.call(node)
            return name in _NON_NEGATIVE or self._exponential_wrapper(name)
        if kind == "identifier" and cuda.text(node) in function.locals:
            return self._local(function, cuda.text(node), "zero")
        return False

    # -- names ----------------------------------------------------------------

    def call(self, node: ts.Node) -> tuple[str, list[ts.Node]]:
        callee, arguments = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        name = self.cuda.text(callee) if callee is not None else ""
        if name in MAXIMA | _NON_NEGATIVE and \
                any(f.name == name.lstrip(":").removeprefix("std::") for f in self.cuda.functions):
            name = ""  # the unit's own `max` or `expf`: not the math library's
        return name, list(arguments.named_children) if arguments is not None else []

    def exponential(self, name: str) -> bool:
        return name in EXPONENTIALS or self._exponential_wrapper(name)

    def _exponential_wrapper(self, name: str) -> bool:
        """`fast_exp`: a device helper whose body is `return expf(x);` of its one parameter."""
        helpers = [f for f in self.cuda.functions if f.name == name and f.is_device and f.body is not None]
        if len(helpers) != 1 or len(helpers[0].params) != 1:
            return False
        statements = [c for c in helpers[0].body.named_children if c.type != "comment"]
        if len(statements) != 1 or statements[0].type != "return_statement" or not statements[0].named_children:
            return False
        value = _unwrap(statements[0].named_children[0])
        if value is None or value.type != "call_expression":
            return False
        callee, args = self.call(value)
        return callee in EXPONENTIALS and len(args) == 1 and self.cuda.text(args[0]) == helpers[0].params[0].name

    def _enter(self, function: CudaFunction, name: str, what: str) -> bool:
        key = (function.node.id, name, what)
        if key in self.visiting:
            return False
        self.visiting.add(key)
        return True

    def _local(self, function: CudaFunction, name: str, bound: str) -> bool:
        """Every definition of the local keeps `bound` ("one": >= 1, "zero": >= 0)."""
        if not self.plain_local(function, name) or not self._enter(function, name, bound):
            return False
        try:
            keeps = self.at_least_one if bound == "one" else self.non_negative
            declarations = self.declarations(function, name)
            if not declarations or any(init is None or not keeps(function, init) for _, init in declarations):
                return False
            for node in function.assignments(name):
                if node.type == "update_expression":
                    if self.cuda.text(node).count("++") != 1:
                        return False
                    continue
                op = self.cuda.text(node.child_by_field_name("operator"))
                right = node.child_by_field_name("right")
                if not ((op == "=" and keeps(function, right)) or (op == "+=" and self.non_negative(function, right))
                        or (op == "*=" and keeps(function, right))):
                    return False
            return True
        finally:
            self.visiting.discard((function.node.id, name, bound))

    def declarations(self, function: CudaFunction, name: str) -> list[tuple[ts.Node, ts.Node | None]]:
        """(declaration, initial value) of each declaration of `name` in the function's body."""
        found = []
        body = function.body
        for declaration in self.cuda.declarations_of(name):
            if body is None or not (body.start_byte <= declaration.start_byte < body.end_byte):
                continue
            for variable in self.cuda.read_declaration(declaration):
                if variable.name == name:
                    found.append((declaration, variable.init))
        return found

    def plain_local(self, function: CudaFunction, name: str) -> bool:
        """A scalar local no pointer or reference can change behind its assignments."""
        variable = function.locals.get(name)
        if variable is None or variable.shared or variable.dims or variable.ctype.pointers:
            return False
        return self._unaliased(function, name)

    def _unaliased(self, function: CudaFunction, name: str) -> bool:
        """No `&name`, no reference bound to it or declaring it, no call that takes it by reference."""
        if function.body is None:
            return False
        text = self.cuda.text
        for node in walk(function.body):
            kind = node.type
            if kind == "reference_declarator" and any(text(c) == name for c in node.named_children):
                return False
            if kind == "init_declarator" and node.child_by_field_name("declarator") is not None and \
                    node.child_by_field_name("declarator").type == "reference_declarator" and \
                    text(_unwrap(node.child_by_field_name("value")) or node) == name:
                return False
            if kind == "pointer_expression" and text(node)[:1] == "&":
                argument = _unwrap(node.child_by_field_name("argument"))
                if argument is not None and text(argument) == name:
                    return False
            if kind == "call_expression" and self._by_reference(node, name):
                return False
        return True

    def _by_reference(self, call: ts.Node, name: str) -> bool:
        """Is `name` an argument of a call that may bind it to a reference (`swap`, a helper's `float&`)?"""
        arguments = call.child_by_field_name("arguments")
        if arguments is None or not any(self.cuda.text(_unwrap(a) or a) == name for a in arguments.named_children):
            return False
        callee = self.cuda.text(call.child_by_field_name("function")).split("<")[0]
        last = callee.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
        if last == "swap":
            return True
        return any(f.name == last and any("&" in self.cuda.text(p.node.parent or p.node) for p in f.params)
                   for f in self.cuda.functions)

    def _parameter(self, function: CudaFunction, name: str) -> bool:
        """A by-value parameter of a device helper, never assigned, >= 1 at every call."""
        if function.is_kernel or function.assignments(name) or not self._unaliased(function, name) or \
                not self._enter(function, name, "parameter"):
            return False
        try:
            index = next((i for i, p in enumerate(function.params) if p.name == name), None)
            if index is None or function.params[index].ctype.pointers or \
                    "&" in self.cuda.text(function.params[index].node.parent or function.params[index].node):
                return False
            if sum(1 for f in self.cuda.functions if f.name == function.name) != 1:
                return False
            calls = [c for c in self.cuda.calls_named(function.name) if c.function is not None]
            return bool(calls) and all(len(c.args) > index and self.at_least_one(c.function, c.args[index])
                                       for c in calls)
        finally:
            self.visiting.discard((function.node.id, name, "parameter"))

    # -- log-sum-exp ------------------------------------------------------------

    def _sum_with_one(self, function: CudaFunction, name: str, use: ts.Node) -> bool:
        """`s = 0; s += expf(a - m); s += expf(b - m); ...` with `m` the maximum of `a`, `b`, ..."""
        declarations = self.declarations(function, name)
        if len(declarations) != 1 or not self.plain_local(function, name) or not self._enter(function, name, "sum"):
            return False
        try:
            return self._holds_exp_zero(function, name, declarations[0], use)
        finally:
            self.visiting.discard((function.node.id, name, "sum"))

    def _holds_exp_zero(self, function: CudaFunction, name: str, declared: tuple[ts.Node, ts.Node | None],
                        use: ts.Node) -> bool:
        declaration, init = declared
        block = declaration.parent
        if init is None or block is None or block.type != "compound_statement" or \
                not self.non_negative(function, init):
            return False
        updates = function.assignments(name)
        terms: list[tuple[str, str, int]] = []   # (a, m, where) of each `s += expf(a - m)`
        for node in updates:
            if node.type != "assignment_expression" or self.cuda.text(node.child_by_field_name("operator")) != "+=" \
                    or not _statement_of(node, block) or not self.non_negative(function, node.child_by_field_name("right")):
                return False
            term = self._exp_difference(node.child_by_field_name("right"))
            if term is not None:
                terms.append((term[0], term[1], node.start_byte))
        if not updates or use.start_byte < max(n.end_byte for n in updates):
            return False
        for m in {m for _, m, _ in terms}:
            first = min(start for _, mm, start in terms if mm == m)
            candidates = self._maximum_of(function, m, block, first)
            if candidates is not None and candidates <= {a for a, mm, _ in terms if mm == m}:
                return True
        return False

    def _exp_difference(self, node: ts.Node | None) -> tuple[str, str] | None:
        """`expf(a - m)` → (a, m)."""
        node = _unwrap(node)
        if node is None or node.type != "call_expression":
            return None
        name, args = self.call(node)
        if not (name in EXPONENTIALS or self._exponential_wrapper(name)) or len(args) != 1:
            return None
        difference = _unwrap(args[0])
        if difference is None or difference.type != "binary_expression" or \
                self.cuda.text(difference.child_by_field_name("operator")) != "-":
            return None
        left, right = difference.child_by_field_name("left"), difference.child_by_field_name("right")
        if right is None or right.type != "identifier" or left is None:
            return None
        return self.cuda.text(left), self.cuda.text(right)

    def _maximum_of(self, function: CudaFunction, m: str, block: ts.Node, before: int) -> set[str] | None:
        """The values `m` is the maximum of (`m = a; m = fmaxf(m, b);` in `block`, all before `before`),
        each a local or a field of one that nothing assigns after its declaration."""
        declarations = self.declarations(function, m)
        if len(declarations) != 1 or not self.plain_local(function, m):
            return None
        declaration, init = declarations[0]
        if declaration.parent is None or declaration.parent.id != block.id or init is None or \
                declaration.end_byte > before:
            return None
        values = [init]
        for node in function.assignments(m):
            if node.type != "assignment_expression" or self.cuda.text(node.child_by_field_name("operator")) != "=" \
                    or not _statement_of(node, block) or node.end_byte > before:
                return None
            right = _unwrap(node.child_by_field_name("right"))
            name, args = self.call(right) if right is not None and right.type == "call_expression" else ("", [])
            others = [a for a in args if self.cuda.text(a) != m]
            if name not in MAXIMA or len(args) != 2 or len(others) != 1:
                return None
            values.append(others[0])
        for value in values:
            value = _unwrap(value)
            base = value
            while base is not None and base.type == "field_expression":
                base = base.child_by_field_name("argument")
            if base is None or base.type != "identifier" or not self.plain_local(function, self.cuda.text(base)) \
                    or self._assigned_after_declaration(function, self.cuda.text(base)):
                return None
        return {self.cuda.text(_unwrap(v)) for v in values}

    def _assigned_after_declaration(self, function: CudaFunction, name: str) -> bool:
        if function.assignments(name) or len(self.declarations(function, name)) != 1:
            return True
        for node in walk(function.body):
            if node.type in ("assignment_expression", "update_expression"):
                target = node.child_by_field_name("left") or node.child_by_field_name("argument")
                while target is not None and target.type in ("field_expression", "subscript_expression"):
                    target = target.child_by_field_name("argument")
                if target is not None and self.cuda.text(target) == name:
                    return True
        return False


def _statement_of(node: ts.Node, block: ts.Node) -> bool:
    """Is `node` the whole expression of a statement directly in `block`?"""
    parent = node.parent
    return parent is not None and parent.type == "expression_statement" and \
        parent.parent is not None and parent.parent.id == block.id


def _unwrap(node: ts.Node | None) -> ts.Node | None:
    """The value inside parentheses and casts to a floating type (an integer cast may wrap)."""
    while node is not None and node.type in _WRAPPERS:
        if node.type == "cast_expression":
            kind = node.child_by_field_name("type")
            if kind is None or kind.text is None or kind.text.decode("utf-8", "replace").strip() not in _FLOATS:
                return node
            node = node.child_by_field_name("value")
        else:
            node = node.named_children[0] if node.named_children else None
    return node


def _literal(text: str) -> float | None:
    """A decimal literal's value (None for hexadecimal and anything else)."""
    text = text.replace("'", "")
    if text[:2].lower() == "0x":
        return None
    try:
        return float(text.rstrip("fFlLuU"))
    except ValueError:
        return None
