"""Reading a CudaModule's nodes (model.py says what the model holds).

`build` reads the top of the tree: functions and their qualifiers (expanding a
macro the unit defines when a kernel is declared through one), `#define`s,
file-scope declarations, and the regions that did not parse.  The `read_*`
functions read one thing when the model is first asked for it: a parameter
list, a function's locals, a declaration, a call, a launch.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import QUALIFIERS, CudaCall, CudaFunction, CudaLaunch, Variable
from kanalyze.analyzer.cuda.sources import CudaUnit
from kanalyze.analyzer.cuda.types import UNKNOWN, CType, normalize
from kanalyze.analyzer.cuda.values import walk

if TYPE_CHECKING:
    from kanalyze.analyzer.cuda.model import CudaModule

_WRAPPERS = ("pointer_declarator", "reference_declarator", "parenthesized_declarator", "attributed_declarator")
# Top-level items that hold further top-level items.
_CONTAINERS = {"namespace_definition", "linkage_specification", "declaration_list", "preproc_if", "preproc_ifdef",
               "preproc_else", "preproc_elif", "template_declaration", "class_specifier", "struct_specifier",
               "field_declaration_list"}
# `LOOP(i, n) {` inside a body: an upper-case call followed by a block.
_MACRO_BLOCK = re.compile(rb"\b[A-Z_][A-Z0-9_]*\s*\([^;{}]*\)\s*\{")


def build(model: CudaModule) -> None:
    text = model.text
    qualifier_macros: dict[str, frozenset[str]] = {}
    explained: set[int] = set()
    stack = list(reversed(model.root.named_children))
    definitions: list[ts.Node] = []
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "function_definition":
            definitions.append(node)
        elif kind == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                model.defines[text(name)] = value
                words = QUALIFIERS & set(re.findall(r"__\w+__", text(value)))
                if words:
                    qualifier_macros[text(name)] = frozenset(words)
        elif kind == "preproc_function_def":
            name = node.child_by_field_name("name")
            if name is not None:
                model.macros[text(name)] = node
        elif kind == "declaration":
            model.top_declarations.append(node)
        elif kind == "template_instantiation":
            model.top_instantiations.append(node)
        elif kind in _CONTAINERS:
            stack.extend(reversed(node.named_children))
    for node in definitions:
        function = _function(model, node, qualifier_macros, explained)
        if function is not None:
            model.functions.append(function)
    model.functions.sort(key=lambda f: f.node.start_byte)
    model._starts = [f.node.start_byte for f in model.functions]
    for function in model.functions:
        if function.is_kernel:
            model.kernels.setdefault(function.name, function)
        elif function.is_device:
            model.device_functions.setdefault(function.name, function)
    for match in _MACRO_BLOCK.finditer(model.source):
        node = model.root.descendant_for_byte_range(match.start(), match.start())
        while node is not None and node.type not in ("function_definition", "translation_unit"):
            node = node.parent
        function = model.function_of(node) if node is not None and node.type == "function_definition" else None
        if function is None or function.node.id == node.id:
            continue
        # The grammar reads `LOOP(i, n) { ... }` in a body as a nested definition; its block stays
        # part of the enclosing function.
        head = node.child_by_field_name("declarator")
        head = head.child_by_field_name("declarator") if head is not None else None
        if head is None or text(head) not in model.macros:
            model.unknown_macros.append(node)
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
            return CudaFunction(expanded.name, node, name_node, body, expanded.qualifiers, declarator,
                                macro=raw_name, return_type=expanded.return_type, model=model, expanded=expanded)
    name, _, _, _ = callee_name(name_node, text)
    function = CudaFunction(name.rsplit("::", 1)[-1], node, name_node, body, frozenset(qualifiers), declarator,
                            macro=macro, model=model,
                            return_type=CType(normalize(text(type_node))) if type_node is not None else UNKNOWN)
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
    mini = type(model).parse(CudaUnit(model.path, expansion + " {}", "macro expansion"))
    return mini.functions[0] if mini.functions else None


def read_params(model: CudaModule, parameters: ts.Node | None) -> list[Variable]:
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


def read_locals(model: CudaModule, function: CudaFunction) -> dict[str, Variable]:
    found: dict[str, Variable] = {}
    for node in model.nodes_in(function, "declaration"):
        for variable in read_declaration(model, node):
            found.setdefault(variable.name, variable)
    return found


def read_declaration(model: CudaModule, node: ts.Node, local: bool = True) -> list[Variable]:
    """The variables a declaration declares (read once per declaration: locals and name lookups share them)."""
    key = (node.id, local)
    found = model._declarations.get(key)
    if found is None:
        found = model._declarations[key] = _read_declaration(model, node, local)
    return found


def _read_declaration(model: CudaModule, node: ts.Node, local: bool) -> list[Variable]:
    text = model.text
    type_node = node.child_by_field_name("type")
    if type_node is None:
        return []
    shared = const = False
    for child in node.children:
        if child.type == "type_qualifier":
            word = text(child)
            shared = shared or word == "__shared__"
            const = const or word in ("const", "constexpr")
        elif child.type == "storage_class_specifier" and text(child) == "constexpr":
            const = True
    base = normalize(text(type_node))
    found = []
    for declarator in node.children_by_field_name("declarator"):
        read = _read_declarator(declarator, local)
        if read is None:
            continue
        name_node, pointers, dims, init = read
        found.append(Variable(text(name_node), CType(base, pointers), name_node, init, shared, const, dims, node))
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
            dims.append(node.child_by_field_name("size"))
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


def read_call(model: CudaModule, node: ts.Node) -> CudaCall | None:
    function_node = node.child_by_field_name("function")
    if function_node is None:
        return None
    name, method, receiver, template = callee_name(function_node, model.text)
    arguments = node.child_by_field_name("arguments")
    args = [a for a in arguments.named_children if a.type != "comment"] if arguments is not None else []
    return CudaCall(node, name, model.function_of(node), args, method, receiver, template)


def read_launch(model: CudaModule, node: ts.Node) -> CudaLaunch | None:
    config = next((c for c in node.children if c.type == "kernel_call_syntax"), None)
    call = model._call(node)
    if config is None or call is None:
        return None
    kernel = model.kernels.get(call.name.rsplit("::", 1)[-1])
    return CudaLaunch(node, call.name, kernel, [c for c in config.named_children if c.type != "comment"],
                      call.args, call.function, call.template_args)


def callee_name(function: ts.Node | None, text) -> tuple[str, str | None, ts.Node | None, list[str]]:
    """(name, method, receiver, template args) of a call's `function` node."""
    if function is None:
        return "", None, None, []
    kind = function.type
    if kind == "template_function":
        args = function.child_by_field_name("arguments")
        template = [text(a) for a in args.named_children] if args is not None else []
        return text(function.child_by_field_name("name")), None, None, template
    if kind == "field_expression":
        receiver = function.child_by_field_name("argument")
        field_node = function.child_by_field_name("field")
        template: list[str] = []
        if field_node is not None and field_node.type == "template_method":
            args = field_node.child_by_field_name("arguments")
            template = [text(a) for a in args.named_children] if args is not None else []
            field_node = field_node.child_by_field_name("name")
        method = text(field_node)
        return f"{text(receiver)}.{method}", method, receiver, template
    if kind == "qualified_identifier":
        name = text(function)
        if "<" in name:
            name = re.sub(r"<[^<>]*>", "", name)
        return name, None, None, []
    return text(function), None, None, []


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


__all__ = ["build", "callee_name", "read_call", "read_declaration", "read_launch", "read_locals", "read_params",
           "walk"]
