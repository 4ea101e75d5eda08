"""The client's settings (section "kanalyze"): what they may hold and how a
client's object, in whichever wrapping it comes, updates them.

    select, ignore   codes or prefixes; replace [tool.kanalyze]'s, as on the command line.
                     A list with a code that names no clause (`PRC01`) is not applied:
                     the server shows why (window/showMessage) and keeps what it had.
    ir               accepted; the editor runs the source pass only (`check --ir` compiles)
    debounce         milliseconds (default 150; 0 analyzes every change)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kanalyze.config import selector_problems

DEFAULT_DEBOUNCE_MS = 150


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    ir: bool = False
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    def merged(self, raw: Any) -> tuple["Settings", list[str]]:
        """These settings updated from a client's object; also the problems found in it.

        Accepts the settings themselves, or wrapped as {"kanalyze": {...}} (what
        editors send for a section) or {"settings": {...}} (as ruff's server).
        """
        if isinstance(raw, dict) and isinstance(raw.get("kanalyze"), dict):
            raw = raw["kanalyze"]
        elif isinstance(raw, dict) and isinstance(raw.get("settings"), dict):
            raw = raw["settings"]
        if raw is None:
            return self, []
        if not isinstance(raw, dict):
            return self, [f"settings must be an object, got {type(raw).__name__}"]
        values: dict[str, Any] = {}
        problems: list[str] = []
        for key in ("select", "ignore"):
            if key not in raw:
                continue
            codes = _codes(raw[key])
            unknown = selector_problems(codes or ())  # codes that name no clause, with the closest known one
            if raw[key] is None:
                values[key] = None  # back to [tool.kanalyze]'s
            elif codes is None:
                problems.append(f"`{key}` must be a list of codes or a comma-separated string")
            elif unknown:
                problems.append(f"`{key}`: {'; '.join(unknown)}")
            elif key == "select" and not codes:
                problems.append("`select` is empty, so nothing would be checked; name the codes to check, "
                                "or set it to null for [tool.kanalyze]'s selection")
            else:
                values[key] = codes
        if "ir" in raw:
            if isinstance(raw["ir"], bool):
                values["ir"] = raw["ir"]
            else:
                problems.append("`ir` must be true or false")
        if "debounce" in raw:
            value = raw["debounce"]
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10_000:
                values["debounce_ms"] = value
            else:
                problems.append("`debounce` must be a number of milliseconds from 0 to 10000")
        unknown = sorted(set(raw) - {"select", "ignore", "ir", "debounce"})
        if unknown:
            problems.append(f"unknown setting(s): {', '.join(map(str, unknown))}")
        return replace(self, **values), problems


def _codes(value: Any) -> tuple[str, ...] | None:
    """Codes from a list or a comma-separated string; None if it is neither."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(v.strip().upper() for v in value if v.strip())
