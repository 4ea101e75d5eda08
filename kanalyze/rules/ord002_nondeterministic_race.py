"""ORD002 nondeterministic-race: the same inputs give different bits across runs (a race).

Triton source has no static detectors for it (the gate decides); its CUDA C++
detectors are in ord002_nondeterministic_race_cuda.py.
"""

from kanalyze.rules.base import Rule


class NondeterministicRace(Rule):
    code = "ORD002"
    name = "nondeterministic-race"
    summary = "The same inputs give different bits across runs (a race)"
    gate = "ord002-repeated-runs"
    has_detectors = False  # in Triton source; CUDA C++ has detectors (see below)
    docs = """
    ## What it does
    Runs the kernel repeatedly on the same inputs with poisoned scratch memory
    and compares the outputs bitwise. In CUDA C++ the static pass also flags
    shared-memory races and divergent barriers (below).

    ## Why is this bad
    A race (shared memory read without a barrier after a write, a read of
    memory another program writes in the same launch) makes the result depend
    on timing: it passes once and fails in production.

    ## Example
    One program reads a tile that a neighbouring program is still writing.

    ## Use instead
    Separate the phases with a barrier or a second launch.
    """
