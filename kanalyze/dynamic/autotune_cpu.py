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

A GPU picks the fastest config, which is not the first: a kernel right only for its first
config (square tiles, say, where another config's are not) passed on the CPU and failed on
a GPU.  So a case may name the config each autotuner takes (`choose`, a case's
`autotune_choice`: a position among the configs its pruning keeps, modulo their number);
CMP001's cases take one each in turn.  A new choice empties every autotuner's cache, so the
next call tunes again; a tuning for a chosen config runs no config's kernel, as a GPU's later
calls of a size it has tuned run none (the first call's timing runs are the baseline's, which
chooses nothing): a case's witness then replays as it ran, first in its worker or not.  (The
timing runs of a first call can hide a config's fault: a config that writes all of the output
runs before one that writes part of it.)  `seen()` says, per kernel, which config its last
tuning took, of how many.

A config that fails one of its kernel's `tl.static_assert`s does not compile on a GPU, whose
autotuner times it as inf and never takes it; the interpreter raises AssertionError when the
kernel runs.  Such a config is timed as inf here too, and where a chosen one (never timed)
fails so, the call tunes again without it: a case never takes a config a GPU could not.
"""

from __future__ import annotations

import functools
import inspect
import weakref

from kanalyze.dynamic.recording import config_settings, kernel_name

_installed = False
_choice: int | None = None        # the position, among a tuning's configs, that every autotuner takes
_tuners = weakref.WeakSet()       # every autotuner made since `install`
_seen: dict[str, dict] = {}       # kernel name -> its last tuning: {"config", "configs", "settings"}


def choose(position: int | None) -> None:
    """From now on, every autotuner takes the config at `position` (None: the first) among
    those its pruning keeps; a new position makes each tune again at its next call."""
    global _choice
    if position != _choice:
        _choice = position
        for tuner in list(_tuners):
            tuner.cache.clear()


def seen() -> dict[str, dict]:
    """Per autotuned kernel, the config its last tuning took: its position, of how many, and
    its settings (the config's scalar keywords)."""
    return {name: dict(tuning) for name, tuning in _seen.items()}


def _benchmarker(autotuner):
    """A benchmarker for one autotuner: the chosen config takes less time than every other.  On
    its first tuning, where no config is chosen, each config's kernel runs once; on later
    tunings (a new size), and wherever a config is chosen, none does."""
    def bench(kernel_call, quantiles=None, **_options):
        if _choice is None and not autotuner.__dict__.get("_kanalyze_tuned"):
            kernel_call()
        time = 0.5 if autotuner.__dict__.get("_kanalyze_benching") is autotuner.__dict__.get("_kanalyze_chosen") else 1.0
        return [time] * 3 if quantiles is not None else time
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
        _tuners.add(self)

    Autotuner.__init__ = __init__
    _wrap_tuning(Autotuner)
    _installed = True


def _wrap_tuning(Autotuner) -> None:
    """Each tuning marks the config `choose` names among the pruned ones that do not fail their
    kernel's static assertions, and says which it was (`seen`); each timing run says which config
    it times; a config whose run fails a static assertion is left out from then on."""
    prune, time_one, run = Autotuner.prune_configs, Autotuner._bench, Autotuner.run

    @functools.wraps(prune)
    def prune_configs(tuner, *args, **kwargs):
        if "_kanalyze_chosen" in tuner.__dict__:   # a tuning before this one ran each config once
            tuner._kanalyze_tuned = True
        tuner._kanalyze_kept = prune(tuner, *args, **kwargs)
        _choose_among(tuner)
        return tuner._kanalyze_kept

    @functools.wraps(time_one)
    def _bench(tuner, *args, config, **meta):
        tuner._kanalyze_benching = config
        if config in _failing(tuner):
            return [float("inf")] * 3
        try:
            return time_one(tuner, *args, config=config, **meta)
        except Exception as exc:   # a GPU's compiler rejects it: timed as inf, never taken
            if not _static_assertion(exc):
                raise
            _failing(tuner).add(config)
            return [float("inf")] * 3

    @functools.wraps(run)
    def run_tuned(tuner, *args, **kwargs):
        for _ in range(len(tuner.configs)):
            try:
                done = run(tuner, *args, **kwargs)
                chosen = tuner.__dict__.get("_kanalyze_chosen")
                if chosen is not None and getattr(tuner, "best_config", chosen) is not chosen:
                    _choose_among(tuner)   # the chosen config failed as it was timed: said of the one taken
                return done
            except Exception as exc:   # the chosen config, never timed, fails a static assertion
                config = getattr(tuner, "best_config", None)
                if not _static_assertion(exc) or config is None or config in _failing(tuner):
                    raise
                _failing(tuner).add(config)
                tuner.cache.clear()
        return run(tuner, *args, **kwargs)

    Autotuner.prune_configs, Autotuner._bench, Autotuner.run = prune_configs, _bench, run_tuned


def _choose_among(tuner) -> None:
    """Mark the config `choose` names among the last pruning's that do not fail a static
    assertion (all of them where every one does), and say which it was (`seen`)."""
    kept = tuner.__dict__.get("_kanalyze_kept") or []
    usable = [config for config in kept if config not in _failing(tuner)] or kept
    position = (_choice or 0) % len(usable) if usable else 0
    tuner._kanalyze_chosen = usable[position] if usable else None
    _seen[kernel_name(tuner)] = {"config": position, "configs": len(usable),
                                 "settings": config_settings(usable[position]) if usable else {}}


def _failing(tuner) -> set:
    """The configs of `tuner` whose run failed a static assertion."""
    return tuner.__dict__.setdefault("_kanalyze_failing", set())


def _static_assertion(exc: BaseException) -> bool:
    """Whether `exc` is the interpreter's `tl.static_assert` failing (an AssertionError raised
    there, wrapped in the interpreter's InterpreterError): where a GPU's compiler raises
    CompileTimeAssertionFailure, which its autotuner times as inf (the config is never taken)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, AssertionError):
            frame = exc.__traceback__
            while frame is not None and frame.tb_next is not None:
                frame = frame.tb_next
            return frame is not None and "static_assert" in frame.tb_frame.f_code.co_name \
                and "interpreter" in frame.tb_frame.f_code.co_filename
        exc = exc.__cause__
    return False


def _position(function, name: str) -> int:
    """The positional index of parameter `name` (self included), or a large number."""
    names = list(inspect.signature(function).parameters)
    return names.index(name) if name in names else 1 << 30
