"""What kanalyze's worker reads the candidate's results and writes its records with, and the hooks
that would run the candidate's code inside the worker's: replaced or added means tampered.

After the candidate's call, the worker still runs code in the candidate's process: it reads
the outputs (`Tensor.detach`, `.cpu`, `.numpy`, `.clone`), writes new values into the input
buffers for INT001's second call (`Tensor.copy_`), and writes its records (`json`, numpy's
`.npy` writer).  A candidate that replaced one of those at its import decides what the
worker sees: its torch calls dropped from the record of its call, the inputs it overwrote
put back before MEM002 reads them, the second call's new values never written.  The
worker's own records are written by `sandbox/sealed_io.py`, which replacing names cannot
reach; this watch makes every such replacement a tampered seal (recording.py): INT001
confirmed ("the candidate replaced …"), and every other verdict of the run `unconfirmed`.

A snapshot, taken in the worker after kanalyze's own hooks are in place and before the
candidate's import, of `torch.Tensor`'s own attributes and the writer functions below,
each with its code object: a function whose `__code__` was swapped is replaced too.  And
the hooks through which Python runs code inside any other code (trace and profile
functions, `gc` callbacks, audit hooks the candidate added): each sees the worker's frames,
where the record of the call is being built.
"""

from __future__ import annotations

import gc
import sys
import threading

from kanalyze.dynamic import integrity

# Taken at import, before any candidate code: `sys.gettrace` could be replaced by one that
# answers None, and `gc.callbacks` rebound to an empty list while gc keeps calling the real one.
_gettrace, _getprofile, _gc_callbacks = sys.gettrace, sys.getprofile, gc.callbacks

# Module-level functions the worker's reading and writing of results goes through (dotted names).
NAMES = ("json.dump", "json.dumps", "json.load", "json.loads", "json.JSONEncoder", "json.encoder.c_make_encoder",
         "json.encoder.encode_basestring_ascii", "json.encoder.encode_basestring", "numpy.save", "numpy.load",
         "numpy.asarray", "numpy.ascontiguousarray", "builtins.open", "io.open", "os.write", "os.open",
         "torch.Tensor")
# kanalyze's wrappers that fill fresh memory with the run's sentinel (environment.py; MEM001 and
# ORD002 read what is left of it): put back to torch's own, fresh memory is never poisoned.
POISONING = ("torch.empty", "torch.empty_like", "torch.empty_strided")
READS = "which kanalyze's worker reads or writes the run's results with"


def _fingerprint(value) -> tuple:
    """The object and, for a Python function (a method's too), its code, defaults and keyword
    defaults (a dict, changed in place by a candidate as easily as replaced)."""
    function = getattr(value, "__func__", value)
    code = getattr(function, "__code__", None)
    if code is None:
        return (value,)
    keywords = getattr(function, "__kwdefaults__", None) or {}
    return (value, code, getattr(function, "__defaults__", None), tuple((k, id(v)) for k, v in keywords.items()))


def _same(one: tuple, other: tuple) -> bool:
    return len(one) == len(other) and all(a is b or (isinstance(a, tuple) and a == b) for a, b in zip(one, other))


def _changed(now, prints: dict) -> list[str]:
    """The names of a class's attributes added, removed or replaced since their `prints`."""
    return [name for name in sorted(set(now) | set(prints))
            if name not in prints or name not in now or not _same(_fingerprint(now[name]), prints[name])]


class WriterWatch:
    """The snapshot, and what was replaced or added since (`replaced`, for the run's seal)."""

    def __init__(self) -> None:
        import torch

        self.tensor = torch.Tensor
        self.objects = {name: integrity.resolve(name) for name in NAMES + POISONING}
        self.prints = {name: _fingerprint(value) for name, value in self.objects.items() if value is not None}
        self.tensor_prints = {name: _fingerprint(value) for name, value in vars(torch.Tensor).items()}
        encoder = getattr(self.objects.get("json.JSONEncoder"), "__dict__", {})
        self.encoder_prints = {name: _fingerprint(value) for name, value in encoder.items()}
        self.trace, self.profile = _gettrace(), _getprofile()
        self.thread_trace = getattr(threading, "_trace_hook", None)
        self.thread_profile = getattr(threading, "_profile_hook", None)
        self.gc_callbacks = list(_gc_callbacks)

    def replaced(self) -> list[str]:
        """What the worker reads and writes with that is no longer the snapshot's, and the hooks
        through which the candidate's code would run inside the worker's, in words."""
        return self._replaced() + self._hooks()

    def _hooks(self) -> list[str]:
        """A trace or profile function runs on every call of the worker's own code, with its
        frame (its locals: the record being written); a `gc` callback runs inside it at any
        allocation; an audit hook at every file the worker opens."""
        found = [f"a {what} of the candidate's ({how}) runs inside the worker's own code after its call"
                 for what, how, now, then in (
                     ("trace function", "sys.settrace", _gettrace(), self.trace),
                     ("profile function", "sys.setprofile", _getprofile(), self.profile),
                     ("trace function", "threading.settrace", getattr(threading, "_trace_hook", None),
                      self.thread_trace),
                     ("profile function", "threading.setprofile", getattr(threading, "_profile_hook", None),
                      self.thread_profile))
                 if now is not then]
        if len(_gc_callbacks) != len(self.gc_callbacks) or any(a is not b for a, b in zip(_gc_callbacks,
                                                                                        self.gc_callbacks)):
            found.append("a garbage-collector callback of the candidate's (gc.callbacks) runs inside the worker's "
                         "own code after its call")
        if integrity.audit_hooks_added():
            found.append("the candidate added an audit hook (sys.addaudithook), which runs inside the worker's "
                         "own code after its call: " + ", ".join(integrity.audit_hooks_added()[:2]))
        return found

    def _replaced(self) -> list[str]:
        found = [name for name, mark in self.prints.items()
                 if not _same(_fingerprint(integrity.resolve(name)), mark)]
        found += [f"torch.Tensor.{name}" for name in _changed(vars(self.tensor), self.tensor_prints)]
        encoder = getattr(self.objects.get("json.JSONEncoder"), "__dict__", {})
        found += [f"json.JSONEncoder.{name}" for name in _changed(encoder, self.encoder_prints)]
        return [f"replaced `{name}`, " + ("kanalyze's wrapper that fills fresh memory with the run's sentinel "
                                          "(MEM001)" if name in POISONING else READS) for name in found[:8]]
