"""`expf(x) - 1` standing for `expm1f(x)` in CUDA C++ device code (EXC002).

As in Triton (analyzer/triton/exp_minus_one.py): float `expf` of any |x| below 2^-24 is
exactly 1, so the difference is 0 where torch's ELU, SELU, CELU (`std::expm1`) and tanh keep
a tiny or subnormal x.  It stands for expm1 in the negative branch of an ELU (a `?:` or an
`if`/`else` testing x against 0, or `fminf(0, ...)`) and in a tanh's numerator
(`(e - 1) / (e + 1)`, one `e`); elsewhere (a cross-entropy gradient `p - 1` at the target
column) it is the formula itself.  Where a constant is added to it before the output
(GELU's `1.0f + t`, in the statement or where a variable holding it is read), the loss is
absorbed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaCall
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk

EXPONENTIALS = ("exp", "expf", "__expf", "exp2f", "exp2", "std::exp")
_STATEMENTS = {"expression_statement", "declaration", "return_statement", "compound_statement"}
_LITERAL = "number_literal"
_ONE_APART = rb"-\s*1(?:\.0*)?[fF]?\b|\b1(?:\.0*)?[fF]?\s*-"    # `... - 1.0f`, `1 - ...`: where to look


@dataclass
class CudaExpMinusOne:
    node: ts.Node          # the difference
    call: CudaCall         # its exponential
    negated: bool          # `1 - expf(x)`


def exp_minus_ones(cuda: CudaModule) -> Iterator[CudaExpMinusOne]:
    for difference in cuda.find(_ONE_APART, "binary_expression"):
        function = cuda.function_of(difference)
        if function is None or not function.is_device or _operator(cuda, difference) != "-":
            continue
        left, right = difference.child_by_field_name("left"), difference.child_by_field_name("right")
        if _one(cuda, right):
            held, negated = left, False
        elif _one(cuda, left):
            held, negated = right, True
        else:
            continue
        call = _exponential(cuda, held)
        if call is None or len(call.args) != 1:
            continue
        argument = call.args[0]
        if not any(n.type == "identifier" for n in walk(argument)):
            continue   # a constant's exponential
        if _stands_for_expm1(cuda, difference, held, argument) and not _absorbed(cuda, difference):
            yield CudaExpMinusOne(difference, call, negated)


def _exponential(cuda: CudaModule, held: ts.Node | None) -> CudaCall | None:
    """The `expf(...)` call `held` is: the call itself, or a variable of the function
    declared once with it and never assigned again."""
    while held is not None and held.type == "parenthesized_expression" and held.named_child_count == 1:
        held = held.named_children[0]
    if held is None:
        return None
    if held.type == "identifier":
        value = _only_value(cuda, held)
        return _exponential(cuda, value) if value is not None and value.type != "identifier" else None
    if held.type != "call_expression":
        return None
    call = next((c for c in cuda.calls_named(*EXPONENTIALS) if c.node.id == held.id), None)
    return call


def _only_value(cuda: CudaModule, name: ts.Node) -> ts.Node | None:
    """The initializer of a variable declared once in the function and never assigned."""
    function = cuda.function_of(name)
    text = cuda.text(name)
    declarations = [d for d in cuda.declarations_of(text) if cuda.function_of(d) is function]
    if len(declarations) != 1 or any(cuda.function_of(a) is function for a in cuda.assignments_to(text)):
        return None
    for n in declarations[0].named_children:
        if n.type == "init_declarator" and cuda.text(n.child_by_field_name("declarator")) == text:
            return n.child_by_field_name("value")
    return None


def _outer(node: ts.Node) -> ts.Node:
    while node.parent is not None and node.parent.type == "parenthesized_expression":
        node = node.parent
    return node


def _operator(cuda: CudaModule, node: ts.Node) -> str:
    op = node.child_by_field_name("operator")
    return cuda.text(op) if op is not None else ""


def _number(cuda: CudaModule, node: ts.Node | None) -> float | None:
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    if node is None or node.type != _LITERAL:
        return None
    text = cuda.text(node).rstrip("fFlLuU")
    try:
        return float(text)
    except (ValueError, OverflowError):
        return None


def _one(cuda: CudaModule, node: ts.Node | None) -> bool:
    return _number(cuda, node) == 1.0


def _squeezed(cuda: CudaModule, node: ts.Node) -> str:
    return "".join(cuda.text(node).split())


def _inside(outer: ts.Node | None, node: ts.Node) -> bool:
    return outer is not None and outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _tests_x_against_zero(cuda: CudaModule, condition: ts.Node | None, argument: ts.Node) -> bool:
    """`x > 0`, `x[i] <= 0.0f` with x the exponential's argument (or part of it: `x / alpha`)."""
    while condition is not None and condition.type in ("parenthesized_expression", "condition_clause") \
            and condition.named_child_count == 1:
        condition = condition.named_children[0]
    if condition is None or condition.type != "binary_expression" \
            or _operator(cuda, condition) not in (">", ">=", "<", "<="):
        return False
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    text = _squeezed(cuda, argument)
    for tested, bound in ((left, right), (right, left)):
        if tested is not None and _number(cuda, bound) == 0.0 and _squeezed(cuda, tested) in text:
            return True
    return False


def _min_with_zero(cuda: CudaModule, node: ts.Node | None) -> bool:
    """`fminf(x, 0.0f)` (or `fmin`, `min`): an ELU's negative part."""
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    if node is None or node.type != "call_expression" or \
            cuda.text(node.child_by_field_name("function")) not in ("fminf", "fmin", "min", "std::min"):
        return False
    arguments = node.child_by_field_name("arguments")
    return arguments is not None and any(_number(cuda, a) == 0.0 for a in arguments.named_children)


def _negative_part(cuda: CudaModule, argument: ts.Node) -> bool:
    """The exponential's argument is `fminf(x, 0)`, or a variable declared once with it."""
    if argument.type == "identifier":
        value = _only_value(cuda, argument)
        return value is not None and _min_with_zero(cuda, value)
    return _min_with_zero(cuda, argument)


def _stands_for_expm1(cuda: CudaModule, difference: ts.Node, held: ts.Node, argument: ts.Node) -> bool:
    """An ELU's negative part or a tanh's numerator: at the difference itself, or where the
    variable its statement declares or assigns is read (`float e = expf(x) - 1.0f; y = x > 0
    ? x : a * e;`)."""
    if _negative_part(cuda, argument):
        return True
    exp_text = _squeezed(cuda, held)
    if _in_expm1_context(cuda, difference, argument, exp_text):
        return True
    target = _assigned(difference)
    return target is not None and any(_in_expm1_context(cuda, read, argument, exp_text)
                                      for read in _reads_after(cuda, difference, cuda.text(target)))


def _in_expm1_context(cuda: CudaModule, site: ts.Node, argument: ts.Node, exp_text: str) -> bool:
    node = site
    while node.parent is not None and node.type not in _STATEMENTS:
        parent = node.parent
        if parent.type == "conditional_expression":
            if not _inside(parent.child_by_field_name("condition"), node) and \
                    _tests_x_against_zero(cuda, parent.child_by_field_name("condition"), argument):
                return True
        elif parent.type == "argument_list" and _min_with_zero(cuda, parent.parent):
            return True
        elif parent.type == "binary_expression" and _operator(cuda, parent) == "/" \
                and _inside(parent.child_by_field_name("left"), site):
            for n in walk(parent.child_by_field_name("right")):
                if n.type == "binary_expression" and _operator(cuda, n) == "+":
                    sides = (n.child_by_field_name("left"), n.child_by_field_name("right"))
                    if any(_one(cuda, a) and b is not None and _squeezed(cuda, b) == exp_text
                           for a, b in (sides, sides[::-1])):
                        return True
        node = parent
    # an `if (x > 0) ... else ...` around the statement
    while node is not None and node.type != "function_definition":
        parent = node.parent
        if parent is not None and parent.type == "if_statement" \
                and not _inside(parent.child_by_field_name("condition"), node) \
                and _tests_x_against_zero(cuda, parent.child_by_field_name("condition"), argument):
            return True
        node = parent
    return False


def _assigned(node: ts.Node) -> ts.Node | None:
    """The variable whose declaration or assignment `node`'s value is (`float t = ...`)."""
    while node.parent is not None and node.type not in _STATEMENTS:
        parent = node.parent
        if parent.type in ("init_declarator", "assignment_expression"):
            target = parent.child_by_field_name("declarator") or parent.child_by_field_name("left")
            return target if target is not None and target.type == "identifier" and target.id != node.id else None
        node = parent
    return None


def _absorbed(cuda: CudaModule, difference: ts.Node, follow: bool = True) -> bool:
    """A constant added on the way out: in the statement, or (`follow`) at every read of the
    variable the statement declares or assigns, one step."""
    node = difference
    while node.parent is not None and node.type not in _STATEMENTS:
        parent = node.parent
        if parent.type in ("init_declarator", "assignment_expression"):
            break
        if parent.type == "binary_expression" and _operator(cuda, parent) in ("+", "-"):
            other = parent.child_by_field_name("right") if _inside(parent.child_by_field_name("left"), node) \
                else parent.child_by_field_name("left")
            if _number(cuda, other) not in (None, 0.0):
                return True
        node = parent
    target = _assigned(difference) if follow else None
    if target is None:
        return False
    reads = _reads_after(cuda, difference, cuda.text(target))
    return bool(reads) and all(_absorbed(cuda, r, follow=False) for r in reads)


def _reads_after(cuda: CudaModule, at: ts.Node, name: str) -> list[ts.Node]:
    """The reads of `name` after `at` in its function (not the places it is assigned)."""
    function = cuda.function_of(at)
    body = function.body if function is not None else None
    if body is None:
        return []
    found = []
    for position in cuda.word_positions(name):
        if not (at.end_byte < position < body.end_byte):
            continue
        n = cuda.root.descendant_for_byte_range(position, position + len(name))
        if n is None or n.type != "identifier":
            continue
        parent = n.parent
        if parent is not None and parent.type in ("init_declarator", "assignment_expression") and \
                (parent.child_by_field_name("declarator") or parent.child_by_field_name("left")) == n:
            continue
        found.append(n)
    return found
