"""Small questions about one call's arguments, shared by the model and the rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.entities import Param

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.model import TritonModule


def bind_call_args(call: cst.Call, params: list[Param] | list[str]) -> dict[str, cst.BaseExpression]:
    """Parameter name → argument expression, for positional and keyword args.
    `params` are a jit function's Params or plain parameter names."""
    bound: dict[str, cst.BaseExpression] = {}
    names_in_order = [p if isinstance(p, str) else p.name for p in params]
    names = set(names_in_order)
    index = 0
    for arg in call.args:
        if arg.star:
            return bound  # *args / **kwargs: cannot bind the rest statically
        if arg.keyword is not None:
            if arg.keyword.value in names:  # others are launch options (num_warps, ...)
                bound[arg.keyword.value] = arg.value
        elif index < len(names_in_order):
            bound[names_in_order[index]] = arg.value
            index += 1
    return bound


def keyword(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    """The argument passed as `name=` (or at `position` when given positionally)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            return positional[position].value
    return None


# An integer literal wider than this is no size, stride or constant a kernel uses:
# it is read as unknown (a hex literal of thousands of digits parses, but its
# decimal text, which z3 and the messages need, is refused past 4,300 digits).
MAX_LITERAL_BITS = 1024


def int_literal(expr: cst.BaseExpression | None) -> int | None:
    """The value of an integer literal (or of its negation); None for anything else,
    and for a literal too wide to be a size (MAX_LITERAL_BITS)."""
    if isinstance(expr, cst.Integer):
        try:
            value = int(expr.evaluated_value)
        except (ValueError, SyntaxError):  # `0x_`; more digits than Python converts
            return None
        return value if value.bit_length() <= MAX_LITERAL_BITS else None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = int_literal(expr.expression)
        return -inner if inner is not None else None
    return None


def string_literal(expr: cst.BaseExpression | None) -> str | None:
    """The text of a plain string literal; None for anything else: a bytes literal,
    and a literal Python refuses (`b"é"`, `"\\N{no such name}"`), whose value
    LibCST computes by raising."""
    if not isinstance(expr, cst.SimpleString):
        return None
    try:
        value = expr.evaluated_value
    except (SyntaxError, ValueError):
        return None
    return value if isinstance(value, str) else None


def calls_within(model: TritonModule, node: cst.CSTNode) -> Iterable[tuple[cst.Call, str | None]]:
    for inner in walk(node):
        if isinstance(inner, cst.Call):
            yield inner, model.call_name(inner)
