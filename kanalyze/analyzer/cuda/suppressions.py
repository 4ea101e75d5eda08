"""`// NOLINT` comments, read the way clang-tidy users expect.

- `// NOLINT` at the end of a line suppresses every finding on that line;
- `// NOLINT(ORD001, PRC)` suppresses those codes (prefixes and `*` globs too);
- `// NOLINTNEXTLINE(ORD001)` does the same for the line after it;
- `// NOLINTBEGIN(ORD001)` ... `// NOLINTEND(ORD001)` for the lines between;
- `// kanalyze: noqa` on a line of its own suppresses the whole file,
  `// kanalyze: noqa: ORD001` one code in the whole file (as `# kanalyze: noqa`).
In a Python file these work on the lines of an inline CUDA string, next to
`# noqa` on the Python line.

`unknown_cuda_codes` finds the codes such comments name that are no clause, as
`unknown_codes` does for `# noqa` (../suppressions.py): a `NOLINT` is shared with
clang-tidy (`NOLINT(bugprone-*)`), so there only codes of kanalyze's families are judged.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from kanalyze.analyzer.cuda.sources import compiler_lines
from kanalyze.analyzer.suppressions import UnknownCode, judge
from kanalyze.config import known_codes

_NOLINT = re.compile(r"//\s*NOLINT(?P<kind>NEXTLINE|BEGIN|END)?\b(?:\((?P<codes>[^)]*)\))?")
_FILE_NOQA = re.compile(r"^\s*//\s*kanalyze:\s*noqa(?::\s*(?P<codes>[A-Za-z0-9*,\s]+))?\s*$",
                        re.IGNORECASE | re.MULTILINE)


def _codes(text: str | None) -> frozenset[str] | None:
    """None means every code."""
    if text is None:
        return None
    codes = frozenset(c.strip().upper() for c in text.split(",") if c.strip())
    return codes or None


def _matches(code: str, codes: frozenset[str] | None) -> bool:
    if codes is None:
        return True
    return any(code.startswith(c) or fnmatch.fnmatchcase(code, c) for c in codes)


@dataclass
class CudaSuppressions:
    lines: list[str]
    file_codes: list[frozenset[str] | None] = field(default_factory=list)
    # (first row, last row, codes) of NOLINTBEGIN/END blocks, rows 1-based
    blocks: list[tuple[int, int, frozenset[str] | None]] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "CudaSuppressions":
        text = compiler_lines(text)  # `^...$` of a file-wide noqa: a lone "\r" ends a line too
        lines = text.splitlines()
        file_codes = [_codes(m.group("codes")) for m in _FILE_NOQA.finditer(text)] if "kanalyze" in text else []
        blocks: list[tuple[int, int, frozenset[str] | None]] = []
        if "NOLINTBEGIN" in text:
            open_blocks: list[tuple[int, frozenset[str] | None]] = []
            for row, line in enumerate(lines, start=1):
                for match in _NOLINT.finditer(line):
                    if match.group("kind") == "BEGIN":
                        open_blocks.append((row, _codes(match.group("codes"))))
                    elif match.group("kind") == "END" and open_blocks:
                        start, codes = open_blocks.pop()
                        blocks.append((start, row, codes))
            blocks.extend((start, len(lines), codes) for start, codes in open_blocks)
        return cls(lines, file_codes, blocks)

    def suppressed(self, code: str, rows: tuple[int, ...]) -> bool:
        if any(_matches(code, codes) for codes in self.file_codes):
            return True
        for row in rows:
            if any(first <= row <= last and _matches(code, codes) for first, last, codes in self.blocks):
                return True
            if self._line(code, row, None) or self._line(code, row - 1, "NEXTLINE"):
                return True
        return False

    def _line(self, code: str, row: int, kind: str | None) -> bool:
        if not 1 <= row <= len(self.lines):
            return False
        line = self.lines[row - 1]
        if "NOLINT" not in line:
            return False
        return any(match.group("kind") == kind and _matches(code, _codes(match.group("codes")))
                   for match in _NOLINT.finditer(line))


def unknown_cuda_codes(text: str) -> list[UnknownCode]:
    """The codes of this CUDA text's `NOLINT` and `// kanalyze: noqa` comments that name no clause."""
    if "NOLINT" not in text and "noqa" not in text.lower():
        return []
    found = []
    for row, line in enumerate(compiler_lines(text).splitlines(), start=1):
        whole_file = _FILE_NOQA.match(line)
        if whole_file:
            found += [judge(row, code, "// kanalyze: noqa", True) for code in _codes(whole_file.group("codes")) or ()
                      if not _glob_matches_a_code(code)]
            continue
        for match in _NOLINT.finditer(line):
            comment = f"// NOLINT{match.group('kind') or ''}"
            found += [judge(row, code, comment, False) for code in _codes(match.group("codes")) or ()
                      if not _glob_matches_a_code(code)]
    return [unknown for unknown in found if unknown is not None]


def _glob_matches_a_code(code: str) -> bool:
    return any(c in code for c in "*?[") and any(fnmatch.fnmatchcase(known, code) for known in known_codes())
