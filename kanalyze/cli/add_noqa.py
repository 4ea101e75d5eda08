"""`kanalyze check --add-noqa`: a suppression comment on each line with a finding, as ruff's.

A Python line gets `# noqa: CODE`, merged into the `# noqa:` comment the line
already has (`# noqa: PRC002` becomes `# noqa: PRC002, PRC001`); a CUDA C++ line
(a `.cu` file, or a row inside an inline CUDA string of a Python file) gets
`// NOLINT(CODE)`, merged the same way: that is what analyzer/cuda/suppressions.py
reads there (a `// noqa` would suppress nothing).  The rest of the line stays as
it is; trailing spaces go, as ruff drops them.  A finding is annotated on its
first row, else its last, where a comment can end the line: never a Python row
whose end lies inside a string or continues with a backslash, nor a CUDA row
continued with a backslash (a comment there would swallow the next row).  Every
edit is checked with the parser that will read it, so that what was added does
suppress; a finding no comment can reach is named on stderr instead.
Parse errors and crashes (KAN000, KAN001) get nothing: no comment suppresses them.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict

from kanalyze.analyzer.cuda.sources import is_cuda_path
from kanalyze.analyzer.cuda.suppressions import _NOLINT, CudaSuppressions
from kanalyze.analyzer.sources import read_for_rewrite
from kanalyze.analyzer.suppressions import _CODE, _LINE_NOQA, Suppressions
from kanalyze.findings import Finding, Status

_ROW = re.compile(r"(\r\n|\r|\n)")
NOQA, NOLINT = "noqa", "nolint"


def _python_rows(text: str) -> tuple[set[int], set[int], dict[int, int]] | None:
    """(rows a `#` comment may end, rows whose end lies inside a string, where each row's
    comment starts); None if the text does not tokenize."""
    ends, inside, comments = set(), set(), {}
    fstrings: list[int] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            kind, (srow, scol), (erow, _) = token.type, token.start, token.end
            if kind in (tokenize.NEWLINE, tokenize.NL):
                ends.add(srow)
            elif kind == tokenize.COMMENT:
                comments[srow] = scol
            elif kind == tokenize.STRING:
                inside.update(range(srow, erow))
            elif kind == getattr(tokenize, "FSTRING_START", None):
                fstrings.append(srow)
            elif kind == getattr(tokenize, "FSTRING_END", None) and fstrings:
                inside.update(range(fstrings.pop(), erow))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return ends - inside, inside, comments


def _merge(codes: list[str], new: set[str]) -> list[str]:
    have = {code.upper() for code in codes}
    return codes + sorted(code for code in new if code.upper() not in have)


def _with_noqa(line: str, codes: set[str], comment: int | None) -> str:
    if comment is not None:
        for match in _LINE_NOQA.finditer(line, comment):
            if not line[: match.start()].rstrip().endswith("kanalyze:"):
                merged = _merge(_CODE.findall(match.group("codes") or ""), codes)
                return line[: match.start()] + "# noqa: " + ", ".join(merged) + line[match.end():]
    return line.rstrip() + "  # noqa: " + ", ".join(sorted(codes))


def _with_nolint(line: str, codes: set[str]) -> str:
    for match in _NOLINT.finditer(line):
        if match.group("kind") is None and match.group("codes") is not None:
            merged = _merge([c.strip() for c in match.group("codes").split(",") if c.strip()], codes)
            return line[: match.start()] + "// NOLINT(" + ", ".join(merged) + ")" + line[match.end():]
    return line.rstrip() + "  // NOLINT(" + ", ".join(sorted(codes)) + ")"


def annotate(path: str, text: str, findings: list[tuple[int, int, str]]) -> tuple[str, int, list[tuple[int, str]]]:
    """`text` with a comment for each `(row, end_row, code)`; how many lines got one; and
    the `(row, code)` pairs that none could be added for."""
    pieces = _ROW.split(text)
    lines = pieces[0::2]
    cuda = is_cuda_path(path)
    if cuda:
        python = None
    else:
        python = _python_rows(text)
        if python is None:
            return text, 0, [(row, code) for row, _, code in findings]
    wanted: dict[tuple[int, str], set[str]] = defaultdict(set)
    missed: list[tuple[int, str]] = []
    for row, end_row, code in findings:
        for candidate in dict.fromkeys((row, end_row)):
            if not 1 <= candidate <= len(lines):
                continue
            continued = lines[candidate - 1].rstrip().endswith("\\")
            if python is not None and candidate in python[0]:
                wanted[(candidate, NOQA)].add(code)
                break
            if (cuda or (python is not None and candidate in python[1])) and not continued:
                wanted[(candidate, NOLINT)].add(code)
                break
        else:
            missed.append((row, code))
    edited = list(lines)
    for (row, kind), codes in sorted(wanted.items()):
        edited[row - 1] = (_with_noqa(lines[row - 1], codes, python[2].get(row) if python else None)
                           if kind == NOQA else _with_nolint(lines[row - 1], codes))
    pieces[0::2] = edited
    result = "".join(pieces)
    # What was added must suppress: read it back with the parsers the analysis uses.
    noqa, nolint = Suppressions.parse(result), CudaSuppressions.parse(result)
    added = 0
    for (row, kind), codes in sorted(wanted.items()):
        reader = noqa if kind == NOQA else nolint
        if all(reader.suppressed(code, (row,)) for code in codes):
            added += edited[row - 1] != lines[row - 1]
        else:
            edited[row - 1] = lines[row - 1]
            missed += [(row, code) for code in sorted(codes)]
    pieces[0::2] = edited
    return "".join(pieces), added, sorted(missed)


def to_annotate(findings: list[Finding]) -> dict[str, list[tuple[int, int, str]]]:
    """The findings that fail the run, by file: those that stand and those unconfirmed."""
    by_file: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for f in findings:
        failing = f.stands or (f.status is Status.UNCONFIRMED and not f.informational)
        if failing and not f.code.startswith("KAN") and f.location.file != "-":
            by_file[f.location.file].append((f.location.row, f.location.end_row, f.code))
    return by_file


def add_noqa(findings: list[Finding]) -> tuple[int, list[str]]:
    """Annotate the files in place; how many lines got a comment, and warnings to print."""
    added, warnings = 0, []
    for path, wanted in sorted(to_annotate(findings).items()):
        try:
            text, encoding = read_for_rewrite(path)
        except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as exc:
            warnings.append(f"{path}: cannot add noqa comments: {exc}")
            continue
        new, count, missed = annotate(path, text, wanted)
        warnings += [f"{path}:{row}: no comment can suppress {code} on this line (it ends inside a string "
                     f"or continues on the next); not annotated" for row, code in missed]
        if count:
            try:
                with open(path, "wb") as handle:
                    handle.write(new.encode(encoding))
            except (OSError, UnicodeEncodeError) as exc:
                warnings.append(f"{path}: cannot write: {exc}")
                continue
            added += count
    return added, warnings
