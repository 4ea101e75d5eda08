"""What one Python file imports, refers to and defines as a jit kernel, read with `ast`.

The project index (project_index.py) links these summaries across the files of
one check: it asks each file which names its imports bind (`from .kernels import
k`, `import pkg.kernels as K`), which dotted names its code loads (`k`, `K.k2`,
`pkg.kernels.k3`) and which of its top-level functions are jit kernels.  It
asks about a few names only (the kernels of the check): the references of the
statements that name none of them are not collected.  Nothing is imported or
run; CPython's own parser reads the text, so names are folded the way Python
folds them (`ｋ` is `k`).
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field
from typing import Iterable

from kanalyze.analyzer.spelling import folded_text

# A decorator whose dotted name holds one of these words makes a function a jit
# kernel candidate (`@triton.jit`, `@jit`, `@triton.autotune(...)`, `@triton.heuristics(...)`).
KERNEL_DECORATOR_WORDS = ("jit", "autotune", "heuristics")


@dataclass(frozen=True)
class Binding:
    """What an import binds a local name to: `module` (dotted, `level` dots before it for a
    relative import) itself (`import m as x`), or its attribute `name` (`from m import name`)."""

    level: int
    module: str
    name: str | None = None


@dataclass
class ModuleSummary:
    bindings: dict[str, list[Binding]] = field(default_factory=dict)  # local dotted name → bindings
    stars: list[Binding] = field(default_factory=list)  # `from m import *`
    references: set[str] = field(default_factory=set)   # dotted names the code loads
    exported: set[str] = field(default_factory=set)     # the strings of `__all__`
    decorated: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)  # by a kernel decorator
    jit_aliases: set[str] = field(default_factory=set)  # `kernel = triton.jit(_impl)`

    def is_kernel(self, name: str) -> bool:
        """A top-level jit function that returns nothing (one that returns a value is a device
        function: no grid launches it), or an alias made with `triton.jit(...)`."""
        function = self.decorated.get(name)
        return name in self.jit_aliases or (function is not None and not _returns_a_value(function))

    @property
    def kernels(self) -> set[str]:
        return {name for name in (*self.decorated, *self.jit_aliases) if self.is_kernel(name)}


def summarize(text: str, *, package_init: bool = False, words: Iterable[str] | None = None) -> ModuleSummary | None:
    """The summary of one file's text; None when CPython cannot parse it (its own analysis
    reports why).  In a package's `__init__.py` (`package_init`), a name imported from a
    module is re-exported: it counts as a reference.  With `words`, only the references in
    statements that name one of them (or a local name an import binds to one of them) are
    collected: the index asks only about kernels' names, and walking every expression of a
    large file costs more than parsing it."""
    try:
        tree = ast.parse(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # SyntaxError, ValueError, RecursionError, MemoryError: not this index's to report
        return None
    summary = ModuleSummary()
    _top_level(tree.body, summary)
    statements = _statements(tree.body)
    for node in statements:
        if isinstance(node, ast.Import):
            _bind_import(node, summary)
        elif isinstance(node, ast.ImportFrom):
            _bind_import_from(node, summary, package_init)
    marked = None
    if words is not None:
        wanted = set(words)
        wanted |= {local for local, bindings in summary.bindings.items() if any(b.name in wanted for b in bindings)}
        marked = _lines_naming(text, wanted)
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if marked is not None and not _COMPOUND_FIELDS.intersection(node._fields) \
                and not _spans(marked, node.lineno, node.end_lineno or node.lineno):
            continue  # a simple statement that names none of the words
        _collect_references(node, summary)
    summary.references |= summary.exported
    return summary


# The fields of a compound statement that hold statements (walked on their own by `_statements`).
_COMPOUND_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement at any depth (in functions, classes, branches, handlers, cases), except
    the body of `if __name__ == "__main__":` (what runs only as a script launches nothing for
    the library)."""
    found: list[ast.stmt] = []
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        found.append(node)
        inner: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            if name == "body" and isinstance(node, ast.If) and _is_main_guard(node.test):
                continue
            value = getattr(node, name, None)
            if isinstance(value, list):
                inner.extend(v for v in value if isinstance(v, ast.stmt))
        for holder in [*getattr(node, "handlers", ()), *getattr(node, "cases", ())]:
            inner.extend(holder.body)
        stack.extend(reversed(inner))
    return found


def _collect_references(statement: ast.stmt, summary: ModuleSummary) -> None:
    """The dotted names a statement's own expressions load (its nested statements are walked
    on their own; a handler's exception type and a case's guard are its own)."""
    stack: list[ast.AST] = []
    for name, value in ast.iter_fields(statement):
        if name in _COMPOUND_FIELDS:
            for holder in value if name in ("handlers", "cases") else ():
                stack.extend(e for e in (getattr(holder, "type", None), getattr(holder, "pattern", None),
                                         getattr(holder, "guard", None)) if e is not None)
            continue
        stack.extend(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            summary.references.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = dotted_name(node)
            if name is not None:
                summary.references.add(name)
                continue  # the chain's inner attributes name its prefixes: no use of their own
        stack.extend(ast.iter_child_nodes(node))


def _lines_naming(text: str, words: set[str]) -> list[int]:
    """The sorted numbers of the lines (as CPython counts them) where one of the identifiers
    `words` occurs, in the text as Python reads its names."""
    folded = folded_text(text)
    breaks = [m.end() for m in _LINE_BREAK.finditer(folded)]
    found: set[int] = set()
    for word in words:
        start = folded.find(word)
        while start >= 0:
            end = start + len(word)
            if not (start and (folded[start - 1].isalnum() or folded[start - 1] == "_")) \
                    and not (end < len(folded) and (folded[end].isalnum() or folded[end] == "_")):
                found.add(bisect.bisect_right(breaks, start) + 1)
            start = folded.find(word, end)
    return sorted(found)


_LINE_BREAK = re.compile(r"\r\n?|\n")


def _spans(lines: list[int], first: int, last: int) -> bool:
    """Whether one of the sorted line numbers lies in [first, last]."""
    at = bisect.bisect_left(lines, first)
    return at < len(lines) and lines[at] <= last


def _top_level(body: list[ast.stmt], summary: ModuleSummary) -> None:
    """Kernel candidates and `__all__` among the module's statements, also under a top-level
    `if`, `try` or `with` (`if HAS_TRITON:` around the kernels)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_is_kernel_decorator(d) for d in node.decorator_list):
                summary.decorated[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if isinstance(node.value, ast.Call) and (dotted_name(node.value.func) or "").split(".")[-1] == "jit":
                summary.jit_aliases.add(target)
            elif target == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                summary.exported |= {e.value for e in node.value.elts
                                     if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        elif isinstance(node, ast.If):
            _top_level(node.body + node.orelse, summary)
        elif isinstance(node, ast.Try):
            _top_level(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body], summary)
        elif isinstance(node, ast.With):
            _top_level(node.body, summary)


def _returns_a_value(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A `return value` anywhere in the function (nested functions included, as RES001 reads it)."""
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(function))


def _is_kernel_decorator(decorator: ast.expr) -> bool:
    name = dotted_name(decorator.func if isinstance(decorator, ast.Call) else decorator) or ""
    return any(word in name.split(".")[-1] for word in KERNEL_DECORATOR_WORDS)


def _bind_import(node: ast.Import, summary: ModuleSummary) -> None:
    for alias in node.names:
        if alias.asname is not None:
            summary.bindings.setdefault(alias.asname, []).append(Binding(0, alias.name))
            continue
        parts = alias.name.split(".")  # `import a.b.c` binds `a`; `a.b` and `a.b.c` are reached through it
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            summary.bindings.setdefault(prefix, []).append(Binding(0, prefix))


def _bind_import_from(node: ast.ImportFrom, summary: ModuleSummary, package_init: bool) -> None:
    module = node.module or ""
    for alias in node.names:
        if alias.name == "*":
            summary.stars.append(Binding(node.level, module))
            continue
        local = alias.asname or alias.name
        summary.bindings.setdefault(local, []).append(Binding(node.level, module, alias.name))
        if package_init:
            summary.references.add(local)


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` for an attribute chain on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_main_guard(test: ast.expr) -> bool:
    """`if __name__ == "__main__":`, either way round."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and \
        any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
