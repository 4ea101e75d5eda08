"""`# noqa` comments, read the way flake8 and ruff users expect.

- `# noqa` on a line suppresses every finding reported on that line;
- `# noqa: PRC002, EXC001` suppresses those codes (prefixes such as `PRC` too);
- `# kanalyze: noqa` on a line of its own suppresses the whole file;
- `# kanalyze: noqa: PRC002` suppresses one code in the whole file.
Only lines that carry a finding are looked at, so this costs nothing on clean files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(r"^\s*#\s*kanalyze:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?\s*$", re.IGNORECASE | re.MULTILINE)
_CODE = re.compile(r"[A-Z]+[0-9]*", re.IGNORECASE)


def _codes(text: str | None) -> frozenset[str] | None:
    """None means "every code"."""
    if not text:
        return None
    return frozenset(code.upper() for code in _CODE.findall(text))


def _matches(code: str, codes: frozenset[str] | None) -> bool:
    return codes is None or any(code.startswith(c) for c in codes)


@dataclass
class Suppressions:
    lines: list[str]
    file_codes: list[frozenset[str] | None]

    @classmethod
    def parse(cls, text: str) -> "Suppressions":
        file_codes = [_codes(m.group("codes")) for m in _FILE_NOQA.finditer(text)] if "kanalyze" in text else []
        return cls(text.splitlines(), file_codes)

    def suppressed(self, code: str, rows: tuple[int, ...]) -> bool:
        if any(_matches(code, codes) for codes in self.file_codes):
            return True
        for row in rows:
            if 1 <= row <= len(self.lines):
                line = self.lines[row - 1]
                if "#" not in line:
                    continue
                match = _LINE_NOQA.search(line)
                if match and not line[: match.start()].rstrip().endswith("kanalyze:") and _matches(code, _codes(match.group("codes"))):
                    return True
        return False
