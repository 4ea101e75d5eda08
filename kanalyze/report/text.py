"""ruff-style text: `path:row:col: CODE message`, then a summary line."""

from __future__ import annotations

from collections import Counter

from kanalyze.findings import Finding, Status

_BOLD, _RED, _CYAN, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[2m", "\x1b[0m"


def render_text(findings: list[Finding], *, color: bool = False, suppressed: int = 0,
                files_checked: int | None = None) -> str:
    def paint(text: str, *codes: str) -> str:
        return "".join(codes) + text + _RESET if color else text

    lines = []
    for f in findings:
        loc = f.location
        where = paint(loc.file, _BOLD) + paint(":", _CYAN) + f"{loc.row}" + paint(":", _CYAN) + f"{loc.column}" + paint(":", _CYAN)
        status = "" if f.status is Status.FLAGGED else f" [{f.status}]"
        lines.append(f"{where} {paint(f.code, _BOLD, _RED)}{status} {f.message}")
        if f.evidence.get("gate_result"):  # the dynamic pass's one-line verdict
            lines.append(f"    {f.evidence['gate_result']}")
        elif f.witness is not None and f.witness.path:
            lines.append(f"    witness: {f.witness.path}")
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
    return "".join(f"{n:>{width}}\t{code}\t{names.get(code, '')}\n" for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
