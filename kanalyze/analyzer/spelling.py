"""Identifiers as Python reads them: folded to NFKC (PEP 3131).

Python normalizes every identifier to NFKC while parsing, so a kernel written
`ｔｌ.ｍａｘｉｍｕｍ(x, 0.0)` (fullwidth letters) or `@triton.ｊｉｔ` runs
exactly like `tl.maximum(x, 0.0)` and `@triton.jit`.  LibCST keeps the raw
spelling, and the detectors compare names as strings, so such a file would
hide its code from them.

`python_spelling(text)` rewrites each identifier of the text to its NFKC form
(comments and strings are left alone: only what `tokenize` reads as a name
changes) and says where each rewritten identifier is.  The pipeline parses the
rewritten text; positions and suppressions keep reading the user's text, and
`PythonSpelling.to_user` maps an offset of the rewritten text back to it (most
foldings keep the length, fullwidth letters do; a ligature such as `ﬁ` does
not).  Never raises: a text `tokenize` cannot read to the end keeps the
rewrites read before the error.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import accumulate

# `tokenize` and LibCST must see the same lines: Python ends a line at "\r\n",
# "\n" or a lone "\r"; the pure-Python tokenizer only at "\n".
_LONE_CR = re.compile(r"\r(?!\n)")
_NAME_PIECES = (tokenize.NAME, tokenize.ERRORTOKEN)
_LITERALS = (tokenize.NUMBER, tokenize.STRING)


@dataclass(frozen=True)
class Respelling:
    """One identifier whose raw spelling is not the one Python reads.

    `start`/`end` are offsets in the user's text, `parsed_start`/`parsed_end`
    in the rewritten text.  `rewritten` is False for a name that folds to a
    keyword (`ｉｆ` is the *name* "if" to Python: no spelling of it in plain
    text means the same, so the text keeps it raw)."""

    raw: str
    folded: str
    start: int
    end: int
    parsed_start: int
    parsed_end: int
    rewritten: bool = True


@dataclass(frozen=True)
class PythonSpelling:
    """The text the parser reads, and the identifiers that differ from the user's text."""

    text: str
    respellings: tuple[Respelling, ...] = ()
    normal: bool = True    # the user's text is NFKC already: no identifier in it can fold

    @cached_property
    def resized(self) -> bool:
        """Did some rewrite change the length of the text (so that offsets need mapping)?"""
        return any(r.end - r.start != r.parsed_end - r.parsed_start for r in self.respellings)

    @cached_property
    def _parsed_starts(self) -> list[int]:
        return [r.parsed_start for r in self.respellings]

    def to_user(self, offset: int) -> int:
        """An offset of the rewritten text → the same place in the user's text.

        Past a rewritten identifier the offset shifts by the lengths' difference;
        inside one (no node starts there) it is clamped to the identifier."""
        index = bisect_right(self._parsed_starts, offset) - 1
        if index < 0:
            return offset
        last = self.respellings[index]
        if offset >= last.parsed_end:
            return offset + last.end - last.parsed_end
        return last.start + min(offset - last.parsed_start, last.end - last.start)


def folded_text(text: str) -> str:
    """The whole text folded to NFKC, for the cheap text prefilters (`triton`, `jit`,
    `load_inline` written with compatibility characters still count)."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def python_spelling(text: str) -> PythonSpelling:
    """`text` with every identifier folded to NFKC, as Python reads it."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return PythonSpelling(text)
    return _fold_names(text)


@lru_cache(maxsize=4)
def _fold_names(text: str) -> PythonSpelling:
    """The rewrite of a text that is not NFKC (cached: the parser, the positions
    and the inline CUDA reader of the same file all ask)."""
    found = [_respelling(raw, start) for raw, start in _identifiers(_LONE_CR.sub("\n", text))]
    return _rewrite(text, [r for r in found if r is not None])


def _identifiers(text: str) -> list[tuple[str, int]]:
    """(raw spelling, offset) of every identifier-like run of tokens that is not ASCII.

    The pure-Python tokenizer (3.11) reads a name as `\\w+`, so `a` + a combining
    accent, or a fullwidth low line `＿`, comes out as a NAME and ERRORTOKENs
    side by side: adjacent pieces are joined into one run.  A run glued to a
    number or a string (`0xｆｆ`, `1ｅ5`, `ｆ"..."`) is left alone: Python
    rejects it, and folding it would make a literal of it."""
    runs: list[list] = []   # [raw, start, end, glued to a literal]
    previous: tuple[int, int] = (tokenize.OP, -1)   # (type, end) of the token before
    for kind, string, start in _tokens(text):
        glued = previous[1] == start and previous[0] in _LITERALS
        if kind in _LITERALS and runs and runs[-1][2] == start:
            runs[-1][3] = True
        previous = (kind, start + len(string))
        if kind not in _NAME_PIECES or not string or string.isspace():
            continue
        if runs and runs[-1][2] == start:
            runs[-1][0] += string
            runs[-1][2] += len(string)
        else:
            runs.append([string, start, start + len(string), glued])
    return [(raw, start) for raw, start, _, glued in runs if not raw.isascii() and not glued]


def _tokens(text: str) -> list[tuple[int, str, int]]:
    """(token type, string, character offset) of the text's tokens, up to the first
    error `tokenize` raises (what came before it is read correctly)."""
    lines = io.StringIO(text).readlines()   # split at "\n" only, as `tokenize` reads them
    line_starts = list(accumulate((len(line) for line in lines), initial=0))
    tokens: list[tuple[int, str, int]] = []
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            row, column = token.start
            if row <= len(line_starts):   # the end marker is on the line after the last
                tokens.append((token.type, token.string, line_starts[row - 1] + column))
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    return tokens


def _respelling(raw: str, start: int) -> Respelling | None:
    """The rewrite of one identifier (its place in the rewritten text is set by
    `_rewrite`), or None when Python reads it as written (or would not read it
    as an identifier at all: then the parser says so)."""
    folded = unicodedata.normalize("NFKC", raw)
    if folded == raw or not folded.isidentifier():
        return None
    return Respelling(raw, folded, start, start + len(raw), start, start + len(raw),
                      rewritten=not keyword.iskeyword(folded))


def _rewrite(text: str, found: list[Respelling]) -> PythonSpelling:
    """Splice the folded spellings into the text, recording where each one lands."""
    pieces: list[str] = []
    placed: list[Respelling] = []
    done = shift = 0
    for item in found:
        new = item.folded if item.rewritten else item.raw
        pieces += [text[done:item.start], new]
        done = item.end
        parsed_start = item.start + shift
        shift += len(new) - len(item.raw)
        placed.append(Respelling(item.raw, item.folded, item.start, item.end, parsed_start,
                                 parsed_start + len(new), item.rewritten))
    pieces.append(text[done:])
    return PythonSpelling("".join(pieces), tuple(placed), normal=False)
