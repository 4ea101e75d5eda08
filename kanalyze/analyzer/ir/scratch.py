"""The scratch module: a kernel's source on its own, for compiling without
importing the user's file.

Triton compiles a jit function from its source text and the globals of its
module.  Importing the user's module would run all of it (model set-up, data
loading, benchmarks), so the IR stage writes a scratch module with only what
the kernels need, found by name from the kernels outwards:

  - the jit functions themselves and the jit helpers they call,
  - module-level constants they read (`BLOCK = 128`, `DTYPE = tl.float16`),
  - the imports that bind the names they use (Triton, `math`, installed
    packages; never a relative import or a module next to the file, which
    would run more of the user's code),
  - the `@triton.autotune` / `@triton.heuristics` decorators, so that the
    worker reads the configurations from Triton's own objects.

Every kept statement stays on its original rows (the rest become blank
lines), so the line numbers Triton writes into TTIR and PTX are the user's.
Imports nested in a top-level `try:` / `if:` (`try: import triton`) are kept
dedented on their rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.positions import Positions
from kanalyze.analyzer.triton.dataflow import _all_params, names_read
from kanalyze.analyzer.triton.model import TritonModule

# Names Python provides: never looked up among the module's statements.
_ALWAYS_AVAILABLE = {"True", "False", "None", "range", "len", "min", "max", "int", "float", "bool",
                     "print", "isinstance", "getattr", "tuple", "list", "dict", "abs", "zip", "enumerate"}


@dataclass
class Scratch:
    text: str                                   # the scratch module, row for row
    kept: list[str] = field(default_factory=list)        # names it defines
    missing: dict[str, str] = field(default_factory=dict)  # needed name → why it was left out


@dataclass
class _Statement:
    node: cst.CSTNode
    rows: tuple[int, int]           # first and last row (1-based)
    binds: set[str]
    reads: set[str]
    dedent: bool = False            # nested in a try/if: write it at column 0
    excluded: str | None = None     # why it must not be imported
    blank_rows: list[tuple[int, int]] = field(default_factory=list)  # decorators to leave out


def _local_names(function: cst.FunctionDef) -> set[str]:
    names = {p.name.value for p in _all_params(function.params)}
    for node in walk(function.body):
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
            names.add(node.target.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            names.add(node.target.value)
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            names.add(node.target.value)
    return names


def _import_binds(node: cst.Import | cst.ImportFrom) -> set[str]:
    names: set[str] = set()
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                names.add(alias.asname.name.value)
            else:
                names.add(full.split(".")[0])
    elif not isinstance(node.names, cst.ImportStar):
        for alias in node.names:
            name = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                names.add(alias.asname.name.value)
            else:
                names.add(name)
    return names


def _local_module(node: cst.Import | cst.ImportFrom, directory: str) -> str | None:
    """Why an import must not run: it is relative, or names a module next to the file."""
    if isinstance(node, cst.ImportFrom) and node.relative:
        return "a relative import (the user's own package)"
    heads = []
    if isinstance(node, cst.Import):
        heads = [(dotted(a.name) or "").split(".")[0] for a in node.names]
    elif node.module is not None:
        heads = [(dotted(node.module) or "").split(".")[0]]
    for head in heads:
        if head and (os.path.isfile(os.path.join(directory, head + ".py"))
                     or os.path.isdir(os.path.join(directory, head))):
            return f"module `{head}` lives next to the file (the user's own code)"
    return None


class _Builder:
    def __init__(self, model: TritonModule, positions: Positions | None = None) -> None:
        self.model = model
        self.positions = positions or Positions(model.module, model.text)
        self.directory = os.path.dirname(os.path.abspath(model.path))
        self.statements: list[_Statement] = []
        for statement in model.module.body:
            self._add(statement, nested=False)

    def _rows(self, node: cst.CSTNode) -> tuple[int, int]:
        row, _, end_row, _ = self.positions.span(node)
        return row, end_row

    def _add(self, statement: cst.CSTNode, nested: bool) -> None:
        if isinstance(statement, cst.FunctionDef) and not nested:
            rows = self._rows(statement)
            first = min([rows[0]] + [self._rows(d)[0] for d in statement.decorators])
            kept = [d for d in statement.decorators if self._keeps_decorator(d)]
            blank = [self._rows(d) for d in statement.decorators if not self._keeps_decorator(d)]
            reads = names_read(statement.params) | names_read(statement.body)
            reads = reads.union(*(names_read(d.decorator) for d in kept)) - _local_names(statement)
            self.statements.append(_Statement(statement, (first, rows[1]), {statement.name.value}, reads,
                                              blank_rows=blank))
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    self.statements.append(_Statement(
                        statement, self._rows(statement), _import_binds(small), set(), nested,
                        _local_module(small, self.directory)))
                elif isinstance(small, (cst.Assign, cst.AnnAssign)) and not nested:
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                    binds = {t.value for t in targets if isinstance(t, cst.Name)}
                    if binds and small.value is not None:
                        self.statements.append(_Statement(statement, self._rows(statement), binds,
                                                          names_read(small.value)))
        elif isinstance(statement, (cst.Try, cst.If)) and not nested:
            # `try: import triton` / `if HAS_TRITON: import triton.language as tl`
            for inner in statement.body.body:
                if isinstance(inner, cst.SimpleStatementLine):
                    self._add(inner, nested=True)

    def _keeps_decorator(self, decorator: cst.Decorator) -> bool:
        expr = decorator.decorator
        name = self.model.qualify(expr.func if isinstance(expr, cst.Call) else expr) or ""
        return name == "triton" or name.startswith("triton.")

    def build(self, roots: list[str]) -> Scratch:
        by_name: dict[str, list[_Statement]] = {}
        for statement in self.statements:
            for name in statement.binds:
                by_name.setdefault(name, []).append(statement)
        chosen: list[_Statement] = []
        missing: dict[str, str] = {}
        todo = list(roots)
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            if name in seen or name in _ALWAYS_AVAILABLE:
                continue
            seen.add(name)
            for statement in by_name.get(name, ()):
                if statement.excluded:
                    missing[name] = statement.excluded
                    continue
                if not any(statement is c for c in chosen):
                    chosen.append(statement)
                    todo.extend(statement.reads)
        lines = self.model.text.splitlines()
        out = [""] * len(lines)
        for statement in chosen:
            first, last = statement.rows
            block = lines[first - 1:last]
            if statement.dedent and block:
                indent = len(block[0]) - len(block[0].lstrip())
                block = [line[indent:] if line[:indent].isspace() else line for line in block]
            out[first - 1:last] = block
            for start, end in statement.blank_rows:
                out[start - 1:end] = [""] * (end - start + 1)
        kept = sorted({n for s in chosen for n in s.binds})
        return Scratch("\n".join(out) + "\n", kept, missing)


def build_scratch(model: TritonModule, kernels: list[str], positions: Positions | None = None) -> Scratch:
    """The scratch module text for compiling `kernels` (jit function names) of `model`."""
    return _Builder(model, positions).build(kernels)
