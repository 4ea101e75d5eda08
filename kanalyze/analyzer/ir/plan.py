"""What to compile in one Triton file: the scratch module and one job per
kernel, launch and target.

A kernel is a jit function that is launched (`kernel[grid](...)`), autotuned,
or called by no other jit function (a library kernel).  Jit helpers are
compiled inside the kernels that call them.  Each launch site gives one
compilation context (its argument types and constexpr values); a kernel with
no launch in the file gets one context from its defaults and the settings.
The worker expands a context into the kernel's autotune configurations.

Everything here is static (LibCST only) and JSON-serialisable, so a plan can
be cached by the file's content hash and a warm run never parses the file.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
from dataclasses import asdict, dataclass, field
from typing import Any

import libcst as cst

from kanalyze.analyzer.ir.scratch import build_scratch
from kanalyze.analyzer.ir.settings import IRSettings
from kanalyze.analyzer.ir.signature import TL, LaunchReader
from kanalyze.analyzer.positions import Positions
from kanalyze.analyzer.triton.entities import JitFunction, Launch
from kanalyze.analyzer.triton.model import TritonModule

AUTOTUNE = "triton.autotune"
_DTYPE_WORDS = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16",
                "fp32": "float32", "float32": "float32", "fp8e4nv": "float8e4nv", "fp8e5": "float8e5"}
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


@dataclass
class Context:
    """One compilation context of a kernel: what the worker needs, plus what the
    report says about it."""

    kernel: str                       # the jit function's name
    names: list[str]                  # module attributes it is reachable by (aliases)
    label: str                        # "launch at line 88" / "no launch in this file"
    row: int                          # the launch row, or the kernel's def row
    signature: dict[str, str]         # non-constexpr param → Triton type
    constexprs: dict[str, str]        # param → Python source of its value
    settings_values: dict[str, str]   # param → value from [tool.kanalyze.ir] constexprs
    guesses: dict[str, list[str]]     # param → [stand-in value, note] when nothing else gives one
    options: dict[str, str]           # num_warps, ... → Python source
    ints: dict[str, int]              # runtime ints handed to @triton.heuristics
    notes: list[str] = field(default_factory=list)   # what was assumed
    unresolved: dict[str, str] = field(default_factory=dict)  # constexpr → the runtime expression
    assumed_pointers: list[str] = field(default_factory=list)  # pointers whose element type is a default


@dataclass
class KernelPlan:
    name: str
    def_row: int
    contexts: list[Context]
    config_rows: list[int] = field(default_factory=list)  # rows of literal autotune Config(...) entries


@dataclass
class FilePlan:
    path: str
    scratch: str
    kernels: list[KernelPlan]
    missing: dict[str, str] = field(default_factory=dict)  # names left out of the scratch module → why

    @property
    def scratch_hash(self) -> str:
        return hashlib.sha256(self.scratch.encode("utf-8", "surrogatepass")).hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "FilePlan":
        data = json.loads(text)
        kernels = [KernelPlan(k["name"], k["def_row"], [Context(**c) for c in k["contexts"]], k["config_rows"])
                   for k in data["kernels"]]
        return cls(data["path"], data["scratch"], kernels, data["missing"])


def _settings_text(value: Any) -> str:
    if isinstance(value, str):
        if value.startswith(("tl.", "triton.language.")):
            return TL + value.split(".")[-1]
        if value in _DTYPE_WORDS:
            return TL + _DTYPE_WORDS[value]
    return repr(value)


def small_int(text: str) -> int | None:
    """The value of integer arithmetic on literals (`(64) * (2)`), without eval."""
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            left, right = value(node.left), value(node.right)
            if max(abs(left), abs(right)) > 2**40:
                raise ValueError("too large")
            return _INT_OPS[type(node.op)](left, right)
        raise ValueError("not integer arithmetic")

    try:
        return value(tree)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


def kernels_of(model: TritonModule) -> list[JitFunction]:
    """Jit functions to compile on their own: launched, autotuned, or called by no other jit function."""
    unique: list[JitFunction] = []
    for jit in model.jit.values():
        if any(jit is u for u in unique):
            continue
        if jit.function.class_name is not None:
            continue
        if jit.launches or jit.autotune_configs or not jit.called_from:
            unique.append(jit)
    return unique


class _Planner:
    def __init__(self, model: TritonModule, settings: IRSettings) -> None:
        self.model = model
        self.settings = settings
        self.positions = Positions(model.module, model.text)

    def row(self, node: cst.CSTNode) -> int:
        return self.positions.span(node)[0]

    def plan(self) -> FilePlan:
        kernels = kernels_of(self.model)
        names = {id(j): [n for n, other in self.model.jit.items() if other is j] for j in kernels}
        roots = [n for j in kernels for n in names[id(j)]]
        scratch = build_scratch(self.model, roots, self.positions)
        plans = []
        for jit in kernels:
            def_row = self.row(jit.node.name)
            contexts = self.contexts(jit, names[id(jit)], def_row)
            plans.append(KernelPlan(jit.name, def_row, contexts, self.config_rows(jit)))
        return FilePlan(self.model.path, scratch.text, plans, scratch.missing)

    def config_rows(self, jit: JitFunction) -> list[int]:
        for decorator in jit.node.decorators:
            call = decorator.decorator
            if not isinstance(call, cst.Call) or self.model.qualify(call.func) != AUTOTUNE:
                continue
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "configs" and isinstance(arg.value, (cst.List, cst.Tuple)):
                    return [self.row(e.value) for e in arg.value.elements]
                if arg.keyword is not None and arg.keyword.value == "configs":
                    return []
        return []

    def contexts(self, jit: JitFunction, names: list[str], def_row: int) -> list[Context]:
        reader = LaunchReader(self.model, jit, self.settings.pointer_dtype)
        launches: list[Launch | None] = list(jit.launches[: self.settings.max_launches]) or [None]
        found: list[Context] = []
        seen: set[str] = set()
        for launch in launches:
            context = self.context(jit, names, def_row, reader, launch)
            key = json.dumps([context.signature, context.constexprs, context.options, context.guesses])
            if key not in seen:
                seen.add(key)
                found.append(context)
        return found

    def context(self, jit: JitFunction, names: list[str], def_row: int, reader: LaunchReader,
                launch: Launch | None) -> Context:
        wrapper = launch.wrapper if launch is not None else None
        args = launch.args if launch is not None else {}
        signature: dict[str, str] = {}
        constexprs: dict[str, str] = {}
        settings_values: dict[str, str] = {}
        guesses: dict[str, list[str]] = {}
        ints: dict[str, int] = {}
        notes: list[str] = []
        unresolved: dict[str, str] = {}
        assumed_pointers: list[str] = []
        tuned = {k for config in jit.autotune_configs for k in config} | set(jit.heuristics)
        for param in jit.params:
            name = param.name
            configured = self.settings.constexpr_for(jit.name, name)
            if configured is not None:
                settings_values[name] = _settings_text(configured)
            arg = args.get(name)
            if param.is_constexpr or name in tuned:
                if arg is not None:
                    text = reader.value_text(wrapper, arg)
                    if text is not None:
                        constexprs[name] = text
                        continue
                    unresolved[name] = reader._text(arg)
                guess = reader.guess(name, arg)
                if guess is not None:  # the worker uses it only when nothing else gives a value
                    guesses[name] = list(guess)
                continue
            kind, note = reader.param_type(name, arg, wrapper)
            signature[name] = kind
            if note:
                notes.append(f"{name}: {note}")
                if kind == f"*{self.settings.pointer_dtype}":
                    assumed_pointers.append(name)
            if kind in ("i32", "i64"):
                text = reader.value_text(wrapper, arg) if arg is not None else None
                value = small_int(text) if text else None
                ints[name] = value if value is not None else self.settings.size
        options: dict[str, str] = {}
        for option in _OPTIONS:
            expr = launch.options.get(option) if launch is not None else None
            if expr is not None:
                text = reader.value_text(wrapper, expr)
                if text is not None:
                    options[option] = text
        label = f"launch at line {self.row(launch.call)}" if launch is not None else "no launch in this file"
        row = self.row(launch.call) if launch is not None else def_row
        return Context(jit.name, names, label, row, signature, constexprs, settings_values, guesses,
                       options, ints, notes, unresolved, assumed_pointers)


def plan_file(model: TritonModule, settings: IRSettings) -> FilePlan:
    """The scratch module and compilation contexts of every kernel in `model`."""
    return _Planner(model, settings).plan()
