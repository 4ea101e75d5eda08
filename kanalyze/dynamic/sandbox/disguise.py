"""What a candidate's worker shows of kanalyze: nothing that names it (stdlib only).

A candidate that behaves only when it sees a verifier looks for the verifier's
names: a `kanalyze` module or import, an environment variable, a working
directory, a frame's file on the call stack.  None of these is there to see:

* names on disk (parent side): the run directory, the session's folder and the
  worker's scratch folder (its working directory, HOME and TMPDIR) have
  `tempfile`'s neutral names (rundir.py, process.py), and the candidate's compile
  caches, kept in kanalyze's cache folder, are reached through one link in the
  scratch folder (`cache_view`): the variables that name them say nothing;
* environment: no variable named after kanalyze (the extension builds' folder
  comes through the worker's spec, which the worker deletes once read, by its
  real path: torch rebuilds an extension whose folder moved);
* modules (`hide`, in a candidate's worker once its imports are done and before
  anything kanalyze installs in torch or Triton): every module whose name
  mentions kanalyze leaves `sys.modules` for a private table, with the import
  machinery's traces of it (an editable install's finder, path hook, path entry,
  cached path finders), and a finder first on `sys.meta_path` refuses the names
  (`import kanalyze` raises ModuleNotFoundError, as for a module that is not
  installed).  kanalyze's own code keeps its references; an import it makes
  later (a lazy `from kanalyze... import`) is served from the private table when
  the importing frame's globals are one of kanalyze's modules, and whatever that
  put back into `sys.modules` leaves again before the candidate's code next runs
  (`Hiding.around`, wrapped around the worker's phase reporter);
* frames: the code of kanalyze's functions gets neutral file names (the module's
  last name, `execute.py`), its modules (not its packages: `from package import
  module` reads their names) neutral `__name__` and `__file__`, and its classes
  and functions neutral `__module__` names, so that a walk up the stack or the
  repr of the recorder on torch's mode stack names no kanalyze; worker.py and
  zygote.py, whose frames are already on the stack below the candidate's, rename
  their own code when imported (`rename_own_code`).  Tracebacks keep the function
  names and line numbers;
* the command line as Python shows it (`sys.argv`, `sys.orig_argv`) and the
  candidate's own module name (loading.py names it; `neutral_module_names`).

What stays visible is listed in docs/worker-protocol.md (the interpreter setting
on the CPU above all): a candidate that reads kanalyze's objects through `gc`, or
the bootstrap's code at the bottom of its stack, can still tell.  (Its command line
names nothing: zygote_client.launcher.)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.util
import itertools
import linecache
import os
import sys
import types

NAME = "kanalyze"
LINK = ".compile-cache"   # the scratch folder's link to the candidate's caches


# ---------------------------------------------------------------- parent side

def cache_view(scratch: str, caches: dict[str, str]) -> dict[str, str]:
    """The caches (variable -> folder) as the worker is shown them: through one link in its
    scratch folder to the folder that holds them all.  Writes land in the real folders (the
    mount namespace binds those writable); the variables' values name no kanalyze."""
    common = os.path.commonpath(list(caches.values()))
    link = os.path.join(scratch, LINK)
    os.symlink(common, link)
    return {key: os.path.normpath(os.path.join(link, os.path.relpath(folder, common)))
            for key, folder in caches.items()}


# ---------------------------------------------------------------- worker side

def mentions(text: object) -> bool:
    return isinstance(text, str) and NAME in text.lower()


def neutral_filename(module_name: str) -> str:
    """`kanalyze.dynamic.sandbox.execute` -> `execute.py` (a package: `__init__.py`)."""
    last = module_name.rsplit(".", 1)[-1]
    return f"{'__init__' if last == NAME else last.lower().replace(NAME, 'module')}.py"


def neutral_module(module_name: str) -> str:
    return neutral_filename(module_name)[:-3]


class _Renamer:
    """Gives the code of the functions it visits neutral file names (nested code objects
    included), and functions and classes of the given modules neutral `__module__` names."""

    def __init__(self, files: dict[str, str], modules: dict[str, str]) -> None:
        self.files, self.modules = files, modules   # real file -> neutral; module name -> neutral
        self.done: dict[int, tuple] = {}            # id(old code) -> (old, new)
        self.seen: set[int] = set()

    def code(self, code: types.CodeType) -> types.CodeType:
        filename = self.files.get(code.co_filename)
        if filename is None:
            return code
        if id(code) not in self.done:
            consts = tuple(self.code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
            self.done[id(code)] = (code, code.replace(co_filename=filename, co_consts=consts))
        return self.done[id(code)][1]

    def visit(self, value) -> None:
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        if isinstance(value, types.FunctionType):
            value.__code__ = self.code(value.__code__)
            if value.__module__ in self.modules:
                value.__module__ = self.modules[value.__module__]
            for item in (value.__dict__.get("__wrapped__"), value.__defaults__, value.__kwdefaults__):
                if item is not None:
                    self.visit(item)
        elif isinstance(value, type):
            if value.__module__ in self.modules:
                for item in list(vars(value).values()):
                    self.visit(item)
                value.__module__ = self.modules[value.__module__]
        elif isinstance(value, (staticmethod, classmethod, types.MethodType)):
            self.visit(value.__func__)
        elif isinstance(value, property):
            for function in (value.fget, value.fset, value.fdel):
                if function is not None:
                    self.visit(function)
        elif isinstance(value, (functools.partial, functools.cached_property)):
            self.visit(value.func)
        elif isinstance(value, functools._lru_cache_wrapper):
            self.visit(value.__wrapped__)
        elif isinstance(value, (list, tuple, set, frozenset)):   # tables of functions
            for item in value:
                self.visit(item)
        elif isinstance(value, dict):
            for item in list(value.values()):
                self.visit(item)
        elif isinstance(value, dataclasses.Field):
            self.visit(value.default_factory)

    def module(self, module: types.ModuleType) -> None:
        """Everything the module holds, its own globals included (a code object kept as a
        global, such as the recorder's, becomes the renamed one its function now has)."""
        namespace = vars(module)
        for value in list(namespace.values()):
            self.visit(value)
        for key, value in list(namespace.items()):
            if isinstance(value, types.CodeType) and id(value) in self.done:
                namespace[key] = self.done[id(value)][1]
        name = namespace.get("__name__")
        if name in self.modules and not hasattr(module, "__path__"):   # a package keeps its names:
            namespace["__name__"] = self.modules[name]                 # `from package import x` reads them
            for key in ("__file__", "__cached__"):
                if isinstance(namespace.get(key), str):
                    namespace[key] = neutral_filename(name)


def rename_own_code(namespace: dict) -> None:
    """For worker.py and zygote.py, at import: their functions' frames are on the stack below
    the candidate's (a frame keeps the code it started with), so their code is neutral from the
    start, in every worker.  Only `co_filename` changes: names and line numbers stay."""
    renamer = _Renamer({namespace["__file__"]: neutral_filename(namespace["__name__"])}, {})
    for value in list(namespace.values()):
        if isinstance(value, types.FunctionType) and value.__module__ == namespace["__name__"]:
            renamer.visit(value)


class Hiding:
    """The finder first on `sys.meta_path` that refuses kanalyze's names to everyone but
    kanalyze's own modules, and the private table of the modules it took out."""

    def __init__(self) -> None:
        self.modules: dict[str, types.ModuleType] = {}
        self._ours: set[int] = set()          # ids of those modules' globals
        self._import_frames = {id(vars(importlib)), id(vars(importlib.util))}
        self._asked = False                   # kanalyze's code imported by name since the last `again`

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] != NAME and name not in self.modules:
            return None
        if not self._asked_by_kanalyze():
            top = name.partition(".")[0]
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        self._asked = True
        module = self.modules.get(name)
        if module is None:
            return None   # one it never imported: found and loaded as usual, hidden at the next `again`
        return importlib.machinery.ModuleSpec(name, _Existing(module), is_package=hasattr(module, "__path__"))

    def _asked_by_kanalyze(self) -> bool:
        """Whether the importing frame, past the import system's own, runs in one of kanalyze's
        modules (their globals, by identity: a candidate's own globals never are)."""
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                     or id(frame.f_globals) in self._import_frames):
            frame = frame.f_back
        return frame is not None and id(frame.f_globals) in self._ours

    def again(self) -> None:
        """Take out whatever kanalyze's own imports put back since the last time; a module
        loaded for the first time is renamed as the others were.  (While the candidate's code
        runs, kanalyze's code imports nothing: a worker imports all it needs first, import_modules.)"""
        if not self._asked:
            return
        self._asked = False
        _take_out(self)

    def around(self, phase):
        """The worker's phase reporter, hiding again before the candidate's code runs."""
        def reported(name: str) -> None:
            if name == "candidate":
                self.again()
            phase(name)
        return reported


class _Existing:
    """A loader that hands back a module kanalyze already has (nothing is executed)."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module, self.spec = module, getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec   # the import machinery set its own; the module's stays


def _take_out(hiding: Hiding) -> None:
    """Move every module whose name mentions kanalyze into the private table and rename its code."""
    new = {name: module for name, module in list(sys.modules.items()) if mentions(name)}
    for name in new:
        del sys.modules[name]
    new = {name: module for name, module in new.items() if hiding.modules.get(name) is not module}
    hiding.modules.update(new)
    hiding._ours.update(id(vars(module)) for module in new.values())
    files = {module.__file__: neutral_filename(name) for name, module in new.items()
             if isinstance(getattr(module, "__file__", None), str)}
    renamer = _Renamer(files, {name: neutral_module(name) for name in new})
    for module in new.values():
        renamer.module(module)
    for key in [key for key in linecache.cache if mentions(key)]:
        del linecache.cache[key]


def _from_kanalyze(finder) -> bool:
    """An import hook of kanalyze's own install (an editable install's finder and path hook)."""
    return mentions(getattr(finder, "__module__", ""))


def hide() -> Hiding:
    """In a candidate's worker, once its imports are done: kanalyze out of sight (see above)."""
    hiding = Hiding()
    package = sys.modules.get(NAME)
    own_root = os.path.dirname(os.path.dirname(os.path.abspath(package.__file__))) if package else None
    sys.meta_path[:] = [hiding, *(finder for finder in sys.meta_path if not _from_kanalyze(finder))]
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if not _from_kanalyze(hook)]
    _take_out(hiding)   # after those: it renames the modules they came from
    # A refusal reads as a module that is not installed: Python trims frames of the import
    # system's own file names from an ImportError's traceback, and so the finder's.
    find = Hiding.find_spec
    find.__code__ = find.__code__.replace(co_filename="<frozen importlib._bootstrap_external>")
    sys.path[:] = [entry for entry in sys.path
                   if not (mentions(entry) and (entry == own_root or not os.path.isdir(entry)))]
    for key in [key for key in sys.path_importer_cache if mentions(key)]:
        del sys.path_importer_cache[key]
    for name in [name for name in os.environ if mentions(name)]:
        del os.environ[name]
    sys.argv[1:] = []
    if getattr(sys, "orig_argv", None):
        sys.orig_argv[:] = [sys.orig_argv[0], "-c"]
    return hiding


def neutral_module_names(loading: types.ModuleType) -> None:
    """The candidate's module is named by loading.py (`kanalyze_candidate_N`); in a candidate's
    worker it gets a neutral name instead (`module_N`)."""
    counter = itertools.count(1)
    loading._fresh_name = lambda stem: f"module_{next(counter)}"
