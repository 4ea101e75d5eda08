"""One numerics policy for both sides of a comparison (worker side; imports torch).

The reference and the candidate run under the same torch settings, so that a
difference between them is the candidate's, never torch's: TF32 off for matmul
and cuDNN (torch's default turns it on for cuDNN convolutions, which a candidate
that keeps PyTorch's own convolution would otherwise be blamed for), and fp32
matmuls at "highest" precision.  The policy is applied once per worker, before
the problem or the candidate is imported; what a candidate then changes itself
(`torch.backends.cuda.matmul.allow_tf32 = True` at import) is its own choice,
which the PRC001 gate measures.  The settings in force are recorded in every
witness's environment.
"""

from __future__ import annotations

POLICY = {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest"}


def apply() -> dict:
    """Set the policy on this process's torch; returns the settings in force."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = POLICY["matmul_allow_tf32"]
    torch.backends.cudnn.allow_tf32 = POLICY["cudnn_allow_tf32"]
    torch.set_float32_matmul_precision(POLICY["float32_matmul_precision"])
    return current()


def current() -> dict:
    """The settings in force now (after the candidate's import, say)."""
    import torch

    return {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}
