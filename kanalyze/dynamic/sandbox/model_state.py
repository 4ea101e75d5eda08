"""A reference model's state across a case (worker side; imports torch): what the reference worker
keeps of a built model to give every case the model as it was built (reference_side.py), and the
model itself in float64 for a float64 run (`upcast`: float64.py, gradients.py).

A forward may change a model's buffers (a batch norm's running statistics in training mode);
it does not change its parameters, which only an optimizer or an in-place write of the
problem's own code would.  So the buffers are kept as built (kilobytes) and restored before
each case, and the parameters are not copied at all: each one's version counter (torch counts
every in-place write to a tensor) is kept, and a model whose parameters were written to is
built again.  A copy of the parameters was one more model's worth of the device (a 32768²
`nn.Linear`: 4 GiB) beside the model and its float64 run.
"""

from __future__ import annotations

import contextlib

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


@contextlib.contextmanager
def upcast(model):
    """The model itself with its floating parameters and buffers in float64, for the block; each
    back to its own dtype after it.  No copy of the model is made: a copy to convert held one more
    model's worth of the device beside the working one (a 32768 x 65536 `nn.Linear` at a size
    CMP003 tries: 8 GiB more, past what an H100 had left).  The way back is exact (float64 holds
    every float32, float16 and bfloat16 value), so the working model's values are its own again.
    A buffer the float64 run changed (a running mean in training mode) keeps that change: the
    reference worker restores the model's state before each case (reference_side.py)."""
    if not isinstance(model, torch.nn.Module):
        yield model
        return
    owned = [(module, name, tensor.dtype) for module in model.modules()
             for table in (module._parameters, module._buffers) for name, tensor in table.items()
             if tensor is not None and tensor.is_floating_point()]
    try:
        model.to(torch.float64)
        yield model
    finally:
        with torch.no_grad():
            for module, name, dtype in owned:
                if name in module._parameters:
                    parameter = module._parameters[name]
                    parameter.grad = None   # (a float64 backward's, gradients.py: never the working model's)
                    parameter.data = parameter.data.to(dtype)
                else:
                    module._buffers[name] = module._buffers[name].to(dtype)
