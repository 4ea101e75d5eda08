"""A fast walk over LibCST trees.

LibCST's visitors rebuild every node as they go, and `node.children` is
computed by a visit: on kernel files both cost several times the parse itself.
The analyzer only reads the tree, so it walks the dataclass fields directly
and skips trivia (whitespace, comments, brackets, commas, operator tokens),
which are most of the nodes and never hold an expression.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import libcst as cst

_TRIVIA = (
    cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.Newline, cst.TrailingWhitespace,
    cst.Comment, cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon,
    cst.AssignEqual, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
    cst.BaseAugOp, cst.Asynchronous, cst.ImportStar,
)

_TRIVIA_FIELDS = {
    "whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators", "header",
    "footer", "comma", "semicolon", "equal", "colon", "lbracket", "rbracket", "lbrace",
    "rbrace", "dot", "asynchronous", "trailing_whitespace", "newline",
}

_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node_type: type) -> tuple[str, ...]:
    names = _FIELDS.get(node_type)
    if names is None:
        names = tuple(
            f.name for f in dataclasses.fields(node_type)
            if not f.name.startswith("whitespace") and f.name not in _TRIVIA_FIELDS
        )
        _FIELDS[node_type] = names
    return names


def child_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The non-trivia children of `node`, in field order."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            if not isinstance(value, _TRIVIA):
                yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode) and not isinstance(item, _TRIVIA):
                    yield item


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every non-trivia node under it."""
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        current = pop()
        yield current
        extend(child_nodes(current))


def walk_scope(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Like `walk`, but does not enter nested functions, classes or lambdas
    (their names live in a scope of their own)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        stack.extend(child_nodes(current))


def body_nodes(function: cst.FunctionDef) -> Iterator[cst.CSTNode]:
    """Nodes of a function's own body; nested defs, classes and lambdas are
    scopes of their own and are not entered (nor yielded)."""
    stack = list(child_nodes(function.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        yield node
        stack.extend(child_nodes(node))
