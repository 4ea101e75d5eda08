"""What ran while the candidate ran: torch calls, kernel launches, host transfers (RES001).

Worker-side only.  Two recorders, on while a case asks for them:

* `LaunchCounter` wraps Triton's launch entry points (`JITFunction.run` on a GPU,
  `InterpretedFunction.run` under the interpreter) and counts launches per
  kernel; while a launch runs (or kanalyze itself fills fresh memory), the
  call recorder looks away: the interpreter stages arguments with torch calls.
* `CallRecorder`, a TorchFunctionMode, counts every torch function and tensor
  method the candidate's Python code calls (`matmul`, `linear`, `softmax`,
  `item`, `cpu` …).  A TorchFunctionMode rather than a TorchDispatchMode: it
  sees the same library calls at the level the candidate wrote them, and
  entering a dispatch mode imports torch._dynamo (seconds per worker).
"""

from __future__ import annotations

import collections
import functools

from torch.overrides import TorchFunctionMode


class LaunchCounter:
    def __init__(self) -> None:
        self.launches: collections.Counter = collections.Counter()
        self.depth = 0      # > 0 while a launch (or kanalyze's own work) runs
        self._install()

    def _wrap(self, cls) -> None:
        original = cls.run
        counter = self

        @functools.wraps(original)
        def run(fn, *args, **kwargs):
            name = getattr(getattr(fn, "fn", None), "__name__", None) or getattr(fn, "__name__", "kernel")
            counter.depth += 1
            try:
                launched = original(fn, *args, **kwargs)
            finally:
                counter.depth -= 1
            # Counted once it returned: a launch that raised (a fallback's decoy) did no work.
            if not kwargs.get("warmup"):
                counter.launches[name] += 1
            return launched

        cls.run = run

    def _install(self) -> None:
        from triton.runtime import jit

        self._wrap(jit.JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every Triton we support has it
            return
        self._wrap(InterpretedFunction)


class CallRecorder(TorchFunctionMode):
    def __init__(self, launches: LaunchCounter) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()
        self.launches = launches

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.launches.depth == 0:
            name = getattr(func, "__name__", None) or str(func)
            if not name.startswith("__") or name in ("__matmul__", "__rmatmul__", "__float__", "__int__"):
                self.calls[name] += 1
        return func(*args, **(kwargs or {}))
