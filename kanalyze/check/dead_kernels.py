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

A library's kernel that only never-run code launches (a layer whose `__init__` always
raises, and the private names only it uses: analyzer/never_run.py) does nothing either:
when the project index names it (`Linked.never_run`), the findings inside it are dropped
too, RES001's aside.
"""

from __future__ import annotations

from typing import Iterable

from kanalyze.rules.base import NEVER_LAUNCHED


def without_dead_kernels(reports: list, never_run: Iterable[str] = ()) -> list:
    """The reports, less those of other clauses inside a kernel that nothing launches (RES001
    says so) or that only never-run code launches (`never_run`, from the project index)."""
    dead = {r.kernel for r in reports if r.code == "RES001" and r.kernel and r.evidence.get(NEVER_LAUNCHED)}
    dead |= set(never_run)
    if not dead:
        return reports
    return [r for r in reports if r.code == "RES001" or r.kernel not in dead]
