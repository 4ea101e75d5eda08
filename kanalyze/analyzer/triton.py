"""The kernel model of one Python file, read with LibCST (never imported).

`TritonModule.from_source(path, text)` parses the file once and records:
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

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, walk
from kanalyze.analyzer.dataflow import Dataflow, Def, _all_params, names_read
from kanalyze.analyzer.names import ImportMap, dotted

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
        _Collector(self).collect()

    @classmethod
    def from_source(cls, path: str, text: str) -> "TritonModule":
        return cls(path, text, cst.parse_module(text))

    # --- names -------------------------------------------------------------

    def qualify(self, expr: cst.BaseExpression) -> str | None:
        return self.imports.qualify(expr)

    def call_name(self, call: cst.Call) -> str | None:
        """Qualified name of a call's callee: `tl.dot(...)` → `triton.language.dot`."""
        return self.imports.qualify(call.func)

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
        node = function.node
        return [c for c in self.calls if c.function is not None and c.function.node is node
                and (not qualnames or c.qualname in qualnames)]

    def calls_to(self, *qualnames: str) -> list[CallSite]:
        wanted = set(qualnames)
        return [c for c in self.calls if c.qualname in wanted]

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
        upstream = flow.upstream(expr)
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


class _Collector:
    """One walk over the tree that fills a TritonModule."""

    def __init__(self, model: TritonModule) -> None:
        self.model = model
        self.subscript_calls: list[tuple[cst.Call, Function | None]] = []
        self.jit_call_forms: list[tuple[str, cst.Call]] = []

    def collect(self) -> None:
        self._walk()
        imports = self.model.imports
        for site in self.model.calls:  # qualify once every import is known
            site.qualname = imports.qualify(site.node.func)
        self._resolve_jit()
        self._resolve_launches_and_helpers()

    def _walk(self) -> None:
        model = self.model
        parents = model.parents
        # (node, parent, enclosing Function, ClassDef whose body we are directly in)
        stack: list[tuple] = [(model.module, None, None, None)]
        while stack:
            node, parent, function, klass = stack.pop()
            if parent is not None:
                parents[id(node)] = parent
            kind = type(node)
            by_type = model.by_type.get(kind)
            if by_type is None:
                by_type = model.by_type[kind] = []
            by_type.append(node)
            if kind is cst.Call:
                model.calls.append(CallSite(node, None, function))
                if isinstance(node.func, cst.Subscript):
                    self.subscript_calls.append((node, function))
            elif kind is cst.Assign:
                # `kernel = triton.jit(_kernel)` (the call form of the decorator)
                if isinstance(node.value, cst.Call) and len(node.targets) == 1 \
                        and isinstance(node.targets[0].target, cst.Name):
                    self.jit_call_forms.append((node.targets[0].target.value, node.value))
            elif kind is cst.FunctionDef:
                bases = tuple(filter(None, (dotted(b.value) for b in klass.bases))) if klass else ()
                function = Function(node.name.value, node, klass.name.value if klass else None, bases)
                model.functions.append(function)
                model._function_of[id(node)] = function
                klass = None
            elif kind is cst.ClassDef:
                stack.extend((child, node, function, node) for child in reversed(list(child_nodes(node))))
                continue
            elif kind is cst.Import:
                model.imports.add_import(node)
            elif kind is cst.ImportFrom:
                model.imports.add_import_from(node)
            stack.extend((child, node, function, klass) for child in reversed(list(child_nodes(node))))

    # --- after the walk ----------------------------------------------------

    def _decorator_names(self, decorator: cst.Decorator) -> tuple[str | None, cst.Call | None]:
        expr = decorator.decorator
        call = expr if isinstance(expr, cst.Call) else None
        return self.model.imports.qualify(call.func if call else expr), call

    def _make_jit(self, name: str, function: Function) -> JitFunction:
        params = []
        for p in _all_params(function.node.params):
            annotation = None
            is_constexpr = False
            if p.annotation is not None:
                node = p.annotation.annotation
                if isinstance(node, cst.SimpleString):
                    # Triton reads string annotations (`"tl.constexpr"`, or any
                    # annotation under `from __future__ import annotations`) textually.
                    annotation = str(node.evaluated_value)
                    is_constexpr = "constexpr" in annotation
                else:
                    annotation = self.model.imports.qualify(node)
                    is_constexpr = annotation == CONSTEXPR
            params.append(Param(p.name.value, p, is_constexpr, p.default, annotation))
        return JitFunction(name, function, params)

    def _resolve_jit(self) -> None:
        model = self.model
        for function in model.functions:
            decorators = [self._decorator_names(d) for d in function.node.decorators]
            if not any(name in JIT_DECORATORS for name, _ in decorators):
                continue
            jit = self._make_jit(function.name, function)
            for name, call in decorators:
                if name == AUTOTUNE and call is not None:
                    jit.autotune_configs = _autotune_configs(call, model.imports)
                elif name == HEURISTICS and call is not None and call.args:
                    value = call.args[0].value
                    if isinstance(value, cst.Dict):
                        jit.heuristics = {
                            k.key.evaluated_value for k in value.elements
                            if isinstance(k, cst.DictElement) and isinstance(k.key, cst.SimpleString)
                        }
            model.jit[function.name] = jit
        # `kernel = triton.jit(_impl)`
        by_name = {f.name: f for f in model.functions if f.class_name is None}
        for alias, call in self.jit_call_forms:
            if model.imports.qualify(call.func) in JIT_DECORATORS and call.args:
                target = call.args[0].value
                if isinstance(target, cst.Name) and target.value in by_name:
                    jit = model.jit.get(target.value) or self._make_jit(target.value, by_name[target.value])
                    model.jit[target.value] = jit
                    model.jit[alias] = jit

    def _resolve_launches_and_helpers(self) -> None:
        model = self.model
        for call, function in self.subscript_calls:
            subscript = call.func
            assert isinstance(subscript, cst.Subscript)
            name = dotted(subscript.value)
            if name is None:
                continue
            jit = model.jit.get(name.split(".")[-1])
            if jit is None or len(subscript.slice) != 1:
                continue
            index = subscript.slice[0].slice
            if not isinstance(index, cst.Index):
                continue
            args = bind_call_args(call, jit.params)
            options = {a.keyword.value: a.value for a in call.args
                       if a.keyword is not None and jit.param(a.keyword.value) is None}
            launch = Launch(jit, call, index.value, function, args, options)
            jit.launches.append(launch)
            model.launches.append(launch)
        for site in model.calls:
            if site.function is None or not isinstance(site.node.func, cst.Name):
                continue
            callee = model.jit.get(site.node.func.value)
            caller = model.jit.get(site.function.name)
            if callee is None or caller is None or caller.function is not site.function:
                continue
            caller.calls_helpers.add(callee.name)
            callee.called_from.append((caller.function, site.node))


def bind_call_args(call: cst.Call, params: list[Param] | list[str]) -> dict[str, cst.BaseExpression]:
    """Parameter name → argument expression, for positional and keyword args.
    `params` are a jit function's Params or plain parameter names."""
    bound: dict[str, cst.BaseExpression] = {}
    names_in_order = [p if isinstance(p, str) else p.name for p in params]
    names = set(names_in_order)
    index = 0
    for arg in call.args:
        if arg.star:
            return bound  # *args / **kwargs: cannot bind the rest statically
        if arg.keyword is not None:
            if arg.keyword.value in names:  # others are launch options (num_warps, ...)
                bound[arg.keyword.value] = arg.value
        elif index < len(names_in_order):
            bound[names_in_order[index]] = arg.value
            index += 1
    return bound


def _autotune_configs(call: cst.Call, imports: ImportMap) -> list[dict[str, cst.BaseExpression]]:
    """The constexpr dicts of `triton.Config({...}, ...)` entries in `configs=[...]`."""
    configs: list[dict[str, cst.BaseExpression]] = []
    for arg in call.args:
        if arg.keyword is None or arg.keyword.value != "configs":
            continue
        if not isinstance(arg.value, (cst.List, cst.Tuple)):
            continue
        for element in arg.value.elements:
            item = element.value
            if not isinstance(item, cst.Call) or not item.args:
                continue
            kwargs = item.args[0].value
            if isinstance(kwargs, cst.Dict):
                entry = {}
                for e in kwargs.elements:
                    if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString):
                        entry[e.key.evaluated_value] = e.value
                configs.append(entry)
    return configs


# --- small expression helpers shared by rules ---------------------------------

def keyword(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    """The argument passed as `name=` (or at `position` when given positionally)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            return positional[position].value
    return None


def int_literal(expr: cst.BaseExpression | None) -> int | None:
    if isinstance(expr, cst.Integer):
        try:
            return int(expr.evaluated_value)
        except ValueError:
            return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = int_literal(expr.expression)
        return -inner if inner is not None else None
    return None


def calls_within(model: TritonModule, node: cst.CSTNode) -> Iterable[tuple[cst.Call, str | None]]:
    for inner in walk(node):
        if isinstance(inner, cst.Call):
            yield inner, model.call_name(inner)


__all__ = [
    "CallSite", "Dataflow", "Def", "Function", "JitFunction", "Launch", "Param",
    "TritonModule", "bind_call_args", "calls_within", "int_literal", "keyword",
    "names_read", "walk",
]
