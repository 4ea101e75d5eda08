"""The kernel model of one CUDA translation unit, read with tree-sitter-cuda.

`CudaModule.parse(unit)` parses the unit once and records, from one query
over the tree (the matching runs in C, so only interesting nodes reach Python):
  - every function: `__global__` kernels (also templates, and kernels declared
    through a macro the unit defines), `__device__` helpers, host functions,
    with their parameters, locals and the types of both;
  - the launch sites `kernel<<<grid, block, shmem, stream>>>(args)`, with the
    host function that holds them;
  - `__shared__` declarations, barriers, calls, inline PTX, `#define`s;
  - the regions tree-sitter could not parse.
Rules read this model; they never parse anything themselves.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

import tree_sitter as ts
import tree_sitter_cuda

from kanalyze.analyzer.cuda_sources import CudaUnit
from kanalyze.analyzer.cuda_types import UNKNOWN, CType, eval_int, normalize

QUALIFIERS = frozenset({"__global__", "__device__", "__host__"})
BLOCK_BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                            "__barrier_sync", "cg::sync", "cooperative_groups::sync", "grid.sync", "block.sync"})
WARP_BARRIERS = frozenset({"__syncwarp"})

_QUERY = """
(function_definition) @function
(declaration) @declaration
(call_expression) @call
(assignment_expression) @assignment
(if_statement) @if
(for_statement) @for
(while_statement) @while
(do_statement) @do
(conditional_expression) @conditional
(preproc_def) @define
(preproc_function_def) @macro
(gnu_asm_expression) @asm
(template_instantiation) @instantiation
"""


@lru_cache(maxsize=1)
def _language() -> tuple[ts.Language, ts.Parser, ts.Query]:
    language = ts.Language(tree_sitter_cuda.language())
    return language, ts.Parser(language), ts.Query(language, _QUERY)


def parse_cuda(source: bytes) -> ts.Tree:
    return _language()[1].parse(source)


@dataclass(eq=False)
class Variable:
    name: str
    ctype: CType
    node: ts.Node                     # the declarator
    init: ts.Node | None = None       # `= value` or `(args)` of a constructor
    shared: bool = False
    const: bool = False
    dims: list[ts.Node] = field(default_factory=list)  # array extents, outermost first
    declaration: ts.Node | None = None


@dataclass(eq=False)
class CudaFunction:
    name: str
    node: ts.Node                      # the function_definition
    name_node: ts.Node
    body: ts.Node | None
    qualifiers: frozenset[str]
    params: list[Variable] = field(default_factory=list)
    template_params: list[str] = field(default_factory=list)
    macro: str | None = None           # declared through this macro
    locals: dict[str, Variable] = field(default_factory=dict)
    return_type: CType = UNKNOWN

    @property
    def is_kernel(self) -> bool:
        return "__global__" in self.qualifiers

    @property
    def is_device(self) -> bool:
        return "__device__" in self.qualifiers or "__global__" in self.qualifiers

    @property
    def is_host(self) -> bool:
        return not self.qualifiers or "__host__" in self.qualifiers

    def variable(self, name: str) -> Variable | None:
        found = self.locals.get(name)
        if found is not None:
            return found
        for p in self.params:
            if p.name == name:
                return p
        return None


@dataclass(eq=False)
class CudaCall:
    node: ts.Node
    name: str                          # "atomicAdd", "torch::empty", "x.data_ptr"
    function: CudaFunction | None
    args: list[ts.Node]
    method: str | None = None          # "data_ptr" for `x.data_ptr<float>()`
    receiver: ts.Node | None = None
    template_args: list[str] = field(default_factory=list)


@dataclass(eq=False)
class CudaLaunch:
    node: ts.Node                      # the call_expression
    kernel_name: str
    kernel: CudaFunction | None
    config: list[ts.Node]              # grid, block[, shared bytes[, stream]]
    args: list[ts.Node]
    host: CudaFunction | None
    template_args: list[str] = field(default_factory=list)

    def config_at(self, index: int) -> ts.Node | None:
        return self.config[index] if index < len(self.config) else None


class CudaModule:
    """Everything the CUDA rules need to know about one unit."""

    def __init__(self, unit: CudaUnit, tree: ts.Tree, source: bytes) -> None:
        self.unit = unit
        self.path = unit.path
        self.source = source
        self.tree = tree
        self.root = tree.root_node
        self.functions: list[CudaFunction] = []
        self.kernels: dict[str, CudaFunction] = {}
        self.device_functions: dict[str, CudaFunction] = {}
        self.launches: list[CudaLaunch] = []
        self.calls: list[CudaCall] = []
        self.shared: list[Variable] = []
        self.globals: dict[str, Variable] = {}
        self.defines: dict[str, ts.Node] = {}       # object-like macro → its value node
        self.macros: dict[str, ts.Node] = {}        # function-like macro → its definition
        self.instantiations: dict[str, list[list[str]]] = {}
        self.problem_sizes: dict[str, int] = {}     # module-level integers of the Python file, by name
        self.host = None                            # the Python file's TritonModule, for inline units
        self.errors: list[ts.Node] = []
        self.unknown_macros: list[ts.Node] = []     # `MACRO(args) { ... }` in a body, MACRO not defined here
        self.by_type: dict[str, list[ts.Node]] = {}
        self._starts: list[int] = []
        self._int_cache: dict[tuple[int, int], int | None] = {}
        from kanalyze.analyzer.cuda_build import build  # it needs the classes of this module

        build(self)

    @classmethod
    def parse(cls, unit: CudaUnit) -> "CudaModule":
        source = unit.text.encode("utf-8", "surrogatepass")
        return cls(unit, parse_cuda(source), source)

    # --- text and structure ------------------------------------------------

    def text(self, node: ts.Node | None, limit: int | None = None) -> str:
        if node is None:
            return ""
        text = " ".join(self.source[node.start_byte: node.end_byte].decode("utf-8", "replace").split())
        return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"

    def nodes(self, *types: str) -> list[ts.Node]:
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        found = [n for t in types for n in self.by_type.get(t, ())]
        found.sort(key=lambda n: n.start_byte)
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

    def calls_in(self, function: CudaFunction, *names: str) -> list[CudaCall]:
        return [c for c in self.calls if c.function is function and (not names or c.name in names)]

    def calls_named(self, *names: str) -> list[CudaCall]:
        wanted = set(names)
        return [c for c in self.calls if c.name in wanted or (c.method is not None and c.method in wanted)]

    def callers_kernel(self, function: CudaFunction) -> str:
        """The kernel a device function runs in (for messages): itself, or a kernel calling it."""
        if function.is_kernel:
            return function.name
        for call in self.calls:
            if call.name == function.name and call.function is not None and call.function.is_device:
                return self.callers_kernel(call.function) if call.function is not function else function.name
        return function.name

    def variable(self, name: str, function: CudaFunction | None) -> Variable | None:
        found = function.variable(name) if function is not None else None
        return found if found is not None else self.globals.get(name)

    # --- values ------------------------------------------------------------

    def int_value(self, node: ts.Node | None, function: CudaFunction | None = None, depth: int = 0) -> int | None:
        """An integer constant: literals, `#define`s, const locals with constant initialisers."""
        if node is None or depth > 8:
            return None
        key = (node.start_byte, node.end_byte)
        if key in self._int_cache:
            return self._int_cache[key]
        value = self._int_value(node, function, depth)
        self._int_cache[key] = value
        return value

    def _int_value(self, node: ts.Node, function: CudaFunction | None, depth: int) -> int | None:
        kind = node.type
        if kind == "number_literal":
            return eval_int(self.text(node))
        if kind in ("identifier", "type_identifier", "parameter_declaration"):
            # (a constructor argument the grammar read as a parameter is a name too)
            name = self.text(node)
            variable = self.variable(name, function)
            if variable is not None:
                if variable.init is not None and "list" not in variable.init.type and self.single_assignment(
                        variable, function):
                    return self.int_value(variable.init, function, depth + 1)
                return None
            define = self.defines.get(name)
            if define is not None:
                return eval_int(self.text(define), {k: v for k, v in self._define_ints(depth).items() if k != name})
            return None
        if kind in ("parenthesized_expression", "binary_expression", "unary_expression"):
            names: dict[str, int] = {}
            for inner in walk(node):
                if inner.type == "identifier":
                    value = self.int_value(inner, function, depth + 1)
                    if value is None:
                        return None
                    names[self.text(inner)] = value
                elif inner.type not in ("number_literal", "parenthesized_expression", "binary_expression",
                                        "unary_expression"):
                    return None
            return eval_int(self.text(node), names)
        if kind == "call_expression" and self.text(node.child_by_field_name("function")) == "dim3":
            args = node.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            return self.int_value(first, function, depth + 1)
        return None

    def _define_ints(self, depth: int) -> dict[str, int]:
        values: dict[str, int] = {}
        if depth > 4:
            return values
        for name, node in self.defines.items():
            value = eval_int(self.text(node))
            if value is not None:
                values[name] = value
        return values

    def single_assignment(self, variable: Variable, function: CudaFunction | None) -> bool:
        """No `x = ...`, `x += ...` or `x++` after the declaration."""
        if function is None or function.body is None:
            return True
        name = variable.name
        for node in self.nodes("assignment"):
            if function.node.start_byte <= node.start_byte < function.node.end_byte:
                left = node.child_by_field_name("left")
                if left is not None and left.type == "identifier" and self.text(left) == name:
                    return False
        return not re.search(rf"(?:\+\+|--)\s*{re.escape(name)}\b|\b{re.escape(name)}\s*(?:\+\+|--)",
                             self.text(function.body))

    def dims(self, node: ts.Node | None, function: CudaFunction | None) -> list[int | None] | None:
        """The x, y, z of a launch dimension (`256`, `threads`, `dim3 block(16, 16)`), None if unknown."""
        if node is None:
            return None
        if node.type == "identifier":
            variable = self.variable(self.text(node), function)
            if variable is not None and variable.ctype.base == "dim3":
                init = variable.init
                if init is None:
                    return None
                if init.type == "call_expression":
                    init = init.child_by_field_name("arguments")
                if init is not None and init.type in ("argument_list", "initializer_list", "parameter_list"):
                    return [self.int_value(a, function) for a in init.named_children]
                return None
        if node.type == "call_expression" and self.text(node.child_by_field_name("function")) == "dim3":
            args = node.child_by_field_name("arguments")
            return [self.int_value(a, function) for a in (args.named_children if args is not None else [])]
        return [self.int_value(node, function)]

    def resolve(self, node: ts.Node, function: CudaFunction | None, depth: int = 3) -> ts.Node:
        """A local variable's initialiser in place of its name (once assigned only)."""
        while depth > 0 and node is not None and node.type == "identifier":
            variable = self.variable(self.text(node), function)
            if variable is None or variable.init is None or not self.single_assignment(variable, function):
                break
            node = variable.init
            depth -= 1
        while node is not None and node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        return node


def walk(node: ts.Node) -> Iterator[ts.Node]:
    """`node` and every named node under it, in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = current.named_children
        if children:
            stack.extend(reversed(children))


def ancestors(node: ts.Node, stop: ts.Node | None = None) -> Iterator[ts.Node]:
    current = node.parent
    while current is not None:
        yield current
        if stop is not None and current.id == stop.id:
            return
        current = current.parent


def callee_name(function: ts.Node | None, text) -> tuple[str, str | None, ts.Node | None, list[str]]:
    """(name, method, receiver, template args) of a call's `function` node."""
    if function is None:
        return "", None, None, []
    kind = function.type
    if kind == "template_function":
        args = function.child_by_field_name("arguments")
        template = [text(a) for a in args.named_children] if args is not None else []
        return text(function.child_by_field_name("name")), None, None, template
    if kind == "field_expression":
        receiver = function.child_by_field_name("argument")
        field_node = function.child_by_field_name("field")
        template: list[str] = []
        if field_node is not None and field_node.type == "template_method":
            args = field_node.child_by_field_name("arguments")
            template = [text(a) for a in args.named_children] if args is not None else []
            field_node = field_node.child_by_field_name("name")
        method = text(field_node)
        return f"{text(receiver)}.{method}", method, receiver, template
    if kind == "qualified_identifier":
        name = text(function)
        if "<" in name:
            name = re.sub(r"<[^<>]*>", "", name)
        return name, None, None, []
    return text(function), None, None, []

