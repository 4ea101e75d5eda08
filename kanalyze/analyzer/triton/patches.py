"""Which assignments replace a library function for the whole process, and which put the original back?

`torch.cuda.synchronize = ...`, `F.gelu = my_gelu`, `setattr(torch, "mm", f)` patch
an attribute of a module a benchmark times or compares through (PATCHABLE).
`F.gelu = _orig_gelu` after `_orig_gelu = F.gelu`, or a name imported from where
the function is defined, restores it (`restores`).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.model import TritonModule

# Modules whose attributes are the functions a benchmark calls to time and compare.
PATCHABLE = {"torch", "torch.cuda", "torch.cuda.Event", "torch.nn", "torch.nn.functional", "torch.nn.Module",
             "torch.Tensor", "torch.testing", "time", "timeit", "triton", "triton.testing"}


def patches(model: TritonModule) -> Iterator[tuple[cst.CSTNode, str]]:
    """Each assignment or `setattr` that replaces an attribute of a PATCHABLE module, with
    the name it replaces (`torch.cuda.synchronize`); putting the saved original back is
    a restore and is left out."""
    for node in model.nodes(cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Call):
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, cst.Call) and model.call_name(node) == "setattr" and len(node.args) >= 2:
            owner = model.qualify(node.args[0].value)
            attr = node.args[1].value
            if owner in PATCHABLE:
                name = string_literal(attr)
                what = f"{owner}.{name}" if name is not None else f"an attribute of {owner}"
                if name is not None and len(node.args) >= 3 and restores(model, node, what, node.args[2].value):
                    continue  # `setattr(torch, "mm", _orig_mm)`: the original put back
                yield node, what
            continue
        value = getattr(node, "value", None) if isinstance(node, (cst.Assign, cst.AnnAssign)) else None
        for target in targets:
            if isinstance(target, cst.Attribute) and model.qualify(target.value) in PATCHABLE:
                what = f"{model.qualify(target.value)}.{target.attr.value}"
                if value is not None and restores(model, node, what, value):
                    continue  # `torch.nn.functional.gelu = _orig_gelu`: the original put back
                yield node, what


def restores(model: TritonModule, node: cst.CSTNode, what: str, value: cst.BaseExpression) -> bool:
    """Is `value` the library's own `what`, saved before a patch (or imported from where it is
    defined), so that assigning it back restores the original rather than patching it?"""
    if _names_original(model, value, what):
        return True
    text = dotted(value)
    if text is None:
        return False
    function = model.function_of(node)
    saves: list[cst.BaseExpression] = []
    for assign in model.nodes(cst.Assign):
        if assign is node or not any(dotted(t.target) == text for t in assign.targets):
            continue
        holder = model.function_of(assign)
        if text.startswith("self."):
            same_scope = holder is not None and function is not None and holder.class_name == function.class_name
        else:
            same_scope = holder is None or (function is not None and holder.node is function.node)
        if same_scope:
            saves.append(assign.value)
    if not saves and function is not None and "." not in text:
        for d in model.flow(function).defs_of(text):
            if d.kind == "param" and isinstance(d.node, cst.Param) and d.node.default is not None:
                saves.append(d.node.default)  # `def _restore(orig=torch.cuda.synchronize)`
    return bool(saves) and all(_names_original(model, v, what) for v in saves)


def _names_original(model: TritonModule, value: cst.BaseExpression, what: str) -> bool:
    """`torch.nn.functional.gelu`, `getattr(torch.nn.functional, "gelu")`, or a name imported
    from where the function is defined (`from triton.runtime.autotuner import autotune as orig`)."""
    if isinstance(value, cst.Call) and model.call_name(value) == "getattr" and len(value.args) >= 2:
        owner, attr = model.qualify(value.args[0].value), string_literal(value.args[1].value)
        return owner is not None and attr is not None and f"{owner}.{attr}" == what
    name = model.qualify(value)
    if name is None:
        return False
    if name == what:
        return True
    imported = isinstance(value, cst.Name) and dotted(value) != name  # bound by an import, not assigned
    return imported and name.split(".")[0] == what.split(".")[0] and name.rsplit(".", 1)[-1] == what.rsplit(".", 1)[-1]
