"""Fixes: LibCST codemods that resolve a finding, as `kanalyze check --fix` and the editor apply them.

The registry says which finding (its code and evidence) each fix applies to;
`fixes_for` gives the fixes of one finding, `apply` makes one pass over a file
(every applicable fix at once, without overlapping edits, kept only if the
file still parses), and `fix_until_stable` repeats passes on a fresh check of
the text until no fix applies (at most MAX_PASSES), as ruff does.

    base.py                      Edit, Fix, Fixer, Source (the parsed text), with_keyword
    prc001_dot_ieee.py           `tl.dot(a, b)` in TF32 → `input_precision="ieee"` (unsafe)
    prc002_fp32_accumulator.py   fp16/bf16 `tl.zeros` accumulator → fp32, one cast at the store (unsafe)
    cmp003_grid_cdiv.py          grid `n // BLOCK` → `triton.cdiv(n, BLOCK)` (safe when the kernel masks)
    cmp003_tail_mask.py          unmasked `tl.load(p + offs)` → `mask=offs < n, other=0.0`; a tile's
                                 `mask=(offs_m[:, None] < M) & (offs_n[None, :] < N)` (unsafe)
    exc001_propagate_nan.py      `tl.maximum/minimum/clamp` → `propagate_nan=tl.PropagateNan.ALL` (unsafe)
    exc001_where_nan.py          `tl.where(x > 0, x, 0.0)` → `tl.where(x <= 0, 0.0, x)` (unsafe)
    mem004_int64_offsets.py      `pid * stride` → `pid.to(tl.int64) * stride` (safe)

Fixes never import or run the code they edit, and never touch CUDA C++.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

import libcst as cst

from kanalyze.findings import Finding, Status
from kanalyze.fixes.base import SAFE, UNSAFE, Edit, Fix, Fixer, Source
from kanalyze.fixes.cmp003_grid_cdiv import GridCdiv
from kanalyze.fixes.cmp003_tail_mask import TailMask
from kanalyze.fixes.exc001_propagate_nan import PropagateNan
from kanalyze.fixes.exc001_where_nan import WhereKeepsNan
from kanalyze.fixes.mem004_int64_offsets import WidenOffsets
from kanalyze.fixes.prc001_dot_ieee import DotInputPrecision
from kanalyze.fixes.prc002_fp32_accumulator import Fp32Accumulator

FIXERS: tuple[Fixer, ...] = (DotInputPrecision(), Fp32Accumulator(), GridCdiv(), TailMask(), PropagateNan(),
                             WhereKeepsNan(), WidenOffsets())
FIXED_CODES = frozenset(code for fixer in FIXERS for code in fixer.codes)
MAX_PASSES = 4


def fixable(finding: Finding) -> bool:
    """A finding some fixer may handle: it fails the run, it sits in a Python file, its code has fixes."""
    failing = finding.stands or (finding.status is Status.UNCONFIRMED and not finding.informational)
    return failing and finding.code in FIXED_CODES and not finding.location.file.endswith((".cu", ".cuh", ".cuda"))


def _source(text: str | Source) -> Source | None:
    if isinstance(text, Source):
        return text
    try:
        return Source(text)
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return None


def fixes_for(finding: Finding, source: str | Source) -> list[Fix]:
    """The fixes of one finding in the text `source` (str, or a Source to share the parse)."""
    if not fixable(finding):
        return []
    parsed = _source(source)
    if parsed is None:
        return []
    found = []
    for fixer in FIXERS:
        if fixer.applies(finding):
            fix = fixer.fix(finding, parsed)
            if fix is not None:
                found.append(fix)
    return found


def parses(text: str) -> bool:
    """Does the text still parse, for LibCST and for Python?"""
    try:
        cst.parse_module(text)
        ast.parse(text)
    except (cst.ParserSyntaxError, SyntaxError, RecursionError, ValueError):
        return False
    return True


def _apply_edits(text: str, fixes: Iterable[Fix]) -> str:
    edits = sorted({edit for fix in fixes for edit in fix.edits})
    pieces, last = [], 0
    for edit in edits:
        pieces += [text[last:edit.start], edit.content]
        last = edit.end
    return "".join(pieces) + text[last:]


def apply(source: str, findings: Iterable[Finding], unsafe: bool = False) -> tuple[str, list[Fix]]:
    """One pass: every fix of `findings` allowed by `unsafe`, in order of position,
    a fix whose edits overlap one taken already left for the next pass (a fix
    with the very same edits counts as applied); kept only if the result parses."""
    parsed = _source(source)
    if parsed is None:
        return source, []
    candidates = []
    for finding in findings:
        fix = next((f for f in fixes_for(finding, parsed) if unsafe or f.safe), None)
        if fix is not None:
            candidates.append(fix)
    chosen: list[Fix] = []
    taken: list[Edit] = []
    provided: set[str] = set()
    for fix in sorted(candidates, key=lambda f: (f.start, f.edits)):
        if any(fix.edits == other.edits for other in chosen):
            chosen.append(fix)
            continue
        if fix.depends & provided or any(e.start < t.end and t.start < e.end or (e.start == e.end == t.start == t.end)
                                         for e in fix.edits for t in taken):
            continue
        chosen.append(fix)
        taken += fix.edits
        provided |= fix.provides
    if not chosen:
        return source, []
    text = _apply_edits(source, chosen)
    if parses(text):
        return text, chosen
    kept: list[Fix] = []  # one of them broke the file: keep those that do not
    for fix in chosen:
        if parses(_apply_edits(source, kept + [fix])):
            kept.append(fix)
    return _apply_edits(source, kept), kept


def fix_until_stable(source: str, findings: list[Finding], check: Callable[[str], list[Finding]],
                     unsafe: bool = False, passes: int = MAX_PASSES) -> tuple[str, list[Fix], list[Finding]]:
    """Fix, check the result again, fix again, until no fix applies or `passes` are done.
    Returns the text, every fix applied, and the findings of the last check."""
    applied: list[Fix] = []
    for _ in range(passes):
        text, done = apply(source, findings, unsafe)
        if not done:
            break
        source, applied = text, applied + done
        findings = check(source)
    return source, applied, findings


def hidden_unsafe(source: str, findings: Iterable[Finding]) -> int:
    """How many of `findings` have only an unsafe fix (what `--unsafe-fixes` would add)."""
    parsed = _source(source)
    if parsed is None:
        return 0
    return sum(1 for f in findings if (fixes := fixes_for(f, parsed)) and not any(x.safe for x in fixes))


__all__ = ["FIXERS", "FIXED_CODES", "MAX_PASSES", "SAFE", "UNSAFE", "Edit", "Fix", "Fixer", "Source", "apply",
           "fix_until_stable", "fixable", "fixes_for", "hidden_unsafe", "parses"]
