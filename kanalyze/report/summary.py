"""What a run found, counted once: for the summary line and for the exit code.

A finding that stands (flagged or confirmed) is an error; an unconfirmed flag is
a warning; a refuted flag and an informational line (RES002 "within budget") are
notes (`Finding.severity`).  The run fails, exit code 1, when anything stands or
is unconfirmed: only a gate's refutation clears a static flag, and a flag that
no gate could decide has not passed (docs/worker-protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from kanalyze.findings import Finding, Status


@dataclass(frozen=True)
class Summary:
    errors: int = 0          # findings that stand ...
    confirmed: int = 0       # ... of which a gate confirmed
    unconfirmed: int = 0
    refuted: int = 0
    informational: int = 0

    @classmethod
    def of(cls, findings: list[Finding]) -> "Summary":
        standing = [f for f in findings if f.stands]
        return cls(
            errors=len(standing),
            confirmed=sum(1 for f in standing if f.status is Status.CONFIRMED),
            unconfirmed=sum(1 for f in findings if f.status is Status.UNCONFIRMED and not f.informational),
            refuted=sum(1 for f in findings if f.status is Status.REFUTED and not f.informational),
            informational=sum(1 for f in findings if f.informational),
        )

    @property
    def failed(self) -> bool:
        return self.errors > 0 or self.unconfirmed > 0

    def line(self, fixed: int = 0) -> str:
        """`Found 3 errors (1 confirmed); 2 refuted, 1 unconfirmed.`, or `All checks passed!`;
        after `--fix` (`fixed` of them fixed), as ruff: `Found 3 errors (2 fixed, 1 remaining).`"""
        apart = ", ".join(f"{count} {label}" for count, label in (
            (self.refuted, "refuted"), (self.unconfirmed, "unconfirmed"), (self.informational, "informational"))
            if count)
        if fixed:
            total = self.errors + fixed
            return (f"Found {total} error{'' if total == 1 else 's'} ({fixed} fixed, {self.errors} remaining)"
                    + (f"; {apart}" if apart else "") + ".")
        if not self.failed:
            return "All checks passed!" + (f" ({apart})" if apart else "")
        found = f"Found {self.errors} error{'' if self.errors == 1 else 's'}"
        if self.confirmed:
            found += f" ({self.confirmed} confirmed)"
        return found + (f"; {apart}" if apart else "") + "."
