"""MEM003 out-of-bounds: a load or store can leave its tensor for some size in range.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class OutOfBounds(Rule):
    code = "MEM003"
    name = "out-of-bounds"
    summary = "A load or store can leave its tensor for some size in range"
    gate = "mem003-bounds-run"
    has_detectors = False
    docs = """
    ## What it does
    Proves with z3 that each masked access stays inside its tensor for all
    sizes in range, or finds the smallest counterexample size, which the gate
    runs under the interpreter's bounds checks.

    ## Why is this bad
    Allocation granularity hides small overruns: `compute-sanitizer` did not
    report an unmasked access running 24 elements past a 1000-element tensor
    on an H200.  The kernel reads garbage or corrupts a neighbour.

    ## Example
    `tl.load(x_ptr + offs, mask=offs <= n)`

    ## Use instead
    `tl.load(x_ptr + offs, mask=offs < n)`
    """
