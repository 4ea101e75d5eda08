"""EXC002 subnormal-flush: subnormal values are flushed to zero where the reference keeps them.

Triton source has no static detectors for it (the gate decides); its CUDA C++
detectors are in exc002_subnormal_flush_cuda.py.
"""

from kanalyze.rules.base import Rule


class SubnormalFlush(Rule):
    code = "EXC002"
    name = "subnormal-flush"
    summary = "Subnormal values are flushed to zero where the reference keeps them"
    gate = "exc002-subnormal-inputs"
    has_detectors = False  # in Triton source; CUDA C++ has detectors (see below)
    docs = """
    ## What it does
    Feeds subnormal-magnitude inputs and compares against the reference. In
    CUDA C++ the static pass flags `--use_fast_math`, `-ftz=true`, fast-math
    intrinsics and PTX `.ftz` on fp32 arithmetic (below).

    ## Why is this bad
    Flushing subnormals to zero changes results near zero (and divisions by
    them) where the IEEE reference does not.

    ## Example
    A kernel built with `--use_fast_math`.

    ## Use instead
    Build without fast math, or document the flush in the contract.
    """
