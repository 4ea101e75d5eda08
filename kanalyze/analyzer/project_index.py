"""The project index: which checked module defines which jit kernel, and which other
checked modules use it.

One `kanalyze check` reads many files, but analyzes each on its own (in a worker,
under its own CPU budget).  A library often defines its kernels in one module and
launches them from another (`from .kernels import k; k[grid](...)`, `import
pkg.kernels as K; K.k2[grid](...)`, a dict of kernels handed to a dispatcher).
Seen alone, the defining module never launches them.  The index links the files of
one check before they are analyzed, and hands each file what the others say
about it: a `Linked`, the names of its kernels that another checked module uses,
with the paths of those modules.  Only kernels that their own module does not
launch (no `k[...]` in its text) are looked for: the others need nothing from
elsewhere.

It reads only the files of the check (never a file outside the checked paths,
never an installed package), with `ast` (module_imports.py), and resolves imports
within them: relative imports from the importing file's directory, absolute ones
by the trailing parts of a checked file's path (`fla.ops.utils` is any checked
`.../fla/ops/utils.py` or `.../fla/ops/utils/__init__.py`), re-exports through a
package's `__init__.py` followed a few steps.  A use is any load of the name:
a launch, an argument, a value in a dict or in `__all__`; what runs only under
`if __name__ == "__main__":` is not a use.

A kernel here is what a grid can launch: a top-level function decorated with
something named `jit`, `autotune` or `heuristics` that returns nothing (one that
returns a value is a device function, which RES001 never reports), or `k =
triton.jit(f)`.  A re-export under another name (`from .kernels import k as k2`
in a module that others import `k2` from) is not followed.

It stays cheap: a text scan finds the names that may be kernels not launched
where they are defined, and `ast` parses only the files that mention such a name
that another file defines, and the modules their imports lead to.  The pipeline passes a file's `Linked` to its
model as `model.settings["linked"]` (`linked_of`) and keys its cache entry by it.

A `Linked` also carries, for a module that launches kernels from top-level host
functions that other checked modules call (`from .kernels import fwd; fwd(q, k)`),
the dtypes those calls pass per parameter (`passed`, cross_callers.py), and for a
module whose kernels other checked modules launch themselves (`from .kernels import
k; k[grid](q, ...)`), what those launches pass per kernel parameter (cross_launches.py):
the callers' dtype checks reach the kernel's operands (PRC001, through host_dtypes.py
and dtype_flow.py).  That step reads each calling file's dtype evidence with LibCST,
and costs more: on fla's whole tree (40 calling files) the index takes about 7.7 s
instead of 0.44 s (3.7 s on a faster machine), once per check (a pre-commit run links
only the files it is given); the kernels' launches add about 0.2 s of that (one more
calling file to read).

A `Linked` also names a module's kernels that only never-run code launches (`never_run`:
a layer whose `__init__` always raises, a private name only it uses; never_run.py): the
file's check drops the findings inside them (check/dead_kernels.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping

from kanalyze.analyzer.discovery import PYTHON_SUFFIXES
from kanalyze.analyzer.module_imports import KERNEL_DECORATOR_WORDS, Binding, ModuleSummary, summarize
from kanalyze.analyzer.never_run import never_run_kernels
from kanalyze.analyzer.sources import may_contain_triton
from kanalyze.analyzer.spelling import folded_text
from kanalyze.analyzer.triton.cross_callers import passed_to_launchers
from kanalyze.analyzer.triton.cross_launches import passed_to_kernels

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.model import TritonModule

DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+([^\W\d]\w*)", re.MULTILINE)
JIT_ALIAS = re.compile(r"^([^\W\d]\w*)[ \t]*=[ \t]*[\w.]*jit[ \t]*\(", re.MULTILINE)
KERNEL_WORDS = re.compile("|".join(KERNEL_DECORATOR_WORDS))
RETURN_VALUE = re.compile(r"return\b[ \t]*[^\s#;]")
INLINE_RETURN_VALUE = re.compile(r":[ \t]*return\b[ \t]*[^\s#;]")
DECORATOR_LOOKBACK = 40  # lines above a `def` searched for its decorators
BODY_LOOKAHEAD = 2_000   # lines of a kernel's body searched for a `return value` (past them: none)
REEXPORT_STEPS = 6       # `from pkg import k` through `pkg/__init__.py` and on


@dataclass(frozen=True)
class Linked:
    """What the index tells one file: each of its kernels that other checked modules use,
    with their paths, sorted."""

    users: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # each of its kernel launchers that other checked modules call (cross_callers.py), and each
    # of its kernels they launch directly (cross_launches.py): per parameter, the dtypes they
    # pass, sorted
    passed: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = ()
    # its kernels that only never-run code of the checked modules launches (never_run.py), sorted
    never_run: tuple[str, ...] = ()

    def users_of(self, kernel: str) -> tuple[str, ...]:
        return next((paths for name, paths in self.users if name == kernel), ())

    def passed_to(self, function: str, param: str) -> frozenset[str] | None:
        """The dtypes other checked modules pass as `param` of top-level `function` (a launcher
        they call, or a kernel they launch); None when none calls it."""
        params = next((params for name, params in self.passed if name == function), None)
        if params is None:
            return None
        return frozenset(next((dtypes for name, dtypes in params if name == param), ()))

    def key(self) -> str:
        """A stable text of everything the index contributed: part of the file's cache key."""
        parts = [self.users, self.passed, self.never_run] if self.never_run else \
            [self.users, self.passed] if self.passed else self.users
        return json.dumps(parts, separators=(",", ":"))


def linked_of(model: TritonModule) -> Linked | None:
    """What the index said about this model's file; None when it was analyzed alone
    (a single file, standard input, the editor)."""
    linked = model.settings.get("linked")
    return linked if isinstance(linked, Linked) else None


class ProjectIndex:
    """The index of one check: `ProjectIndex.build({path: text})`, then `linked(path)`."""

    def __init__(self, users: dict[str, dict[str, set[str]]], paths: set[str],
                 passed: dict[str, dict[str, dict[str, set[str]]]] | None = None,
                 never_run: dict[str, set[str]] | None = None) -> None:
        self._users = users
        self._paths = paths
        self._passed = passed or {}
        self._never_run = never_run or {}

    @classmethod
    def build(cls, files: Mapping[str, str], callers: bool = True) -> "ProjectIndex":
        """The index of these files (path → text; files other than Python are left out).
        With fewer than two Python files there is nothing to link.  `callers`: also what other
        modules pass to each module's kernel launchers (only PRC001 reads it, and it costs the
        most: a check that does not select PRC001 leaves it out)."""
        python = {path: text for path, text in files.items() if path.endswith(PYTHON_SUFFIXES)}
        if len(python) < 2:
            return cls({}, set())
        folded = {path: folded_text(text) for path, text in python.items()}  # names as Python reads them
        defined: dict[str, set[str]] = {}  # a kernel its file may not launch → the files that may define it
        for path, text in folded.items():
            if may_contain_triton(text):
                for name in kernel_candidates(text):
                    if not _launched_in(text, name):
                        defined.setdefault(name, set()).add(path)
        linker = _Linker(python, folded, set(defined))
        users: dict[str, dict[str, set[str]]] = {}
        for path in sorted(python):
            if not any(path not in files and _names(folded[path], name) for name, files in defined.items()):
                continue  # no kernel of another file is named here (a file's own kernels are its own)
            for module, kernel in linker.uses(path):
                if module != path:
                    users.setdefault(module, {}).setdefault(kernel, set()).add(path)
        passed = {}
        if callers:
            passed = passed_to_launchers(linker, folded)
            passed_to_kernels(linker, folded, defined, passed)
        return cls(users, set(python), passed, never_run_kernels(linker, folded))

    def linked(self, path: str) -> Linked | None:
        """What the index says about `path`: None when it is not a Python file of a check of
        several (then its analysis is the single-file one)."""
        if path not in self._paths:
            return None
        found = self._users.get(path, {})
        passed = self._passed.get(path, {})
        return Linked(tuple((name, tuple(sorted(found[name]))) for name in sorted(found)),
                      tuple((name, tuple((param, tuple(sorted(passed[name][param])))
                                         for param in sorted(passed[name]))) for name in sorted(passed)),
                      tuple(sorted(self._never_run.get(path, ()))))


def _launched_in(text: str, name: str) -> bool:
    """Whether `text` subscripts `name` (`k[grid](...)`): its own module launches it."""
    return any(text[end:end + 80].lstrip(" \t").startswith("[") for end in _occurrences(text, name, dotted=False))


def _names(text: str, name: str) -> bool:
    """Whether `text` holds the identifier `name`."""
    return next(_occurrences(text, name), None) is not None


def _occurrences(text: str, name: str, dotted: bool = True) -> Iterator[int]:
    """Where each occurrence of the identifier `name` in `text` ends (str.find: no regular
    expression scans the whole text per name); with `dotted` False, not as an attribute (`x.k`)."""
    start = text.find(name)
    while start >= 0:
        end = start + len(name)
        if not (start and (text[start - 1].isalnum() or text[start - 1] in ("_" if dotted else "_."))) \
                and not (end < len(text) and (text[end].isalnum() or text[end] == "_")):
            yield end
        start = text.find(name, end)


def kernel_candidates(text: str) -> set[str]:
    """The names `text` may define as jit kernels, from its text alone: every `def` whose
    decorators (the lines above it) mention jit, autotune or heuristics and whose body has
    no `return value` line, and every `name = ...jit(...)`.  More than `module_imports` finds,
    never less, for decorators written above their `def` as usual (and no line of a string
    in the body that starts with `return`).  Names are read as Python reads them (`ｋ` is `k`)."""
    text = folded_text(text)  # the text itself when it is ASCII
    found = set(JIT_ALIAS.findall(text))
    lines = text.split("\n")
    matches = list(DEF_LINE.finditer(text))
    row, seen = 0, 0
    for i, match in enumerate(matches):
        row += text.count("\n", seen, match.start())
        seen = match.start()
        indent = len(match.group(1).expandtabs())
        if not _decorated_as_kernel(lines[max(0, row - DECORATOR_LOOKBACK):row], indent):
            continue
        following = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        if "return" not in text[match.end():following] or not _returns_a_value(lines, row, indent):
            found.add(match.group(2))  # (no `return` before the next `def`: the common case, seen at once)
    return found


def _returns_a_value(lines: list[str], row: int, indent: int) -> bool:
    """Whether the body of the `def` on `row` (on its line after a colon, and the lines below
    it up to the next code line at its indentation or less that is not a closing bracket) has
    a `return value`."""
    if INLINE_RETURN_VALUE.search(lines[row]):
        return True  # `def exp(x): return tl.exp(x)`
    for line in lines[row + 1:row + 1 + BODY_LOOKAHEAD]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(line.expandtabs()) - len(line.expandtabs().lstrip()) <= indent and stripped[0] not in ")]}":
            return False
        if RETURN_VALUE.match(stripped):
            return True
    return False


def _decorated_as_kernel(above: list[str], indent: int) -> bool:
    """Whether the decorators right above a `def` at `indent` name a kernel decorator.  Going
    up from the def: blank lines, comments, decorators (`@` at the def's indentation) and
    their arguments (deeper lines, closing brackets); the decorators end at the topmost `@`."""
    block: list[tuple[str, bool]] = []  # (the line stripped, whether it starts a decorator)
    for line in reversed(above):
        stripped = line.strip()
        depth = len(line.expandtabs()) - len(line.expandtabs().lstrip())
        if stripped and not stripped.startswith("#") and depth <= indent and stripped[0] not in "@)]}":
            break
        block.append((stripped, depth == indent and stripped.startswith("@")))
    tops = [i for i, (_, decorator) in enumerate(block) if decorator]
    return bool(tops) and any(KERNEL_WORDS.search(line) for line, _ in block[:tops[-1] + 1])


class _Linker:
    """Resolves what a file's names refer to among the checked modules."""

    def __init__(self, files: Mapping[str, str], folded: Mapping[str, str], candidates: set[str]) -> None:
        self.files = files
        self.folded = folded  # the texts with names as Python reads them
        self.candidates = candidates  # the names that may be kernels somewhere in the check
        self.module_at: dict[tuple[str, ...], str] = {}   # a module's path parts → its file
        self.known: set[tuple[str, ...]] = set()           # modules and the directories above them
        self.by_suffix: dict[tuple[str, ...], set[tuple[str, ...]]] = {}  # trailing parts → known parts
        self._summaries: dict[str, ModuleSummary | None] = {}
        for path in files:
            parts = _module_parts(path)
            self.module_at[parts] = path
            self.known |= {parts[:i] for i in range(1, len(parts) + 1)}
        for known in self.known:
            for length in range(1, min(len(known), 8) + 1):
                self.by_suffix.setdefault(known[-length:], set()).add(known)

    def summary(self, path: str) -> ModuleSummary | None:
        """The file's summary, with the references that name a kernel the check may link."""
        if path not in self._summaries:
            words = {name for name in self.candidates if _names(self.folded[path], name)}
            self._summaries[path] = summarize(self.files[path], words=words,
                                              package_init=os.path.basename(path).startswith("__init__."))
        return self._summaries[path]

    def uses(self, path: str) -> set[tuple[str, str]]:
        """(module file, kernel name) for every kernel of a checked module that `path` refers to."""
        summary = self.summary(path)
        if summary is None:
            return set()
        found: set[tuple[str, str]] = set()
        aliases = {local for local, bindings in summary.bindings.items()
                   if any(b.name in self.candidates for b in bindings)}  # `from .kern import k as kk`
        for reference in sorted(summary.references):
            parts = reference.split(".")
            if not self.candidates.intersection(parts) and parts[0] not in aliases:
                continue  # no kernel is named anywhere in it
            for i in range(len(parts), 0, -1):
                bindings = summary.bindings.get(".".join(parts[:i]))
                if bindings:
                    for binding in bindings:
                        for target in self._bound(path, binding):
                            found |= set(self._walk(target, parts[i:], REEXPORT_STEPS))
                    break
            else:
                for star in summary.stars:
                    for module in self._modules(path, star.level, star.module):
                        found |= set(self._walk((module, parts[0]), parts[1:], REEXPORT_STEPS))
        return found

    # -- resolution -----------------------------------------------------------

    def _modules(self, path: str, level: int, dotted: str) -> list[tuple[str, ...]]:
        """The path parts of the checked modules or packages that `dotted` names from `path`."""
        names = tuple(dotted.split(".")) if dotted else ()
        if level:
            base = _module_parts(path)[:-1] if not os.path.basename(path).startswith("__init__.") \
                else _module_parts(path)
            base = base[:len(base) - (level - 1)] if level > 1 else base
            return [base + names]
        return sorted(self.by_suffix.get(names, ())) if names else []

    def _bound(self, path: str, binding: Binding) -> Iterator[tuple]:
        """What a binding refers to: a module (its parts) or an attribute of one (parts, name)."""
        for module in self._modules(path, binding.level, binding.module):
            yield (module, binding.name) if binding.name is not None else (module,)

    def _walk(self, target: tuple, rest: list[str], steps: int) -> Iterator[tuple[str, str]]:
        """Follow `target` (a module, or a name in one) through the remaining attribute parts
        and through re-exports, to the kernels it reaches."""
        if len(target) == 1:  # a module: its attribute `rest[0]`, if any
            if rest:
                yield from self._walk((target[0], rest[0]), rest[1:], steps)
            return
        module, name = target
        if name not in self.candidates and module + (name,) not in self.known:
            return  # neither a kernel's name nor a submodule: nothing to parse a module for
        file = self.module_at.get(module)
        summary = self.summary(file) if file is not None else None
        if summary is not None and summary.is_kernel(name):
            yield file, name  # an attribute of a kernel (`k.run`, `k[grid]`) is a use of it
            return
        if module + (name,) in self.known:
            yield from self._walk((module + (name,),), rest, steps)  # a submodule
        if summary is None or steps <= 0:
            return
        for binding in summary.bindings.get(name, ()):  # a name the module imports: a re-export
            for bound in self._bound(file, binding):
                yield from self._walk(bound, rest, steps - 1)


def _module_parts(path: str) -> tuple[str, ...]:
    """A file's absolute path as module parts: `.../pkg/ops.py` → (..., "pkg", "ops");
    a package's `__init__.py` stands for its directory."""
    parts = tuple(os.path.normpath(os.path.abspath(path)).split(os.sep))
    stem = os.path.splitext(parts[-1])[0]
    return parts[:-1] if stem == "__init__" else parts[:-1] + (stem,)
