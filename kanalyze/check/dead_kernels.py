"""Findings inside a kernel that nothing launches: RES001's one report, not the others'.

Every other clause states what a kernel does when it runs: the order of its sums
(ORD001), the precision of its products (PRC001), the elements it leaves
unwritten (MEM001).  A kernel that a candidate defines and never launches does
none of it: its `tl.atomic_add` changes no bits from run to run.  RES001 reports
the kernel itself ("`k` is never launched … launch it or delete it"); the
findings inside it come back once it is launched.  Decided only where RES001 sees
every launch: a candidate's file (it defines `ModelNew`, whose forward launches
from that file) and a CUDA C++ extension built inline from a Python file; never a
library module or a `.cu` file, whose kernels another file may launch.
"""

from __future__ import annotations

from kanalyze.rules.base import NEVER_LAUNCHED


def without_dead_kernels(reports: list) -> list:
    dead = {r.kernel for r in reports if r.code == "RES001" and r.kernel and r.evidence.get(NEVER_LAUNCHED)}
    if not dead:
        return reports
    return [r for r in reports if r.code == "RES001" or r.kernel not in dead]
