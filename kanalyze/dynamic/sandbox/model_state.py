"""What the reference worker keeps of a built model to give every case the model as it was built
(reference_side.py; imports torch).

A forward may change a model's buffers (a batch norm's running statistics in training mode);
it does not change its parameters, which only an optimizer or an in-place write of the
problem's own code would.  So the buffers are kept as built (kilobytes) and restored before
each case, and the parameters are not copied at all: each one's version counter (torch counts
every in-place write to a tensor) is kept, and a model whose parameters were written to is
built again.  A copy of the parameters was one more model's worth of the device (a 32768²
`nn.Linear`: 4 GiB) beside the model and its float64 run.
"""

from __future__ import annotations

import torch


def initial(model) -> tuple[dict, dict] | None:
    """(its buffers as built, each parameter's version counter), or None for a model that is not
    a torch module (a function: nothing to restore)."""
    if not isinstance(model, torch.nn.Module):
        return None
    buffers = {name for name, _ in model.named_buffers()}
    kept = {name: tensor.detach().clone() for name, tensor in model.state_dict().items() if name in buffers}
    return kept, {name: parameter._version for name, parameter in model.named_parameters()}


def restore(model, kept: tuple[dict, dict] | None) -> bool:
    """The model as built again (its buffers); False where a parameter was written to since it
    was built (then the caller builds it again)."""
    if kept is None:
        return True
    buffers, versions = kept
    if any(parameter._version != versions.get(name) for name, parameter in model.named_parameters()):
        return False
    model.load_state_dict(buffers, strict=False)
    return True
