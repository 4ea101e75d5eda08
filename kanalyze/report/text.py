"""ruff-style text: `path:row:col: CODE message`, then a summary line.

Every string a finding carries goes through `printable`: paths, messages and
verdicts can hold text from the checked files or from a candidate's output.
"""

from __future__ import annotations

from collections import Counter

from kanalyze.findings import Finding, Status
from kanalyze.report.escape import printable

_BOLD, _RED, _CYAN, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[2m", "\x1b[0m"


def render_text(findings: list[Finding], *, color: bool = False, suppressed: int = 0,
                files_checked: int | None = None) -> str:
    def paint(text: str, *codes: str) -> str:
        return "".join(codes) + text + _RESET if color else text

    lines = []
    for f in findings:
        loc = f.location
        colon = paint(":", _CYAN)
        where = f"{paint(printable(loc.file), _BOLD)}{colon}{loc.row}{colon}{loc.column}{colon}"
        status = "" if f.status is Status.FLAGGED else f" [{f.status}]"
        lines.append(f"{where} {paint(printable(f.code), _BOLD, _RED)}{status} {printable(f.message)}")
        if f.evidence.get("gate_result"):  # the dynamic pass's one-line verdict
            lines.append(f"    {printable(str(f.evidence['gate_result']))}")
        elif f.witness is not None and f.witness.path:
            lines.append(f"    witness: {printable(f.witness.path)}")
    count = len(findings)
    if count:
        lines.append(f"Found {count} error{'s' if count != 1 else ''}.")
    else:
        lines.append("All checks passed!")
    if suppressed:
        lines.append(paint(f"({suppressed} suppressed by noqa)", _DIM))
    return "\n".join(lines) + "\n"


def render_statistics(findings: list[Finding], names: dict[str, str]) -> str:
    counts = Counter(f.code for f in findings)
    width = max((len(str(n)) for n in counts.values()), default=1)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{n:>{width}}\t{printable(code)}\t{printable(names.get(code, ''))}\n" for code, n in ranked)
