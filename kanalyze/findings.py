"""The one data model shared by every pass and every output.

A Finding is `(clause, location, message, evidence, status, witness?)`.  The
static pass creates findings with status `flagged`; the dynamic pass moves them
to `confirmed` (with a witness), `refuted` or `unconfirmed`.  Every report
format (text, json, sarif, github) and the editor read this model and nothing
else, and take a finding's severity from `Finding.severity` alone, so that
they never disagree:

    flagged, confirmed           error     the finding stands: a violation as far as kanalyze knows
    unconfirmed                  warning   no gate could decide it: not refuted, so not passed either
    refuted, informational       note      a gate ran and could not make it fail; or a number
                                           reported for information (RES002 "within budget")

This module imports nothing of kanalyze.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


DOCS_URL = "https://kanalyze.dev/rules/"


def rule_url(code: str, name: str) -> str:
    """The docs page of a clause (also what editors link a diagnostic to)."""
    return f"{DOCS_URL}{code.lower()}-{name}/"


class Status(str, enum.Enum):
    FLAGGED = "flagged"          # a static detector fired; nothing ran
    CONFIRMED = "confirmed"      # the gate ran and the property failed
    REFUTED = "refuted"          # the gate ran and could not make it fail
    UNCONFIRMED = "unconfirmed"  # no harness or no runtime to run the gate

    def __str__(self) -> str:
        return self.value


class Severity(str, enum.Enum):
    """How a finding is shown, in every format; the names are SARIF's levels."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, order=True)
class Location:
    """A span in a file.  Rows and columns are 1-based, as in ruff's output."""

    file: str
    row: int
    column: int
    end_row: int
    end_column: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "row": self.row,
            "column": self.column,
            "end_row": self.end_row,
            "end_column": self.end_column,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Location":
        return cls(data["file"], data["row"], data["column"], data["end_row"], data["end_column"])


@dataclass
class Witness:
    """A replayable record of a failed gate (filled in by the dynamic pass)."""

    clause: str
    gate: str
    data: dict[str, Any] = field(default_factory=dict)
    path: str | None = None  # the JSON file it was written to, if any

    def to_dict(self) -> dict[str, Any]:
        return {"clause": self.clause, "gate": self.gate, "path": self.path, **self.data}


@dataclass
class Finding:
    """One violation (or suspected violation) of one clause at one place."""

    code: str
    name: str
    message: str
    location: Location
    status: Status = Status.FLAGGED
    kernel: str | None = None
    # Free-form facts that back the finding: the expression, the inferred dtype,
    # the gate that would confirm it, ...  Values must be JSON-serialisable.
    evidence: dict[str, Any] = field(default_factory=dict)
    witness: Witness | None = None

    @property
    def informational(self) -> bool:
        """A number reported for information (`--show-resources`: RES002 "within budget"), not a violation."""
        return bool(self.evidence.get("informational"))

    @property
    def stands(self) -> bool:
        """Flagged by the static pass or confirmed by a gate, and not merely informational."""
        return self.status in (Status.FLAGGED, Status.CONFIRMED) and not self.informational

    @property
    def severity(self) -> Severity:
        """How every format shows this finding (the table at the top of this module)."""
        if self.stands:
            return Severity.ERROR
        if self.status is Status.UNCONFIRMED and not self.informational:
            return Severity.WARNING
        return Severity.NOTE

    @property
    def sort_key(self) -> tuple:
        loc = self.location
        return (loc.file, loc.row, loc.column, self.code)

    def to_dict(self) -> dict[str, Any]:
        loc = self.location
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "status": str(self.status),
            "filename": loc.file,
            "location": {"row": loc.row, "column": loc.column},
            "end_location": {"row": loc.end_row, "column": loc.end_column},
            "kernel": self.kernel,
            "evidence": self.evidence,
            "witness": self.witness.to_dict() if self.witness else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        witness = None
        if data.get("witness"):
            w = dict(data["witness"])
            witness = Witness(w.pop("clause"), w.pop("gate"), path=w.pop("path", None), data=w)
        return cls(
            code=data["code"],
            name=data["name"],
            message=data["message"],
            location=Location(
                data["filename"],
                data["location"]["row"],
                data["location"]["column"],
                data["end_location"]["row"],
                data["end_location"]["column"],
            ),
            status=Status(data["status"]),
            kernel=data.get("kernel"),
            evidence=data.get("evidence") or {},
            witness=witness,
        )
