"""A Python document cut into pieces that can be analyzed apart, so that an
edit re-analyzes only the kernels it touched (incremental.py).

The text is read with `ast` (never run) into top-level *blocks*: a statement
with the decorators above it, statements that share a line kept together.
A block that is a `def` or a `class` is a *unit*: a jit kernel, a wrapper
that launches one, a host helper, a `ModelNew`, an autograd Function; every
other block is *context* (imports, constants, the module docstring, module
code).  Units are joined into *components*, and some into the context, by
the names they share (joins.py says how, blocks.py what each block says).  A
*piece* is the text of the context and one component, every other line left
out, with the document row of each of its lines: the findings of a piece,
rows mapped back, are the findings that the whole text gives inside that
component, and the union over the pieces is what the whole text gives.

That holds because what the rules read about a unit is the unit, the units
that name it or that it names, the units that share a name the model keys
facts by, and the context; and because the few facts the rules read of the
whole file are the same in every piece: the context holds the import map (an
import inside a unit joins whatever reads the name it binds), ModelNew, and
the first launch on the candidate path (RES001's messages name it).  Whatever
no piece could stand for leaves the text uncut, and the caller analyzes it
whole:
  - calls that look like launches (`f[...](...)`) of which none is surely a
    launch on the candidate path, or a `forward` with no launch at all (the
    forward path is then a file-wide question);
  - a word naming Ascend or an NPU in a unit (the dot default is file-wide);
  - a name imported as two different things (the import map's order);
  - a file-level `# kanalyze: noqa`, inline CUDA, deep nesting, a text `ast`
    cannot parse (the pipeline reports the error at its place), a BOM;
  - fewer than two components holding a kernel (nothing to gain).
The bounds proofs (MEM003, MEM004) share one solver and one budget per file:
incremental.py analyzes whole a text that may launch (`may_launch`) when they
are on.  A RES001 finding that lists every launched kernel of the file (a kernel
never launched) is file-wide too: incremental.py then analyzes the text whole.
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
import warnings
from dataclasses import dataclass

from kanalyze.analyzer.cuda.sources import may_contain_inline_cuda
from kanalyze.analyzer.names import ImportMap
from kanalyze.analyzer.sources import MAX_FILE_BYTES, may_contain_triton, measure_nesting
from kanalyze.analyzer.suppressions import Suppressions
from kanalyze.analyzer.triton.entities import JIT_DECORATORS
from kanalyze.lsp.blocks import IDENTIFIER, BlockFacts, block_facts
from kanalyze.lsp.joins import expression, file_wide, join

# Lines as Python and LibCST count them: `\r\n`, `\r` and `\n` end one.
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# Text that may hold a launch, `kernel[grid](...)`: where the bounds proofs may run.
_MAY_LAUNCH = re.compile(r"\]\s*\(")


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
    may_launch: bool  # text like a launch `kernel[grid](...)`: the bounds proofs may run on it


@dataclass(frozen=True)
class _Block:
    start: int   # first row, 1-based
    end: int     # last row
    facts: BlockFacts


def cut(text: str, previous: Layout | None = None) -> Layout | str:
    """The text's layout, or why it is to be analyzed whole.  With `previous`, the
    layout of an earlier version, only the lines that differ from it are parsed."""
    if text.startswith("\ufeff") or "\x00" in text or len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        return "a byte-order mark, a NUL byte or a size the pipeline refuses"
    if not may_contain_triton(text) or may_contain_inline_cuda(text):
        return "not a Triton-only file"
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
    units = [b for b in blocks if b.facts.name is not None]
    odd = next((name for b in blocks for name in b.facts.names | b.facts.keys | b.facts.writes | b.facts.bound
                if not IDENTIFIER.fullmatch(name)), None)
    if odd is not None:
        return f"`{odd}` has characters that mentions are not searched with"
    jit_names = {u.facts.name for u in units if u.facts.is_function and _is_jit(u.facts.decorators, aliases)}
    problem = file_wide(blocks, units, jit_names, aliases)
    if problem:
        return problem
    joined = join(blocks, units, aliases, jit_names)
    # A piece the pipeline's prefilter would skip (host code, no kernel) goes with the first one
    # it would not: a union of components is analyzed as the whole text analyzes it.
    kept, skipped = [], []
    for component in joined.components:
        piece = _piece(lines, sorted(joined.context + component, key=lambda b: b.start))
        (kept if may_contain_triton(piece.text) else skipped).append((component, piece))
    if skipped and kept:
        first = sorted(joined.context + kept[0][0] + [b for c, _ in skipped for b in c], key=lambda b: b.start)
        kept[0] = (None, _piece(lines, first))
    if len(kept) < 2:
        return "fewer than two components (with a kernel)"
    return Layout(tuple(piece for _, piece in kept), _piece(lines, joined.context), tuple(lines), tuple(blocks),
                  bool(_MAY_LAUNCH.search(text)))


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
            facts = block_facts("".join(lines[start - 1:end]), len(span) == 2)
            blocks.append(_Block(start + offset, end + offset, facts))
        previous = end
    return blocks


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
    """Do these decorators make a Triton jit function, as the model's collector reads them
    (one of them `triton.jit`, whatever the others are)?"""
    imports = ImportMap()
    imports.aliases = dict(aliases)
    return any(d is not None and imports.qualify(expression(d)) in JIT_DECORATORS for d in decorators)


def _piece(lines: list[str], blocks: list[_Block]) -> Piece:
    rows = [row for block in blocks for row in range(block.start, block.end + 1)]
    return Piece("".join(lines[row - 1] for row in rows), tuple(rows))
