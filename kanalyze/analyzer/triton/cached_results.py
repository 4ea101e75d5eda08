"""Which results does the forward path store in one call and return in a later one?

State kept across calls is `self.attr` or a module global the forward path writes
(`stores_across_calls`); a cache hit is an `if` whose test reads it (`reads_store`)
around a `return` of the stored value itself (`holds_store`), or with every launch
inside such an `if` (`all_work_guarded`).  `producing_functions` names the functions
that return outputs, where `functools.lru_cache` hands back an earlier call's tensor.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import body_nodes, walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

STORE_METHODS = {"update", "setdefault", "__setitem__", "append"}


def producing_functions(model: TritonModule, path: list[Function], launching: set[int]) -> set[int]:
    """Forward-path functions that return outputs: `forward`, launchers, and callers of launchers."""
    producing = {id(f.node) for f in path if f.name in ("forward", "__call__")} | launching
    names = {f.name: f for f in path}
    changed = True
    while changed:
        changed = False
        for function in path:
            if id(function.node) in producing:
                continue
            for site in model.calls_in(function):
                name = dotted(site.node.func) or ""
                callee = names.get(name[5:] if name.startswith("self.") else name)
                if callee is not None and id(callee.node) in producing and callee.name not in ("forward", "__call__"):
                    producing.add(id(function.node))
                    changed = True
                    break
    return producing


def stores_across_calls(model: TritonModule, path: list[Function]) -> set[tuple[str | None, str]]:
    """State written by the forward path and kept across calls: (class, attr) for `self.attr`,
    (None, name) for a module global."""
    stores: set[tuple[str | None, str]] = set()
    for function in path:
        declared = {n.name.value for node in body_nodes(function.node) if isinstance(node, cst.Global)
                    for n in node.names}
        locals_ = {d.name for d in model.flow(function).defs}
        targets: list[tuple[cst.BaseExpression, bool]] = []   # (holder, written through a key)
        for node in body_nodes(function.node):
            if isinstance(node, cst.Assign):
                targets += [h for t in node.targets for h in _holders(t.target)]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets += _holders(node.target)
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                    and node.func.attr.value in STORE_METHODS:
                targets.append((node.func.value, True))
        for held, keyed in targets:
            name = dotted(held) or ""
            if name.startswith("self.") and name.count(".") == 1:
                stores.add((function.class_name, name[5:]))
            elif isinstance(held, cst.Name) and (name in declared or (keyed and name not in locals_)):
                stores.add((None, name))
    return stores


def _holders(target: cst.BaseExpression) -> list[tuple[cst.BaseExpression, bool]]:
    """What an assignment target writes: (the held object, whether through a key)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [h for e in target.elements for h in _holders(e.value)]
    if isinstance(target, cst.StarredElement):
        return _holders(target.value)
    return [(target.value, True)] if isinstance(target, cst.Subscript) else [(target, False)]


def _is_global_store(model: TritonModule, function: Function, name: str,
                     stores: set[tuple[str | None, str]]) -> bool:
    if (None, name) not in stores:
        return False
    declared = any(isinstance(n, cst.Global) and any(a.name.value == name for a in n.names)
                   for n in body_nodes(function.node))
    return declared or name not in model.flow(function).by_name


def holds_store(model: TritonModule, function: Function, expr: cst.BaseExpression,
                 stores: set[tuple[str | None, str]], seen: frozenset[str] = frozenset()) -> bool:
    """Is `expr` the stored value itself (`self._cache`, `_CACHE[key]`, `hit.clone()` of one),
    rather than something computed from it?"""
    while True:
        name = dotted(expr) or ""
        if name.startswith("self.") and name.count(".") == 1:
            return (function.class_name, name[5:]) in stores
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        else:
            break
    if not isinstance(expr, cst.Name) or expr.value in seen:
        return False
    if _is_global_store(model, function, expr.value, stores):
        return True
    return any(d.value is not None and holds_store(model, function, d.value, stores, seen | {expr.value})
               for d in model.flow(function).defs_of(expr.value))


def reads_store(model: TritonModule, function: Function, expr: cst.CSTNode,
                 stores: set[tuple[str | None, str]], seen: frozenset[str] = frozenset()) -> bool:
    locals_ = model.flow(function).by_name
    for node in walk(expr):
        name = dotted(node) if isinstance(node, (cst.Attribute, cst.Name)) else None
        if name is None:
            continue
        if name.startswith("self.") and name.count(".") == 1 and (function.class_name, name[5:]) in stores:
            return True
        if "." in name or name in seen:
            continue
        if _is_global_store(model, function, name, stores):
            return True
        for d in locals_.get(name, ()):
            if d.value is not None and reads_store(model, function, d.value, stores, seen | {name}):
                return True
    return False


def all_work_guarded(model: TritonModule, function: Function, guards: list[cst.If],
                     helpers: set[str]) -> bool:
    """Is every launch (or call of a forward-path helper) inside a cache-miss `if`?"""
    work = [l.call for l in model.launches if l.wrapper is function]
    for site in model.calls_in(function):
        name = dotted(site.node.func) or ""
        if (name[5:] if name.startswith("self.") else name) in helpers:
            work.append(site.node)
    bodies = {id(g.body) for g in guards}
    return bool(guards) and bool(work) and all(any(id(a) in bodies for a in model.ancestors(w)) for w in work)
