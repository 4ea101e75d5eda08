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

For the gates that compare a candidate's runs bit for bit (ORD001, ORD002: a case's
`deterministic_torch`), torch's own kernels in the candidate's runs are held to
deterministic algorithms where torch has them (`torch.use_deterministic_algorithms(True,
warn_only=True)`, cuDNN's deterministic algorithms, cuBLAS with a fixed workspace): on an
H100 a KernelBench transposed 3-D convolution gave 10 different results in 10 runs under
torch's defaults, so a candidate that keeps PyTorch's convolution would be blamed for
the atomics of the algorithm cuDNN picked.  Set before each such run (whatever the
candidate's import or constructor set, `torch.backends.cudnn.deterministic = False` being
a common line) and put back after it: cuDNN's deterministic algorithms cost up to 15× on
those convolutions, which the other gates need not pay.  Where torch has no deterministic
implementation it warns; `alerts` collects those warnings around a call, and the run's
record names the ops (ord001_permuted_order.py weighs them).  Uninitialised memory is left
as torch leaves it by default (no NaN fill): fresh memory is the poison's business
(MEM001, ORD002).
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings

POLICY = {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest"}
DETERMINISM = {"deterministic_algorithms": True, "deterministic_warn_only": True, "cudnn_deterministic": True}
# cuBLAS is deterministic only with a fixed workspace (torch warns on every matmul under the
# deterministic setting without it); the variable must be set before the first cuBLAS call.
CUBLAS_WORKSPACE = ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
_ALERT = re.compile(r"^(?P<op>.{1,200}?) does not have a deterministic implementation")
MAX_ALERTS = 16


def apply(cuda: bool = False) -> dict:
    """Set the policy on this process's torch (on a GPU, before its first cuBLAS call); returns
    the settings in force."""
    import torch

    if cuda:   # cuBLAS reads it as it makes its handle: before the first matmul, for every run
        os.environ.setdefault(*CUBLAS_WORKSPACE)
    torch.backends.cuda.matmul.allow_tf32 = POLICY["matmul_allow_tf32"]
    torch.backends.cudnn.allow_tf32 = POLICY["cudnn_allow_tf32"]
    torch.set_float32_matmul_precision(POLICY["float32_matmul_precision"])
    return settings()


def current() -> dict:
    """The precision settings in force now (after the candidate's import, say).  A change of
    these during a call is one that a benchmark's later reference run would inherit (INT001)."""
    import torch

    return {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def determinism() -> dict:
    """Whether torch's own kernels are held to deterministic algorithms now."""
    import torch

    return {"deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
            "deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic)}


def settings() -> dict:
    """Every setting of the policy, as in force now: what a witness's environment records."""
    return {**current(), **determinism()}


def set_determinism(state: dict) -> None:
    """Put torch's determinism settings to `state` (determinism()'s shape)."""
    import torch

    torch.use_deterministic_algorithms(state["deterministic_algorithms"],
                                       warn_only=state.get("deterministic_warn_only", False))
    torch.backends.cudnn.deterministic = state["cudnn_deterministic"]
    deterministic = getattr(getattr(torch, "utils", None), "deterministic", None)
    if deterministic is not None and hasattr(deterministic, "fill_uninitialized_memory"):
        deterministic.fill_uninitialized_memory = False   # fresh memory stays as a benchmark finds it


def hold_deterministic() -> dict:
    """Torch's own kernels on deterministic algorithms from now on (warnings where torch has
    none); returns the settings that were in force, for `set_determinism` to put back."""
    before = determinism()
    set_determinism(DETERMINISM)
    return before


@contextlib.contextmanager
def alerts():
    """Collects, in the list it yields, the torch ops that warned, during the block, that they
    have no deterministic implementation (at most MAX_ALERTS names); other warnings go on as
    they would have."""
    seen: list[str] = []
    with warnings.catch_warnings():
        show = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None):
            found = _ALERT.match(str(message))
            if found is None:
                show(message, category, filename, lineno, file, line)
            elif found["op"] not in seen and len(seen) < MAX_ALERTS:
                seen.append(found["op"])

        warnings.showwarning = record
        warnings.filterwarnings("always", message=".*does not have a deterministic implementation")
        yield seen
