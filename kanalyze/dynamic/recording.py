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

Both live in the candidate's process, so both say after every call whether
they are still the ones installed (`tampered`): the launch hooks still in
place with their own code, the call recorder still on torch's mode stack with
its own code, and a canary — one `torch.add` on the recorder's own tensor with
the run's nonce, a number the trusted side drew for this run alone — recorded
as it must be.  A candidate that unhooks, replaces or pops them leaves the
trusted side a record without its canary: INT001 confirmed, never a clean
trace.  (A candidate that rewrites kanalyze's own reporting code as well
could forge the record; this check makes tampering deliberate and visible,
while the verdicts are computed outside the candidate's process.)
"""

from __future__ import annotations

import collections
import functools

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack


class LaunchCounter:
    def __init__(self) -> None:
        self.launches: collections.Counter = collections.Counter()
        self.depth = 0      # > 0 while a launch (or kanalyze's own work) runs
        self.installed: dict[type, tuple] = {}   # class -> (our run, its code)
        self._install()

    def tampered(self) -> list[str]:
        """How the launch hooks differ from the ones installed (empty: intact)."""
        return [f"{cls.__name__}.run is no longer kanalyze's launch counter" for cls, (run, code) in
                self.installed.items() if cls.__dict__.get("run") is not run or run.__code__ is not code]

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
        self.installed[cls] = (run, run.__code__)

    def _install(self) -> None:
        from triton.runtime import jit

        self._wrap(jit.JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every Triton we support has it
            return
        self._wrap(InterpretedFunction)


class ModeGuard:
    """Calls from outside torch and Triton that switch torch function modes off
    (`torch._C.DisableTorchFunction`) or pop them off the stack: how a candidate would hide
    its torch calls from the recorder for the length of its call and put it back after."""

    NAMES = (("torch._C", "DisableTorchFunction"), ("torch._C", "_pop_torch_function_stack"),
             ("torch.overrides", "_pop_mode"), ("torch.overrides", "_pop_mode_temporarily"))

    def __init__(self) -> None:
        import importlib
        import os

        import triton

        self.trusted = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, triton))
        self.seen: list[str] = []   # since the last `clear`: one run's
        for module_name, name in self.NAMES:
            module = importlib.import_module(module_name)
            original = getattr(module, name, None)
            if original is not None:
                setattr(module, name, self._watch(f"{module_name}.{name}", original))

    def tampered(self) -> list[str]:
        return [f"torch function modes switched off: {seen}" for seen in self.seen]

    def _watch(self, name: str, original):
        import sys

        guard = self

        def watched(*args, **kwargs):
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(guard.trusted) and len(guard.seen) < 8:
                guard.seen.append(f"{name} called from {caller.f_code.co_filename}:{caller.f_lineno}")
            return original(*args, **kwargs)
        return watched


class CallRecorder(TorchFunctionMode):
    def __init__(self, launches: LaunchCounter) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()
        self.launches = launches
        self.canary = torch.zeros(1)
        self.canaries: list[int] = []   # the nonces of the canary calls it saw

    def sing(self, nonce: int) -> None:
        """The canary call: recorded only while this recorder is really on."""
        torch.add(self.canary, nonce)

    def tampered(self) -> list[str]:
        """How this recorder differs from the one installed (empty: intact); called while it is on."""
        problems = []
        if not any(mode is self for mode in _get_current_function_mode_stack()):
            problems.append("the torch call recorder is no longer on torch's mode stack")
        if type(self).__torch_function__.__code__ is not RECORDER_CODE or type(self) is not CallRecorder:
            problems.append("the torch call recorder's code was replaced")
        if not torch._C._is_torch_function_enabled():
            problems.append("torch function modes were disabled")
        return problems

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if args and args[0] is self.canary:   # kanalyze's canary, not the candidate's call
            self.canaries.append(int(args[1]))
            return func(*args, **(kwargs or {}))
        if self.launches.depth == 0:
            name = getattr(func, "__name__", None) or str(func)
            if not name.startswith("__") or name in ("__matmul__", "__rmatmul__", "__float__", "__int__"):
                self.calls[name] += 1
        return func(*args, **(kwargs or {}))


RECORDER_CODE = CallRecorder.__torch_function__.__code__
