"""KernelBench-style code on the CPU: `cuda` devices and `torch.cuda.*` mapped to the CPU.

Worker-side only (imports torch).  Candidates and problems are written for a
GPU: `.cuda()`, `device="cuda"`, `torch.cuda.synchronize()`, `assert x.is_cuda`.
Under Triton's interpreter the same code runs on CPU tensors, so:

* a TorchFunctionMode rewrites every `device` argument naming a CUDA device
  (`"cuda"`, `"cuda:0"`, `torch.device("cuda")`, `0`) to the target device, and
  makes `Tensor.cuda()` a no-op;
* `Tensor.is_cuda` answers True, so that `assert x.is_cuda` and
  `if not x.is_cuda: fallback()` take the kernel path;
* the common `torch.cuda` calls become CPU equivalents or no-ops.

The target is "cpu", or "meta" while the reference worker measures input sizes.
"""

from __future__ import annotations

import contextlib
import types

import torch
from torch.overrides import TorchFunctionMode

from kanalyze.dynamic.recording import own_mode


def _is_cuda_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.startswith("cuda")
    return isinstance(value, int) and not isinstance(value, bool)


@own_mode
class CudaToCpu(TorchFunctionMode):
    def __init__(self, target: str = "cpu") -> None:
        super().__init__()
        self.target = target

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs["device"] = self.target
        if func in (torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros) and args:
            args = tuple(self.target if i > 0 and _is_cuda_device(a) and not isinstance(a, int) else a
                         for i, a in enumerate(args))
            if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool):
                args = (args[0], self.target, *args[2:])
        return func(*args, **kwargs)


class _Stream:
    """Stands in for torch.cuda.Stream / Event on the CPU: everything is synchronous."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self) -> None:
        pass

    def wait_stream(self, *args) -> None:
        pass

    def wait_event(self, *args) -> None:
        pass

    def record_event(self, *args):
        return _Stream()

    def record(self, *args) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, *args) -> float:
        return 0.0


def _properties(*args, **kwargs):
    return types.SimpleNamespace(name="Triton interpreter (CPU)", major=9, minor=0, multi_processor_count=132,
                                 total_memory=80 * 2 ** 30, max_shared_memory_per_block_optin=227 * 1024,
                                 warp_size=32, L2_cache_size=50 * 2 ** 20)


_CUDA_SHIMS = {
    "is_available": lambda: True,
    "synchronize": lambda *a, **k: None,
    "current_device": lambda: 0,
    "device_count": lambda: 1,
    "set_device": lambda *a, **k: None,
    "get_device_name": lambda *a, **k: "Triton interpreter (CPU)",
    "get_device_capability": lambda *a, **k: (9, 0),
    "get_device_properties": _properties,
    "empty_cache": lambda: None,
    "manual_seed": lambda seed: torch.default_generator.manual_seed(int(seed)),
    "manual_seed_all": lambda seed: torch.default_generator.manual_seed(int(seed)),
    "memory_allocated": lambda *a, **k: 0,
    "max_memory_allocated": lambda *a, **k: 0,
    "reset_peak_memory_stats": lambda *a, **k: None,
    "Stream": _Stream,
    "Event": _Stream,
    "current_stream": lambda *a, **k: _Stream(),
    "default_stream": lambda *a, **k: _Stream(),
    "stream": lambda *a, **k: contextlib.nullcontext(),
    "device": lambda *a, **k: contextlib.nullcontext(),
}


def install(target: str = "cpu") -> CudaToCpu:
    """Map CUDA to `target` for the rest of this process; returns the mode (already entered)."""
    for name, shim in _CUDA_SHIMS.items():
        setattr(torch.cuda, name, shim)
    torch.Tensor.is_cuda = property(lambda self: True)
    mode = CudaToCpu(target)
    mode.__enter__()
    return mode
