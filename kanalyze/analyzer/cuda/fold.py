"""Constant folding of Python expressions into strings, without running anything.

`Folder.fold(expr)` gives the value of a string literal (escapes decoded, with
the offset of every character in the source kept), an implicit or `+`
concatenation, an f-string or `str.format` whose fields are constants,
`"sep".join([...])`, a list of strings, a name assigned such values earlier
in the same scope (in a branch, `try` or `with` block too), or `self.<name>` that its
class assigns once.  What cannot be folded becomes a hole: an identifier where a
placeholder names one, else nothing, and a `Skipped` note saying what.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.cuda.sources import Skipped, Span
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.model import TritonModule

_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t", "v": "\v"}
_FIELD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d*")
_MAX_DEPTH = 24


@dataclass
class Folded:
    """A constant string (or integer, `kind="int"`) with the origin of each character."""

    text: str
    spans: list[Span] = field(default_factory=list)
    holes: list[Skipped] = field(default_factory=list)
    kind: str = "str"

    def sliced(self, start: int, end: int) -> "Folded":
        spans = []
        for s in self.spans:
            a, b = max(s.start, start), min(s.end, end)
            if a < b:
                spans.append(Span(a - start, b - start, s.node, s.body, s.first + a - s.start, s.offsets))
        return Folded(self.text[start:end], spans)


def concat(parts: list[Folded], separator: str = "") -> Folded:
    text: list[str] = []
    spans: list[Span] = []
    holes: list[Skipped] = []
    offset = 0
    for i, part in enumerate(parts):
        if i and separator:
            text.append(separator)
            offset += len(separator)
        text.append(part.text)
        spans.extend(Span(s.start + offset, s.end + offset, s.node, s.body, s.first, s.offsets) for s in part.spans)
        holes.extend(part.holes)
        offset += len(part.text)
    return Folded("".join(text), spans, holes)


def _opaque(text: str, node: cst.CSTNode, what: str | None = None) -> Folded:
    """Text standing in for `node` (a placeholder name, a folded integer): every
    character maps to the node's start."""
    hole = [Skipped(what, node)] if what else []
    return Folded(text, [Span(0, len(text), node, 0, 0, [0] * len(text))] if text else [], hole)


def decode_escapes(raw: str, *, fstring: bool = False) -> tuple[str, list[int] | None]:
    """A non-raw literal's body → (value, offset in `raw` of each character).
    The offsets are None when they are the identity (no escapes, no `{{`)."""
    if "\\" not in raw and not (fstring and ("{{" in raw or "}}" in raw)):
        return raw, None
    out: list[str] = []
    offsets: list[int] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if fstring and c in "{}" and raw[i + 1: i + 2] == c:
            out.append(c)
            offsets.append(i)
            i += 2
            continue
        if c != "\\" or i + 1 >= n:
            out.append(c)
            offsets.append(i)
            i += 1
            continue
        e = raw[i + 1]
        if e == "\n" or e == "\r":  # a backslash-newline joins lines
            i += 3 if raw[i + 1: i + 3] == "\r\n" else 2
            continue
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            offsets.append(i)
            i += 2
            continue
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is not None:
            try:
                out.append(chr(int(raw[i + 2: i + 2 + width], 16)))
            except ValueError:
                out.append(raw[i: i + 2 + width])
            offsets.append(i)
            i += 2 + width
            continue
        if e in "01234567":
            j = i + 1
            while j < min(i + 4, n) and raw[j] in "01234567":
                j += 1
            out.append(chr(int(raw[i + 1: j], 8)))
            offsets.append(i)
            i = j
            continue
        if e == "N" and raw[i + 2: i + 3] == "{":
            end = raw.find("}", i)
            try:
                out.append(unicodedata.lookup(raw[i + 3: end]))
            except KeyError:
                out.append("?")
            offsets.append(i)
            i = end + 1
            continue
        out.extend(("\\", e))  # an unknown escape keeps its backslash
        offsets.extend((i, i + 1))
        i += 2
    return "".join(out), offsets


class Folder:
    """Folds constant Python expressions at one place in a file."""

    def __init__(self, host: TritonModule) -> None:
        self.host = host

    def fold(self, expr: cst.BaseExpression, depth: int = 0) -> Folded | None:
        """The constant value of `expr`, or None when nothing of it is constant."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.SimpleString):
            return self._literal(expr)
        if isinstance(expr, cst.ConcatenatedString):
            left, right = self.fold(expr.left, depth + 1), self.fold(expr.right, depth + 1)
            return concat([left, right]) if left is not None and right is not None else None
        if isinstance(expr, cst.FormattedString):
            return self._fstring(expr, depth)
        if isinstance(expr, cst.Integer):
            return int_folded(expr)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
            left, right = self.fold(expr.left, depth + 1), self.fold(expr.right, depth + 1)
            if left is not None and right is not None and left.kind == right.kind == "str":
                return concat([left, right])
            if left is not None and left.kind == "str":
                return concat([left, self._hole(expr.right)])
            if right is not None and right.kind == "str":
                return concat([self._hole(expr.left), right])
            return None
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
            left = self.fold(expr.left, depth + 1)
            if left is not None and left.kind == "str":
                left.holes.append(Skipped(f"`%` formatting of `{self._text(expr)}` was not applied", expr))
            return left
        if isinstance(expr, cst.Name):
            return self._name(expr, depth)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            value = self._attribute(expr)
            return self.fold(value, depth + 1) if value is not None else None
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            receiver = self.fold(expr.func.value, depth + 1)
            if receiver is None or receiver.kind != "str":
                return None
            if expr.func.attr.value == "format":
                return self._format(receiver, expr, depth)
            if expr.func.attr.value == "join" and len(expr.args) == 1:
                items = self.fold_list(expr.args[0].value, depth + 1)
                return concat(items, receiver.text) if items is not None else None
        if isinstance(expr, (cst.List, cst.Tuple)):
            items = self.fold_list(expr, depth)
            return concat(items, "\n") if items is not None else None
        return None

    def fold_list(self, expr: cst.BaseExpression, depth: int = 0) -> list[Folded] | None:
        """A list or tuple of constant strings (a lone string is a list of one)."""
        if isinstance(expr, cst.Name):
            value = self._definition(expr.value, expr)
            return self.fold_list(value, depth + 1) if value is not None and depth < _MAX_DEPTH else None
        if not isinstance(expr, (cst.List, cst.Tuple)):
            single = self.fold(expr, depth + 1)
            return [single] if single is not None else None
        items: list[Folded] = []
        for element in expr.elements:
            folded = self.fold(element.value, depth + 1) if not isinstance(element, cst.StarredElement) else None
            items.append(folded if folded is not None else self._hole(element.value))
        return items

    # -- pieces -----------------------------------------------------------

    def _literal(self, node: cst.SimpleString) -> Folded | None:
        prefix = node.prefix.lower()
        if "b" in prefix:
            return None
        raw = node.raw_value
        body = len(node.prefix) + len(node.quote)
        if "r" in prefix:
            text, offsets = raw, None
        else:
            text, offsets = decode_escapes(raw)
        return Folded(text, [Span(0, len(text), node, body, 0, offsets)] if text else [])

    def _fstring(self, node: cst.FormattedString, depth: int) -> Folded | None:
        raw_string = "r" in node.start.lower()
        parts: list[Folded] = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                if raw_string:
                    text, offsets = decode_escapes(part.value.replace("\\", "\x00"), fstring=True)
                    text = text.replace("\x00", "\\")
                else:
                    text, offsets = decode_escapes(part.value, fstring=True)
                parts.append(Folded(text, [Span(0, len(text), part, 0, 0, offsets)] if text else []))
                continue
            value = self.fold(part.expression, depth + 1) if not part.format_spec and not part.conversion else None
            parts.append(value if value is not None else self._hole(part.expression))
        return concat(parts)

    def _format(self, template: Folded, call: cst.Call, depth: int) -> Folded:
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        text = template.text
        pieces: list[Folded] = []
        i = start = 0
        auto = 0
        while i < len(text):
            c = text[i]
            if c in "{}" and text[i + 1: i + 2] == c:
                pieces.append(template.sliced(start, i + 1))
                i += 2
                start = i
                continue
            if c != "{":
                i += 1
                continue
            end = text.find("}", i)
            if end < 0:
                break
            pieces.append(template.sliced(start, i))
            spec = text[i + 1: end]
            name = re.split(r"[!:]", spec, maxsplit=1)[0]
            simple = _FIELD.fullmatch(name) is not None and name == spec
            value_node = None
            if simple and name == "":
                value_node = positional[auto] if auto < len(positional) else None
                auto += 1
            elif simple and name.isdigit():
                index = int(name)
                value_node = positional[index] if index < len(positional) else None
            elif simple:
                value_node = named.get(name)
            value = self.fold(value_node, depth + 1) if value_node is not None else None
            if value is None:
                stand_in = name if name and not name[0].isdigit() and _FIELD.fullmatch(name) else "0"
                value = _opaque(stand_in, value_node if value_node is not None else call,
                                f"`.format` field `{{{spec}}}` is not a constant; read as `{stand_in}`")
            pieces.append(value)
            i = start = end + 1
        pieces.append(template.sliced(start, len(text)))
        folded = concat(pieces)
        folded.holes[:0] = template.holes
        return folded

    def _name(self, expr: cst.Name, depth: int) -> Folded | None:
        value = self._definition(expr.value, expr)
        if value is None:
            return None
        if isinstance(value, _Accumulated):
            parts = [self.fold(v, depth + 1) for v in value.values]
            if any(p is None for p in parts):
                return None
            return concat(parts)  # type: ignore[arg-type]
        return self.fold(value, depth + 1)

    def _hole(self, expr: cst.BaseExpression) -> Folded:
        name = dotted(expr)
        stand_in = name.rsplit(".", 1)[-1] if name else ""
        what = f"`{self._text(expr)}` is not a constant expression"
        return _opaque(stand_in, expr, what + (f"; read as `{stand_in}`" if stand_in else "; left out"))

    def _text(self, node: cst.CSTNode) -> str:
        text = " ".join(self.host.module.code_for_node(node).split())
        return text if len(text) <= 50 else text[:49] + "…"

    # -- names --------------------------------------------------------------

    def _attribute(self, expr: cst.Attribute):
        """The value of `self.<name>` where its class assigns it once, in any of its methods
        (`self.cuda_source = "..."` in `__init__`, read in another method); else None."""
        cls = next((n for n in self.host.ancestors(expr) if isinstance(n, cst.ClassDef)), None)
        if cls is None:
            return None
        name, values = expr.attr.value, []
        for node in walk(cls):
            if isinstance(node, cst.Assign):
                values += [node.value for target in node.targets if _is_self_attribute(target.target, name)]
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and _is_self_attribute(node.target, name):
                values.append(node.value)
        return values[0] if len(values) == 1 else None

    def _definition(self, name: str, at: cst.CSTNode):
        """The value `name` holds at `at`: the last plain assignment before it in the
        enclosing function, else at module level, branches and `try` blocks included (a
        source assigned under `if torch.cuda.is_available():` or in a `try`); `+=` after
        it accumulate."""
        path = [at, *self.host.ancestors(at)]
        scopes: list[tuple[list, cst.CSTNode | None]] = []
        for i, node in enumerate(path):
            if isinstance(node, cst.FunctionDef) and isinstance(node.body, cst.IndentedBlock) and i >= 2:
                scopes.append((list(node.body.body), path[i - 2]))
        # Module-level names are all bound by the time a function runs.
        scopes.append((list(self.host.module.body), None if scopes else path[-2] if len(path) >= 2 else None))
        within = {id(node) for node in path}
        for statements, stop in scopes:
            values: list[cst.BaseExpression] = []
            for statement in _in_order(statements, stop, within):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and any(
                            isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets):
                        values = [small.value]
                    elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                            and small.target.value == name and small.value is not None:
                        values = [small.value]
                    elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) \
                            and small.target.value == name and isinstance(small.operator, cst.AddAssign) and values:
                        values.append(small.value)
            if values:
                return values[0] if len(values) == 1 else _Accumulated(values)
        return None


def _is_self_attribute(node: cst.BaseExpression, name: str) -> bool:
    return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"
            and node.attr.value == name)


@dataclass
class _Accumulated:
    values: list[cst.BaseExpression]


_BLOCKS = (cst.If, cst.Else, cst.Try, cst.TryStar, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.With,
           cst.For, cst.While)


def _in_order(statements, stop: cst.CSTNode | None, within: set[int]):
    """The simple statement lines of `statements` in source order, those of their branches,
    `try`, `with` and loop blocks included (not of nested functions or classes), up to `stop`
    or the statement that holds the use (whose ids are `within`); the use's own block is read
    up to the use."""
    for statement in statements:
        if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            if statement is stop or id(statement) in within:
                return
            yield statement
        elif isinstance(statement, _BLOCKS):
            yield from _in_order(list(_blocks_of(statement)), None, within)
            if statement is stop or id(statement) in within:
                return
        elif statement is stop:
            return


def _blocks_of(node: cst.CSTNode):
    """The statements of a compound statement's blocks, in source order, as `_in_order`
    walks them (an `else:` or `except:` clause is a node of its own, read as a block)."""
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        yield from body.body
    elif isinstance(body, cst.SimpleStatementSuite):   # `if x: a = 1`
        yield body
    yield from getattr(node, "handlers", ())
    for part in ("orelse", "finalbody"):
        clause = getattr(node, part, None)
        if clause is not None:
            yield clause


def int_folded(expr: cst.Integer) -> Folded | None:
    try:
        folded = _opaque(str(int(expr.evaluated_value)), expr)
    except (ValueError, SyntaxError):  # a literal of more digits than Python converts
        return None
    folded.kind = "int"
    return folded
