"""The parts of a Triton kernel model: functions, jit functions, parameters, launches, call sites.

Plain data filled in by collect.py and read through model.py's TritonModule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

JIT_DECORATORS = {"triton.jit", "triton.language.jit"}
AUTOTUNE = "triton.autotune"
HEURISTICS = "triton.heuristics"
CONSTEXPR = "triton.language.constexpr"

# Functions and classes that are references or tests, not the candidate.
REFERENCE_FUNCTION = re.compile(r"^(_?ref(erence)?(_.*)?|.*_ref(erence)?|_?test.*|_?bench.*|torch_.*|check_.*|verify.*)$")
REFERENCE_CLASS = re.compile(r"^(Model|Ref.*|.*Reference|Test.*)$")


@dataclass(eq=False)
class Function:
    """Any `def` in the file."""

    name: str
    node: cst.FunctionDef
    class_name: str | None = None
    class_bases: tuple[str, ...] = ()

    @property
    def qualname(self) -> str:
        return f"{self.class_name}.{self.name}" if self.class_name else self.name


@dataclass(eq=False)
class Param:
    name: str
    node: cst.Param
    is_constexpr: bool
    default: cst.BaseExpression | None
    annotation: str | None


@dataclass(eq=False)
class Launch:
    """`kernel[grid](args...)`."""

    kernel: "JitFunction"
    call: cst.Call
    grid: cst.BaseExpression
    wrapper: Function | None
    # Kernel parameter name → the argument expression bound to it.
    args: dict[str, cst.BaseExpression] = field(default_factory=dict)
    # Launch-time options that are not kernel parameters (num_warps, ...).
    options: dict[str, cst.BaseExpression] = field(default_factory=dict)


@dataclass(eq=False)
class JitFunction:
    """A `@triton.jit` function: a kernel when launched, a helper when called."""

    name: str
    function: Function
    params: list[Param]
    # Names bound by `@triton.autotune` configs / `@triton.heuristics`.
    autotune_configs: list[dict[str, cst.BaseExpression]] = field(default_factory=list)
    heuristics: set[str] = field(default_factory=set)
    calls_helpers: set[str] = field(default_factory=set)
    launches: list[Launch] = field(default_factory=list)
    called_from: list[tuple[Function, cst.Call]] = field(default_factory=list)

    @property
    def node(self) -> cst.FunctionDef:
        return self.function.node

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    @property
    def constexpr_names(self) -> set[str]:
        return {p.name for p in self.params if p.is_constexpr}

    def constexpr_values(self, name: str) -> list[cst.BaseExpression]:
        """Every value a constexpr can take: default, launch sites, autotune configs."""
        values: list[cst.BaseExpression] = []
        p = self.param(name)
        if p is not None and p.default is not None:
            values.append(p.default)
        for launch in self.launches:
            if name in launch.args:
                values.append(launch.args[name])
        for config in self.autotune_configs:
            if name in config:
                values.append(config[name])
        return values


@dataclass(eq=False)
class CallSite:
    node: cst.Call
    qualname: str | None
    function: Function | None  # enclosing def, None at module level
