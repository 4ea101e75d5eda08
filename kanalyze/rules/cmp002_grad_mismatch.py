"""CMP002 grad-mismatch: backward does not match float64 autograd of the reference.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class GradMismatch(Rule):
    code = "CMP002"
    name = "grad-mismatch"
    summary = "Backward does not match float64 autograd of the reference"
    gate = "cmp002-gradient"
    has_detectors = False
    docs = """
    ## What it does
    Compares the gradients of a candidate with a custom backward against
    float64 autograd of the reference, on the same input families as CMP001.

    ## Why is this bad
    A forward that matches with a backward that does not trains a different
    model.

    ## Example
    A `torch.autograd.Function` whose `backward` drops a term.

    ## Use instead
    Derive the backward from the forward and let the gate compare it.
    """
