"""The kernels of a checked module that only never-run code launches.

Every clause states what a kernel does when it runs: the order of its sums (ORD001), the
precision of its products (PRC001), the elements it leaves unwritten (MEM001).  Code that
nothing reachable runs does none of it.  A library sometimes keeps such code: a layer
deprecated by an unconditional `raise` at the top of its `__init__`, whose `forward` still
applies a private autograd Function, whose static methods still launch kernels.  No path
from the project's public API meets those kernels: the findings inside them claim nothing
that can happen (check/dead_kernels.py drops them; RES001, on the kernel itself, stays).

The project index (project_index.py) asks this module, once per check, for each checked
module's never-run kernels (`Linked.never_run`).  Each step errs towards "it may run":

1. A class that cannot be constructed: a top-level class (no decorator, no metaclass or
   other keyword), bound once, whose one `__init__` starts (a docstring aside) with a
   `raise`, with no `__new__`, `__init_subclass__`, `__class_getitem__`, `classmethod`
   or `staticmethod` in it (another way to make or use it), that no checked class names
   among its bases (`Name` or `mod.Name`), and whose every other load outside never-run
   code is a call (`C(...)` raises) or an `isinstance` argument (`C.method(obj)`, or `C`
   handed on, is a path in).  Its methods never run.
2. A private name that only never-run code uses: a top-level function or class named
   `_...` (outside code is not expected to use it), bound once, in no `__all__` and not
   re-exported by a package's `__init__.py`, with one use found at least, and every load
   of it (in its module; elsewhere as its name imported, an alias of it, an attribute
   `x._name`, or its name under a star import) inside never-run code.  Its body (for a
   class, its methods' bodies) never runs.
3. A kernel that only never-run code launches: a top-level jit function (or `k =
   triton.jit(f)`) of any name, under step 2's conditions (a launch, a call from another
   kernel, any load).
Steps 2 and 3 repeat until nothing changes (a kernel that only a never-run kernel calls).
What runs at import (decorators, defaults, a class body's own statements) always runs.
Uses the text does not show (`getattr(module, "_name")`) are not seen: for a private
name, that is outside code reaching into the library.

Only the checked files are read (`ast`, never imported).  A subclass or a use in a file
outside the check is not seen: a pre-commit run handed a few files concludes from what it
was given.  Steps 2 and 3 need one use found (a run given only the kernels' module
concludes nothing); a check of the whole tree, as CI runs it, sees every use.  Cheap: a
text scan finds the `__init__`s that may start with `raise`; without one nothing is parsed.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Mapping

from kanalyze.analyzer.module_uses import Chain, ModuleUses, NameLoad, read_uses
from kanalyze.analyzer.triton.cross_callers import _mentions

# The project index's `_Linker` (project_index.py imports this module: no import back):
# `files`, `folded`, `module_at`, `_modules(path, level, dotted)`.
_Linker = object

INIT_DEF = re.compile(r"\bdef[ \t]+__init__[ \t]*\(")
# After `__init__(...)`'s closing bracket: its colon, comments, a docstring, then `raise`.
RAISES_FIRST = re.compile(r"[ \t]*(?:->[^:\n]*)?:(?:\s|#[^\n]*)*(?:[rRuU]?(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''"
                          r"|\"[^\"\n]*\"|'[^'\n]*')(?:\s|#[^\n]*)*)?raise\b")
SIGNATURE_CHARS = 20_000  # past this, a signature is not looked at (then: may run)
ROUNDS = 8                # steps 2 and 3 repeated at most this often
ALTERNATIVE_CONSTRUCTION = {"__new__", "__init_subclass__", "__class_getitem__", "classmethod", "staticmethod"}
def never_run_kernels(linker: _Linker, folded: Mapping[str, str]) -> dict[str, set[str]]:
    """Each checked module's kernels (top-level jit functions) that only never-run code uses."""
    seeds = [path for path, text in folded.items() if "__init__" in text and _may_raise_first(text)]
    if not seeds:
        return {}
    return _Search(linker, folded).run(seeds)


def _may_raise_first(text: str) -> bool:
    """Whether an `__init__` in `text` may start with `raise` (more than there are, never fewer
    where its signature's brackets balance outside strings)."""
    for match in INIT_DEF.finditer(text):
        end = _closing_bracket(text, match.end() - 1)
        if end is not None and RAISES_FIRST.match(text, end + 1):
            return True
    return False


def _closing_bracket(text: str, start: int) -> int | None:
    depth, i, stop = 0, start, min(len(text), start + SIGNATURE_CHARS)
    while i < stop:
        char = text[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return i
        elif char in "\"'":
            close = text.find(char, i + 1)
            if close < 0:
                return None
            i = close
        elif char == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
        i += 1
    return None


class _Search:
    def __init__(self, linker: _Linker, folded: Mapping[str, str]) -> None:
        self.linker = linker
        self.folded = folded
        self._files: dict[str, ModuleUses | None] = {}
        self._mentioning: dict[str, list[str]] = {}
        self.dead: dict[tuple[str, str], str] = {}  # (file, name) → "raising" (step 1) or "unused"

    def run(self, seeds: list[str]) -> dict[str, set[str]]:
        raising = [(path, node.name) for path in seeds if (file := self.file(path)) is not None
                   for node in file.tree.body if isinstance(node, ast.ClassDef) and _cannot_construct(node)
                   and file.bound.get(node.name) == 1]
        candidates: set[tuple[str, str]] = set()
        for _ in range(ROUNDS):
            changed = False
            for path, name in raising:
                if (path, name) not in self.dead and self._only_called(path, name):
                    self.dead[path, name] = "raising"
                    changed = True
            candidates |= {c for path, name in self.dead for c in self._used_in(path, name)}
            for path, name in sorted(candidates - self.dead.keys()):
                if self._only_never_run(path, name):
                    self.dead[path, name] = "unused"
                    changed = True
            if not changed:
                break
        found: dict[str, set[str]] = {}
        for (path, name), how in self.dead.items():
            file = self.file(path)
            if how == "unused" and file is not None and name in file.kernels and file.functions.get(name, 0) <= 1:
                found.setdefault(path, set()).add(name)  # (a report names its kernel: one def of the name)
        return found

    # -- the files ------------------------------------------------------------

    def file(self, path: str) -> ModuleUses | None:
        if path not in self._files:
            self._files[path] = read_uses(path, self.linker.files[path])
        return self._files[path]

    def mentioning(self, name: str) -> list[str]:
        """The checked files whose text holds the identifier `name`."""
        if name not in self._mentioning:
            self._mentioning[name] = [path for path, text in self.folded.items() if _mentions(text, name)]
        return self._mentioning[name]

    def never_runs(self, path: str, chain: Chain) -> bool:
        """Whether code at `chain` in `path` lies inside never-run code."""
        if not chain:
            return False
        how = self.dead.get((path, chain[0][1]))
        if how is None:
            return False
        if chain[0][0] == "def":
            return True
        if how == "raising":  # the methods of a class that cannot be constructed
            return len(chain) > 1 and chain[1][0] == "def"
        return any(kind == "def" for kind, _ in chain[1:])  # a never-used class: its methods' bodies

    def _loads_of(self, path: str, name: str):
        """(file, load, whether it refers to `path`'s `name` through an import) for every load in the
        checked files that may refer to `name` of `path`, its own body aside."""
        for other in self.mentioning(name):
            file = self.file(other)
            if file is None:
                yield other, None, False
                continue
            aliases = {local for local, bindings in file.imports.items() if any(b[2] == name for b in bindings)}
            for load in file.loads:
                if other == path and (load.context == "own base" or (load.chain and load.chain[0][1] == name
                                                                     and any(k == "def" for k, _ in load.chain))):
                    continue  # its own body (runs only if it runs), or `class C(nn.C)`'s base: not itself
                if other == path:
                    if load.name == name:
                        yield other, load, load.base is None
                elif (load.base is not None and load.name == name) or (load.base is None and load.name in aliases):
                    yield other, load, (path, name) in self._targets(other, file, load)
                elif load.name == name and file.stars:
                    yield other, load, False

    def _blocked(self, path: str, name: str) -> bool:
        """Re-exported, listed in an `__all__`, or imported by a file that cannot be read."""
        for other in self.mentioning(name):
            file = self.file(other)
            if file is None or name in file.exported:
                return True
            if os.path.basename(other).startswith("__init__.") and other != path and \
                    any(b[2] == name for bindings in file.imports.values() for b in bindings):
                return True
        return False

    # -- the steps ------------------------------------------------------------

    def _only_called(self, path: str, name: str) -> bool:
        """Step 1: no checked file subclasses the class, or reads it other than to call it."""
        for other, load, _ in self._loads_of(path, name):
            if load is None:
                return False
            if load.context not in ("call", "isinstance") and not self.never_runs(other, load.chain):
                return False
        return True

    def _only_never_run(self, path: str, name: str) -> bool:
        """Steps 2 and 3: every load inside never-run code, one of them found."""
        file = self.file(path)
        if file is None or file.bound.get(name) != 1 or name not in file.defined or self._blocked(path, name):
            return False
        if not (name in file.kernels or (name.startswith("_") and not name.endswith("__"))):
            return False
        found = False
        for other, load, resolved in self._loads_of(path, name):
            if load is None or not self.never_runs(other, load.chain):
                return False
            found = found or resolved
        return found

    def _used_in(self, path: str, name: str) -> set[tuple[str, str]]:
        """(file, name) of the top-level definitions that never-run code of `path`'s `name` loads."""
        file = self.file(path)
        found: set[tuple[str, str]] = set()
        if file is None:
            return found
        for load in file.loads:
            if load.chain and load.chain[0][1] == name and self.never_runs(path, load.chain):
                found |= self._targets(path, file, load)
        return found

    def _targets(self, path: str, file: ModuleUses, load: NameLoad) -> set[tuple[str, str]]:
        """(file, name) of the checked top-level definitions that a load refers to, through the
        imports of its file (`_p`, `kern._p`, `pkg.kern._p`) or as the file's own."""
        if load.base is None:
            if load.name not in file.imports:
                return {(path, load.name)} if load.name in file.defined else set()
            found = {self._resolve(path, b, ()) for b in file.imports[load.name]}
        else:
            first, *rest = load.base.split(".")
            found = {self._resolve(path, b, (load.name,)) for b in file.imports.get(load.base, ())} | \
                {self._resolve(path, b, (*rest, load.name)) for b in file.imports.get(first, ()) if rest}
        return found - {None}

    def _resolve(self, path: str, binding: tuple[int, str, str | None], attributes: tuple[str, ...],
                 steps: int = 4) -> tuple[str, str] | None:
        """(file, name) of the top-level definition that an import (and the attribute read from
        the module it binds) refers to, through a few re-exports; None when not a checked one."""
        level, module, name = binding
        for parts in self.linker._modules(path, level, module):
            full = parts + ((name,) if name is not None else ()) + attributes
            target = self.linker.module_at.get(full[:-1])
            file = self.file(target) if target is not None else None
            if file is None:
                continue
            if full[-1] in file.defined:
                return target, full[-1]
            if steps > 0:
                for bound in file.imports.get(full[-1], ()):
                    found = self._resolve(target, bound, (), steps - 1)
                    if found is not None:
                        return found
        return None


def _cannot_construct(node: ast.ClassDef) -> bool:
    """Step 1's shape: one `__init__` that starts with `raise`, nothing that makes or uses the
    class without constructing it."""
    if node.decorator_list or node.keywords:
        return False
    inits = [s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
    every = [s for s in ast.walk(node) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__init__"]
    if len(inits) != 1 or len(every) != 1:
        return False
    for inner in ast.walk(node):  # (also `__init__ = ...`)
        named = getattr(inner, "name", None) or getattr(inner, "id", None) or getattr(inner, "attr", None)
        if named in ALTERNATIVE_CONSTRUCTION or (named == "__init__" and isinstance(inner, ast.Name)):
            return False
    body = inits[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) and len(body) > 1:
        body = body[1:]  # the docstring
    return bool(body) and isinstance(body[0], ast.Raise)
