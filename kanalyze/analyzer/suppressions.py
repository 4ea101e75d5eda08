"""`# noqa` comments, read the way flake8 and ruff users expect.

- `# noqa` on a line suppresses every finding reported on that line;
- `# noqa: PRC002, EXC001` suppresses those codes (prefixes such as `PRC` too);
- `# kanalyze: noqa` on a line of its own suppresses the whole file;
- `# kanalyze: noqa: PRC002` suppresses one code in the whole file.
Only lines that carry a finding are looked at, so this costs nothing on clean files.

`unknown_codes` finds the codes such comments name that are no clause (a typo
such as `PRC01` suppresses nothing); the CLI warns about them.  A `# noqa` line
is shared with ruff and flake8, so there only codes of kanalyze's families
(`PRC...`, `KAN...`) are judged: `# noqa: E501` is another tool's business.
Every code of a `# kanalyze: noqa:` line is kanalyze's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kanalyze.config import closest_selector, is_known_selector, known_families

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


# --- codes that name nothing ------------------------------------------------------

@dataclass(frozen=True)
class UnknownCode:
    """A code in a suppression comment that names no clause, so it suppresses nothing."""

    row: int
    code: str
    comment: str              # the kind of comment: "# noqa", "# kanalyze: noqa", "// NOLINT", ...
    closest: str | None       # the known code or prefix it most likely meant

    def warning(self, path: str) -> str:
        hint = f"did you mean `{self.closest}`?" if self.closest else "`kanalyze rules` lists every code"
        return f"{path}:{self.row}: unknown code `{self.code}` in `{self.comment}` ({hint}); it suppresses nothing"


def judge(row: int, code: str, comment: str, kanalyze_only: bool) -> UnknownCode | None:
    """An UnknownCode for a code that is kanalyze's to judge and names no clause; else None.

    `kanalyze_only`: the comment is kanalyze's own, so every code in it is meant for kanalyze;
    in a comment shared with other linters only codes of kanalyze's families are.
    """
    code = code.upper()
    if is_known_selector(code):
        return None
    if not kanalyze_only and not code.startswith(known_families()):
        return None
    return UnknownCode(row, code, comment, closest_selector(code))


def unknown_codes(text: str) -> list[UnknownCode]:
    """The codes of this Python text's `# noqa` comments that name no clause."""
    if "noqa" not in text.lower():
        return []
    found = []
    for row, line in enumerate(text.splitlines(), start=1):
        if "#" not in line:
            continue
        whole_file = _FILE_NOQA.match(line)
        if whole_file:
            found += [judge(row, code, "# kanalyze: noqa", True) for code in _CODE.findall(whole_file.group("codes") or "")]
            continue
        match = _LINE_NOQA.search(line)
        if match and not line[: match.start()].rstrip().endswith("kanalyze:"):
            found += [judge(row, code, "# noqa", False) for code in _CODE.findall(match.group("codes") or "")]
    return [unknown for unknown in found if unknown is not None]
