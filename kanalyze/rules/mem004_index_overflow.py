"""MEM004 index-overflow: offset arithmetic overflows int32 for sizes in range.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class IndexOverflow(Rule):
    code = "MEM004"
    name = "index-overflow"
    summary = "Offset arithmetic overflows int32 for sizes in range"
    gate = "mem004-large-tensor"
    has_detectors = False
    docs = """
    ## What it does
    Proves with z3 that offset arithmetic stays within int32 for tensors up to
    `max-numel` elements, or gives the smallest overflowing size.

    ## Why is this bad
    Triton computes `pid * stride` in int32 unless an operand is int64: past
    2^31 elements the offset wraps, and the kernel faults or writes the wrong
    place.  8 of 133 accepted KernelBench kernels failed this way.

    ## Example
    `offs = pid * BLOCK + tl.arange(0, BLOCK)`

    ## Use instead
    `offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)`
    """
