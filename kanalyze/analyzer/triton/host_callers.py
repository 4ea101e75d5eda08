"""Who calls a host function within its own file, and which argument each parameter gets.

    def matmul(a, b): ...                     called as `matmul(x, w)` anywhere in the file
    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w): ...           called as `Linear.apply(x, w)` (ctx is not passed),
                                              or through `linear = Linear.apply`
    class Block:
        def run(self, x): ...                 called as `self.run(h)` from the class's methods

Only these three spellings, and only when one `def` has the name (a name defined twice,
or rebound, is not followed).  A call that unpacks (`f(*args)`) binds what precedes the
star.  Callers in other files are not seen: a function nobody in its file calls has
no caller here.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.triton.calls import bind_call_args
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

Binding = tuple[Function | None, dict[str, cst.BaseExpression], cst.Call]


def host_callers(model: TritonModule, function: Function, cache: dict) -> list[Binding]:
    """(calling function or None at module level, parameter → argument, the call) for every
    call of `function` in the file (kept in `cache`, the caller's: one per model)."""
    key = id(function.node)
    if key not in cache:
        cache[key] = list(_callers(model, function))
    return cache[key]


def parameter_names(function: Function) -> list[str]:
    params = function.node.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _callers(model: TritonModule, function: Function):
    names = parameter_names(function)
    nested = model.function_of(function.node) is not None
    if nested:
        return
    twins = [f for f in model.functions if f.name == function.name and f.class_name == function.class_name]
    if len(twins) != 1:
        return
    if function.class_name is None:
        if any(isinstance(t.target, cst.Name) and t.target.value == function.name
               for node in model.nodes(cst.Assign) for t in node.targets):
            return  # rebound somewhere: a call of the name may not be this function
        for site in model.calls:
            if isinstance(site.node.func, cst.Name) and site.node.func.value == function.name:
                yield site.function, bind_call_args(site.node, names), site.node
        return
    bound = names[1:]  # past `self`, or the autograd context
    autograd = function.name == "forward" and any(b.rpartition(".")[2] == "Function" for b in function.class_bases)
    appliers = _apply_aliases(model, function.class_name) if autograd else set()
    for site in model.calls:
        func = site.node.func
        if isinstance(func, cst.Name) and func.value in appliers:
            yield site.function, bind_call_args(site.node, bound), site.node  # `attention = _attention.apply`
        if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
            continue
        if autograd and func.attr.value == "apply" and func.value.value == function.class_name:
            yield site.function, bind_call_args(site.node, bound), site.node
        elif func.attr.value == function.name and func.value.value == "self" and site.function is not None \
                and site.function.class_name == function.class_name:
            yield site.function, bind_call_args(site.node, bound), site.node


def _apply_aliases(model: TritonModule, class_name: str | None) -> set[str]:
    """Module-level names bound once to `Cls.apply` (`attention = _attention.apply`)."""
    bindings: dict[str, list[cst.BaseExpression]] = {}
    for node in model.nodes(cst.Assign):
        if model.function_of(node) is None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    bindings.setdefault(target.target.value, []).append(node.value)
    return {name for name, values in bindings.items()
            if len(values) == 1 and isinstance(values[0], cst.Attribute) and values[0].attr.value == "apply"
            and isinstance(values[0].value, cst.Name) and values[0].value.value == class_name}
