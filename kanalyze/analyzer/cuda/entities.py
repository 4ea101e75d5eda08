"""The parts of a CUDA kernel model: functions, variables, calls, launches.

Plain data, created by build.py and read through model.py's CudaModule; what a
function declares is read on first use, through its module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import tree_sitter as ts

from kanalyze.analyzer.cuda.types import UNKNOWN, CType

if TYPE_CHECKING:
    from kanalyze.analyzer.cuda.model import CudaModule

QUALIFIERS = frozenset({"__global__", "__device__", "__host__"})
BLOCK_BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                            "__barrier_sync", "cg::sync", "cooperative_groups::sync", "grid.sync", "block.sync"})
WARP_BARRIERS = frozenset({"__syncwarp"})


@dataclass(eq=False)
class Variable:
    name: str
    ctype: CType
    node: ts.Node                     # the declarator's name
    init: ts.Node | None = None       # `= value`, or the `(args)` of a constructor
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
    declarator: ts.Node | None = None  # the function_declarator
    template_params: list[str] = field(default_factory=list)
    macro: str | None = None           # declared through this macro
    return_type: CType = UNKNOWN
    model: "CudaModule | None" = field(default=None, repr=False)
    expanded: "CudaFunction | None" = field(default=None, repr=False)  # a macro kernel's signature

    @property
    def is_kernel(self) -> bool:
        return "__global__" in self.qualifiers

    @property
    def is_device(self) -> bool:
        return "__device__" in self.qualifiers or "__global__" in self.qualifiers

    @property
    def is_host(self) -> bool:
        return not self.qualifiers or "__host__" in self.qualifiers

    @cached_property
    def params(self) -> list[Variable]:
        if self.expanded is not None:
            return self.expanded.params
        parameters = self.declarator.child_by_field_name("parameters") if self.declarator is not None else None
        return self.model.read_params(parameters)

    @cached_property
    def locals(self) -> dict[str, Variable]:
        return self.model.read_locals(self) if self.body is not None else {}

    def variable(self, name: str) -> Variable | None:
        """The local or parameter `name` (the first declaration of it in the body)."""
        if "locals" in self.__dict__:
            found = self.locals.get(name)
        else:  # look for this one name's declaration rather than reading every declaration
            found = self._declared(name)
        if found is not None:
            return found
        for p in self.params:
            if p.name == name:
                return p
        return None

    def _declared(self, name: str) -> Variable | None:
        cache = self.__dict__.setdefault("_declared_cache", {})
        if name in cache:
            return cache[name]
        found = None
        if self.body is not None:
            for declaration in self.model.declarations_of(name):
                if self.body.start_byte <= declaration.start_byte < self.body.end_byte:
                    found = next((v for v in self.model.read_declaration(declaration) if v.name == name), None)
                    if found is not None:
                        break
        cache[name] = found
        return found

    def assignments(self, name: str) -> list[ts.Node]:
        """`name = ...`, `name += ...`, `name++` in the body."""
        cache = self.__dict__.setdefault("_assignments_cache", {})
        found = cache.get(name)
        if found is None:
            found = cache[name] = []
            if self.body is not None:
                found.extend(node for node in self.model.assignments_to(name)
                             if self.body.start_byte <= node.start_byte < self.body.end_byte)
        return found

    def contains(self, node: ts.Node) -> bool:
        return self.node.start_byte <= node.start_byte < self.node.end_byte


@dataclass(eq=False)
class CudaCall:
    node: ts.Node
    name: str                          # "atomicAdd", "torch::empty", "x.data_ptr"
    function: CudaFunction | None
    args: list[ts.Node]
    method: str | None = None          # "data_ptr" for `x.data_ptr<float>()`
    receiver: ts.Node | None = None
    template_args: list[str] = field(default_factory=list)

    @property
    def last(self) -> str:
        return self.method or self.name.rsplit("::", 1)[-1]


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
