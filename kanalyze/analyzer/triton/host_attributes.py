"""What a module's attribute holds, read in one of its class's methods.

    class ModelNew(nn.Module):
        def __init__(self, n):
            self.w = nn.Parameter(torch.randn(n, n, dtype=torch.float16))   `self.w` is fp16
            self.ws = nn.ParameterList()
            for _ in range(3):
                self.ws.append(torch.randn(n, n, dtype=torch.float16))     `self.ws[i]` is fp16
        def forward(self, x):
            return kernel_wrapper(x, self.w, self.ws[0])

and in an autograd Function,

    def forward(ctx, q, k):   ctx.save_for_backward(q, k)
    def backward(ctx, do):    q, k = ctx.saved_tensors            q, k: forward's q, k

`self.w` read in a method takes what every `self.w = ...` (or `self.w.data = ...`) in the
class's methods assigns, and for a container built empty (`nn.ParameterList()`, `[]`) what
its `self.ws.append(...)` calls add.  Not followed (None: the file does not show it): a class
whose name is defined twice, an attribute nothing in the class assigns, and a class whose
methods convert the whole module (`self.half()`, `self.to(...)`), which changes every
parameter's dtype.  A conversion by a caller outside the class (`ModelNew(...).half()`) is
not seen.  `ctx.saved_tensors` unpacked in `backward` takes, element by element, what each
`ctx.save_for_backward(...)` in the class's `forward` passes (None where one unpacks `*args`
or saves a different number of tensors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host_callers import parameter_names

if TYPE_CHECKING:
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow

CONTAINERS = {"ParameterList", "ModuleList", "list"}
MODULE_CASTS = {"half", "float", "double", "bfloat16", "to", "type"}


def self_attribute(flow: DtypeFlow, func: Function | None, expr: cst.Attribute, depth: int) -> set[str] | None:
    """The dtypes of `self.<attr>` read in a method of its class; None when the class does not show them."""
    model = flow.model
    if func is None or func.class_name is None or not isinstance(expr.value, cst.Name):
        return None
    receiver = parameter_names(func)[:1]
    if receiver != [expr.value.value]:
        return None
    if sum(1 for c in model.nodes(cst.ClassDef) if c.name.value == func.class_name) != 1:
        return None
    methods = {id(f.node): f for f in model.functions
               if f.class_name == func.class_name and model.function_of(f.node) is None and parameter_names(f)}
    attr = expr.attr.value
    found: set[str] = set()
    assigned = False
    for node in model.nodes(cst.Assign, cst.AnnAssign, cst.AugAssign):
        method = _method_of(model, node, methods)
        if method is None or node.value is None:
            continue
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        if not any(_is_attribute(t, method, attr) for t in targets):
            continue
        assigned = True
        if not _empty_container(model, node.value):
            found |= flow.host_tensor(method, node.value, depth - 1)
    for site in model.calls:
        method = methods.get(id(site.function.node)) if site.function is not None else None
        func_node = site.node.func
        if method is None or not isinstance(func_node, cst.Attribute):
            continue
        if func_node.attr.value in MODULE_CASTS and _is_self(func_node.value, method):
            return None  # `self.half()`: every parameter converted
        if func_node.attr.value == "append" and _is_attribute(func_node.value, method, attr) and site.node.args:
            found |= flow.host_tensor(method, site.node.args[0].value, depth - 1)
    return found if assigned and found else None


def _method_of(model, node: cst.CSTNode, methods: dict[int, Function]) -> Function | None:
    function = model.function_of(node)
    return methods.get(id(function.node)) if function is not None else None


def _is_self(expr: cst.BaseExpression, method: Function) -> bool:
    return isinstance(expr, cst.Name) and expr.value == parameter_names(method)[0]


def _is_attribute(target: cst.BaseExpression, method: Function, attr: str) -> bool:
    """`self.<attr>`, or `self.<attr>.data`."""
    if isinstance(target, cst.Attribute) and target.attr.value == "data":
        target = target.value
    return isinstance(target, cst.Attribute) and target.attr.value == attr and _is_self(target.value, method)


def _empty_container(model, value: cst.BaseExpression) -> bool:
    """`nn.ParameterList()`, `nn.ModuleList()`, `list()`, `[]`: what it holds comes from `append`."""
    if isinstance(value, cst.List):
        return not value.elements
    if isinstance(value, cst.Call) and not value.args:
        name = model.call_name(value) or (value.func.value if isinstance(value.func, cst.Name) else "")
        return name.rpartition(".")[2] in CONTAINERS
    return False


def saved_tensor(flow: DtypeFlow, func: Function | None, d, depth: int) -> set[str] | None:
    """`q, k = ctx.saved_tensors` in an autograd Function's `backward` (definition `d` of one of
    the names): the dtypes of what `forward` passed at that position to `ctx.save_for_backward`."""
    model = flow.model
    node, value = d.node, d.value
    if func is None or func.name != "backward" or func.class_name is None or not isinstance(node, cst.Assign):
        return None
    if not (isinstance(value, cst.Attribute) and value.attr.value == "saved_tensors" and _is_self(value.value, func)):
        return None
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, (cst.Tuple, cst.List)):
        return None
    names = [e.value.value if isinstance(e.value, cst.Name) and isinstance(e, cst.Element) else None
             for e in node.targets[0].target.elements]
    if d.name not in names:
        return None
    index = names.index(d.name)
    forwards = [f for f in model.functions if f.class_name == func.class_name and f.name == "forward"
                and model.function_of(f.node) is None and parameter_names(f)]
    if len(forwards) != 1 or sum(1 for c in model.nodes(cst.ClassDef) if c.name.value == func.class_name) != 1:
        return None
    forward = forwards[0]
    found: set[str] = set()
    for site in model.calls:
        call = site.node
        if site.function is not forward or not isinstance(call.func, cst.Attribute) \
                or call.func.attr.value != "save_for_backward" or not _is_self(call.func.value, forward):
            continue
        if len(call.args) != len(names) or any(a.star or a.keyword is not None for a in call.args):
            return None
        found |= flow.host_tensor(forward, call.args[index].value, depth - 1)
    return found or None
