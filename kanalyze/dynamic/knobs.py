"""A problem's size knobs: its module-level integers, constant expressions included.

KernelBench writes sizes as literals (`dim = 4096`), as constant expressions
(`batch_size = 8192 * 2`, `N = 2 ** 20`, `M = 1024 * 16 - 1`) and as tuples of
them (`input_shape = (32768,)`, `kernel_size = (3, 5)`: one knob per element,
named `input_shape[0]`), and unpacked from a tuple (`height, width = 128, 128`: a
knob each): all are knobs the harness may scale or perturb.  A size
computed from another name (`dim2 = dim * 2`) is not a knob of its own: it
follows the knob it is made of when the module runs.  Read with `ast`, never
executed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterable

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_LIMIT = 2 ** 63   # larger is no size


def constant_int(node: ast.AST) -> int | None:
    """The value of an integer constant expression, or None (names, floats, calls, huge values)."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int and abs(node.value) < _LIMIT else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = constant_int(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = constant_int(node.left), constant_int(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.Pow, ast.LShift)) and not 0 <= right <= 64:
            return None
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return None
        if isinstance(node.op, ast.RShift) and right < 0:
            return None
        value = _BINARY[type(node.op)](left, right)
        return value if abs(value) < _LIMIT else None
    return None


def assignment(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """`NAME = value` or `NAME: type = value` at module level, as (name, value)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None


def unpacked(node: ast.stmt) -> list[tuple[str, ast.Tuple, int]]:
    """`a, b = 1, 2` at module level: (name, the value tuple, the name's index in it) for each
    name; [] for any other statement (a starred target, lengths that differ)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Tuple)):
        return []
    target = node.targets[0]
    if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(node.value.elts)
            and all(isinstance(e, ast.Name) for e in target.elts)):
        return []
    return [(e.id, node.value, i) for i, e in enumerate(target.elts)]


def read_knobs(tree: ast.Module) -> dict[str, int]:
    """Module-level integer sizes, by name, a tuple's elements as `name[i]` (names starting with
    `_` are private, not knobs)."""
    knobs: dict[str, int] = {}
    for node in tree.body:
        for name, values, i in unpacked(node):
            value = constant_int(values.elts[i])
            if value is not None and not name.startswith("_"):
                knobs[name] = value
        found = assignment(node)
        if found is None or found[0].startswith("_"):
            continue
        value = constant_int(found[1])
        if value is not None:
            knobs[found[0]] = value
        for i, element in enumerate(_size_tuple(found[1])):
            knobs[f"{found[0]}[{i}]"] = constant_int(element)
    return knobs


def set_knobs(tree: ast.Module, sizes: dict[str, int]) -> None:
    """Rewrite the knobs' assignments in `tree` to the given sizes (the module then runs with them)."""
    for node in tree.body:
        for name, values, i in unpacked(node):
            if name in sizes and constant_int(values.elts[i]) is not None:
                values.elts[i] = ast.copy_location(ast.Constant(int(sizes[name])), values.elts[i])
        found = assignment(node)
        if found is None:
            continue
        name, value = found
        if name in sizes and constant_int(value) is not None:
            node.value = ast.copy_location(ast.Constant(int(sizes[name])), value)
        for i, element in enumerate(_size_tuple(value)):
            if f"{name}[{i}]" in sizes:
                value.elts[i] = ast.copy_location(ast.Constant(int(sizes[f"{name}[{i}]"])), element)


def knob_name(knob: str) -> str:
    """The module-level name a knob is part of (`input_shape` for `input_shape[0]`)."""
    return knob.split("[", 1)[0]


def _size_tuple(node: ast.expr) -> list[ast.expr]:
    """The elements of a tuple of integer constant expressions (`(32768,)`, `(3, 5)`), else []."""
    if isinstance(node, ast.Tuple) and node.elts and all(constant_int(e) is not None for e in node.elts):
        return list(node.elts)
    return []


def built_from_init_inputs(tree: ast.Module, knobs: Iterable[str]) -> bool:
    """Whether the problem's `Model` depends on its sizes only through `get_init_inputs`: no name
    whose value follows a knob (the knobs, and module-level names computed from them) is read
    anywhere in its class, `forward` included (a kept model's methods read the globals of the
    module it was built in), nor in the module's functions and classes it names.  Then one model
    serves every size with the same init inputs (a batch size changed, the weights the same)."""
    sized = {knob_name(k) for k in knobs}
    changed = True
    while changed:   # module-level names computed from sizes follow them
        changed = False
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            stored = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if stored - sized and _read(node) & sized:
                sized |= stored
                changed = True
    defined = {node.name: node for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if not isinstance(defined.get("Model"), ast.ClassDef):
        return False
    todo, seen = [defined["Model"]], {"Model"}
    while todo:
        names = _read(todo.pop())
        if names & sized:
            return False
        for name in sorted(names & defined.keys() - seen):
            seen.add(name)
            todo.append(defined[name])
    return True


def _read(node: ast.AST, local: frozenset = frozenset()) -> set[str]:
    """The names `node` reads from the module's globals: a function's parameters and the names
    it assigns are its own, a method does not see its class's names, a comprehension's targets
    are its own.  Where unsure, a name counts as read (the caller is then cautious)."""
    if isinstance(node, ast.Name):
        return {node.id} - local if isinstance(node.ctx, ast.Load) else set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        outer = [*args.defaults, *(d for d in args.kw_defaults if d is not None),
                 *getattr(node, "decorator_list", []), *(a.annotation for a in _arguments(args) if a.annotation)]
        found = set().union(*(_read(item, local) for item in outer))
        body = node.body if isinstance(node.body, list) else [node.body]
        declared = {name for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Global) for name in n.names}
        own = ({a.arg for a in _arguments(args)} | _stored(body)) - declared
        return found | set().union(*(_read(stmt, local | own) for stmt in body))
    if isinstance(node, ast.ClassDef):
        found = set().union(*(_read(item, local) for item in [*node.bases, *node.keywords, *node.decorator_list]))
        names = local | _stored(node.body)
        for stmt in node.body:   # methods see the module's names, not the class's
            inner = local if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else names
            found |= _read(stmt, inner)
        return found
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        targets = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        return set().union(*(_read(child, local | targets) for child in ast.iter_child_nodes(node)))
    return set().union(set(), *(_read(child, local) for child in ast.iter_child_nodes(node)))


def _arguments(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]


def _stored(body: list[ast.stmt]) -> set[str]:
    """The names a block assigns (its own nested scopes apart, their names included)."""
    found: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found
