"""What a candidate changes in its own process that a benchmark relies on (worker side; imports torch).

A snapshot, taken before the candidate is imported, of the functions a
benchmark times and compares with (`time.perf_counter`, `torch.cuda.synchronize`,
`torch.cuda.Event.elapsed_time`, `torch.allclose`, ...) and of the numerics
flags; after each call, the names whose objects were replaced and the flags
that changed, and the threads still running that the call started.  And from
the candidate's import on, its reads of the checker's state (`Snoops`): the heap
through `gc` and every thread's frames, made by code of the candidate's own
files.  The INT001 gate reads them.  These are observations made inside the
candidate's process: a candidate can hide a patch it undoes before returning,
and could tamper with this module (docs/worker-protocol.md, known gaps).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import types

from kanalyze.dynamic import numerics

WATCHED = (
    "time.time", "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.process_time",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close",
    "torch.Tensor.allclose", "torch.Tensor.__eq__", "torch.manual_seed", "torch.randn", "torch.rand",
    "torch.nn.Module.__call__", "triton.testing.do_bench",
)


def resolve(name: str):
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


# Audit events that read the checker's state: the heap, every thread's stack, a caller's frame.
HEAP_AND_STACKS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames")
FRAME = "sys._getframe"
# Audit events that name the file code will say it comes from: (source, filename), (code, filename, ...);
# and the event of code run by `exec` (code,).
NAMING = ("compile", "code.__new__")
EXEC = "exec"
ADD_HOOK = "sys.addaudithook"


class Snoops:
    """An audit hook (installed once; Python cannot remove one) that records the heap and frame
    reads made by the candidate's own code: a `gc` walk or `sys._current_frames` while a frame
    of the candidate's files is on the stack, or `sys._getframe` called from one (logging's
    own `sys._getframe`, called for a candidate's `logging.info`, is not the candidate's).  The
    candidate's files are those of its folder (its module and what it imports beside it), the
    file names it gives code it compiles or builds itself (`compile(src, "/usr/lib/x.py", ...)`,
    `code.replace(co_filename=...)`), and the code it runs through `exec` (a string's code is
    named `<string>`, as is the worker's own bootstrap: by the code object, not the name).
    Any observation made inside its process can be escaped (docs/worker-protocol.md, known
    gaps)."""

    def __init__(self) -> None:
        self.folder: str | None = None      # set before the candidate's import
        self.seen: list[str] = []
        self.hooks: list[str] = []         # audit hooks the candidate's code added (where)
        self.names: set[str] = set()        # file names the candidate's code gave code it made
        # Code objects it ran through `exec`, and theirs within, by identity (code objects compare
        # equal by content, file name aside): id -> the object, kept so that the id stays its own.
        self.codes: dict[int, types.CodeType] = {}
        self._busy = threading.local()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args) -> None:
        if self.folder is None or getattr(self._busy, "on", 0):
            return
        if event in NAMING or event == EXEC:
            self._made(event, args)
            return
        if event == ADD_HOOK:
            self._hook_added()
            return
        if event != FRAME and event not in HEAP_AND_STACKS:
            return
        self._busy.on = 1                   # the frame read below raises an event of its own
        try:
            frame = sys._getframe(1)
            while frame is not None and not self._candidates(frame):
                frame = frame.f_back if event != FRAME else None
            if frame is not None and len(self.seen) < 20:
                where = f"{event}() at line {frame.f_lineno} of {os.path.basename(frame.f_code.co_filename)}"
                if where not in self.seen:
                    self.seen.append(where)
        finally:
            self._busy.on = 0

    def _hook_added(self) -> None:
        """An audit hook added by the candidate's code (its frame on the stack): it would run
        inside the worker's own code at every file the worker opens."""
        self._busy.on = 1
        try:
            frame = sys._getframe(2)
            while frame is not None and not self._candidates(frame):
                frame = frame.f_back
            if frame is not None and len(self.hooks) < 8:
                self.hooks.append(f"at line {frame.f_lineno} of {os.path.basename(frame.f_code.co_filename)}")
        finally:
            self._busy.on = 0

    def _made(self, event: str, args) -> None:
        """Code made or run by the candidate's own code (the frame calling `compile`, building
        a code object or calling `exec`) is the candidate's from now on: by its file name where
        it names a file, by the code object run through `exec`."""
        self._busy.on = 1
        try:
            if len(self.names) + len(self.codes) >= 10_000 or not self._candidates(sys._getframe(2)):
                return
            if event == EXEC:
                stack = [args[0]] if args and isinstance(args[0], types.CodeType) else []
                while stack:
                    code = stack.pop()
                    self.codes[id(code)] = code
                    stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            elif len(args) > 1 and isinstance(args[1], str) and not args[1].startswith("<"):
                self.names.add(args[1])
        finally:
            self._busy.on = 0

    def _candidates(self, frame) -> bool:
        code = frame.f_code
        filename = code.co_filename
        return ((os.path.isabs(filename) and os.path.dirname(filename) == self.folder) or filename in self.names
                or self.codes.get(id(code)) is code)


_snoops: Snoops | None = None


def audit_hooks_added() -> list[str]:
    """Where the candidate's code added audit hooks (empty before its import, or none added)."""
    return list(_snoops.hooks) if _snoops is not None else []


def torch_wraps(new, original) -> bool:
    """Is `new` torch's own wrapper of `original`?  Importing `torch._dynamo` (which torch
    does lazily, on a candidate's `load_inline` or `torch.compile` as much as on its own)
    replaces `torch.manual_seed` with `torch._disable_dynamo(torch.manual_seed)`: a
    function of torch's `_compile.py` that calls the very function of the snapshot.  Only
    that wrapper counts: one the candidate writes (`functools.wraps` in its own file) is
    the candidate's."""
    code = getattr(new, "__code__", None)
    if code is None or getattr(new, "__wrapped__", None) is not original:
        return False
    torch = sys.modules.get("torch")
    folder = os.path.dirname(getattr(torch, "__file__", "") or "")
    return bool(folder) and os.path.abspath(code.co_filename) == os.path.join(folder, "_compile.py")


class Watch:
    """The snapshot, and what changed since."""

    def __init__(self) -> None:
        global _snoops
        self.objects = {name: resolve(name) for name in WATCHED}
        self.numerics = numerics.current()
        self.threads = set(threading.enumerate())
        if _snoops is None:
            _snoops = Snoops()
        self.snoops = _snoops

    def watch_candidate(self, path: str) -> None:
        """Record the heap and frame reads of the code in `path`'s folder from now on."""
        self.snoops.folder = os.path.dirname(os.path.abspath(path))

    def snooped(self) -> list[str]:
        return list(self.snoops.seen)

    def replaced(self) -> list[str]:
        """Watched names whose object is no longer the one of the snapshot (torch's own
        wrapper of it aside: `torch_wraps`)."""
        changed = []
        for name, original in self.objects.items():
            now = resolve(name)
            if original is not None and now is not original and not torch_wraps(now, original):
                changed.append(name)
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
