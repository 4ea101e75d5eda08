"""ruff-style text: `path:row:col: CODE message`, then a summary line.

Two formats, as ruff's: `concise`, one line per finding (what `text` means), and
`full`, each finding's line followed by the source it points at, a caret line
under the span (snippet.py), and a blank line.

A finding that does not stand says so after its code (`[confirmed]`, `[refuted]`,
`[unconfirmed]`, `[info]`), and the summary line counts what stands and lists the
rest apart (summary.py).  Every string a finding carries goes through `printable`:
paths, messages and verdicts can hold text from the checked files or from a
candidate's output.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from kanalyze.findings import Finding, Severity, Status
from kanalyze.report.escape import printable
from kanalyze.report.snippet import render_snippet
from kanalyze.report.summary import Summary

_BOLD, _RED, _YELLOW, _CYAN, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[36m", "\x1b[2m", "\x1b[0m"
_CODE_COLOR = {Severity.ERROR: _RED, Severity.WARNING: _YELLOW, Severity.NOTE: _DIM}


def status_tag(finding: Finding) -> str:
    """What the text shows after the code: nothing for a plain flag."""
    if finding.informational:
        return " [info]"
    return "" if finding.status is Status.FLAGGED else f" [{finding.status}]"


def render_text(findings: list[Finding], *, color: bool = False, suppressed: int = 0,
                summary: bool = True, source: Callable[[str], list[str] | None] | None = None,
                fixed: int = 0) -> str:
    """Each finding's line (and the dynamic pass's verdict under it); with `summary`,
    the summary line and the count that `# noqa` suppressed.  With `source` (a file's
    rows, or None where they cannot be read), the `full` format: the source lines too.
    `fixed`: how many findings `--fix` fixed, for the summary line."""
    def paint(text: str, *codes: str) -> str:
        return "".join(codes) + text + _RESET if color else text

    lines = []
    for f in findings:
        loc = f.location
        colon = paint(":", _CYAN)
        where = f"{paint(printable(loc.file), _BOLD)}{colon}{loc.row}{colon}{loc.column}{colon}"
        code = paint(printable(f.code), _BOLD, _CODE_COLOR[f.severity])
        lines.append(f"{where} {code}{status_tag(f)} {printable(f.message)}")
        rows = source(loc.file) if source is not None else None
        if rows is not None:
            lines += render_snippet(f, rows, paint, _CODE_COLOR[f.severity], _CYAN)
        if f.evidence.get("gate_result"):  # the dynamic pass's one-line verdict
            lines.append(f"    {printable(str(f.evidence['gate_result']))}")
        elif f.witness is not None and f.witness.path:
            lines.append(f"    witness: {printable(f.witness.path)}")
        if source is not None:
            lines.append("")
    if summary:
        lines.append(Summary.of(findings).line(fixed))
        if suppressed:
            lines.append(paint(f"({suppressed} suppressed by noqa)", _DIM))
    return "".join(line + "\n" for line in lines)


def render_statistics(findings: list[Finding], names: dict[str, str]) -> str:
    """A count per code of the findings that stand (what the summary line counts), most first."""
    counts = Counter(f.code for f in findings if f.stands)
    width = max((len(str(n)) for n in counts.values()), default=1)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{n:>{width}}\t{printable(code)}\t{printable(names.get(code, ''))}\n" for code, n in ranked)
