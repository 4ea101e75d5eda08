"""What ran while the candidate ran: torch calls, kernel launches, host transfers (RES001).

Worker-side only.  Two recorders, on while a case asks for them:

* `LaunchCounter` wraps Triton's launch entry points (`JITFunction.run` on a GPU,
  `InterpretedFunction.run` under the interpreter) and counts launches per
  kernel; while a launch runs on a thread (or kanalyze itself fills fresh
  memory there), the call recorder looks away from that thread: the
  interpreter stages arguments with torch calls.
* `CallRecorder`, a TorchFunctionMode, counts every torch function and tensor
  method the candidate's Python code calls (`matmul`, `linear`, `softmax`,
  `item`, `cpu` …).  A TorchFunctionMode rather than a TorchDispatchMode: it
  sees the same library calls at the level the candidate wrote them, and
  entering a dispatch mode imports torch._dynamo (seconds per worker).
* `extension_recorder`: a torch dispatch mode around each call into the
  candidate's CUDA C++ extension, counting the ATen ops its C++ dispatches
  (`torch::matmul` in a "kernel" reaches no function mode).
* `follow_threads`: torch function modes are kept per thread, so the recorder
  on the calling thread's stack never sees what a thread the candidate starts
  computes (one it joins before returning leaves nothing running).  Every
  thread started in the worker runs under a `ThreadCalls` mode that counts its
  calls into the run's recorder.

Both live in the candidate's process, so both say after every call whether
they are still the ones installed (`tampered`): the launch hooks still in
place with their own code, the call recorder still on torch's mode stack with
its own code, and a canary — one `torch.add` on the recorder's own tensor with
the run's nonce, a number the trusted side drew for this run alone — recorded
as it must be.  A candidate that unhooks, replaces or pops them leaves the
trusted side a record without its canary: INT001 confirmed, never a clean
trace; the seal also breaks where the candidate replaced what the worker
reads its results and writes its records with (writers.py), and the records
are written with the worker's own encoder (sandbox/sealed_io.py).  (A
candidate that reaches kanalyze's own objects through their closures could
still forge the record; this check makes tampering deliberate and visible,
while the verdicts are computed outside the candidate's process.)
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import threading

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack


# kanalyze's own torch function modes (the CPU's device map, PRC002's reduction recorder, the
# recorders here): the only ones a candidate's call may leave on torch's mode stack.
OWN_MODES: set[type] = set()


def own_mode(cls: type) -> type:
    """Mark a TorchFunctionMode class as kanalyze's (a class decorator)."""
    OWN_MODES.add(cls)
    return cls


SCALARS = (bool, int, float, str)   # the launch keywords a run's settings keep (recording and pinning)


def config_settings(config) -> dict:
    """An autotune config's scalar launch keywords (its constexprs, warps, stages...): what a
    launch of it records, and what pinning and the CPU's chosen config are named by."""
    settings = config.all_kwargs() if hasattr(config, "all_kwargs") else {
        **config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return {k: v for k, v in settings.items() if type(v) in SCALARS}


def kernel_name(fn) -> str:
    """The name of the function under a launcher (a JITFunction, an autotuner, @heuristics)."""
    while hasattr(fn, "fn"):
        fn = fn.fn
    return getattr(fn, "__name__", "kernel")


def launch_grid(fn, args: tuple, kwargs: dict) -> tuple[int, int, int] | None:
    """The grid a launch ran, (x, y, z): its `grid`, or what a callable grid gives for the launch's
    arguments by name (defaults included), as Triton computes it; None where it cannot be had."""
    grid = kwargs.get("grid")
    try:
        if callable(grid):
            signature = getattr(fn, "signature", None) or inspect.signature(fn.fn)   # (the interpreter's has none)
            parameters = signature.parameters
            bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in parameters})
            bound.apply_defaults()
            grid = grid(dict(bound.arguments))
        sizes = [int(g) for g in grid][:3]
    except Exception:   # (a grid that only Triton's own binding can compute: not counted)
        return None
    if not sizes:
        return None
    return tuple(sizes + [1] * (3 - len(sizes)))


class LaunchCounter:
    SETTINGS_PER_KERNEL = 16   # distinct launch settings kept per kernel and run

    def __init__(self) -> None:
        self.launches: collections.Counter = collections.Counter()
        # Per kernel, the scalar keyword arguments of its launches (an autotuned kernel's chosen
        # config among them): a variant of the candidate must launch the same (ORD001, autotune_pin.py).
        self.settings: dict[str, set] = collections.defaultdict(set)
        # Per kernel, the grids its launches ran, as (x, y, z): how many programs of a launch share
        # an address (ORD001 on a GPU, where nothing counts the programs each address gets).
        self.grids: dict[str, set] = collections.defaultdict(set)
        self._inside = threading.local()   # per thread: > 0 while a launch (or kanalyze's own work) runs
        self.installed: dict[type, tuple] = {}   # class -> (our run, its code)
        # On the CPU, told when a launch starts and ends (True, False): the parent then knows
        # that a case out of time was Triton's interpreter running a kernel (worker.py).
        self.interpreting = None
        self._install()

    def busy(self) -> bool:
        """Whether this thread is inside a launch or kanalyze's own work: its torch calls are not
        the candidate's."""
        return getattr(self._inside, "depth", 0) > 0

    @contextlib.contextmanager
    def looking_away(self):
        """This thread's torch calls inside are not the candidate's (a launch, kanalyze's own work)."""
        self._inside.depth = getattr(self._inside, "depth", 0) + 1
        try:
            yield
        finally:
            self._inside.depth -= 1

    def tampered(self) -> list[str]:
        """How the launch hooks differ from the ones installed (empty: intact)."""
        return [f"{cls.__name__}.run is no longer kanalyze's launch counter" for cls, (run, code) in
                self.installed.items() if cls.__dict__.get("run") is not run or run.__code__ is not code]

    def _wrap(self, cls) -> None:
        original = cls.run
        counter = self

        @functools.wraps(original)
        def run(fn, *args, **kwargs):
            name = kernel_name(fn)
            told = counter.interpreting is not None and not counter.busy()
            if told:
                counter.interpreting(True)
            try:
                with counter.looking_away():
                    launched = original(fn, *args, **kwargs)
            finally:
                if told:
                    counter.interpreting(False)
            # Counted once it returned: a launch that raised (a fallback's decoy) did no work.
            if not kwargs.get("warmup"):
                counter.launches[name] += 1
                if len(counter.settings[name]) < counter.SETTINGS_PER_KERNEL:
                    counter.settings[name].add(tuple(sorted(
                        (k, v) for k, v in kwargs.items() if k != "warmup" and type(v) in SCALARS)))
                if len(counter.grids[name]) < counter.SETTINGS_PER_KERNEL:
                    with counter.looking_away():
                        grid = launch_grid(fn, args, kwargs)
                    if grid is not None:
                        counter.grids[name].add(grid)
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
    its torch calls from the recorder for the length of its call and put it back after; and
    lookups of the modes on the stack, where a candidate finds the recorder to clear it."""

    NAMES = (("torch._C", "DisableTorchFunction"), ("torch._C", "_pop_torch_function_stack"),
             ("torch.overrides", "_pop_mode"), ("torch.overrides", "_pop_mode_temporarily"),
             ("torch.overrides", "_get_current_function_mode_stack"), ("torch._C", "_get_function_stack_at"))
    LOOKUPS = ("_get_current_function_mode_stack", "_get_function_stack_at")

    def __init__(self) -> None:
        import importlib
        import os

        import triton

        self.trusted = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, triton))
        self.seen: list[tuple[str, str]] = []   # (name, where called) since the last `clear`: one run's
        for module_name, name in self.NAMES:
            module = importlib.import_module(module_name)
            original = getattr(module, name, None)
            if original is not None:
                setattr(module, name, self._watch(f"{module_name}.{name}", original))

    def tampered(self) -> list[str]:
        problems = []
        for name, where in self.seen:
            what = ("torch's mode stack, where kanalyze's recorder is, looked up"
                    if name.rpartition(".")[2] in self.LOOKUPS else "torch function modes switched off")
            problems.append(f"{what}: {name} called from {where}")
        return problems

    def _watch(self, name: str, original):
        import sys

        guard = self

        def watched(*args, **kwargs):
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(guard.trusted) and len(guard.seen) < 8:
                guard.seen.append((name, f"{caller.f_code.co_filename}:{caller.f_lineno}"))
            return original(*args, **kwargs)
        return watched


@own_mode
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
        stack = _get_current_function_mode_stack()
        if not any(mode is self for mode in stack):
            problems.append("the torch call recorder is no longer on torch's mode stack")
        # Another mode left on the stack sees every tensor method kanalyze calls after the call
        # (reading the inputs back, writing new values into them) and can answer for it;
        # torch's own default-device mode (`torch.set_default_device`) only places new tensors.
        others = [type(mode).__name__ for mode in stack
                  if mode is not self and type(mode) is not _DEVICE_MODE and type(mode) not in OWN_MODES]
        if others:
            problems.append(f"a torch function mode of the candidate's ({', '.join(others[:3])}) stays on torch's "
                            f"mode stack after its call, where it would answer for what the worker reads")
        if type(self).__torch_function__.__code__ is not RECORDER_CODE or type(self) is not CallRecorder:
            problems.append("the torch call recorder's code was replaced")
        if not torch._C._is_torch_function_enabled():
            problems.append("torch function modes were disabled")
        return problems

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if args and args[0] is self.canary:   # kanalyze's canary, not the candidate's call
            self.canaries.append(int(args[1]))
            return func(*args, **(kwargs or {}))
        self.note(func)
        return func(*args, **(kwargs or {}))

    def note(self, func) -> None:
        """Count a torch call made on any thread, unless that thread is inside a launch."""
        if not self.launches.busy():
            name = getattr(func, "__name__", None) or str(func)
            if not name.startswith("__") or name in ("__matmul__", "__rmatmul__", "__float__", "__int__"):
                self.calls[name] += 1


RECORDER_CODE = CallRecorder.__torch_function__.__code__
_DISPATCH_RECORDER: list[type] = []   # made on first use (below)


def extension_recorder():
    """A recorder of the ATen ops dispatched while a CUDA C++ extension of the candidate's runs
    (extensions.py enters it around each call): C++ that calls `torch::matmul` reaches no torch
    function mode, but every op it dispatches passes a torch dispatch mode on that thread.  The
    class is made on first use: entering a dispatch mode imports torch._dynamo (about a second),
    which only a candidate with an extension, in a run that records its calls, pays."""
    if not _DISPATCH_RECORDER:
        from torch.utils._python_dispatch import TorchDispatchMode

        class ExtensionOps(TorchDispatchMode):
            def __init__(self) -> None:
                super().__init__()
                self.calls: collections.Counter = collections.Counter()

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.calls[func.overloadpacket.__name__] += 1
                return func(*args, **(kwargs or {}))

        _DISPATCH_RECORDER.append(ExtensionOps)
    return _DISPATCH_RECORDER[0]()
try:
    from torch.utils._device import DeviceContext as _DEVICE_MODE
except ImportError:  # pragma: no cover - every torch we support has it
    _DEVICE_MODE = None


@own_mode
class ThreadCalls(TorchFunctionMode):
    """On a thread started in the worker, for the thread's life: its torch calls go to the run's
    recorder (`current()`, None between runs)."""

    def __init__(self, current) -> None:
        super().__init__()
        self.current = current

    def __torch_function__(self, func, types, args=(), kwargs=None):
        recorder = self.current()
        if recorder is not None:
            recorder.note(func)
        return func(*args, **(kwargs or {}))


# Where Python starts a thread: `threading` calls its own alias of the `_thread` function
# (`_start_new_thread` up to 3.12, `_start_joinable_thread` from 3.13).
_THREAD_STARTS = (("_thread", "start_new_thread"), ("_thread", "start_new"), ("_thread", "start_joinable_thread"),
                  ("threading", "_start_new_thread"), ("threading", "_start_joinable_thread"))


def follow_threads(current) -> None:
    """Every thread started from now on (through `threading` or `_thread`) runs its function
    under a `ThreadCalls` mode.  Installed before the candidate is imported."""
    import importlib

    def covered(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            with ThreadCalls(current):
                return function(*args, **kwargs)
        return run

    def starting(original):
        @functools.wraps(original)
        def start(function, *args, **kwargs):
            return original(covered(function), *args, **kwargs)
        return start

    for module_name, name in _THREAD_STARTS:
        module = importlib.import_module(module_name)
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, starting(original))
