"""Profiles: the same facts, shown to two kinds of readers.

    candidate   a generated kernel (a KernelBench solution, an RL rollout) must earn
                trust: every finding, at `error`.  The profile of a file that
                defines `ModelNew`, and of every `--dynamic` run and audit.
    library     a maintained library has chosen policies a generated kernel has not:
                TF32 for float32 dots, float atomics in backward passes, in-place
                APIs, PyTorch glue around its kernels, a precision it asks for by
                name at the call (`out_dtype=tl.float16`, `input_precision="tf32"`,
                a narrowing under an `fp16` flag its caller sets), sizes it refuses
                with an error before anything runs (an `assert` or a `raise` in the
                wrapper, `tl.static_assert`).  Findings that rest on such a choice,
                or on a dtype kanalyze cannot see, are folded into one `note` per
                file and clause that counts them and names the setting that shows
                each; every other finding stays an `error` (a float atomic in a
                forward pass among them: torch's own forward ops give the same bits
                run after run, and a library that replaces them should say so with
                `deterministic = false`).  The profile of every other file.

`[tool.kanalyze] profile = "candidate" | "library"` (or `--profile`) fixes one
for every file.  A library can instead declare its policy once:

    allow-tf32 = true       TF32 dots are the library's policy: not reported
    allow-tf32 = false      every TF32 dot is an error, dtype known or not
    deterministic = false   float-atomic order (ORD001) is accepted: not reported (stores
                            that programs race on still are: the last writer's value wins)
    deterministic = true    every float atomic is an error, backward passes too

A folded note is informational (`Finding.informational`): it never fails a run,
and every report format shows it as a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from kanalyze.config import Config
from kanalyze.findings import Finding, Location

CANDIDATE, LIBRARY = "candidate", "library"
_DEFINES_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
# A kernel whose name says it computes gradients: `_bwd_kernel`, `backward_dq`, `grad_input_kernel`.
_BACKWARD = re.compile(r"(^|_)(bwd|backward|grad|dq|dk|dv|dx|dw|db)(_|$|\d)", re.IGNORECASE)


def profile_of(config: Config, text: str) -> str:
    """The profile a file is checked under: the configured one, else by what the file is."""
    if config.profile in (CANDIDATE, LIBRARY):
        return config.profile
    return CANDIDATE if _DEFINES_MODEL_NEW.search(text) else LIBRARY


@dataclass(frozen=True)
class Fold:
    """Findings of one clause that the library profile counts instead of listing."""

    code: str
    applies: Callable[[Finding], bool]
    what: str     # what the folded findings say, for the note: "... findings: <what>"
    setting: str  # the setting that lists each of them


def _tf32_dot(finding: Finding) -> bool:
    return finding.code == "PRC001" and "precision" in finding.evidence


def _unknown_dtype(finding: Finding) -> bool:
    evidence = finding.evidence
    return evidence.get("dtype_known") is False or "unknown" in (evidence.get("operand_dtypes") or ())


def _narrowing(finding: Finding) -> bool:
    return finding.code == "PRC001" and "to_dtype" in finding.evidence


def _requested_precision(finding: Finding) -> bool:
    """A reduced precision named at the call: `input_precision="tf32"` / `allow_tf32=True`
    (PRC001), `out_dtype=tl.float16` (PRC002), a narrowing under a kernel flag whose name
    asks for it (`if fp16:`, set by the caller)."""
    evidence = finding.evidence
    return (evidence.get("precision") == "tf32" or evidence.get("requested") == "out_dtype"
            or bool(evidence.get("opt_in")))


def _refused_up_front(finding: Finding) -> bool:
    """A size check that stops the run with an error before the kernel computes anything:
    a wrapper's `assert`/`raise`, a `tl.static_assert`.  A device assert is compiled only
    under TRITON_DEBUG and otherwise lets the kernel run on: not folded."""
    return "assertion" in finding.evidence and finding.evidence.get("refused") in ("host", "compile")


def _atomic_order(finding: Finding) -> bool:
    """ORD001 on float atomics (a policy a library may choose), not on a store programs race on (a bug)."""
    return finding.code == "ORD001" and (finding.evidence or {}).get("value_kind") != "store race"


def _in_backward_pass(finding: Finding) -> bool:
    return bool(finding.kernel) and bool(_BACKWARD.search(finding.kernel or ""))


FOLDS = (
    Fold("PRC001", lambda f: _tf32_dot(f) and _unknown_dtype(f),
         "`tl.dot` on operands whose dtype kanalyze cannot see runs in TF32 if they are float32",
         "`allow-tf32 = false` (or `--profile candidate`)"),
    Fold("PRC001", lambda f: _narrowing(f) and _unknown_dtype(f) and not _requested_precision(f),
         "narrowings to fp16/bf16 of values whose dtype kanalyze cannot see (nothing is rounded if they "
         "already are half precision)", "`--profile candidate`"),
    Fold("PRC001", lambda f: _tf32_dot(f) and _requested_precision(f),
         "`tl.dot` calls that ask for TF32 by name (`input_precision=\"tf32\"`, `allow_tf32=True`)",
         "`allow-tf32 = false` (or `--profile candidate`)"),
    Fold("PRC001", lambda f: _narrowing(f) and _requested_precision(f),
         "narrowings to fp16/bf16 under a kernel flag that asks for them (`if fp16:`, set by the caller "
         "as under autocast)", "`--profile candidate`"),
    Fold("PRC002", _requested_precision,
         "accumulators whose precision the call names (`tl.dot(..., out_dtype=tl.float16)`)",
         "`--profile candidate`"),
    Fold("CMP003", _refused_up_front,
         "sizes the code refuses with an error before the kernel runs (a wrapper's `assert` or `raise`, "
         "`tl.static_assert`): a documented restriction, not wrong results",
         "`--profile candidate`"),
    Fold("ORD001", lambda f: _atomic_order(f) and _in_backward_pass(f),
         "float atomics in backward-pass kernels make gradients differ in their last bits from run to run",
         "`deterministic = true` (or `--profile candidate`)"),
    Fold("MEM002", lambda f: f.code == "MEM002",
         "writes into tensors the caller passed in (in-place APIs, caches, running statistics, accumulators)",
         "`--profile candidate`"),
    Fold("RES001", lambda f: f.code == "RES001",
         "work done in PyTorch around the library's kernels, or kernels this file does not launch",
         "`--profile candidate`"),
    Fold("INT001", lambda f: f.code == "INT001" and "patched" in f.evidence,
         "functions of other libraries replaced at run time (the library's patching API)",
         "`--profile candidate`"),
)


def _declared_away(finding: Finding, config: Config) -> bool:
    """A finding the library's declared policy accepts: not reported at all."""
    if config.allow_tf32 is True and _tf32_dot(finding):
        return True
    return config.deterministic is False and _atomic_order(finding)


def _declared_strict(finding: Finding, config: Config) -> bool:
    """A finding the library's declared policy makes an error whatever the profile folds."""
    if config.allow_tf32 is False and _tf32_dot(finding):
        return True
    return config.deterministic is True and finding.code == "ORD001"


def apply_profiles(findings: Iterable[Finding], config: Config, profiles: dict[str, str]) -> list[Finding]:
    """Every file's findings as its profile shows them; `profiles`: each file's (`profile_of`),
    a file not in it is a candidate.  The last step before the report: after the IR stage,
    whose findings join the static ones line by line."""
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.location.file, []).append(finding)
    shown = [f for path, members in by_file.items()
             for f in apply_profile(members, config, profiles.get(path, CANDIDATE))]
    return sorted(shown, key=lambda f: f.sort_key)


def apply_profile(findings: Iterable[Finding], config: Config, profile: str) -> list[Finding]:
    """One file's findings (the selection already applied) as `profile` shows them."""
    findings = [f for f in findings if not _declared_away(f, config)]
    if profile == CANDIDATE:
        return findings
    kept: list[Finding] = []
    folded: dict[Fold, list[Finding]] = {}
    for finding in findings:
        fold = None if _declared_strict(finding, config) else next(
            (fold for fold in FOLDS if fold.code == finding.code and fold.applies(finding)), None)
        if fold is None:
            kept.append(finding)
        else:
            folded.setdefault(fold, []).append(finding)
    kept.extend(_note(fold, members) for fold, members in folded.items())
    return sorted(kept, key=lambda f: f.sort_key)


def _note(fold: Fold, members: list[Finding]) -> Finding:
    first = min(members, key=lambda f: f.sort_key)
    count = len(members)
    lines = sorted({f.location.row for f in members})
    where = ", ".join(map(str, lines[:8])) + (", …" if len(lines) > 8 else "")
    message = (f"library profile: {count} {fold.code} finding{'s' if count != 1 else ''} folded into this note "
               f"(line{'s' if len(lines) != 1 else ''} {where}): {fold.what}; {fold.setting} lists each")
    loc = first.location
    return Finding(code=first.code, name=first.name, message=message,
                   location=Location(loc.file, loc.row, loc.column, loc.end_row, loc.end_column),
                   status=first.status, kernel=first.kernel,
                   evidence={"informational": True, "profile": LIBRARY, "folded": count, "rows": lines})
