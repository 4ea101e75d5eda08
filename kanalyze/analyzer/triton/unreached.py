"""Host functions of a candidate's file that nothing runs.

A harness imports a candidate's file, builds `ModelNew(*init_inputs)` and calls it:
module-level code, `ModelNew.__init__` and `ModelNew.forward` run, and whatever
they name.  A method of `ModelNew` that no code names (`def backward(self, dout)`
written beside `forward`; `nn.Module` never calls a method of that name) never
runs, nor a module-level function that only such methods name: a candidate's file
is imported for its `ModelNew`, and a helper only dead code calls is that code's.
Kernels that only they launch are never launched (RES001 says so; the other clauses
then say nothing of them).  A module-level function that nothing in the file names,
or only its `__main__` block, stays reached: it is the file's interface, which
another module (a test, a benchmark) may import and call.

Decided only where the file shows it:
- the file defines `ModelNew` directly over `nn.Module` (a subclass of `nn.Linear`
  or `nn.Conv2d` inherits methods that call overridable ones: `reset_parameters`,
  `_conv_forward`);
- a `ModelNew` method counts only when its name is neither a dunder nor one of
  `nn.Module`'s own (`forward`, `_apply`, `extra_repr`, `load_state_dict`, ...);
- a decorated function counts never (a decorator may register it: `custom_op`,
  `atexit.register`);
- a function is unreached when every mention of its name (a name, an attribute, a
  string as in `getattr(self, "backward")`) lies inside unreached functions, or, for
  a `ModelNew` method, under `if __name__ == "__main__":`.
"""

from __future__ import annotations

import weakref

import libcst as cst

from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

# nn.Module's own methods: torch, a harness or the module itself may call any of them.
MODULE_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule",
    "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules",
    "named_parameters", "parameters", "register_backward_hook", "register_buffer", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook", "register_module",
    "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook", "requires_grad_",
    "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train", "type",
    "xpu", "zero_grad",
})
MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "Module"})
_FOUND: "weakref.WeakKeyDictionary[TritonModule, frozenset[int]]" = weakref.WeakKeyDictionary()


def unreached_functions(model: TritonModule) -> frozenset[int]:
    """`id` of the FunctionDef of every host function in a candidate's file that nothing runs."""
    if model not in _FOUND:
        _FOUND[model] = _unreached(model)
    return _FOUND[model]


def _unreached(model: TritonModule) -> frozenset[int]:
    model_new = [f for f in model.functions if f.class_name == "ModelNew"]
    if not model_new or any(not f.class_bases or set(f.class_bases) - MODULE_BASES for f in model_new):
        return frozenset()
    maybe = {id(f.node): f for f in model.host_functions if _may_be_unreached(model, f)}
    if not maybe:
        return frozenset()
    mentions: dict[str, list[cst.CSTNode]] = {}
    names = {f.name for f in maybe.values()}
    for node in model.nodes(cst.Name, cst.SimpleString):
        text = node.value if isinstance(node, cst.Name) else string_literal(node)
        if text not in names:
            continue
        parent = model.parent(node)
        if isinstance(node, cst.Name) and isinstance(parent, cst.FunctionDef) and parent.name is node:
            continue  # the `def` itself
        mentions.setdefault(text, []).append(node)
    unreached: set[int] = set()
    grown = True
    while grown:
        grown = False
        for key, function in maybe.items():
            if key in unreached:
                continue
            named = mentions.get(function.name, ())
            module_level = function.class_name is None
            if module_level and not named:
                continue  # a module-level function nothing here names: another module may import it
            if all(_dead_mention(model, node, unreached | {key}, main_runs=module_level) for node in named):
                unreached.add(key)
                grown = True
    return frozenset(unreached)


def _may_be_unreached(model: TritonModule, function: Function) -> bool:
    node = function.node
    if any(not _is_method_kind(d.decorator) for d in node.decorators):
        return False
    if model.function_of(node) is not None:
        return False  # nested: unreached with the function that holds it
    if function.class_name is None:
        return True
    name = function.name
    return (function.class_name == "ModelNew" and not (name.startswith("__") and name.endswith("__"))
            and name not in MODULE_METHODS)


def _is_method_kind(decorator: cst.BaseExpression) -> bool:
    return isinstance(decorator, cst.Name) and decorator.value in ("staticmethod", "classmethod")


def _dead_mention(model: TritonModule, node: cst.CSTNode, unreached: set[int], main_runs: bool) -> bool:
    """Is this mention inside an unreached function, or (unless `main_runs`) under the
    `__main__` guard?  A module-level function the guard calls runs when another module
    imports it just as well: for it the guard is no dead place."""
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef) and id(ancestor) in unreached:
            return True
        if not main_runs and is_main_guard(ancestor):
            return True
    return False


def is_main_guard(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.If) or not isinstance(node.test, cst.Comparison):
        return False
    text = cst.Module([]).code_for_node(node.test).replace("'", '"')
    return "__name__" in text and '"__main__"' in text
