"""CMP001 value-mismatch: output does not match the reference computed in float64 within a calibrated tolerance.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class ValueMismatch(Rule):
    code = "CMP001"
    name = "value-mismatch"
    summary = "Output does not match the reference computed in float64 within a calibrated tolerance"
    gate = "cmp001-calibrated-value"
    has_detectors = False
    docs = """
    ## What it does
    The value gate: runs the candidate and the reference on fresh seeds and
    several input distributions (normal, uniform, heavy-tailed, large
    magnitude, mixed sign) and compares against the reference computed in
    float64, with a tolerance calibrated from the error of an honest
    implementation in the working dtype: 4× the reference's own error, and at
    least 4 ulps of the output's largest value, grown by √(terms / 4096)
    where the reference's longest reduction (a norm, a matmul's inner
    dimension, a convolution window) sums more terms than that, since a
    kernel that adds per-block partial sums one after another honestly errs
    more than torch's tree sums.  It has no static detector: the gate is the
    ground truth.

    ## Why is this bad
    `torch.allclose(atol=rtol=1e-2)` on five normal inputs of one shape accepts
    kernels that are wrong by orders of magnitude more than the working dtype
    allows, and misses failures that only show on other distributions.

    ## Example
    A kernel whose error is 100× that of torch's own implementation in the
    same dtype.

    ## Use instead
    Compute in the reference's precision; see PRC001 and PRC002.
    """
