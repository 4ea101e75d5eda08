"""CMP002's runs: gradients of the outputs with respect to the inputs and the parameters (worker side; imports torch).

The reference side draws one upstream gradient per floating output (seeded),
back-propagates it through the problem's model in the working dtype and in
float64, and keeps the input gradients and those of the model's parameters
(by name); the upstream gradients go to the candidate with its inputs (drawn again
from the case's seed where the inputs are handed over: delivery.py).  The
candidate side calls the candidate on the same inputs with gradients on,
back-propagates the same upstream gradients (the call and the backward pass
are the candidate's code) and keeps its input gradients and the gradients of
its parameters that bear the reference's names (None where its backward
never reached one).  A candidate whose outputs carry no gradient
(forward-only kernels) says so.  Nothing here judges.
"""

from __future__ import annotations

import torch

from kanalyze.dynamic.sandbox.device_share import put
from kanalyze.dynamic.sandbox.model_state import upcast
from kanalyze.dynamic.sandbox.transport import dtype_name


def _differentiable(values: list, dtype=None) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().to(dtype or v.dtype).requires_grad_(True)
        out.append(v)
    return out


def _floating_outputs(out) -> list:
    leaves = [out] if isinstance(out, torch.Tensor) else [t for t in (out or []) if isinstance(t, torch.Tensor)]
    return [t for t in leaves if t.is_floating_point()]


def _input_gradients(values: list) -> list:
    return [v.grad if v.grad is not None else torch.zeros_like(v)
            for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _parameters(model) -> list[tuple[str, torch.Tensor]]:
    """The parameters that learn, by name; their gradients are cleared (the model is reused)."""
    if not isinstance(model, torch.nn.Module):
        return []
    model.zero_grad(set_to_none=True)
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad and p.is_floating_point()]


def _keep(tensors: list, prefix: str, arrays: dict) -> dict:
    nbytes = [put(arrays, f"{prefix}{i}", tensor.detach()) for i, tensor in enumerate(tensors)]
    return {"prefix": prefix, "dtypes": [dtype_name(t.dtype) for t in tensors], "structure": "gradients",
            "nbytes": nbytes}


def upstream_gradients(outputs: list[tuple[list[int], torch.dtype]], seed: int, device) -> list[torch.Tensor]:
    """The upstream gradients of a case's floating outputs ((shape, dtype) each, in order), drawn
    from its seed on `device`'s kind of device: the same values wherever they are drawn again on
    it (delivery.py).  A GPU draws a problem's gigabytes in milliseconds, where the CPU's
    generator took seconds per output (5 s each side for level2_1's 260M elements on an H200)."""
    device = torch.device(device)
    generator = torch.Generator(device=device.type).manual_seed(seed * 7919 + 29)
    return [torch.randn(shape, generator=generator, dtype=torch.float64, device=device.type).to(device, dtype)
            for shape, dtype in outputs]


def reference_gradients(model, values: list, seed: int, result: dict, arrays: dict,
                        offered: dict | None = None) -> None:
    """The reference's input gradients for seeded upstream gradients, in the working dtype and
    float64.  With `offered` (delivery.py), the upstream gradients are offered to the candidate's
    worker, drawn again when its case starts, instead of kept with the inputs."""
    inputs = _differentiable(values)
    parameters = _parameters(model)
    try:
        with torch.enable_grad():
            outputs = _floating_outputs(model(*inputs))
            if not outputs or not any(o.requires_grad for o in outputs):
                result["gradients_error"] = "the reference's outputs carry no gradient"
                return
            upstream = upstream_gradients([(list(o.shape), o.dtype) for o in outputs], seed, outputs[0].device)
            torch.autograd.backward(outputs, upstream)
        result["upstream"] = _keep(upstream, "upstream", arrays if offered is None else {})
        if offered is not None:
            from kanalyze.dynamic.sandbox import delivery

            for i, value in enumerate(upstream):
                delivery.describe(offered["arrays"], f"upstream{i}", value)
        result["gradients"] = _keep(_input_gradients(inputs), "grad", arrays)
        result["parameters"] = [name for name, _ in parameters]
        result["parameter_gradients"] = _keep(_input_gradients([p for _, p in parameters]), "pgrad", arrays)
    finally:
        _parameters(model)   # no gradient left on the cached model for the next case
    try:
        with upcast(model) as model64:   # (the model itself in float64: no copy of it, sandbox/model_state.py)
            parameters64 = _parameters(model64)
            inputs64 = _differentiable(values, torch.float64)
            with torch.enable_grad():
                outputs64 = _floating_outputs(model64(*inputs64))
                torch.autograd.backward(outputs64, [u.to(torch.float64) for u in upstream])
            result["gradients64"] = _keep(_input_gradients(inputs64), "grad64_", arrays)
            result["parameter_gradients64"] = _keep(_input_gradients([p for _, p in parameters64]), "pgrad64_",
                                                    arrays)
    except BaseException as exc:  # no float64 backward: the working-dtype reference stands alone
        result["gradients64_error"] = f"{type(exc).__name__}: {exc}"


def candidate_gradients(model, base_inputs: list, upstream: list, reference: dict, arrays: dict, phase) -> dict:
    """The candidate's input gradients for the reference's `upstream` gradients (tensors), as a run record."""
    inputs = _differentiable(base_inputs)
    record: dict = {"status": "ok", "gradients_run": True}
    own = dict(_parameters(model))
    phase("candidate")
    try:
        with torch.enable_grad():
            outputs = _floating_outputs(model(*inputs))
            if not any(o.requires_grad for o in outputs):
                record["no_gradient"] = True
                return record
            torch.autograd.backward(outputs, [u.to(o.device, o.dtype) for u, o in zip(upstream, outputs)])
    except BaseException as exc:
        record.update(status="error", error=f"{type(exc).__name__}: {exc}")
        return record
    finally:
        phase("kanalyze")
    record["gradients"] = _keep(_input_gradients(inputs), "cand_grad", arrays)
    # The parameters that bear the reference's names and shapes; None: its backward never reached one.
    shared = [name for name in reference.get("parameters", []) if name in own]
    record["parameters"] = shared
    record["parameters_without_gradient"] = [name for name in shared if own[name].grad is None]
    record["parameter_gradients"] = _keep([own[name].grad if own[name].grad is not None
                                           else torch.zeros_like(own[name]) for name in shared], "cand_pgrad", arrays)
    return record
