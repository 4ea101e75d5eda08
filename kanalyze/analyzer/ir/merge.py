"""IR facts as findings, and their merge with the source findings.

The scanners give facts per compiled configuration; a kernel compiled for
two targets and six autotune configurations repeats the same fact twelve
times.  Facts are grouped by (file, clause, row): one finding per source row,
whose evidence lists every configuration it was seen in.

A source finding of the same clause on one of the fact's rows (the helper's
line or the line that calls it) is the same problem seen twice: the IR
evidence joins it and its message says what the compiler made of it.  A fact
with no source twin is a finding of its own: what the source detectors
missed.
"""

from __future__ import annotations

import os
from typing import Iterable

from kanalyze.analyzer.ir.scan import FIXES, IRHit
from kanalyze.analyzer.ir.stage import CompiledKernel, IRRun
from kanalyze.findings import Finding, Location

MAX_CONFIGS_SHOWN = 8


def _line(lines: list[str], row: int) -> str:
    return lines[row - 1] if 0 < row <= len(lines) else ""


def _shorten(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _read_lines(path: str, cache: dict[str, list[str]]) -> list[str]:
    if path not in cache:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                cache[path] = handle.read().splitlines()
        except OSError:
            cache[path] = []
    return cache[path]


def _compiled_to(hit: IRHit, kernel: CompiledKernel) -> str:
    sass = f" (SASS `{hit.sass[0].split(' ')[0]}`)" if hit.sass else ""
    return f"`{hit.instruction}`{sass} on {kernel.target} [{kernel.config}]"


def hit_findings(run: IRRun, names: dict[str, str], gates: dict[str, str]) -> list[Finding]:
    """One finding per (file, clause, row) of the scanners' facts."""
    groups: dict[tuple[str, str, int], list[tuple[IRHit, CompiledKernel]]] = {}
    for file_ir in run.files:
        for kernel in file_ir.kernels:
            for hit in kernel.hits:
                groups.setdefault((file_ir.path, hit.code, hit.row), []).append((hit, kernel))
    lines: dict[str, list[str]] = {}
    findings = []
    for (path, code, row), seen in sorted(groups.items()):
        hit, kernel = seen[0]
        text = _line(_read_lines(path, lines), row)
        column = hit.column or (len(text) - len(text.lstrip()) + 1)
        where = f" (inlined at line {', '.join(map(str, hit.rows[1:]))})" if len(hit.rows) > 1 else ""
        others = len({(k.target, k.config) for _, k in seen}) - 1
        more = f" and {others} more configuration{'s' if others != 1 else ''}" if others > 0 else ""
        message = (f"`{_shorten(text.strip())}`{where}: {hit.detail}; it compiles to {_compiled_to(hit, kernel)}"
                   f"{more}; {FIXES[hit.kind]}")
        findings.append(Finding(
            code=code, name=names.get(code, ""), message=message,
            location=Location(path, row, column, row, len(text) + 1 if text else column),
            kernel=kernel.kernel,
            evidence={"source": "ir", "gate": gates.get(code, ""), "ir": _evidence(seen),
                      "rows": list(hit.rows)},
        ))
    return findings


def _evidence(seen: list[tuple[IRHit, CompiledKernel]]) -> list[dict]:
    entries = []
    for hit, kernel in seen[:MAX_CONFIGS_SHOWN]:
        entries.append({"kernel": kernel.kernel, "target": kernel.target.name, "config": kernel.config,
                        "instruction": hit.instruction, "ptx": hit.ptx, "sass": hit.sass,
                        **({"notes": kernel.notes} if kernel.notes else {})})
    if len(seen) > MAX_CONFIGS_SHOWN:
        entries.append({"more": len(seen) - MAX_CONFIGS_SHOWN})
    return entries


def failure_findings(run: IRRun, name: str) -> list[Finding]:
    """KAN002: a kernel configuration that did not compile (once per kernel, error and target)."""
    findings: list[Finding] = []
    seen: set[tuple] = set()
    for file_ir in run.files:
        for kernel in file_ir.kernels:
            if kernel.ok:
                continue
            error = kernel.error or "unknown error"
            key = (file_ir.path, kernel.kernel, error, kernel.target)
            if key in seen:
                continue
            seen.add(key)
            hint = _missing_hint(error, file_ir.missing)
            row = kernel.error_row or kernel.def_row
            findings.append(Finding(
                code="KAN002", name=name,
                message=f"`{kernel.kernel}` did not compile for {kernel.target} [{kernel.config}]: {error}{hint}",
                location=Location(file_ir.path, row, 1, row, 1), kernel=kernel.kernel,
                evidence={"source": "ir", "target": kernel.target.name, "config": kernel.config, "error": error,
                          "timed_out": kernel.timed_out, "notes": kernel.notes},
            ))
    return findings


def _missing_hint(error: str, missing: dict[str, str]) -> str:
    for name, why in missing.items():
        if f"'{name}'" in error or f"`{name}`" in error or f" {name} " in error:
            return f" (`{name}` is not in the compiled module: {why})"
    return ""


def merge(static: list[Finding], ir: Iterable[Finding]) -> tuple[list[Finding], list[Finding]]:
    """Join IR findings to their source twins.  Returns (static findings, some with IR
    evidence added; IR findings with no twin)."""
    by_key: dict[tuple[str, str, int], Finding] = {}
    for finding in static:
        by_key.setdefault((os.path.abspath(finding.location.file), finding.code, finding.location.row), finding)
    alone = []
    for finding in ir:
        rows = finding.evidence.get("rows") or [finding.location.row]
        path = os.path.abspath(finding.location.file)
        twin = next((by_key[(path, finding.code, r)] for r in rows if (path, finding.code, r) in by_key), None)
        if twin is None:
            finding.evidence["static"] = "no source finding on this line: only the compiled code shows it"
            alone.append(finding)
            continue
        first = finding.evidence["ir"][0]
        if "ir" not in twin.evidence:
            twin.message += (f" (IR: compiles to `{first['instruction']}` on {first['target']} [{first['config']}]"
                             + (f", line {finding.location.row}" if finding.location.row != twin.location.row else "")
                             + ")")
        twin.evidence.setdefault("ir", []).extend(finding.evidence["ir"])
    return static, alone
