"""The kernel model of one CUDA translation unit, read with tree-sitter-cuda.

`CudaModule.parse(unit)` parses the unit once.  What every rule needs is read
right away from the top of the tree (cheap: a unit has tens of top-level
items): the functions with their qualifiers (`__global__` kernels, also
templates and kernels declared through a macro the unit defines; `__device__`
helpers; host functions), `#define`s, and the regions tree-sitter could not
parse.  Everything else is read when a rule first asks, and only where the
text says it can be (a regex over the source finds the candidate spots, the
tree tells what they are; where a name is declared or assigned comes from one
tree-sitter query per unit, run in C): calls by name, launch sites
`kernel<<<grid, block, shmem, stream>>>(args)` with their host function,
`__shared__` declarations, parameters, locals and their types.  A kernel file
with no `atomicAdd` in its text costs the float-atomic rule one regex search.
Rules read this model; they never parse anything themselves.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cached_property, lru_cache
from typing import Iterable

import tree_sitter as ts
import tree_sitter_cuda

from kanalyze.analyzer.cuda import build as reader
from kanalyze.analyzer.cuda.entities import CudaCall, CudaFunction, CudaLaunch, Variable
from kanalyze.analyzer.cuda.sources import CudaUnit, compiler_lines
from kanalyze.analyzer.cuda.values import CudaValues, walk

# What `nodes_in` indexes in a function body.
_INDEXED = frozenset({"declaration", "assignment_expression", "update_expression", "if_statement", "for_statement",
                      "while_statement", "do_statement", "conditional_expression", "return_statement"})
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


@lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def parse_cuda(source: bytes) -> ts.Tree:
    return _parser().parse(source)


class CudaModule(CudaValues):
    """Everything the CUDA rules need to know about one unit (values: values.py)."""

    def __init__(self, unit: CudaUnit, tree: ts.Tree, source: bytes) -> None:
        self.unit = unit
        self.path = unit.path
        self.source = source
        self.tree = tree
        self.root = tree.root_node
        self.functions: list[CudaFunction] = []
        self.kernels: dict[str, CudaFunction] = {}
        self.device_functions: dict[str, CudaFunction] = {}
        self.defines: dict[str, ts.Node] = {}       # object-like macro → its value node
        self.macros: dict[str, ts.Node] = {}        # function-like macro → its definition
        self.top_declarations: list[ts.Node] = []
        self.top_instantiations: list[ts.Node] = []
        self.problem_sizes: dict[str, int] = {}     # module-level integers of the Python file, by name
        self.host = None                            # the Python file's TritonModule, for inline units
        self.errors: list[ts.Node] = []
        self.unknown_macros: list[ts.Node] = []     # `MACRO(args) { ... }` in a body, MACRO not defined here
        self._starts: list[int] = []
        self._int_cache: dict[tuple[int, int], int | None] = {}
        self._found: dict[tuple, list[ts.Node]] = {}
        self._words: dict[str, list[int]] = {}
        self._calls: dict[int, CudaCall] = {}
        self._declarations: dict[tuple[int, bool], list[Variable]] = {}  # (node id, local) → what it declares
        self._facts: dict = {}
        reader.build(self)

    @classmethod
    def parse(cls, unit: CudaUnit) -> "CudaModule":
        source = compiler_lines(unit.text).encode("utf-8", "surrogatepass")  # a lone "\r" ends a line
        return cls(unit, parse_cuda(source), source)

    # --- what a function declares (read on first use) --------------------------

    def read_params(self, parameters: ts.Node | None) -> list[Variable]:
        return reader.read_params(self, parameters)

    def read_locals(self, function: CudaFunction) -> dict[str, Variable]:
        return reader.read_locals(self, function)

    def read_declaration(self, node: ts.Node, local: bool = True) -> list[Variable]:
        return reader.read_declaration(self, node, local)

    # --- text and structure ------------------------------------------------

    def text(self, node: ts.Node | None, limit: int | None = None) -> str:
        if node is None:
            return ""
        text = self.source[node.start_byte: node.end_byte].decode("utf-8", "replace")
        if "\n" in text or "\r" in text or "  " in text or "\t" in text:
            text = " ".join(text.split())
        return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"

    def word_positions(self, word: str) -> list[int]:
        """Where `word` starts as a whole word (a substring search in C, then a boundary check)."""
        positions = self._words.get(word)
        if positions is None:
            positions = self._words[word] = []
            if word.encode() not in self._word_set:
                return positions
            needle, source = word.encode(), self.source
            size, index = len(needle), source.find(needle)
            while index >= 0:
                end = index + size
                if (index == 0 or source[index - 1] not in _WORD_BYTES) and \
                        (end >= len(source) or source[end] not in _WORD_BYTES):
                    positions.append(index)
                index = source.find(needle, end)
        return positions

    @cached_property
    def _word_set(self) -> frozenset[bytes]:
        return frozenset(_WORD.findall(self.source))

    def has_word(self, *words: str) -> bool:
        return any(self.word_positions(w) for w in words)

    def find_words(self, words: Iterable[str], *types: str) -> list[ts.Node]:
        """Like `find`, for whole words: substring searches instead of a regex."""
        key = (words if isinstance(words, (tuple, frozenset)) else tuple(words), types)
        found = self._found.get(key)
        if found is not None:
            return found
        word_set = self._word_set
        present = [w for w, encoded in _encoded(key[0]) if encoded in word_set]
        starts = sorted(p for w in present for p in self.word_positions(w))
        found = self._nodes_at([(p, p) for p in starts], types)
        self._found[key] = found
        return found

    def find(self, pattern: bytes, *types: str) -> list[ts.Node]:
        """The innermost node of one of `types` around each match of `pattern`, in order."""
        key = (pattern, types)
        found = self._found.get(key)
        if found is not None:
            return found
        found = self._nodes_at([(m.start(), max(m.end() - 1, m.start())) for m in _compiled(pattern).finditer(self.source)],
                               types)
        self._found[key] = found
        return found

    def _nodes_at(self, spans: list[tuple[int, int]], types: tuple[str, ...]) -> list[ts.Node]:
        found = []
        seen: set[int] = set()
        for start, end in spans:
            node = self.root.descendant_for_byte_range(start, end)
            while node is not None and node.type not in types:
                node = node.parent
            if node is not None and node.id not in seen:
                seen.add(node.id)
                found.append(node)
        return found

    def function_of(self, node: ts.Node) -> CudaFunction | None:
        """The function whose definition contains `node`."""
        index = bisect_right(self._starts, node.start_byte) - 1
        while index >= 0:
            function = self.functions[index]
            if function.node.start_byte <= node.start_byte and node.end_byte <= function.node.end_byte:
                return function
            index -= 1
        return None

    def kernel_functions(self) -> list[CudaFunction]:
        return [f for f in self.functions if f.is_kernel]

    def device_code(self) -> list[CudaFunction]:
        """Kernels and the `__device__` functions (code that runs on the GPU)."""
        return [f for f in self.functions if f.is_device and f.body is not None]

    # --- calls ---------------------------------------------------------------

    def calls_named(self, *names: str) -> list[CudaCall]:
        """Calls whose callee is one of `names`: a plain or qualified name (`atomicAdd`,
        `torch::empty`) or a method (`cpu` for `x.cpu()`); found through the text."""
        lasts = _lasts(names)
        calls = []
        for node in self.find_words(lasts, "call_expression"):
            call = self._call(node)
            if call is not None and (call.name in names or call.last in lasts):
                calls.append(call)
        return calls

    def calls_in(self, function: CudaFunction, *names: str) -> list[CudaCall]:
        return [c for c in self.calls_named(*names) if c.function is function]

    @cached_property
    def calls(self) -> list[CudaCall]:
        """Every call in the unit (a full walk: for rules that need them all)."""
        found = [self._call(n) for n in walk(self.root) if n.type == "call_expression"]
        return [c for c in found if c is not None]

    def _call(self, node: ts.Node) -> CudaCall | None:
        call = self._calls.get(node.id)
        if call is None:
            call = self._calls[node.id] = reader.read_call(self, node)
        return call

    @cached_property
    def launches(self) -> list[CudaLaunch]:
        return [l for l in (reader.read_launch(self, n) for n in self.find(rb"<<<", "call_expression")) if l is not None]

    @cached_property
    def shared(self) -> list[Variable]:
        found = []
        for node in self.find_words(["__shared__"], "declaration"):
            found.extend(v for v in reader.read_declaration(self, node) if v.shared)
        return found

    @cached_property
    def globals(self) -> dict[str, Variable]:
        found: dict[str, Variable] = {}
        for node in self.top_declarations:
            for variable in reader.read_declaration(self, node, local=False):
                found.setdefault(variable.name, variable)
        return found

    @cached_property
    def instantiations(self) -> dict[str, list[list[str]]]:
        """Kernel name → the template arguments of each explicit instantiation and launch."""
        found: dict[str, list[list[str]]] = {}
        for node in self.top_instantiations:
            declarator = node.child_by_field_name("declarator")
            inner = declarator.child_by_field_name("declarator") if declarator is not None else None
            if inner is not None and inner.type == "template_function":
                name, _, _, args = reader.callee_name(inner, self.text)
                found.setdefault(name, []).append(args)
        for launch in self.launches:
            if launch.template_args:
                found.setdefault(launch.kernel_name.rsplit("::", 1)[-1], []).append(launch.template_args)
        return found

    def callers_kernel(self, function: CudaFunction) -> str:
        """The kernel a device function runs in (for messages): itself, or a kernel calling it."""
        if function.is_kernel:
            return function.name
        for call in self.calls_named(function.name):
            caller = call.function
            if caller is not None and caller is not function and caller.is_device:
                return self.callers_kernel(caller) if not caller.is_kernel else caller.name
        return function.name

    def variable(self, name: str, function: CudaFunction | None) -> Variable | None:
        found = function.variable(name) if function is not None else None
        return found if found is not None else self.globals.get(name)

    # --- walking -------------------------------------------------------------

    @cached_property
    def _captures(self) -> dict[str, list[ts.Node]]:
        """One query over the unit (run in C) for `_index` and `_names`."""
        return ts.QueryCursor(_index_query()).captures(self.root)

    @cached_property
    def _index(self) -> dict[str, tuple[list[int], list[ts.Node]]]:
        """Statements and assignments of the whole unit by type (from `_captures`)."""
        index = {}
        for kind, nodes in self._captures.items():
            if kind not in _INDEXED:
                continue
            nodes.sort(key=lambda n: n.start_byte)
            index[kind] = ([n.start_byte for n in nodes], nodes)
        return index

    @cached_property
    def _names(self) -> tuple[dict[str, list[ts.Node]], dict[str, list[ts.Node]]]:
        """(name → the identifiers where it stands as a declarator, name → its assignments and updates),
        from the same query as `_index`: a lookup instead of a search of every use of the name."""
        declared: dict[str, list[ts.Node]] = {}
        assigned: dict[str, list[ts.Node]] = {}
        source = self.source
        for node in self._captures.get("declared", ()):
            declared.setdefault(source[node.start_byte: node.end_byte].decode("utf-8", "replace"), []).append(node)
        for node in self._captures.get("assigned", ()):
            assigned.setdefault(source[node.start_byte: node.end_byte].decode("utf-8", "replace"), []).append(
                node.parent)
        for nodes in declared.values():
            nodes.sort(key=lambda n: n.start_byte)
        for nodes in assigned.values():
            nodes.sort(key=lambda n: n.start_byte)
        return declared, assigned

    def declarations_of(self, name: str) -> list[ts.Node]:
        """The declarations where `name` stands in a declarator (those that may declare it), in order."""
        found: list[ts.Node] = []
        for node in self._names[0].get(name, ()):
            parent = node.parent
            while parent is not None and parent.type in _DECLARATORS:  # read_declaration's way down, upwards
                parent = parent.parent
            if parent is not None and parent.type == "declaration" and (not found or found[-1].id != parent.id):
                found.append(parent)
        return found

    def assignments_to(self, name: str) -> list[ts.Node]:
        """`name = ...`, `name += ...`, `name++` anywhere in the unit, in order."""
        return self._names[1].get(name, [])

    def nodes_in(self, function: CudaFunction, *types: str) -> list[ts.Node]:
        """Nodes of `types` (from `_INDEXED`) in a function's body, in document order."""
        body = function.body
        if body is None:
            return []
        found: list[ts.Node] = []
        for kind in types:
            starts, nodes = self._index.get(kind, ((), ()))
            found.extend(nodes[bisect_right(starts, body.start_byte - 1): bisect_right(starts, body.end_byte - 1)])
        if len(types) > 1:
            found.sort(key=lambda n: n.start_byte)
        return found


@lru_cache(maxsize=256)
def _compiled(pattern: bytes) -> re.Pattern:
    return re.compile(pattern)


@lru_cache(maxsize=1024)
def _encoded(words: tuple[str, ...] | frozenset[str]) -> tuple[tuple[str, bytes], ...]:
    return tuple((w, w.encode()) for w in words)


@lru_cache(maxsize=512)
def _lasts(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(n.rsplit("::", 1)[-1].rsplit(".", 1)[-1] for n in names)


# Identifiers that may be a declared name: those in a declarator's `declarator` field (or,
# where error recovery left no such field, any identifier child: read_declaration's fallback)
# and those under declarators that have no fields.  declarations_of reads what they declare.
_DECLARED = [pattern for parent in ("declaration", "init_declarator", "pointer_declarator", "array_declarator",
                                    "function_declarator")
             for kind in ("identifier", "field_identifier") if (parent, kind) != ("init_declarator", "field_identifier")
             for pattern in (f"({parent} declarator: ({kind}) @declared)", f"({parent} !declarator ({kind}) @declared)")
             ] + [f"({parent} ({kind}) @declared)" for parent in ("reference_declarator", "parenthesized_declarator",
                                                                 "attributed_declarator")
                  for kind in ("identifier", "field_identifier")]
_DECLARATORS = frozenset({"init_declarator", "pointer_declarator", "abstract_pointer_declarator", "array_declarator",
                          "function_declarator", "reference_declarator", "parenthesized_declarator",
                          "attributed_declarator"})
_ASSIGNED = ["(assignment_expression left: (identifier) @assigned)",
             "(update_expression argument: (identifier) @assigned)"]


@lru_cache(maxsize=1)
def _index_query() -> ts.Query:
    patterns = [f"({t}) @{t}" for t in sorted(_INDEXED)] + _DECLARED + _ASSIGNED
    return ts.Query(ts.Language(tree_sitter_cuda.language()), "\n".join(patterns))


def any_named(names: Iterable[str]) -> bytes:
    """A regex matching any of `names` as a whole word."""
    return _any_named(tuple(sorted(set(names))))


@lru_cache(maxsize=256)
def _any_named(names: tuple[str, ...]) -> bytes:
    return rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b"
