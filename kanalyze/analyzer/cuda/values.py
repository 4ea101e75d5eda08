"""Values in a CUDA unit: integer constants, launch dimensions, the initialiser
a local holds, whether it is ever reassigned.  A mixin of CudaModule (the
methods read its functions, variables and `#define`s)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.types import eval_int

if TYPE_CHECKING:
    from kanalyze.analyzer.cuda.entities import CudaFunction, Variable


class CudaValues:
    def int_value(self, node: ts.Node | None, function: CudaFunction | None = None, depth: int = 0) -> int | None:
        """An integer constant: literals, `#define`s, const locals with constant initialisers."""
        if node is None or depth > 8:
            return None
        key = (node.start_byte, node.end_byte)
        if key in self._int_cache:
            return self._int_cache[key]
        value = self._int_value(node, function, depth)
        self._int_cache[key] = value
        return value

    def _int_value(self, node: ts.Node, function: CudaFunction | None, depth: int) -> int | None:
        kind = node.type
        if kind == "number_literal":
            return eval_int(self.text(node))
        if kind in ("identifier", "type_identifier", "parameter_declaration"):
            # (a constructor argument the grammar read as a parameter is a name too)
            name = self.text(node)
            variable = self.variable(name, function)
            if variable is not None:
                if variable.init is not None and "list" not in variable.init.type and self.single_assignment(
                        variable, function):
                    return self.int_value(variable.init, function, depth + 1)
                return None
            define = self.defines.get(name)
            if define is not None:
                return eval_int(self.text(define), {k: v for k, v in self._define_ints().items() if k != name})
            return None
        if kind in ("parenthesized_expression", "binary_expression", "unary_expression"):
            names: dict[str, int] = {}
            for inner in walk(node):
                if inner.type == "identifier":
                    value = self.int_value(inner, function, depth + 1)
                    if value is None:
                        return None
                    names[self.text(inner)] = value
                elif inner.type not in ("number_literal", "parenthesized_expression", "binary_expression",
                                        "unary_expression"):
                    return None
            return eval_int(self.text(node), names)
        if kind == "call_expression" and self.text(node.child_by_field_name("function")) == "dim3":
            args = node.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            return self.int_value(first, function, depth + 1)
        return None

    @cached_property
    def _define_ints_cached(self) -> dict[str, int]:
        values: dict[str, int] = {}
        for name, node in self.defines.items():
            value = eval_int(self.text(node))
            if value is not None:
                values[name] = value
        return values

    def _define_ints(self) -> dict[str, int]:
        return self._define_ints_cached

    def single_assignment(self, variable: Variable, function: CudaFunction | None) -> bool:
        """No `x = ...`, `x += ...` or `x++` after the declaration."""
        if function is None or function.body is None:
            return True
        return not function.assignments(variable.name)

    def dims(self, node: ts.Node | None, function: CudaFunction | None) -> list[int | None] | None:
        """The x, y, z of a launch dimension (`256`, `threads`, `dim3 block(16, 16)`), None if unknown."""
        if node is None:
            return None
        if node.type == "identifier":
            variable = self.variable(self.text(node), function)
            if variable is not None and variable.ctype.base == "dim3":
                init = variable.init
                if init is None:
                    return None
                if init.type == "call_expression":
                    init = init.child_by_field_name("arguments")
                if init is not None and init.type in ("argument_list", "initializer_list", "parameter_list"):
                    return [self.int_value(a, function) for a in init.named_children]
                return None
        if node.type == "call_expression" and self.text(node.child_by_field_name("function")) == "dim3":
            args = node.child_by_field_name("arguments")
            return [self.int_value(a, function) for a in (args.named_children if args is not None else [])]
        return [self.int_value(node, function)]

    def resolve(self, node: ts.Node, function: CudaFunction | None, depth: int = 3) -> ts.Node:
        """A local variable's initialiser in place of its name (once assigned only)."""
        while depth > 0 and node is not None and node.type == "identifier":
            variable = self.variable(self.text(node), function)
            if variable is None or variable.init is None or not self.single_assignment(variable, function):
                break
            node = variable.init
            depth -= 1
        while node is not None and node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        return node


def walk(node: ts.Node) -> Iterator[ts.Node]:
    """`node` and every named node under it, in document order."""
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        current = pop()
        yield current
        if current.named_child_count:
            extend(reversed(current.named_children))
