"""Host (Python) facts about where the work of a forward path happens, shared by
RES001's Triton and CUDA detectors: the tensors and PyTorch layers a module
holds, and the calls that copy data to the host."""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import body_nodes
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

HOST_TRIPS = {"cpu": "moves the tensor to the host", "numpy": "copies the tensor into host memory",
              "item": "copies a value to the host", "tolist": "copies the tensor into a Python list"}
NOT_COMPUTE_MODULES = {"Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "Identity",
                       "Flatten", "Unflatten", "Buffer"}


def module_attrs(model: TritonModule) -> tuple[set[tuple[str | None, str]], dict[tuple[str | None, str], str]]:
    """Per (class, attribute): the tensors a module holds (`self.w = nn.Parameter(...)`,
    `self.b = torch.zeros(...)`, `register_buffer("b", ...)`) and its PyTorch layers
    (`self.conv = nn.Conv2d(...)` → "nn.Conv2d"). Other attributes (loggers, caches) are not inputs."""
    tensors: set[tuple[str | None, str]] = set()
    layers: dict[tuple[str | None, str], str] = {}
    for function in model.host_functions:
        if function.class_name is None:
            continue
        for node in body_nodes(function.node):
            if isinstance(node, cst.Call) and dotted(node.func) in ("self.register_buffer", "self.register_parameter") \
                    and node.args and (name := string_literal(node.args[0].value)) is not None:
                tensors.add((function.class_name, name))
            if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Call):
                continue
            name = model.call_name(node.value) or ""
            last = name.rsplit(".", 1)[-1]
            attrs = [a[5:] for a in (dotted(t.target) or "" for t in node.targets)
                     if a.startswith("self.") and a.count(".") == 1]
            for attr in attrs:
                if name.startswith("torch.") and (last == "Parameter" or last[:1].islower()):
                    tensors.add((function.class_name, attr))
                elif name.startswith("torch.nn.") and last[:1].isupper() and last not in NOT_COMPUTE_MODULES:
                    layers[(function.class_name, attr)] = f"nn.{last}"
    return tensors, layers


def host_trips(function: Function, model: TritonModule) -> dict[int, tuple[cst.Call, str]]:
    """id → (call, effect) for `.cpu()`, `.numpy()`, `.item()`, `.tolist()`, `.to("cpu")`."""
    trips: dict[int, tuple[cst.Call, str]] = {}
    for site in model.calls_in(function):
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in HOST_TRIPS:
            trips[id(site.node)] = (site.node, HOST_TRIPS[func.attr.value])
        elif isinstance(func, cst.Attribute) and func.attr.value == "to" \
                and any(names_cpu(a.value) for a in site.node.args):
            trips[id(site.node)] = (site.node, "moves the tensor to the host")
    return trips


def names_cpu(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.SimpleString):
        return (string_literal(expr) or "").split(":")[0] == "cpu"
    if isinstance(expr, cst.Call) and dotted(expr.func) in ("torch.device", "device") and expr.args:
        return names_cpu(expr.args[0].value)
    return False
