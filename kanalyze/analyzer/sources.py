"""Reading the files to check safely (discovery.py finds them; `discover` is re-exported here).

Reading never executes anything.  A file that cannot be read as text becomes a
`SourceError` (reported as KAN000 by the pipeline); the run goes on.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import tokenize
from dataclasses import dataclass

from kanalyze.analyzer.discovery import DEFAULT_EXCLUDES, PYTHON_SUFFIXES, discover, is_excluded
from kanalyze.analyzer.spelling import folded_text

__all__ = ["DEFAULT_EXCLUDES", "PYTHON_SUFFIXES", "SourceError", "SourceText", "decode_source", "discover",
           "is_excluded", "may_contain_triton", "measure_nesting", "read_source"]

MAX_FILE_BYTES = 10 * 1024 * 1024

# A file that cannot contain a Triton kernel is not parsed at all: a kernel
# needs both the word `triton` (an import) and `jit` (its decorator).
_TRITON_HINT = re.compile(r"\btriton\b")
_JIT_HINT = re.compile(r"\bjit\b")
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)


@dataclass(frozen=True)
class SourceText:
    path: str
    text: str


@dataclass(frozen=True)
class SourceError:
    path: str
    reason: str
    row: int = 1
    column: int = 0


# --- how deeply the code nests, measured before any parser sees it ------------
#
# LibCST's native parser recurses once per level of nesting and overflows its
# stack on deep input: a segmentation fault, not an exception.  Brackets nest;
# so do operator chains (`a + b + c + ...` is a tree as deep as it is long, and
# so are `not not ...`, `-(-(...))`, `x.a.b...`, `f(x)(y)...`, `x[0][0]...`,
# nested lambdas and conditional expressions).  Measured on this machine
# (Python 3.11, LibCST 1.9, 8 MiB stack), each shape generated at growing depth:
#   - LibCST crashes from about 3,460 nested lambdas, 5,500 conditional
#     expressions or subscripts, 5,900 attribute accesses, 6,900 `+` terms and
#     8,200 `not`s, and from 1,185 nested calls `f(f(...))`; its time grows with
#     the square of the depth (3,000 chained subscripts: 13 s; 1,000: 1 s);
#   - CPython's parser (`ast`, on some of kanalyze's paths) refuses more than
#     200 nested brackets, and fails at about 2,960 levels (a RecursionError);
#   - kanalyze's own recursive walks (LibCST's code generation among them) fail
#     at about 480 levels under Python's default recursion limit: the analysis
#     raises it (check/analyze.py), and then passes 1,000 levels of every shape.
# MAX_EXPRESSION_DEPTH keeps a margin of 3x below the crashes (the measure bounds
# LibCST's depth from above, a test checks it) and lies far above real code: of
# 20,905 Python files installed here one measures deeper (pydoc_data/topics.py:
# 2,219 strings concatenated), the next 573 (sympy), the fixtures 18 at most.
MAX_NESTING = 200
MAX_EXPRESSION_DEPTH = 1000
# CPython refuses a decimal integer literal of more digits (since 3.11: converting
# one costs time quadratic in its length), and so does the analysis.
MAX_INTEGER_DIGITS = 4300
_LONG_INTEGER = re.compile(r"(?<![\w.])[1-9][\d_]{%d,}(?![\w.])" % MAX_INTEGER_DIGITS)

# One pass over the text, finding only what can make an expression deeper.
# Strings and comments are matched whole so that what they contain is skipped
# (an unterminated string runs to the end of its line, or of the text).  No
# named groups: they make the scan three times slower; `_measure` tells the
# tokens apart by their first character.
_NESTING_TOKEN = re.compile(
    r"""'''(?:\\.|[^\\])*?(?:'''|\Z)|""" r'"""(?:\\.|[^\\])*?(?:"""|\Z)'
    r"""|'(?:\\.|[^\\'\n])*'?|"(?:\\.|[^\\"\n])*"?"""        # strings
    r"|\#[^\n]*|\\\r?\n"                                       # comments, line continuations
    r"|\*\*|//|<<|>>|<=|>=|==|!=|:=|->|[-+*/%@&|^~<>.,;=()\[\]{}\n]"
    r"|\bnot\s+in\b|\bis\s+not\b|\blambda\b[^:\n]*:|\b(?:not|and|or|if|else|await|in|is|lambda)\b",
    re.DOTALL)
# A line that starts a statement: inside brackets, the scan lost track.
_STATEMENT = re.compile(r"[ \t]*(?:def|class|return|import|pass|raise|assert|del|global|nonlocal"
                        r"|while|try|except|finally|with|break|continue)\b")
_STRING_PREFIX = re.compile(r"(?i:[rbuf]{1,2})")

# How tightly each operator binds, loosest first (the Language Reference, 6.17).
# A chain of operators of one level nests one node per operator; an operator
# of a looser level ends the chains of the tighter ones.  A conditional
# expression may hold a lambda and a lambda a conditional expression, and a
# power's right operand may be a unary minus: those share a level.
_UNARY, _POWER, _AWAIT, _TRAILER, _CONCATENATION = 12, 13, 14, 15, 16
_LEVEL = {
    ":=": 0, "lambda": 0, "if": 0, "or": 2, "and": 3, "not": 4, "<": 5, ">": 5, "<=": 5, ">=": 5, "==": 5,
    "!=": 5, "in": 5, "is": 5, "not in": 5, "is not": 5, "|": 6, "^": 7, "&": 8, "<<": 9, ">>": 9, "+": 10,
    "-": 10, "*": 11, "@": 11, "/": 11, "//": 11, "%": 11, "**": _POWER, "await": _AWAIT, ".": _TRAILER,
}


@dataclass(frozen=True)
class Nesting:
    """How deeply a text nests (most brackets open at once, a bound on the depth of
    its deepest expression) and why and where no parser may read it, if so."""

    brackets: int
    expressions: int
    problem: str | None = None
    row: int = 1        # 1-based, as findings count
    column: int = 0     # 0-based


class _Overflow(Exception):
    def __init__(self, nesting: Nesting, offset: int) -> None:
        super().__init__(nesting.problem)
        self.nesting, self.offset = nesting, offset  # the counts where the scan stopped


def measure_nesting(text: str) -> Nesting:
    """How deeply `text` nests: one regular-expression pass, no parsing, cheap
    and conservative (it may count deeper than the parser will, never shallower)."""
    try:
        return _measure(text)
    except _Overflow as overflow:
        row = text.count("\n", 0, overflow.offset) + 1
        column = overflow.offset - (text.rfind("\n", 0, overflow.offset) + 1)
        return dataclasses.replace(overflow.nesting, row=row, column=column)


class _Element:
    """One element of an expression list (between commas, inside one pair of
    brackets): the operator chains open in it and the deepest bracket in it."""

    __slots__ = ("chains", "longest", "total", "inner", "deepest")

    def __init__(self) -> None:
        self.chains: list[list[int]] = []   # [level, length] of the open chains, loosest first
        self.longest: dict[int, int] = {}   # level -> the longest chain of that level so far
        self.total = 0                      # sum of `longest`: the operators on one path, at most
        self.inner = 0                      # the deepest bracket (or f-string field) in the element
        self.deepest = 0                    # the deepest element ended so far at this bracket level

    def operator(self, level: int) -> int:
        """One more operator of `level`; the element's depth bound so far."""
        chains = self.chains
        while chains and chains[-1][0] > level:
            chains.pop()  # a looser operator ends the tighter chains
        if not chains or chains[-1][0] != level:
            chains.append([level, 0])
        chains[-1][1] += 1
        length, longest = chains[-1][1], self.longest.get(level, 0)
        if length > longest:
            self.total += length - longest
            self.longest[level] = length
        return self.total + self.inner

    def end(self) -> int:
        """End the element (at a comma, a line end, ...); the deepest at this level."""
        self.deepest = max(self.deepest, self.total + self.inner)
        self.chains, self.longest, self.total, self.inner = [], {}, 0, 0
        return self.deepest


def _measure(text: str) -> Nesting:
    """Bound the depth of every expression in `text`; raise _Overflow past a limit.

    On a path from an element's root to a leaf, the operators of one level are
    part of one chain: the element's depth is at most the sum over levels of the
    longest chain, plus its deepest bracket (a call, subscript or display: the
    node, its argument or element, and what is inside).  Whether `-`, `*`, `.`
    or `(` follows an operand (binary operator, attribute, call) or not (unary
    minus, star argument, float, parenthesis) is told by the text between two
    tokens: a name or number there is an operand."""
    element = _Element()
    enclosing: list[_Element] = []
    deepest = brackets = position = previous = 0
    after_operand = after_string = False
    for match in _NESTING_TOKEN.finditer(text):
        token, start = match.group(), match.start()
        first = token[0]
        prefix = ""
        if start > position:
            gap = text[position:start]
            if len(gap) > MAX_INTEGER_DIGITS:
                _check_integers(text, position, start + 1, brackets)
            if not gap.isspace():
                if first in "'\"" and _STRING_PREFIX.fullmatch(gap.lstrip()):
                    prefix = gap.lstrip()  # `rb"..."`, `f"..."`
                else:
                    after_operand, after_string = True, False  # a name or a number
        position = match.end()
        depth = 0
        if first in "'\"":
            if after_string:  # `"a" "b"`: LibCST nests implicit concatenations
                depth = element.operator(_CONCATENATION)
            if "f" in prefix or "F" in prefix:
                try:
                    fields = _measure(_format_fields(token)).expressions
                except _Overflow as overflow:
                    raise _Overflow(overflow.nesting, start) from None
                element.inner = max(element.inner, fields + 2)
                depth = element.total + element.inner
            after_operand = after_string = True
        elif first in "([{":
            if after_operand and first != "{":
                depth = element.operator(_TRAILER)  # a call or a subscript
            enclosing.append(element)
            element = _Element()
            brackets = max(brackets, len(enclosing))
            if len(enclosing) > MAX_NESTING:
                raise _Overflow(Nesting(brackets, element.total, f"more than {MAX_NESTING} brackets are open "
                                                                 f"at once (Python itself refuses such code)"), start)
            after_operand = after_string = False
        elif first in ")]}":
            inside = element.end()
            if enclosing:
                element = enclosing.pop()
                element.inner = max(element.inner, inside + 2)
                depth = element.total + element.inner
            else:  # a stray bracket: the text does not parse anyway
                deepest, element = max(deepest, inside), _Element()
            after_operand, after_string = True, False
        elif token in (",", ";", "=") or first == "\n":
            if first != "\n" or not enclosing:
                element.end()
                after_operand = after_string = False
            elif _STATEMENT.match(text, position):
                # A statement inside brackets: the scan lost track (a string syntax of
                # a newer Python, say).  Start afresh rather than carry a wrong depth.
                deepest = max([deepest, element.end()] + [e.end() for e in enclosing])
                element, enclosing = _Element(), []
                after_operand = after_string = False
        elif first == "#" or first == "\\":
            continue  # a comment or a line continuation
        else:
            level = _operator_level(token, after_operand)
            if level == _UNARY and previous == _POWER:
                level = _POWER  # `a ** -b ** -c`
            depth = element.operator(level) if level >= 0 else 0
            previous, after_operand, after_string = level, False, False
        if depth > MAX_EXPRESSION_DEPTH:
            raise _Overflow(Nesting(brackets, depth, f"expression nesting deeper than {MAX_EXPRESSION_DEPTH} (a "
                                    f"chain of operators, attribute accesses, calls, subscripts, lambdas or "
                                    f"conditional expressions): LibCST's parser would overflow its stack"), start)
    _check_integers(text, position, len(text), brackets)
    deepest = max([deepest, element.end()] + [e.end() for e in enclosing])
    return Nesting(brackets, deepest)


def _check_integers(text: str, start: int, end: int, brackets: int) -> None:
    """Raise _Overflow at a decimal integer literal of more than MAX_INTEGER_DIGITS
    digits in `text[start:end]` (names and numbers: what lies between two tokens)."""
    for match in _LONG_INTEGER.finditer(text, start, end):
        digits = len(match.group().replace("_", ""))
        if digits > MAX_INTEGER_DIGITS:
            raise _Overflow(Nesting(brackets, 0, f"an integer literal of {digits} digits (Python itself refuses "
                                                 f"more than {MAX_INTEGER_DIGITS})"), match.start())


def _operator_level(token: str, after_operand: bool) -> int:
    """The binding level of an operator token; -1 for one that nests nothing
    (a star argument, a decorator, an annotation arrow, a float's dot, `else`)."""
    if token == "~" or (token in ("-", "+") and not after_operand):
        return _UNARY
    if token in ("*", "@", ".", "**") and not after_operand:
        return -1
    key = "lambda" if token.startswith("lambda") else " ".join(token.split())  # `lambda x:`, `not  in`
    return _LEVEL.get(key, -1)


def _format_fields(token: str) -> str:
    """The replacement fields of an f-string token (`f"a{x + y}b{z}"` gives "x + y" and
    "z", one per line): the expressions LibCST parses inside it."""
    quote = token[:3] if token[:3] in ("'''", '"""') else token[:1]  # (the prefix is not in the token)
    body = token[len(quote):-len(quote)] if token.endswith(quote) and len(token) > len(quote) else token[len(quote):]
    fields, depth, start = [], 0, 0
    for match in re.finditer(r"\{\{|\}\}|[{}]", body):
        if depth == 0 and len(match.group()) == 2:
            continue  # `{{` and `}}` between fields are literal braces
        for at, brace in enumerate(match.group(), match.start()):
            if brace == "{":
                depth += 1
                if depth == 1:
                    start = at + 1
            elif depth:
                depth -= 1
                if depth == 0:
                    fields.append(body[start:at])
    return "\n".join(fields)


def may_contain_triton(text: str) -> bool:
    """Cheap prefilter: no `triton` and `jit` in the text, no kernel to analyze.

    Python reads `@triton.ｊｉｔ` (fullwidth letters) as `@triton.jit`, so a text
    that is not ASCII is also searched folded the way Python folds names."""
    if _TRITON_HINT.search(text) is not None and _JIT_HINT.search(text) is not None:
        return True
    folded = folded_text(text)
    return folded is not text and _TRITON_HINT.search(folded) is not None and _JIT_HINT.search(folded) is not None


def read_source(path: str, *, explicit: bool = False) -> SourceText | SourceError | None:
    """Read `path` as Python source text.

    Returns None for a file that is fine but has nothing to analyze (an empty
    file found while walking a directory, or an empty `__init__.py`).
    """
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            return SourceError(path, f"file too large to analyze ({size} bytes; the limit is {MAX_FILE_BYTES})")
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return SourceError(path, f"cannot read file: {exc.strerror or exc}")
    return decode_source(path, data, explicit=explicit)


def read_for_rewrite(path: str) -> tuple[str, str]:
    """A file's whole text as written (a BOM kept) and its encoding, for a tool that edits
    it in place (`--fix`, `--add-noqa`); raises OSError, SyntaxError, LookupError or
    UnicodeDecodeError on a file it cannot read back faithfully."""
    with open(path, "rb") as handle:
        data = handle.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def decode_source(path: str, data: bytes, *, explicit: bool = False) -> SourceText | SourceError | None:
    """`data` (a file's bytes, or standard input's) as source text, as `read_source` reads a file."""
    if len(data) > MAX_FILE_BYTES:
        return SourceError(path, f"input too large to analyze ({len(data)} bytes; the limit is {MAX_FILE_BYTES})")
    if not data.strip():
        if explicit and os.path.basename(path) != "__init__.py":
            return SourceError(path, "empty file: there is no kernel to analyze")
        return None
    if b"\x00" in data:
        return SourceError(path, "binary file: it contains NUL bytes, so it is not source code")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except (SyntaxError, LookupError) as exc:
        # detect_encoding also fails on undecodable first lines with no
        # declaration: say what is wrong with the bytes when that is the case.
        if _CODING_COOKIE.search(data[:200]) is not None:
            return SourceError(path, f"unknown source encoding: {exc}")
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        row = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
        return SourceError(path, f"not valid {exc.encoding}: byte 0x{data[exc.start]:02x} at offset {exc.start}", row, column)
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceText(path, text)
