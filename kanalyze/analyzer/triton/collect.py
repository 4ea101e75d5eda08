"""One walk over a file's tree that fills a TritonModule: functions, imports, calls,
parents, jit functions (every decorator form, autotune configs, heuristics), launches
and the jit helpers each kernel calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes
from kanalyze.analyzer.names import ImportMap, dotted
from kanalyze.analyzer.triton.calls import bind_call_args, string_literal
from kanalyze.analyzer.triton.dataflow import _all_params
from kanalyze.analyzer.triton.entities import (AUTOTUNE, CONSTEXPR, HEURISTICS, JIT_DECORATORS, CallSite, Function,
                                              JitFunction, Launch, Param)

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.model import TritonModule


class Collector:
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
                    annotation = string_literal(node) or ""
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
                            key for k in value.elements
                            if isinstance(k, cst.DictElement) and (key := string_literal(k.key)) is not None
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
                    if isinstance(e, cst.DictElement) and (key := string_literal(e.key)) is not None:
                        entry[key] = e.value
                configs.append(entry)
    return configs
