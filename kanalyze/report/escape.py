"""Make text from the checked files safe to print on a terminal.

Findings carry text that kanalyze did not write: code excerpts and paths from the
checked files, and the output of the candidates that the dynamic pass ran.  Those
are untrusted, and a terminal obeys what it prints: an escape sequence can clear
the screen or rewrite earlier lines, and a Unicode bidi control can make code
read differently from what it is (the "Trojan Source" trick).  Every such string
goes through `printable` before the text or github format prints it; it shows
each of these characters as a visible escape instead (`\\x1b`, `\\u202e`).
"""

from __future__ import annotations

import re

# The C0 controls (a line break or tab too: one finding is one line), DEL and the
# C1 controls; Unicode's line and paragraph separators (str.splitlines() splits on
# them, so they too would break a line in two); the bidi embeddings, overrides,
# isolates and marks; and lone surrogates (an undecodable byte of a file name),
# which would reach the terminal as that raw byte.
_C0 = "\x00-\x1f"
_C0_BUT_NEWLINE_AND_TAB = "\x00-\x08\x0b-\x1f"
_OTHERS = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\ud800-\udfff"
_UNSAFE_IN_LINE = re.compile(f"[{_C0}{_OTHERS}]")
_UNSAFE_IN_BLOCK = re.compile(f"[{_C0_BUT_NEWLINE_AND_TAB}{_OTHERS}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """`text` with every control, bidi and separator character above written as an escape.

    A line break or tab is escaped too, so that one finding stays one line, unless
    `multiline` says that `text` is meant as a block of lines: then `\\n` and `\\t` stay.
    """
    return (_UNSAFE_IN_BLOCK if multiline else _UNSAFE_IN_LINE).sub(_escape, text)
