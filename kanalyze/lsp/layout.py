"""A Python document cut into pieces that can be analyzed apart, so that an
edit re-analyzes only the kernels it touched (incremental.py).

The text is read with `ast` (never run) into top-level *blocks*: a statement
with the decorators above it, statements that share a line kept together.
A block that is a `@triton.jit` function is a *unit*; every other block is
*context* (imports, constants, the module docstring).  Units that mention one
another's names (a helper and its callers) form one *component*.  A *piece*
is the text of the whole context and one component, every other line left
out, with the document row of each of its lines: the findings of a piece,
rows mapped back, are the findings that the whole text gives inside that
component, and the union over the pieces is what the whole text gives.

That holds because, in a file cut this way, what the rules read about a
kernel is the kernel, the jit functions that name it or that it names, and
the module's context: every link between two kernels goes through a name
(a call, an alias, a string naming a kernel), so any mention of a unit's
name, even in a comment or a string, joins the two, and any context line
that mentions a unit puts that unit in every piece.  Whatever would make the
rules look across the whole file leaves the text uncut, and the caller
analyzes it whole:
  - a host function or class anywhere (the forward path, wrappers and dead
    kernels are file-wide questions), a `def` nested anywhere;
  - a launch `kernel[grid](...)` anywhere, or text that looks like one (the
    bounds proofs share one solver and one budget per file);
  - an import or `global` inside a kernel, a name imported as two different
    things (the import map is file-wide);
  - a file-level `# kanalyze: noqa`, inline CUDA, deep nesting, a text `ast`
    cannot parse (the pipeline reports the error at its place), a BOM;
  - a top-level `def` whose decorators do not make it a Triton jit function;
  - fewer than two components (nothing to gain).
Comment-only and blank lines between blocks are left out of every piece:
rules never read comments, and the line-level `# noqa` that matters sits on
a line with code.

Given the layout of the version before, `cut` parses only the lines between
the blocks the edit left alone (the whole text when those lines are not
whole statements on their own).
"""

from __future__ import annotations

import ast
import re
import unicodedata
import warnings
from dataclasses import dataclass
from functools import lru_cache

from kanalyze.analyzer.cuda.sources import may_contain_inline_cuda
from kanalyze.analyzer.module_imports import dotted_name
from kanalyze.analyzer.names import ImportMap
from kanalyze.analyzer.sources import MAX_FILE_BYTES, may_contain_triton, measure_nesting
from kanalyze.analyzer.suppressions import Suppressions
from kanalyze.analyzer.triton.entities import AUTOTUNE, HEURISTICS, JIT_DECORATORS

# Lines as Python and LibCST count them: `\r\n`, `\r` and `\n` end one.
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
# Text that may hold a launch, `kernel[grid](...)`: checked before anything is parsed,
# since the files that launch their kernels are analyzed whole anyway.
_MAY_LAUNCH = re.compile(r"\]\s*\(")
_UNIT_DECORATORS = JIT_DECORATORS | {AUTOTUNE, HEURISTICS}
BLOCK_FACTS_CACHE = 4096


@dataclass(frozen=True)
class Piece:
    """The lines of some blocks, in document order, and the document row of each."""

    text: str
    rows: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """What `cut` makes of a text: one piece per component, the context alone, and
    the text's lines and blocks, which the next version's `cut` starts from."""

    pieces: tuple[Piece, ...]
    context: Piece
    lines: tuple[str, ...]
    blocks: tuple[_Block, ...]


@dataclass(frozen=True)
class _Facts:
    """What one block's text says, whatever its place in the file (cached by text)."""

    problem: str | None                       # why the file cannot be cut because of this block
    name: str | None                          # the function's name, for a `def`
    decorators: tuple[str | None, ...]        # each decorator's dotted name (a call's callee)
    imports: tuple[tuple[str, str], ...]      # (local name, what it names), in order
    tokens: frozenset[str]                    # every identifier-like word, strings and comments too


@dataclass(frozen=True)
class _Block:
    start: int   # first row, 1-based
    end: int     # last row
    facts: _Facts


def cut(text: str, previous: Layout | None = None) -> Layout | str:
    """The text's layout, or why it is to be analyzed whole.  With `previous`, the
    layout of an earlier version, only the lines that differ from it are parsed."""
    if text.startswith("\ufeff") or "\x00" in text or len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        return "a byte-order mark, a NUL byte or a size the pipeline refuses"
    if not may_contain_triton(text) or may_contain_inline_cuda(text):
        return "not a Triton-only file"
    if _MAY_LAUNCH.search(text):
        return "a launch (`kernel[grid](...)`), or text like one"
    if "kanalyze" in text and Suppressions.parse(text).file_codes:
        return "a file-level `# kanalyze: noqa`"
    lines = _LINES.findall(text)
    blocks = _outline(text, lines, previous)
    if isinstance(blocks, str):
        return blocks
    problem = next((b.facts.problem for b in blocks if b.facts.problem), None)
    if problem:
        return problem
    aliases = _aliases(blocks)
    if aliases is None:
        return "a name imported twice as different things"
    units, context = [], []
    for block in blocks:
        if block.facts.name is None:
            context.append(block)
        elif not _IDENTIFIER.fullmatch(block.facts.name):
            return f"`{block.facts.name}` has characters that mentions are not searched with"
        elif _is_jit(block.facts.decorators, aliases):
            units.append(block)
        else:
            return f"`{block.facts.name}` is a host function"
    components = _components(units, context)
    context.sort(key=lambda b: b.start)
    if len(components) < 2:
        return "fewer than two components"
    pieces = tuple(_piece(lines, sorted(context + component, key=lambda b: b.start)) for component in components)
    if not all(may_contain_triton(piece.text) for piece in pieces):
        return "a piece the prefilter would skip"
    return Layout(pieces, _piece(lines, context), tuple(lines), tuple(blocks))


def _outline(text: str, lines: list[str], previous: Layout | None) -> list[_Block] | str:
    """The top-level blocks: those of `previous` the edit left alone, and the lines
    between them parsed afresh; the whole text parsed when that cannot be done."""
    if previous is not None and "barry_as_FLUFL" not in text:  # the one future import that changes parsing
        blocks = _reused(lines, previous)
        if blocks is not None:
            return blocks
    return _parsed(text, lines, 0)


def _reused(lines: list[str], previous: Layout) -> list[_Block] | None:
    """The blocks before and after the lines that changed, kept, and the region between
    them parsed; None when that region is not whole statements on its own.

    Blocks before the change are tokenized as before.  When the region parses alone
    it ends outside any bracket, string or statement, so the blocks after it (each
    starting a statement at column 0) are tokenized as before too."""
    old, new = previous.lines, lines
    same = 0
    while same < min(len(old), len(new)) and old[same] == new[same]:
        same += 1
    tail = 0
    while tail < min(len(old), len(new)) - same and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    before = [b for b in previous.blocks if b.end <= same]
    after = [b for b in previous.blocks if b.start > len(old) - tail]
    start = before[-1].end if before else 0           # rows before the region
    shift = len(new) - len(old)
    end = (after[0].start - 1 if after else len(old)) + shift
    region = _parsed("".join(new[start:end]), new[start:end], start)
    if isinstance(region, str):
        return None
    return before + region + [_Block(b.start + shift, b.end + shift, b.facts) for b in after]


def _parsed(text: str, lines: list[str], offset: int) -> list[_Block] | str:
    """The blocks of `text` (lines `offset + 1` on of the document), read with `ast`."""
    if measure_nesting(text).problem:  # before any parser: a deep text can crash one
        return "nested too deeply"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `"\d"` and the like warn; the pipeline does not care
            tree = ast.parse(text)
    except Exception:  # SyntaxError, ValueError (a NUL), RecursionError, MemoryError
        return "`ast` cannot parse it"
    return _blocks(tree, lines, offset)


def _blocks(tree: ast.Module, lines: list[str], offset: int) -> list[_Block] | str:
    """The top-level blocks, rows moved by `offset`; every line between them must be
    blank or a comment."""
    spans: list[list[int]] = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", ())
        start = min([statement.lineno] + [d.lineno for d in decorators])
        end = statement.end_lineno or statement.lineno
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
            spans[-1].append(-1)  # more than one statement: never a unit
        else:
            spans.append([start, end])
    blocks: list[_Block] = []
    previous = 0
    for span in spans + [[len(lines) + 1, len(lines)]]:
        start, end = span[0], span[1]
        gap = lines[previous:start - 1]
        if any(line.strip() and not line.lstrip().startswith("#") for line in gap):
            return "code between statements that `ast` did not place"
        if start <= len(lines):
            facts = _facts("".join(lines[start - 1:end]), len(span) == 2)
            blocks.append(_Block(start + offset, end + offset, facts))
        previous = end
    return blocks


@lru_cache(maxsize=BLOCK_FACTS_CACHE)
def _facts(text: str, single: bool) -> _Facts:
    """Read one block: whole statements at the top level, so it parses alone."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            statements = ast.parse(text).body
    except Exception:  # `from __future__` past the top, say: parsed in the file, not alone
        return _Facts("a block that does not parse alone", None, (), (), frozenset())
    tokens = frozenset(_IDENTIFIER.findall(text if text.isascii() else unicodedata.normalize("NFKC", text)))
    top = statements[0]
    is_def = single and len(statements) == 1 and isinstance(top, ast.FunctionDef)
    problem = None
    imports: list[tuple[str, str]] = []
    for node in _preorder(statements):
        if isinstance(node, (ast.ClassDef, ast.AsyncFunctionDef)) \
                or (isinstance(node, ast.FunctionDef) and not (is_def and node is top)):
            problem = "a class or a function that is not a top-level jit function"
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            problem = "a `global` statement"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            problem = "a launch (`kernel[grid](...)`)"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if is_def:
                problem = "an import inside a function"
            imports.extend(_bindings(node))
        if problem:
            break
    if not is_def:
        return _Facts(problem, None, (), tuple(imports), tokens)
    decorators = tuple(dotted_name(d.func if isinstance(d, ast.Call) else d) for d in top.decorator_list)
    return _Facts(problem, top.name, decorators, (), tokens)


def _preorder(statements: list[ast.stmt]):
    """Every node, in source order (the order the model's walk sees imports in)."""
    stack: list[ast.AST] = list(reversed(statements))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(local name, qualified name) as kanalyze's ImportMap records an import."""
    if isinstance(node, ast.Import):
        return [(a.asname, a.name) if a.asname else (a.name.split(".")[0],) * 2 for a in node.names]
    if node.level or node.module is None or any(a.name == "*" for a in node.names):
        return []
    return [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]


def _aliases(blocks: list[_Block]) -> dict[str, str] | None:
    """The file's import map; None when a name is bound to two different things,
    where the order of the imports would matter."""
    aliases: dict[str, str] = {}
    for block in blocks:
        for local, full in block.facts.imports:
            if aliases.setdefault(local, full) != full:
                return None
    return aliases


def _is_jit(decorators: tuple[str | None, ...], aliases: dict[str, str]) -> bool:
    """Do these decorators make a Triton jit function, as the model's collector reads them?"""
    imports = ImportMap()
    imports.aliases = dict(aliases)
    names = [imports.qualify(_expression(d)) if d is not None else None for d in decorators]
    return bool(names) and all(n in _UNIT_DECORATORS for n in names) and any(n in JIT_DECORATORS for n in names)


@lru_cache(maxsize=256)
def _expression(dotted: str):
    import libcst as cst

    return cst.parse_expression(dotted)


def _components(units: list[_Block], context: list[_Block]) -> list[list[_Block]]:
    """Units joined by a mention of a name, in document order; a unit that the
    context mentions (and what it mentions) moves into the context."""
    mentioned = set().union(*(b.facts.tokens for b in context))
    moved = True
    while moved:
        moved = False
        for unit in list(units):
            if unit.facts.name in mentioned:
                units.remove(unit)
                context.append(unit)
                mentioned |= unit.facts.tokens
                moved = True
    parent = list(range(len(units)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_name: dict[str, list[int]] = {}
    for index, unit in enumerate(units):
        by_name.setdefault(unit.facts.name, []).append(index)
    for index, unit in enumerate(units):
        for token in unit.facts.tokens & by_name.keys():
            for other in by_name[token]:
                parent[root(other)] = root(index)
    groups: dict[int, list[_Block]] = {}
    for index, unit in enumerate(units):
        groups.setdefault(root(index), []).append(unit)
    return sorted(groups.values(), key=lambda group: group[0].start)


def _piece(lines: list[str], blocks: list[_Block]) -> Piece:
    rows = [row for block in blocks for row in range(block.start, block.end + 1)]
    return Piece("".join(lines[row - 1] for row in rows), tuple(rows))
