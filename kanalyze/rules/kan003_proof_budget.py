"""KAN003 proof-budget: the MEM003/MEM004 proofs of a file used up their z3 budget, or their time.

kanalyze reports it itself, as a note: MEM003's detector yields it (`budget_notes`)
beside its own findings, from the proofs both rules share (analyzer/bounds).
"""

from __future__ import annotations

from typing import Iterator

from kanalyze.analyzer.bounds.proofs import BoundsAnalysis
from kanalyze.rules.base import Report, Rule


class ProofBudget(Rule):
    code = "KAN003"
    name = "proof-budget"
    summary = "The MEM003/MEM004 proofs of this file used up their z3 budget; the accesses left were not proved"
    gate = ""
    has_detectors = False
    docs = """
    ## What it does
    With the opt-in proofs on (MEM003, MEM004), reports once per file that
    their budget ran out before every access was proved: the questions left
    were not asked.  The budget is a count of z3's work, not seconds
    (`proof-rlimit` in `[tool.kanalyze]`, 30_000_000 z3 resource units by
    default, summed over the file's questions), so the same file gives the
    same note and the same findings on an idle machine and on a loaded one.
    The message names the kernels left unproved and how many accesses; the
    evidence adds the budget, what was spent, and per kernel how many of its
    launch configurations were asked in full.  A note: it does not fail the run.

    A watchdog stands behind the count: z3 can work for a minute on a
    nonlinear question and count little of it.  In `kanalyze check` and in the
    editor the proofs stop at 80% of the file's CPU budget (`file-timeout`, 30 s
    with the proofs on), so that the file is still reported, and the note says
    the proofs were cut by time (`"cut_by": "time"` in the evidence): that cut
    depends on the machine, so its findings may differ from one machine to
    another.

    ## Why is this bad
    An access that was not proved may still leave its tensor or wrap int32:
    its MEM003 or MEM004 finding would be missing, and a clean report would
    say more than was checked.

    ## Example
    A file of many kernels whose offsets multiply runtime sizes
    (`row * stride + col`), each with several autotune configurations: z3's
    nonlinear integer arithmetic is the costly part.

    ## Use instead
    Raise the budget for the project (`proof-rlimit = 100_000_000` in
    `[tool.kanalyze]`; for a cut by time, `file-timeout = 120`), or accept the
    note: `ignore = ["KAN003"]` hides it.
    """


def budget_notes(analysis: BoundsAnalysis) -> Iterator[Report]:
    """One KAN003 note when the file's proof budget (or the watchdog) left accesses unchecked, at the first."""
    if not analysis.cut:
        return
    first = analysis.cut[0]
    kernels = list(dict.fromkeys(report.kernel for report in analysis.cut))
    named = ", ".join(f"`{k}`" for k in kernels[:3]) + (f" and {len(kernels) - 3} more" if len(kernels) > 3 else "")
    count = len(analysis.cut)
    if analysis.out_of_time:
        why = (f"were cut by time after {analysis.cpu_seconds:.0f} s of CPU, short of the per-file CPU budget "
               f"(`file-timeout`)")
        remedy = ("this cut depends on the machine, so the findings may differ between machines; raise "
                  "`file-timeout` to prove them")
    else:
        why = f"used up their budget of {analysis.proof_rlimit:_} z3 resource units (`proof-rlimit`)"
        remedy = "raise `proof-rlimit` in [tool.kanalyze] to prove them"
    message = (f"the MEM003/MEM004 proofs of this file {why}: {count} of {len(analysis.accesses)} accesses "
               f"(in {named}) were not checked in full, so MEM003/MEM004 findings may be missing; {remedy}")
    evidence = {
        "gate": "", "informational": True, "cut_by": "time" if analysis.out_of_time else "rlimit",
        "proof_rlimit": analysis.proof_rlimit, "spent": analysis.spent,
        "unproved": count, "accesses": len(analysis.accesses), "kernels": kernels,
        "configurations": {k: {"finished": done, "of": total} for k, (done, total) in analysis.configurations.items()},
    }
    if analysis.out_of_time:  # seconds only where the cut is by time: a count-cut note is the same on any machine
        evidence["cpu_seconds"] = round(analysis.cpu_seconds, 1)
    yield Report(ProofBudget.code, first.call, message, first.kernel, evidence)
