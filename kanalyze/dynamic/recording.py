"""What ran while the candidate ran: aten ops, kernel launches, host transfers (RES001).

Worker-side only.  Three recorders, all on while a case asks for them:

* `LaunchCounter` wraps Triton's launch entry points (`JITFunction.run` on a GPU,
  `InterpretedFunction.run` under the interpreter) and counts launches per
  kernel; while a launch runs, the op recorder looks away (the interpreter
  itself uses a few torch ops to stage arguments).
* `OpRecorder`, a TorchDispatchMode, counts every aten op the candidate's
  Python code dispatches.
* host transfers: `Tensor.cpu/.numpy/.item/.tolist` are wrapped to record each
  call (on the CPU the device map makes `.cpu()` a no-op, so aten never sees it).
"""

from __future__ import annotations

import collections
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_HOST_METHODS = ("cpu", "numpy", "item", "tolist")


class LaunchCounter:
    def __init__(self) -> None:
        self.launches: collections.Counter = collections.Counter()
        self.depth = 0
        self._install()

    def _wrap(self, cls) -> None:
        original = cls.run
        counter = self

        @functools.wraps(original)
        def run(fn, *args, **kwargs):
            name = getattr(getattr(fn, "fn", None), "__name__", None) or getattr(fn, "__name__", "kernel")
            if not kwargs.get("warmup"):
                counter.launches[name] += 1
            counter.depth += 1
            try:
                return original(fn, *args, **kwargs)
            finally:
                counter.depth -= 1

        cls.run = run

    def _install(self) -> None:
        from triton.runtime import jit

        self._wrap(jit.JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every Triton we support has it
            return
        self._wrap(InterpretedFunction)


class OpRecorder(TorchDispatchMode):
    def __init__(self, launches: LaunchCounter) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.launches = launches

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.launches.depth == 0:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


class HostTransfers:
    """Counts `.cpu()`, `.numpy()`, `.item()`, `.tolist()` while `active`."""

    def __init__(self, launches: LaunchCounter) -> None:
        self.active = False
        self.calls: collections.Counter = collections.Counter()
        for name in _HOST_METHODS:
            original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._wrap(name, original, launches))

    def _wrap(self, name, original, launches):
        recorder = self

        @functools.wraps(original)
        def method(tensor, *args, **kwargs):
            if recorder.active and launches.depth == 0:
                recorder.calls[f".{name}()"] += 1
            return original(tensor, *args, **kwargs)

        return method
