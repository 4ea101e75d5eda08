"""Calling one kernel of a candidate at given sizes, with no problem and no reference (worker side).

A `Case.call` says what to call (planned by the MEM003/MEM004 gates from a z3
counterexample, see gates/counterexample.py):

    {"route": "wrapper", "function": "copy_le",
     "args": [{"name": "x", "shape": [1]}, {"name": "window", "value": 2}]}

calls the file's own wrapper, which computes the grid and launches the kernel as
a user would;

    {"route": "kernel", "function": "copy_le_kernel", "grid": [1],
     "tensors": {"x_ptr": [1], "out_ptr": [1]}, "values": {"n": 1, "BLOCK": 1024}}

launches the kernel directly (`copy_le_kernel[(1,)](x_ptr=..., out_ptr=..., n=1,
BLOCK=1024)`), bypassing autotuning and heuristics so that the counterexample's
configuration is the one that runs.  Tensors are contiguous, seeded standard
normal values in `call["dtype"]` (float32 by default).  The run records what
the interpreter saw (out-of-bounds accesses) or how the device failed; judging
is the gate's job.
"""

from __future__ import annotations

import inspect
import math

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class CallError(Exception):
    """The call cannot be made as described (a missing function, an argument the kernel lacks)."""


LARGE = 2 ** 24  # elements: larger tensors are filled on the device (MEM004's are 2^31 and more)


def _tensor(shape: list, dtype, device: str, seed: int) -> torch.Tensor:
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
    if math.prod(dims) > LARGE and device != "cpu":
        generator = torch.Generator(device=device).manual_seed(seed)
        return torch.empty(*dims, dtype=dtype, device=device).normal_(generator=generator)
    # Generated on the CPU whatever the device: the same values on every machine.
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*dims, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)


def _resolve(module, dotted: str):
    value = module
    for part in dotted.split("."):
        if not hasattr(value, part):
            raise CallError(f"the candidate has no `{dotted}`")
        value = getattr(value, part)
    return value


def _launcher(target):
    """(what to launch, the kernel itself, constexprs that `@triton.heuristics` computes).

    `@triton.autotune` is stripped so that the counterexample's configuration runs
    (under the interpreter every configuration would be benchmarked); heuristics
    stay, as they are part of the kernel's contract."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    while isinstance(target, Autotuner):
        target = target.fn
    kernel, computed = target, set()
    while isinstance(kernel, (Autotuner, Heuristics)):
        computed |= set(getattr(kernel, "values", {}))
        kernel = kernel.fn
    if not (hasattr(kernel, "run") and hasattr(kernel, "arg_names") and callable(getattr(kernel, "fn", None))):
        raise CallError("not a Triton kernel")
    return target, kernel, computed


def prepare(module, call: dict, device: str, seed: int):
    """(function to call with no arguments, a one-line description of the call)."""
    dtype = DTYPES.get(call.get("dtype") or "float32", torch.float32)
    seeds = iter(range(seed, seed + 10_000))
    target = _resolve(module, call["function"])
    if call["route"] == "wrapper":
        args, shown = [], []
        for arg in call["args"]:
            if "shape" in arg:
                tensor = _tensor(arg["shape"], dtype, device, next(seeds))
                args.append(tensor)
                shown.append(f"{arg['name']}: {list(tensor.shape)}")
            else:
                args.append(arg["value"])
                shown.append(f"{arg['name']}={arg['value']}")
        return (lambda: target(*args)), f"{call['function']}({', '.join(shown)})"
    launcher, kernel, computed = _launcher(target)
    parameters = inspect.signature(kernel.fn).parameters
    known = set(parameters)
    kwargs = {name: _tensor(shape, dtype, device, next(seeds)) for name, shape in call["tensors"].items()}
    kwargs.update(call["values"])
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise CallError(f"`{call['function']}` has no parameter {', '.join(unknown)}")
    for name, param in parameters.items():  # unconstrained by the counterexample: any value shows the same access
        if name not in kwargs and name not in computed and param.default is inspect.Parameter.empty:
            kwargs[name] = 1
    grid = tuple(call["grid"])
    shown = ", ".join(f"{k}: {list(v.shape)}" if isinstance(v, torch.Tensor) else f"{k}={v}"
                      for k, v in kwargs.items())
    return (lambda: launcher[grid](**kwargs)), f"{call['function']}[{grid}]({shown})"

