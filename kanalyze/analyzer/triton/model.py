"""The kernel model of one Python file, read with LibCST (never imported).

`TritonModule.from_source(path, text)` parses the file once, with every name
as Python reads it (`ｔｌ.ｍａｘｉｍｕｍ` is `tl.maximum`: spelling.py), and records:
  - every function (with its class, so `ModelNew.forward` is known),
  - the jit functions: `@triton.jit`, `@jit` after `from triton import jit`,
    `f = triton.jit(g)`, stacked under `@triton.autotune` / `@triton.heuristics`,
    with their parameters, constexpr defaults, autotune configs and the jit
    helpers each one calls,
  - the launch sites `kernel[grid](args...)`, with the wrapper that holds them
    and the binding of each argument to a kernel parameter,
  - every call with its qualified name and enclosing function,
  - the parent of every node (for "is this inside a loop / an `if`").
Rules read this model; they never parse anything themselves.
"""

from __future__ import annotations

import unicodedata
from functools import cached_property
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import ImportMap, dotted
from kanalyze.analyzer.positions import Positions
from kanalyze.analyzer.spelling import python_spelling
from kanalyze.analyzer.triton.calls import bind_call_args
from kanalyze.analyzer.triton.collect import Collector
from kanalyze.analyzer.triton.dataflow import Dataflow
from kanalyze.analyzer.triton.entities import CallSite, Function, JitFunction, Launch


class TritonModule:
    """Everything the rules need to know about one file."""

    def __init__(self, path: str, text: str, module: cst.Module) -> None:
        self.path = path
        self.text = text
        self.module = module
        self.imports = ImportMap()
        self.functions: list[Function] = []
        self.jit: dict[str, JitFunction] = {}
        self.launches: list[Launch] = []
        self.calls: list[CallSite] = []
        self.parents: dict[int, cst.CSTNode] = {}
        self.by_type: dict[type, list[cst.CSTNode]] = {}
        self._function_of: dict[int, Function] = {}
        self._flows: dict[int, Dataflow] = {}
        self._called: dict[int, frozenset[str | None]] = {}
        # What the pipeline says about this file's analysis: the proofs' `max-size`,
        # `max-numel`, and `proofs: False` when they are not wanted (bounds/proofs.py).
        self.settings: dict = {}
        Collector(self).collect()

    @classmethod
    def from_source(cls, path: str, text: str, settings: dict | None = None) -> "TritonModule":
        """Parse `text` as Python reads it (identifiers folded to NFKC, `_parse_as_python`);
        `model.text` stays the user's text, which positions and `# noqa` read."""
        model = cls(path, text, _parse_as_python(text))
        model.settings = dict(settings or {})
        return model

    def respelled_names(self) -> list[tuple[cst.Name, str, str]]:
        """(node, raw spelling, what Python reads) of every name written with characters
        that Python folds to others (`ｔｌ` is `tl`): INT001 reports each one.

        The parsed tree holds the folded names, so the rewritten ones are found by
        where they are; a name the rewrite left raw (one that folds to a keyword, or
        one inside an f-string that the tokenizer reads as a string) by its value."""
        spelling = python_spelling(self.text)
        if spelling.normal:
            return []
        positions = Positions(self.module, self.text)
        by_start = {r.start: r for r in spelling.respellings}
        found = []
        for node in self.nodes(cst.Name):
            offsets = positions.offsets(node)
            respelling = by_start.get(offsets[0]) if offsets else None
            if respelling is not None:
                found.append((node, respelling.raw, respelling.folded))
            elif not unicodedata.is_normalized("NFKC", node.value):
                found.append((node, node.value, unicodedata.normalize("NFKC", node.value)))
        return found

    # --- names -------------------------------------------------------------

    def qualify(self, expr: cst.BaseExpression) -> str | None:
        return self.imports.qualify(expr)

    def call_name(self, call: cst.Call) -> str | None:
        """Qualified name of a call's callee: `tl.dot(...)` → `triton.language.dot`."""
        return self.imports.qualify(call.func)

    def called_within(self, node: cst.CSTNode) -> frozenset[str | None]:
        """The qualified names of the calls in `node`, walked once per node: rules ask
        it of every value that flows into an expression, over and over."""
        found = self._called.get(id(node))
        if found is None:
            found = self._called[id(node)] = frozenset(
                self.call_name(n) for n in walk(node) if isinstance(n, cst.Call))
        return found

    # --- structure ---------------------------------------------------------

    def nodes(self, *types: type) -> list[cst.CSTNode]:
        """Every node of these exact types in the file, in walk order (no tree walk)."""
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        return [n for t in types for n in self.by_type.get(t, ())]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(id(node))
        while current is not None:
            yield current
            current = self.parents.get(id(current))

    def function_of(self, node: cst.CSTNode) -> Function | None:
        """The innermost `def` that contains `node`."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return self._function_of.get(id(ancestor))
        return None

    def jit_of(self, node: cst.CSTNode) -> JitFunction | None:
        function = self.function_of(node)
        if function is None:
            return None
        jit = self.jit.get(function.name)
        return jit if jit is not None and jit.function is function else None

    def flow(self, function: Function | JitFunction) -> Dataflow:
        node = function.node
        if id(node) not in self._flows:
            self._flows[id(node)] = Dataflow(node)
        return self._flows[id(node)]

    def calls_in(self, function: Function | JitFunction, *qualnames: str) -> list[CallSite]:
        within = self._calls_by_function.get(id(function.node), [])
        return [c for c in within if not qualnames or c.qualname in qualnames]

    @cached_property
    def _calls_by_function(self) -> dict[int, list[CallSite]]:
        """The call sites of each function, by its node's id: asking every call of the file for
        each function was quadratic in a file of many functions."""
        found: dict[int, list[CallSite]] = {}
        for site in self.calls:
            if site.function is not None:
                found.setdefault(id(site.function.node), []).append(site)
        return found

    def calls_to(self, *qualnames: str) -> list[CallSite]:
        wanted = set(qualnames)
        return [c for c in self.calls if c.qualname in wanted]

    @cached_property
    def calls_by_callee(self) -> dict[str, list[CallSite]]:
        """The call sites in functions by the name they call: `f(...)` and `x.f(...)` under `f`."""
        found: dict[str, list[CallSite]] = {}
        for site in self.calls:
            func = site.node.func
            name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) \
                else None
            if site.function is not None and name is not None:
                found.setdefault(name, []).append(site)
        return found

    @cached_property
    def host_functions(self) -> list[Function]:
        """Functions that are not jit functions: wrappers, forwards, helpers."""
        jit_nodes = {id(j.node) for j in self.jit.values()}
        return [f for f in self.functions if id(f.node) not in jit_nodes]

    @cached_property
    def forward_path(self) -> list[Function]:
        """Host functions a call of the model can run: every `forward`, every
        wrapper that launches a kernel, and the module's functions they call."""
        by_name: dict[str, list[Function]] = {}
        for f in self.host_functions:
            by_name.setdefault(f.name, []).append(f)
        roots = [f for f in self.host_functions if f.name in ("forward", "__call__")]
        roots += [l.wrapper for l in self.launches if l.wrapper is not None]
        seen: list[Function] = []
        stack = list(roots)
        while stack:
            f = stack.pop()
            if any(f is s for s in seen):
                continue
            seen.append(f)
            for call in self.calls_in(f):
                name = dotted(call.node.func) or ""
                head, _, rest = name.partition(".")
                target = rest if head == "self" and rest and "." not in rest else head if not rest else None
                for candidate in by_name.get(target or "", ()):
                    if head == "self" and candidate.class_name != f.class_name:
                        continue
                    stack.append(candidate)
        return seen

    # --- interprocedural dataflow ------------------------------------------

    def sources(self, function: Function | JitFunction, expr: cst.BaseExpression,
                *, depth: int = 4) -> Iterator[tuple[Function, cst.BaseExpression]]:
        """Every expression whose value can reach `expr`, following jit helper
        parameters back to the arguments at their call sites."""
        func = function.function if isinstance(function, JitFunction) else function
        flow = self.flow(func)
        yield func, expr
        upstream = flow.in_order(flow.upstream(expr))
        for d in upstream:
            if d.value is not None:
                yield func, d.value
        if depth <= 0:
            return
        jit = self.jit.get(func.name)
        if jit is None or jit.function is not func:
            return
        for d in upstream:
            if d.kind != "param":
                continue
            for caller, call in jit.called_from:
                arg = bind_call_args(call, jit.params).get(d.name)
                if arg is not None:
                    yield from self.sources(caller, arg, depth=depth - 1)


def _parse_as_python(text: str) -> cst.Module:
    """The tree of `text` with every identifier as Python reads it (spelling.py).

    When the folded text does not parse, the user's own text is parsed instead:
    its error (or its tree) is the one the pipeline reported before folding,
    at the user's rows and columns."""
    spelling = python_spelling(text)
    if spelling.text == text:
        return cst.parse_module(text)
    try:
        return cst.parse_module(spelling.text)
    except Exception:  # LibCST raises more than ParserSyntaxError; the user's text says what, where
        return cst.parse_module(text)
