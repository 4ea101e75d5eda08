"""EXC002 subnormal-flush: subnormal values are flushed to zero where the reference keeps them.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class SubnormalFlush(Rule):
    code = "EXC002"
    name = "subnormal-flush"
    summary = "Subnormal values are flushed to zero where the reference keeps them"
    gate = "exc002-subnormal-inputs"
    has_detectors = False
    docs = """
    ## What it does
    Feeds subnormal-magnitude inputs and compares against the reference.
    Static detectors for `--use_fast_math`, `-ftz=true` and PTX `.ftz` on fp32
    arithmetic come with the CUDA and IR passes.

    ## Why is this bad
    Flushing subnormals to zero changes results near zero (and divisions by
    them) where the IEEE reference does not.

    ## Example
    A kernel built with `--use_fast_math`.

    ## Use instead
    Build without fast math, or document the flush in the contract.
    """
