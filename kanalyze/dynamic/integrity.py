"""What a candidate changes in its own process that a benchmark relies on (worker side; imports torch).

A snapshot, taken before the candidate is imported, of the functions a
benchmark times and compares with (`time.perf_counter`, `torch.cuda.synchronize`,
`torch.cuda.Event.elapsed_time`, `torch.allclose`, ...) and of the numerics
flags; after each call, the names whose objects were replaced and the flags
that changed, and the threads still running that the call started.  The INT001
gate reads them.  These are observations made inside the candidate's process:
a candidate can hide a patch it undoes before returning, and could tamper with
this module (docs/worker-protocol.md, known gaps).
"""

from __future__ import annotations

import importlib
import threading
import time

from kanalyze.dynamic import numerics

WATCHED = (
    "time.time", "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.process_time",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close",
    "torch.Tensor.allclose", "torch.Tensor.__eq__", "torch.manual_seed", "torch.randn", "torch.rand",
    "torch.nn.Module.__call__", "triton.testing.do_bench",
)


def _resolve(name: str):
    """The object at a dotted name, or None where it does not exist."""
    module_name, _, rest = name.partition(".")
    try:
        value = importlib.import_module(module_name) if module_name != "triton" or rest else None
        if module_name == "triton" and rest.startswith("testing"):
            value = importlib.import_module("triton.testing")
            rest = rest[len("testing."):]
        for part in rest.split("."):
            value = getattr(value, part)
        return value
    except Exception:  # not there in this version: nothing to watch
        return None


class Watch:
    """The snapshot, and what changed since."""

    def __init__(self) -> None:
        self.objects = {name: _resolve(name) for name in WATCHED}
        self.numerics = numerics.current()
        self.threads = set(threading.enumerate())

    def replaced(self) -> list[str]:
        """Watched names whose object is no longer the one of the snapshot."""
        changed = [name for name, original in self.objects.items()
                   if original is not None and _resolve(name) is not original]
        now = numerics.current()
        changed += [f"torch setting {key}: {self.numerics[key]} -> {now[key]}" for key in now
                    if now[key] != self.numerics.get(key)]
        return changed

    def threads_left(self, wait: float = 0.05) -> list[str]:
        """Threads started since the snapshot that are still running (after a short grace)."""
        deadline = time.monotonic() + wait
        while True:
            left = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            if not left or time.monotonic() >= deadline:
                return [t.name for t in left]
            time.sleep(0.005)
