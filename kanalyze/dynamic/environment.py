"""The knobs of one candidate run, inside a worker (imports torch and triton).

* fresh memory: every `torch.empty*` (and on a GPU, the caching allocator's
  free blocks of the outputs' sizes) is filled with the run's poison byte, so
  that an unwritten output or a read of unwritten scratch shows (MEM001, ORD002);
* program order and TF32 emulation: set on the interpreter driver (CPU only), and
  autotuned kernels tuned without a device (autotune_cpu.py);
* recorders: kernel launches and calls into a CUDA C++ extension always, torch
  calls (and the ATen ops inside those extension calls) when a case asks (RES001),
  sealed after each call with the run's nonce (recording.py, `tampered`), the seal
  broken too where the candidate replaced what the worker reads its results and
  writes its records with (writers.py);
* a watch over what a benchmark relies on (integrity.py): functions replaced,
  threads left running after each call, and the candidate's reads of the heap
  and frames since its import (INT001).
"""

from __future__ import annotations

import contextlib

from kanalyze.dynamic import numerics
from kanalyze.dynamic.recording import CallRecorder, LaunchCounter, ModeGuard, extension_recorder, follow_threads
from kanalyze.dynamic.sandbox import extensions


class Environment:
    """The knobs of one candidate run: poison, program order, TF32, recorders."""

    def __init__(self, mode: str) -> None:
        import torch

        self.torch, self.mode = torch, mode
        self.driver = None
        self.pin = None   # on a GPU: the configs a variant's autotuners keep (autotune_pin.py)
        self.autotune = None   # on the CPU: the config a case's autotuners take (autotune_cpu.py)
        if mode == "cpu":
            from kanalyze.dynamic import autotune_cpu
            from kanalyze.dynamic.interpreter import InterpreterDriver

            self.driver = InterpreterDriver()
            autotune_cpu.install()   # before the candidate's import: its autotuned kernels tune without a device
            self.autotune = autotune_cpu
        else:
            from kanalyze.dynamic import autotune_pin

            autotune_pin.install()   # a variant's case may name the configs to keep (ORD001)
            self.pin = autotune_pin.pin
        from kanalyze.dynamic.integrity import Watch

        self.watch = Watch()   # before the candidate's import: what it replaces there shows too
        self.launches = LaunchCounter()
        self.modes = ModeGuard()
        self._ops = None
        self._inside = None   # while recording: the ATen ops inside the candidate's extension calls
        self._alerts: list[str] = []   # the last call's: torch ops that warned they are not deterministic
        self._determinism: dict | None = None   # torch's own settings, while a case holds them deterministic
        follow_threads(lambda: self._ops)   # a thread's torch calls go to the run's recorder too
        self._seal: dict | None = None
        self.poison: int | None = None
        self._patch_allocations()
        from kanalyze.dynamic.writers import WriterWatch

        self.writers = WriterWatch()   # after kanalyze's own patches: what replaces them later is the candidate's

    def op_recorder(self) -> CallRecorder:
        return CallRecorder(self.launches)

    def _patch_allocations(self) -> None:
        """Fresh memory from torch.empty* is filled with the run's poison byte first.

        `with torch.device(d):` gives a tensor its device only where the function called is
        one of torch's own constructors, a set torch reads once, at its first use: read here,
        before the wrappers replace them, or every `torch.empty` under that context (a model's
        weights built on the GPU, the problem's tensors on the meta device) lands on the CPU."""
        torch, environment = self.torch, self
        try:
            from torch.utils._device import _device_constructors
        except ImportError:   # a torch without device contexts
            pass
        else:
            _device_constructors()

        def fill(tensor):
            if environment.poison is not None and isinstance(tensor, torch.Tensor) and tensor.numel() > 0:
                with environment.launches.looking_away():  # kanalyze's own calls: not the candidate's
                    storage = tensor.untyped_storage()
                    bytes_view = empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
                    bytes_view.fill_(environment.poison)
            return tensor

        def wrap(original):
            def allocate(*args, **kwargs):
                return fill(original(*args, **kwargs))
            allocate.__name__ = getattr(original, "__name__", "empty")
            return allocate

        empty = torch.empty
        for name in ("empty", "empty_like", "empty_strided"):
            setattr(torch, name, wrap(getattr(torch, name)))
        torch.Tensor.new_empty = wrap(torch.Tensor.new_empty)

    def before_run(self, run: dict, case: dict, output_bytes: list[int]) -> None:
        torch = self.torch
        self._hold_determinism(bool(case.get("deterministic_torch")))
        self.poison = run.get("poison")
        self.launches.launches.clear()
        self.launches.settings.clear()
        self.launches.grids.clear()
        extensions.CALLS.clear()
        if self.pin is not None:
            self.pin(case.get("pin_launches"))
        if self.autotune is not None:
            self.autotune.choose(case.get("autotune_choice"))
        self.modes.seen.clear()
        if self.driver is not None:
            self.driver.reset(run.get("order_seed"), bool(case.get("emulate_tf32")), bool(case.get("collect_bounds")))
        elif self.poison is not None:
            # The caching allocator hands a freed block of the same size to the
            # next request: fill and free one per output, so that stale memory
            # holds the sentinel, not a previous result.
            blocks = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in output_bytes if n]
            for block in blocks:
                block.fill_(self.poison)
            del blocks
            torch.cuda.synchronize()

    def _hold_determinism(self, wanted: bool) -> None:
        """Torch's own kernels on deterministic algorithms for a case that asks (ORD001, ORD002),
        set again before each of its runs, whatever the candidate set; put back as they were
        for the next case that does not ask (numerics.py)."""
        if wanted and self._determinism is None:
            self._determinism = numerics.hold_deterministic()
        elif wanted:
            numerics.set_determinism(numerics.DETERMINISM)
        elif self._determinism is not None:
            numerics.set_determinism(self._determinism)
            self._determinism = None

    @contextlib.contextmanager
    def recording(self, record_ops: bool, nonce: int | None = None):
        """Records the call made inside; with a `nonce`, checks the recorders as the call ends (`seal`)."""
        self._ops = self.op_recorder() if record_ops else None
        self._seal = None
        # ATen ops that the candidate's CUDA C++ extension dispatches (RES001), where it has one.
        self._inside = extension_recorder() if record_ops and extensions.in_use() else None
        extensions.INSIDE = self._inside
        try:
            with numerics.alerts() as self._alerts:
                yield from self._recorded(nonce)
        finally:
            self.poison = None
            extensions.INSIDE = None

    def _recorded(self, nonce: int | None):
        """The body of `recording`: the call, inside the torch call recorder where there is one."""
        if self._ops is not None:
            with self._ops:
                try:
                    yield
                finally:
                    self._close_seal(nonce)
        else:
            yield

    def _close_seal(self, nonce: int | None) -> None:
        """Inside the recorder, after the candidate's call: its canary and whether the hooks are intact."""
        if nonce is None:
            return
        tampered = (self.launches.tampered() + self._ops.tampered() + self.modes.tampered()
                    + self.writers.replaced() + (self.driver.tampered() if self.driver is not None else []))
        self._ops.sing(nonce)
        self._seal = {"canaries": list(self._ops.canaries), "tampered": tampered}

    def after_run(self, case: dict) -> dict:
        out = {"launches": dict(self.launches.launches), "replaced": self.watch.replaced(),
               "launch_settings": {name: [dict(s) for s in sorted(settings, key=repr)]
                                   for name, settings in self.launches.settings.items()},
               "grids": {name: sorted(grids) for name, grids in self.launches.grids.items()},
               "extension_calls": extensions.calls(),   # its CUDA C++ entry points, 0 for those not called
               "threads_left": self.watch.threads_left(), "snooped": self.watch.snooped(),
               "torch_alerts": list(self._alerts)}   # torch's ops that have no deterministic implementation
        if self._ops is not None:
            out["ops"] = dict(self._ops.calls)
        if self._inside is not None:
            out["extension_ops"] = dict(self._inside.calls)
        if self._seal is not None:
            out["seal"] = self._seal
        tunings = self.autotune.seen() if self.autotune is not None else {}
        if tunings:
            out["autotune"] = tunings   # per autotuned kernel, the config it took, of how many
        if self.driver is not None:
            out["tf32_dots"] = self.driver.tf32_dots
            out["atomic_programs"] = self.driver.atomics.most
            if self.driver.out_of_bounds:
                out["out_of_bounds"] = self.driver.out_of_bounds
            if self.driver.violations:
                out["bounds_violations"] = list(self.driver.violations)
        return out
