"""CUDA C++ candidates: their torch extensions, built once per source (inside a worker).

KernelBench's CUDA solutions build their kernels when they are imported, with
`torch.utils.cpp_extension.load_inline` (or `load`).  torch keys the build
directory by the extension's name alone, and most solutions call theirs
`custom_op` or the like; a process that finds another's build lock there waits
and then loads whatever that process built.  Left alone, two candidates of the
same name could load each other's kernels, and every fresh worker would
compile again (tens of seconds).

`install()` wraps both calls, before the candidate is imported: a call that
names no `build_directory` gets `<cache>/<name>-<digest>`, where the digest
covers everything torch's own versioner compares (the sources, flags, include
paths, ...) and what the binary depends on (torch, CUDA, Python, the target
architectures).  Same source, same directory: compiled once, then shared by
every worker and every run (the cache is outside the workers' scratch space:
`KANALYZE_EXTENSIONS_DIR` where set, else kanalyze's cache folder; a candidate's
worker is given its part in its spec, not in a variable).  Other source, other
directory, whatever the name.

A builder holds an `flock` on the directory while torch builds and loads (the
kernel releases it if the worker dies), removes a lock file a killed build left
behind (torch would wait on it forever), and marks the directory complete once
the module has loaded; a directory without the mark is built from scratch.
"""

from __future__ import annotations

import collections
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import types

ROOT_VARIABLE = "KANALYZE_EXTENSIONS_DIR"
USES_EXTENSIONS = re.compile(r"\bload_inline\b|\bcpp_extension\b")
BUILD_VARIABLES = ("CXX", "CC", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")   # besides the arch list
_COMPLETE = "kanalyze-complete"
# Calls into the candidate's built extensions during a run, by function (`module.function`):
# which of its CUDA C++ entry points ran (environment.py clears and reports them per run).
CALLS: collections.Counter = collections.Counter()
FUNCTIONS: set[str] = set()   # every function counted so far, called or not (a run reports each)
# While a run records the candidate's calls (RES001): a recorder of the ATen ops each call into
# an extension dispatches (recording.extension_recorder), entered around it; None otherwise.
INSIDE = None
_LOCK = "kanalyze.lock"
_installed = False


_root: str | None = None   # in a worker: taken out of the environment before the candidate runs


def cache_root() -> str:
    """The shared build cache (stdlib only: the parent computes it for the workers)."""
    if _root:
        return _root
    if os.environ.get(ROOT_VARIABLE):
        return os.environ[ROOT_VARIABLE]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kanalyze", "torch_extensions")


def build_key(function: str, arguments: dict) -> str:
    """A digest of what a build depends on: the call's arguments, the files it names, the toolchain."""
    import torch

    named_files = {}
    for path in list(arguments.get("sources") or []) + list(arguments.get("extra_include_paths") or []):
        if isinstance(path, str) and os.path.isfile(path):
            with open(path, "rb") as handle:
                named_files[path] = hashlib.sha256(handle.read()).hexdigest()
    capability = list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
    described = {
        "function": function,
        "arguments": {k: v for k, v in arguments.items() if k not in ("build_directory", "verbose")},
        "files": named_files,
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": list(sys.version_info[:2]),
        "capability": capability, "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        "build_environment": {k: os.environ.get(k) for k in BUILD_VARIABLES},
    }
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _build_in_cache(original, function: str, *args, **kwargs):
    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    if arguments.get("build_directory"):   # the candidate chose its own place
        return counting_calls(original(*args, **kwargs))
    name = re.sub(r"[^\w.-]", "_", str(arguments.get("name")))[:64]
    directory = os.path.join(cache_root(), f"{name}-{build_key(function, arguments)}")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, _LOCK), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released by the kernel if this worker dies
        try:
            complete = os.path.join(directory, _COMPLETE)
            if not os.path.exists(complete):
                _clear(directory)          # a build that was killed half-way: start over
            stale = os.path.join(directory, "lock")   # torch's own, left by a killed build
            if os.path.exists(stale):
                os.remove(stale)
            arguments["build_directory"] = directory
            # torch's versioner renames a second build of one name in a process (`name_v1`), which
            # would rebuild a cached directory under the new name: here the directory is the version.
            versioner = getattr(sys.modules[original.__module__], "JIT_EXTENSION_VERSIONER", None)
            getattr(versioner, "entries", {}).pop(arguments.get("name"), None)
            module = original(**arguments)
            with open(complete, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"name": arguments.get("name"), "function": function}))
            return counting_calls(module)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def counting_calls(module):
    """The built module, each of its functions (pybind11's builtins) counting its calls into
    `CALLS`: a CUDA C++ candidate's kernels, as RES001 and INT001's traces read them, and what
    ORD001's reversed-order run must show it ran.  A build that registers operators only
    (`is_python_module=False`) returns no module: nothing to count there."""
    if not isinstance(module, types.ModuleType):   # `is_python_module=False`: the library's path
        return module
    name = getattr(module, "__name__", "extension")
    for attribute in dir(module):
        function = getattr(module, attribute, None)
        if attribute.startswith("_") or type(function).__name__ != "builtin_function_or_method":
            continue
        try:
            setattr(module, attribute, _counting(function, f"{name}.{attribute}"))
        except (AttributeError, TypeError):   # a module that refuses new attributes keeps its own
            continue
        FUNCTIONS.add(f"{name}.{attribute}")
    return module


def _counting(function, label: str):
    @functools.wraps(function)
    def call(*args, **kwargs):
        inside = INSIDE
        if inside is None:
            result = function(*args, **kwargs)
        else:
            with inside:
                result = function(*args, **kwargs)
        CALLS[label] += 1   # once it returned, as a Triton launch is counted (recording.py)
        return result
    return call


def _clear(directory: str) -> None:
    for entry in os.listdir(directory):
        if entry == _LOCK:
            continue
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                pass


def _find_ninja() -> None:
    """torch runs `ninja` from PATH; the `ninja` package or the interpreter's bin folder may hold it."""
    if shutil.which("ninja"):
        return
    folders = [os.path.dirname(sys.executable)]
    try:
        import ninja  # noqa: F401  (the PyPI package ships the binary)

        folders.insert(0, ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    for folder in folders:
        if os.path.exists(os.path.join(folder, "ninja")):
            os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
            return


def _wrap(original, function: str):
    @functools.wraps(original)
    def build(*args, **kwargs):
        return _build_in_cache(original, function, *args, **kwargs)
    return build


def builds_at_import(path: str) -> bool:
    """Whether the candidate at `path` builds a torch extension (CUDA C++) when imported; an
    unreadable file builds none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return bool(USES_EXTENSIONS.search(handle.read()))
    except OSError:
        return False


def install() -> None:
    """Route `load_inline` and `load` through the shared cache (once per process)."""
    global _installed
    if _installed:
        return
    from torch.utils import cpp_extension

    for function in ("load_inline", "load"):
        setattr(cpp_extension, function, _wrap(getattr(cpp_extension, function), function))
    _find_ninja()
    _installed = True


def calls() -> dict[str, int]:
    """{function: calls} since the counts were last cleared, for every function counted (0: not
    called); empty where the candidate built no Python module (operators registered instead)."""
    return {label: CALLS.get(label, 0) for label in sorted(FUNCTIONS | set(CALLS))}


def in_use() -> bool:
    """Whether this process routes extension builds (`install`: a candidate that builds one)."""
    return _installed


def keep_root(root: str | None = None) -> None:
    """In a worker, before the candidate's import: remember the build cache (a candidate's
    worker is given it in its spec: disguise.py) and take the variable out of the
    environment, where its name would tell the candidate who runs it."""
    global _root
    _root = os.environ.pop(ROOT_VARIABLE, None) or root or _root
