"""What every fix is made of: the edit, the fix, the fixer, and the parsed text a fixer reads.

A fixer reads one finding (its code, its location, its `evidence`) and the file's
text, finds the node the finding points at, and builds the replacement node with
LibCST.  Only that node's text is regenerated (inside its block's indentation), so
every comment, blank line and layout choice outside it, and every untouched child
inside it, stays byte for byte; the edit is then trimmed to the characters that
changed, so that fixes of nested expressions (`tl.maximum(0, tl.minimum(1, x))`)
do not overlap and apply in one pass.
A fixer that cannot tell what to do returns None: no fix is better than a guess.

Applicability, as ruff's: a fix is `safe` when it keeps every value the code
computed where it was correct (`pid.to(tl.int64) * stride`), `unsafe` when it
changes numerics, NaN handling or register use (`input_precision="ieee"`, an fp32
accumulator, a new mask); unsafe fixes apply only with `--unsafe-fixes`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst
from libcst._nodes.internal import CodegenState

from kanalyze.analyzer.names import ImportMap
from kanalyze.analyzer.positions import _OffsetState
from kanalyze.findings import Finding

SAFE, UNSAFE = "safe", "unsafe"
_LINE_END = re.compile(r"\r\n?|\n")
TL = "triton.language"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace characters [start, end) of the text with `content`."""

    start: int
    end: int
    content: str


@dataclass(frozen=True)
class Fix:
    """The edits that resolve one finding, and what they do."""

    code: str                 # the finding's clause
    name: str                 # the fixer's name, e.g. "dot-input-precision"
    title: str                # what it does, for the editor and `--diff`
    applicability: str        # SAFE or UNSAFE
    edits: tuple[Edit, ...]
    # Names (scoped by function) whose meaning this fix changes, and names its edit
    # reads: a fix that reads what another fix of the same pass changes waits for the
    # next pass, whose fresh check says whether it is still needed.
    provides: frozenset[str] = frozenset()
    depends: frozenset[str] = frozenset()

    @property
    def safe(self) -> bool:
        return self.applicability == SAFE

    @property
    def start(self) -> int:
        return min(edit.start for edit in self.edits)


class _Spans(_OffsetState):
    """Both spans of every node: the syntactic one findings use (positions.py) and
    the full one (`code_for_node`'s text: parentheses and owned whitespace too)."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.full: dict[int, tuple[int, int]] = {}
        self.indents: dict[int, tuple[str, ...]] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.indents[id(node)] = tuple(self.indent_tokens)  # the block's indentation, for regenerating it
        super().before_codegen(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.full[id(node)] = (self.starts[-1], self.offset)
        super().after_codegen(node)


class Source:
    """One file's text, parsed once for every fixer that reads it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.module = cst.parse_module(text)
        spans = _Spans(self.module)
        self.module._codegen(spans)
        self._syntactic, self._full, self._indents = spans.spans, spans.full, spans.indents
        self._line_starts = [0] + [m.end() for m in _LINE_END.finditer(text)]
        self._parents: dict[int, cst.CSTNode] | None = None
        self._by_span: dict[tuple[int, int], list[cst.CSTNode]] | None = None
        self.imports = ImportMap()
        for node in self.module.body:
            for small in getattr(node, "body", ()) if isinstance(node, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    self.imports.add_import(small)
                elif isinstance(small, cst.ImportFrom):
                    self.imports.add_import_from(small)

    # -- where things are --------------------------------------------------------

    def offset(self, row: int, column: int) -> int:
        """A 1-based (row, column) of the text as a character offset."""
        row = min(max(row, 1), len(self._line_starts))
        return self._line_starts[row - 1] + column - 1

    def node_at(self, finding: Finding, *kinds: type) -> cst.CSTNode | None:
        """The node of one of `kinds` whose span is the finding's, and whose text is
        the evidence's `expression` (when it names one); None where there is none."""
        loc = finding.location
        key = (self.offset(loc.row, loc.column), self.offset(loc.end_row, loc.end_column))
        if self._by_span is None:
            self._by_span = {}
            for node in self.walk(self.module):
                span = self._syntactic.get(id(node))
                if span is not None:
                    self._by_span.setdefault(span, []).append(node)
        expression = finding.evidence.get("expression")
        for node in self._by_span.get(key, ()):
            if kinds and not isinstance(node, kinds):
                continue
            if isinstance(expression, str) and not _same_text(self.code(node), expression):
                continue
            return node
        return None

    def code(self, node: cst.CSTNode) -> str:
        """The node's text as written (its full span)."""
        start, end = self._full[id(node)]
        return self.text[start:end]

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        return self._full[id(node)]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if self._parents is None:
            self._parents = {}
            stack: list[cst.CSTNode] = [self.module]
            while stack:
                current = stack.pop()
                for child in current.children:
                    self._parents[id(child)] = current
                    stack.append(child)
        return self._parents.get(id(node))

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function around `node`."""
        current = self.parent(node)
        while current is not None and not isinstance(current, cst.FunctionDef):
            current = self.parent(current)
        return current

    @staticmethod
    def walk(node: cst.CSTNode):
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(reversed(current.children))

    # -- names -------------------------------------------------------------------

    def qualify(self, expr: cst.BaseExpression) -> str | None:
        """`tl.dot` → `triton.language.dot`, as the rules read names."""
        return self.imports.qualify(expr)

    def module_name(self, qualified: str) -> str | None:
        """How this file spells the module `qualified` (`tl` for triton.language), or None
        where it does not import it (nor `triton` above it)."""
        for local, full in sorted(self.imports.aliases.items()):
            if full == qualified:
                return local
        for local, full in sorted(self.imports.aliases.items()):
            if qualified.startswith(full + "."):
                return local + qualified[len(full):]
        return None

    def tl(self) -> str:
        """The file's name for triton.language (`tl` when it imports none: the rules read it so)."""
        return self.module_name(TL) or "tl"

    # -- edits -------------------------------------------------------------------

    def code_for(self, node: cst.CSTNode, indent: tuple[str, ...] = ()) -> str:
        """`node`'s code inside a block indented by `indent` (`Module.code_for_node` knows
        no block: a call spread over lines would lose its indentation)."""
        state = CodegenState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)
        state.indent_tokens.extend(indent)
        node._codegen(state)
        return "".join(state.tokens)

    def replace(self, node: cst.CSTNode, new: cst.CSTNode) -> Edit:
        """The edit that puts `new` in place of `node`: only the characters that differ."""
        start, end = self._full[id(node)]
        old, text = self.text[start:end], self.code_for(new, self._indents.get(id(node), ()))
        head = 0
        while head < min(len(old), len(text)) and old[head] == text[head]:
            head += 1
        tail = 0
        while tail < min(len(old), len(text)) - head and old[-1 - tail] == text[-1 - tail]:
            tail += 1
        return Edit(start + head, end - tail, text[head:len(text) - tail])


def _same_text(code: str, expression: str) -> bool:
    """Is `code` the expression a finding quotes (whitespace collapsed, maybe cut short with `…`)?"""
    code = " ".join(code.split())
    expression = " ".join(expression.split())
    if expression.endswith("…"):
        return code.startswith(expression[:-1])
    return code == expression


def parse(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `name=value` set: the existing argument's value replaced, or a new
    keyword argument after the last one, laid out like the arguments before it (one
    per line stays one per line; a trailing comma stays)."""
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            args = list(call.args)
            args[index] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(value=value, keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    if not call.args:
        return call.with_changes(args=[new])
    args = list(call.args)
    last = args[-1]
    if not isinstance(last.comma, cst.Comma):  # `f(a, b)`: `, name=value` after b, whatever follows b
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
        return call.with_changes(args=args)
    # A trailing comma: the new argument goes last, laid out as the arguments before it.
    before = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else \
        call.whitespace_before_args
    after = last.comma.whitespace_after
    if isinstance(before, cst.ParenthesizedWhitespace) and isinstance(after, cst.ParenthesizedWhitespace):
        # one argument per line: the last keeps its own comment, the new one starts a line of its own
        args[-1] = last.with_changes(comma=last.comma.with_changes(
            whitespace_after=after.with_changes(indent=before.indent, last_line=before.last_line)))
        args.append(new.with_changes(comma=last.comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[]))))
    else:
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=before))
        args.append(new.with_changes(comma=last.comma))
    return call.with_changes(args=args)


class Fixer:
    """One kind of fix.  A subclass documents itself (its docstring: what it does,
    when it applies, why it is safe or unsafe) and carries a BEFORE/AFTER example."""

    name: ClassVar[str] = ""
    codes: ClassVar[tuple[str, ...]] = ()
    title: ClassVar[str] = ""
    applicability: ClassVar[str] = UNSAFE
    BEFORE: ClassVar[str] = ""
    AFTER: ClassVar[str] = ""

    def applies(self, finding: Finding) -> bool:
        """Whether the finding's code and evidence are of the kind this fixer handles."""
        return finding.code in self.codes

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        raise NotImplementedError

    def make(self, finding: Finding, edits: list[Edit], applicability: str | None = None,
             title: str | None = None, provides: frozenset[str] = frozenset(),
             depends: frozenset[str] = frozenset()) -> Fix | None:
        edits = [edit for edit in edits if edit.start != edit.end or edit.content]
        if not edits:
            return None
        return Fix(finding.code, self.name, title or self.title, applicability or self.applicability,
                   tuple(sorted(set(edits))), provides, depends)


__all__ = ["SAFE", "TL", "UNSAFE", "Edit", "Fix", "Fixer", "Source", "parse", "with_keyword"]
