"""Fills a CudaModule from its syntax tree (cuda_model.py says what it holds).

One tree-sitter query collects the nodes of interest; everything else here is
reading those nodes: function signatures (expanding a macro the unit defines
when a kernel is declared through one), declarations and their types, calls
and launches.
"""

from __future__ import annotations

import re

import tree_sitter as ts

from kanalyze.analyzer.cuda_model import (
    QUALIFIERS, CudaCall, CudaFunction, CudaLaunch, CudaModule, Variable, _language, callee_name,
)
from kanalyze.analyzer.cuda_sources import CudaUnit
from kanalyze.analyzer.cuda_types import UNKNOWN, CType, normalize

_CAPTURES = ("function", "declaration", "call", "assignment", "if", "for", "while", "do", "conditional",
             "define", "macro", "asm", "instantiation")
_WRAPPERS = ("pointer_declarator", "reference_declarator", "parenthesized_declarator", "attributed_declarator")


def build(model: CudaModule) -> None:
    query = _language()[2]
    captures = ts.QueryCursor(query).captures(model.root)
    for name in _CAPTURES:
        nodes = captures.get(name, [])
        nodes.sort(key=lambda n: n.start_byte)
        model.by_type[name] = nodes
    text = model.text
    for node in model.by_type["define"]:
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is not None and value is not None:
            model.defines[text(name)] = value
    for node in model.by_type["macro"]:
        name = node.child_by_field_name("name")
        if name is not None:
            model.macros[text(name)] = node
    qualifier_macros = {name: frozenset(QUALIFIERS & set(re.findall(r"__\w+__", text(value))))
                        for name, value in model.defines.items() if "__" in text(value)}
    qualifier_macros = {k: v for k, v in qualifier_macros.items() if v}
    explained: set[int] = set()
    outer_end = -1
    for node in model.by_type["function"]:
        if node.start_byte < outer_end:
            # `LOOP(i, n) { ... }` inside a function: a macro invocation the grammar reads as a
            # nested definition. Its block stays part of the enclosing function.
            name = node.child_by_field_name("declarator")
            name = name.child_by_field_name("declarator") if name is not None else None
            if name is None or model.text(name) not in model.macros:
                model.unknown_macros.append(node)
            continue
        function = _function(model, node, qualifier_macros, explained)
        if function is not None:
            model.functions.append(function)
            outer_end = node.end_byte
    model.functions.sort(key=lambda f: f.node.start_byte)
    model._starts = [f.node.start_byte for f in model.functions]
    for function in model.functions:
        if function.is_kernel:
            model.kernels.setdefault(function.name, function)
        elif function.is_device:
            model.device_functions.setdefault(function.name, function)
    for node in model.by_type["declaration"]:
        _declaration(model, node)
    for node in model.by_type["call"]:
        _call(model, node)
    for node in model.by_type["instantiation"]:
        declarator = node.child_by_field_name("declarator")
        inner = declarator.child_by_field_name("declarator") if declarator is not None else None
        if inner is not None and inner.type == "template_function":
            name, _, _, args = callee_name(inner, text)
            model.instantiations.setdefault(name, []).append(args)
    model.errors = _errors(model, explained)


def _function(model: CudaModule, node: ts.Node, qualifier_macros: dict[str, frozenset[str]],
              explained: set[int]) -> CudaFunction | None:
    text = model.text
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type in _WRAPPERS:
        declarator = declarator.child_by_field_name("declarator") or (
            declarator.named_children[-1] if declarator.named_children else None)
    if declarator is None or declarator.type != "function_declarator":
        return None
    name_node = declarator.child_by_field_name("declarator")
    if name_node is None:
        return None
    body = node.child_by_field_name("body")
    type_node = node.child_by_field_name("type")
    qualifiers = {c.type for c in node.children if c.type in QUALIFIERS}
    macro = None
    if type_node is not None and text(type_node) in qualifier_macros:
        qualifiers |= qualifier_macros[text(type_node)]
        macro = text(type_node)
        explained.update(c.id for c in node.children if c.type == "ERROR")
    raw_name = text(name_node)
    if raw_name in model.macros and not qualifiers:
        expanded = _expand(model, model.macros[raw_name], declarator.child_by_field_name("parameters"))
        if expanded is not None:
            expanded.node, expanded.name_node, expanded.body, expanded.macro = node, name_node, body, raw_name
            return expanded
    name, _, _, _ = callee_name(name_node, text)
    function = CudaFunction(name.rsplit("::", 1)[-1], node, name_node, body, frozenset(qualifiers), macro=macro,
                            return_type=CType(normalize(text(type_node))) if type_node is not None else UNKNOWN)
    function.params = _params(model, declarator.child_by_field_name("parameters"))
    parent = node.parent
    if parent is not None and parent.type == "template_declaration":
        params = parent.child_by_field_name("parameters")
        for p in params.named_children if params is not None else []:
            inner = p.child_by_field_name("declarator") or next(
                (c for c in p.named_children if c.type in ("type_identifier", "identifier")), None)
            if inner is not None:
                function.template_params.append(text(inner))
    return function


def _expand(model: CudaModule, macro: ts.Node, arguments: ts.Node | None) -> CudaFunction | None:
    """A kernel declared as `KERNEL(name, float) { ... }` through `#define KERNEL(...) __global__ void ...`:
    substitute the arguments into the macro and read the signature of the expansion."""
    params = macro.child_by_field_name("parameters")
    value = macro.child_by_field_name("value")
    if params is None or value is None or arguments is None:
        return None
    names = [model.text(p) for p in params.named_children]
    args = [model.text(a) for a in arguments.named_children]
    if len(names) != len(args) or not re.search(r"__(global|device)__", model.text(value)):
        return None
    mapping = dict(zip(names, args))
    expansion = re.sub(r"\b\w+\b", lambda m: mapping.get(m.group(0), m.group(0)), model.text(value))
    expansion = re.sub(r"\s*##\s*", "", expansion)
    mini = CudaModule.parse(CudaUnit(model.path, expansion + " {}", "macro expansion"))
    return mini.functions[0] if mini.functions else None


def _params(model: CudaModule, parameters: ts.Node | None) -> list[Variable]:
    found: list[Variable] = []
    for p in parameters.named_children if parameters is not None else []:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        type_node = p.child_by_field_name("type")
        declarator = p.child_by_field_name("declarator")
        if type_node is None or declarator is None:
            continue
        const = any(c.type == "type_qualifier" and model.text(c) == "const" for c in p.children)
        read = _read_declarator(declarator)
        if read is None:
            continue
        name_node, pointers, dims, _ = read
        ctype = CType(normalize(model.text(type_node)), pointers + len(dims))
        found.append(Variable(model.text(name_node), ctype, name_node, const=const, declaration=p))
    return found


def _read_declarator(node: ts.Node, local: bool = False) -> tuple[ts.Node, int, list[ts.Node], ts.Node | None] | None:
    """(name node, pointer depth, array extents outermost first, initialiser).
    In a function body `dim3 block(TILE, TILE);` reads as a prototype to the
    grammar; with `local` it is a variable constructed from its "parameters"."""
    pointers = 0
    dims: list[ts.Node] = []
    init = None
    while True:
        kind = node.type
        if kind in ("identifier", "field_identifier"):
            dims.reverse()
            return node, pointers, dims, init
        if kind == "init_declarator":
            init = node.child_by_field_name("value")
        elif kind == "pointer_declarator" or kind == "abstract_pointer_declarator":
            pointers += 1
        elif kind == "array_declarator":
            size = node.child_by_field_name("size")
            dims.append(size)
        elif kind == "function_declarator":
            name = node.child_by_field_name("declarator")
            if not local or init is not None or name is None or name.type != "identifier":
                return None
            return name, pointers, dims, node.child_by_field_name("parameters")
        elif kind not in _WRAPPERS:
            return None
        inner = node.child_by_field_name("declarator")
        if inner is None:
            named = [c for c in node.named_children if c.type != "type_qualifier"]
            if not named:
                return None
            inner = named[-1] if kind != "array_declarator" else named[0]
        node = inner


def _declaration(model: CudaModule, node: ts.Node) -> None:
    text = model.text
    type_node = node.child_by_field_name("type")
    if type_node is None:
        return
    shared = const = False
    for child in node.children:
        if child.type == "type_qualifier":
            word = text(child)
            shared = shared or word == "__shared__"
            const = const or word in ("const", "constexpr")
        elif child.type == "storage_class_specifier" and text(child) == "constexpr":
            const = True
    base = normalize(text(type_node))
    function = model.function_of(node)
    for declarator in node.children_by_field_name("declarator"):
        read = _read_declarator(declarator, local=function is not None)
        if read is None:
            continue
        name_node, pointers, dims, init = read
        variable = Variable(text(name_node), CType(base, pointers), name_node, init, shared, const, dims, node)
        if shared:
            model.shared.append(variable)
        if function is None:
            model.globals.setdefault(variable.name, variable)
        else:
            function.locals.setdefault(variable.name, variable)


def _call(model: CudaModule, node: ts.Node) -> None:
    function_node = node.child_by_field_name("function")
    name, method, receiver, template = callee_name(function_node, model.text)
    arguments = node.child_by_field_name("arguments")
    args = [a for a in arguments.named_children if a.type != "comment"] if arguments is not None else []
    function = model.function_of(node)
    model.calls.append(CudaCall(node, name, function, args, method, receiver, template))
    config = next((c for c in node.children if c.type == "kernel_call_syntax"), None)
    if config is None:
        return
    kernel = model.kernels.get(name.rsplit("::", 1)[-1])
    launch = CudaLaunch(node, name, kernel, [c for c in config.named_children if c.type != "comment"], args,
                        function, template)
    model.launches.append(launch)
    if template:
        model.instantiations.setdefault(name.rsplit("::", 1)[-1], []).append(template)


def _errors(model: CudaModule, explained: set[int]) -> list[ts.Node]:
    """Outermost ERROR and MISSING nodes, except those a qualifier macro explains."""
    if not model.root.has_error:
        return []
    found: list[ts.Node] = []
    stack = [model.root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            if node.id not in explained:
                found.append(node)
            continue
        if node.has_error:
            stack.extend(reversed(node.children))
    return found

