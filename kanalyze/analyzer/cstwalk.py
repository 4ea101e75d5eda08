"""A fast walk over LibCST trees.

LibCST's visitors rebuild every node as they go, and `node.children` is
computed by a visit: on kernel files both cost several times the parse itself.
The analyzer only reads the tree, so it walks the dataclass fields directly
and skips trivia (whitespace, comments, brackets, commas, operator tokens),
which are most of the nodes and never hold an expression.
"""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
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


# type → 0: not a node, 1: trivia, 2: a node worth visiting.  isinstance
# against LibCST's abstract base classes is slow; a type lookup is not.
_KIND: dict[type, int] = {}


def _kind(value_type: type) -> int:
    kind = _KIND.get(value_type)
    if kind is None:
        kind = 0 if not issubclass(value_type, cst.CSTNode) else 1 if issubclass(value_type, _TRIVIA) else 2
        _KIND[value_type] = kind
    return kind


def _compute_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    children = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        value_type = type(value)
        if value_type is list or value_type is tuple:
            for item in value:
                if (_KIND.get(type(item)) or _kind(type(item))) == 2:
                    children.append(item)
        elif (_KIND.get(value_type) or _kind(value_type)) == 2:
            children.append(value)
    return children


# Rules walk the same tree many times; while one file is analyzed, children
# are computed once per node.  Keyed by id(): only valid while the tree is
# alive, hence scoped to `cached_children()` and to one thread.
_local = threading.local()


@contextmanager
def cached_children() -> Iterator[None]:
    previous = getattr(_local, "cache", None)
    _local.cache = {} if previous is None else previous
    try:
        yield
    finally:
        _local.cache = previous


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The non-trivia children of `node`, in field order."""
    cache = getattr(_local, "cache", None)
    if cache is None:
        return _compute_children(node)
    children = cache.get(id(node))
    if children is None:
        children = cache[id(node)] = _compute_children(node)
    return children


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        current = pop()
        yield current
        extend(child_nodes(current))


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every non-trivia node under it.  Rules walk whole functions
    again and again; under `cached_children()` those walks are kept."""
    cache = getattr(_local, "cache", None)
    if cache is None or type(node) not in (cst.FunctionDef, cst.Module, cst.IndentedBlock):
        return _walk(node)
    key = ("walk", id(node))
    nodes = cache.get(key)
    if nodes is None:
        nodes = cache[key] = list(_walk(node))
    return iter(nodes)


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


def node_text(module: cst.Module, node: cst.CSTNode) -> str:
    """The source text of `node`, whitespace runs collapsed.  Rules compare
    expressions by text often; under `cached_children()` each is generated once."""
    cache = getattr(_local, "cache", None)
    key = ("text", id(node))
    if cache is not None and key in cache:
        return cache[key]
    text = " ".join(module.code_for_node(node).split())
    if cache is not None:
        cache[key] = text
    return text
