"""Triton's autotuner under the interpreter (CPU workers only; imports triton).

An `@triton.autotune` kernel times each of its configs on the device before its first call
of each key (`driver.active.get_benchmarker()`), and Triton's interpreter has no device to
time on: the benchmarker cannot be made ("0 active drivers", or "libcuda.so cannot found"),
at the first call since Triton 3.4, at the decorator itself (the candidate's import) before.
Most generated kernels are autotuned: on the CPU they could not be judged at all (the
baseline `undecided`: "needs a CUDA device or driver").

`install()` gives every autotuner made afterwards a benchmarker that reports the same time
for every config, so the first config (after the kernel's own pruning) is the one used,
and no disk cache of timings.  On the kernel's first tuning it runs each config's kernel
once, which keeps what a device's benchmark does to a kernel's arguments: a kernel that
adds into its output without `reset_to_zero` has added once per config before the chosen
one runs, as on a GPU (where it adds once per timing run).  Later keys (the other sizes a
gate runs) run no config but the chosen one: a kernel with 16 configs took 339 s for
its targeted gates on the CPU when every new size ran all 16.  The GPU picks the fastest config instead;
which config ran is what the interpreter's launch records show.  From Triton 3.3 (3.2's
interpreter refuses the keywords of its own configs, `num_buffers_warp_spec`: there an
autotuned kernel stays undecided on the CPU).
"""

from __future__ import annotations

import functools
import inspect

_installed = False


def _benchmarker(autotuner):
    """A benchmarker for one autotuner: every config takes the same time; on its first tuning
    (nothing tuned yet) each config's kernel runs once, on later keys (a new size) none does."""
    def bench(kernel_call, quantiles=None, **_options):
        if not getattr(autotuner, "cache", None):
            kernel_call()
        return [1.0, 1.0, 1.0] if quantiles is not None else 1.0
    return bench


def install() -> None:
    """From now on, every `triton.autotune` kernel tunes without a device (idempotent)."""
    global _installed
    if _installed:
        return
    import triton
    from triton.runtime.autotuner import Autotuner

    if tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit()) < (3, 3):
        return   # Triton 3.2's interpreter refuses its own configs' keywords (`num_buffers_warp_spec`)
    original = Autotuner.__init__
    accepts_do_bench = "do_bench" in inspect.signature(original).parameters

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        bench = _benchmarker(self)
        if accepts_do_bench and kwargs.get("do_bench") is None and len(args) < _position(original, "do_bench"):
            kwargs["do_bench"] = bench   # (Triton ≤ 3.3 asks the driver for one right here)
        kwargs.pop("warmup", None), kwargs.pop("rep", None), kwargs.pop("use_cuda_graph", None)
        original(self, *args, **kwargs)
        self.__dict__["do_bench"] = bench   # (≥ 3.4: shadows the cached property)
        if hasattr(self, "_do_bench"):
            self._do_bench = bench
        self.cache_results = False

    Autotuner.__init__ = __init__
    _installed = True


def _position(function, name: str) -> int:
    """The positional index of parameter `name` (self included), or a large number."""
    names = list(inspect.signature(function).parameters)
    return names.index(name) if name in names else 1 << 30
