"""What a module binds at its top and where each name is loaded: the reading never_run.py decides on.

`read_uses` parses a checked file's text (`ast`, never imported) into a `ModuleUses`: the
names its statements bind at the top (and how often), its top-level defs, classes and jit
kernels, every def's name, its imports at any depth, `__all__`, and every load of a name or
an attribute with the defs and classes it runs inside (`Chain`) and how it is used (a call's
callee, an `isinstance` argument, a class's base, any other value).  A file that does not
parse, or nests past the recursion limit, gives None: its own analysis reports it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kanalyze.analyzer.module_imports import _is_kernel_decorator, dotted_name

Chain = tuple  # ((kind, name), ...): the defs and classes around a load, outermost first


@dataclass(frozen=True)
class NameLoad:
    name: str           # the identifier: a Name's id, an Attribute's attr
    chain: Chain        # where it runs: inside the bodies of these defs and classes
    context: str        # "call" (the callee), "isinstance", "base" (a class's bases), "value";
    # "own base": a top-level class's base named like it (`class C(nn.C)`), bound before it
    base: str | None    # for an attribute, the dotted name it is read from (`K` in `K._k`)


@dataclass
class ModuleUses:
    tree: ast.Module
    bound: dict[str, int] = field(default_factory=dict)          # top-level name → how often bound
    defined: dict[str, ast.stmt] = field(default_factory=dict)   # top-level def / class / jit alias
    kernels: set[str] = field(default_factory=set)               # top-level jit functions and aliases
    functions: dict[str, int] = field(default_factory=dict)      # every def's name → how many
    imports: dict[str, list[tuple[int, str, str | None]]] = field(default_factory=dict)  # local → bindings
    exported: set[str] = field(default_factory=set)              # `__all__`'s strings
    stars: bool = False
    loads: list[NameLoad] = field(default_factory=list)


def read_uses(path: str, text: str) -> ModuleUses | None:
    try:
        tree = ast.parse(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # not this index's to report: the file's own analysis does
        return None
    file = ModuleUses(tree)
    try:
        _top_level(tree.body, file)
        _walk(tree, file)
    except RecursionError:
        return None
    return file


def _top_level(body: list[ast.stmt], file: ModuleUses) -> None:
    """What the module's statements bind at its top, also under `if`, `try`, `with`, loops."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            file.bound[node.name] = file.bound.get(node.name, 0) + 1
            file.defined[node.name] = node
            if not isinstance(node, ast.ClassDef) and any(_is_kernel_decorator(d) for d in node.decorator_list):
                file.kernels.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    file.stars = True
                    continue
                local = alias.asname or alias.name.split(".")[0]
                file.bound[local] = file.bound.get(local, 0) + 1
            continue
        header = [v for name, value in ast.iter_fields(node) if name not in _BODIES
                  for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST)]
        for inner in (n for part in header for n in ast.walk(part)):
            if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Load):
                file.bound[inner.id] = file.bound.get(inner.id, 0) + 1  # a target (`global`: in `_walk`)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if isinstance(node.value, ast.Call) and (dotted_name(node.value.func) or "").split(".")[-1] == "jit":
                file.kernels.add(target)
                file.defined[target] = node
            elif target == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                file.exported |= {e.value for e in node.value.elts
                                  if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        for name in ("body", "orelse", "finalbody"):
            _top_level(getattr(node, name, None) or [], file)
        for handler in getattr(node, "handlers", ()):
            if handler.name:
                file.bound[handler.name] = file.bound.get(handler.name, 0) + 1
            _top_level(handler.body, file)
        for case in getattr(node, "cases", ()):
            _top_level(case.body, file)


_BODIES = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _walk(tree: ast.Module, file: ModuleUses) -> None:
    """Every load of a name or an attribute, where it runs; the imports at any depth; `global`."""
    stack: list[tuple[ast.AST, Chain, str]] = [(tree, (), "value")]
    while stack:
        node, chain, context = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            file.functions[node.name] = file.functions.get(node.name, 0) + 1
            header = [*node.decorator_list, *_defaults_and_annotations(node)]
            stack.extend((n, chain, "value") for n in header)
            stack.extend((n, chain + (("def", node.name),), "value") for n in node.body)
            continue
        if isinstance(node, ast.ClassDef):
            stack.extend((n, chain, "value") for n in node.decorator_list)
            stack.extend((n, chain, "own base" if not chain and (dotted_name(n) or ".").split(".")[-1] == node.name
                          else "base") for n in [*node.bases, *(k.value for k in node.keywords)])
            stack.extend((n, chain + (("class", node.name),), "value") for n in node.body)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    level, module = (node.level, node.module or "") if isinstance(node, ast.ImportFrom) else (0, "")
                    binding = (level, module, alias.name) if isinstance(node, ast.ImportFrom) else \
                        (0, alias.name if alias.asname else alias.name.split(".")[0], None)
                    file.imports.setdefault(alias.asname or alias.name.split(".")[0], []).append(binding)
            continue
        if isinstance(node, ast.Global):
            for name in node.names:
                file.bound[name] = file.bound.get(name, 0) + 2  # rebound from inside a function
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            file.loads.append(NameLoad(node.id, chain, context, None))
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            file.loads.append(NameLoad(node.attr, chain, context, dotted_name(node.value)))
            stack.append((node.value, chain, "base" if "base" in context else "value"))
            continue
        if isinstance(node, ast.Call):
            stack.append((node.func, chain, "call" if "base" not in context else "base"))
            checks = isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass")
            inner = "base" if "base" in context else "isinstance" if checks else "value"
            stack.extend((n, chain, inner) for n in [*node.args, *(k.value for k in node.keywords)])
            continue
        stack.extend((n, chain, "base" if "base" in context else "value") for n in ast.iter_child_nodes(node))


def _defaults_and_annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    args = node.args
    found: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    found += [a.annotation for a in every if a.annotation is not None]
    return found + ([node.returns] if node.returns is not None else [])
