"""Host-side sizes, read in order: which tensor a size belongs to, what integer an
expression always has, and whether a launch grid's division leaves a remainder.

Answers "is `x.numel() // x.shape[-1]` exact?", "is `n` this tensor's element
count?", "what are the elements of `grid = (nb,)`?".  Every function takes the
`Reaching` of the host function the expression is in, so a name is read as the
assignments that reach it there (`inp = x.contiguous()` before `inp.numel()`).
Unlike `shapes.constant_int` / `single_value` (any assignment in the function),
these follow only the definitions that reach the read.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import int_literal, keyword
from kanalyze.analyzer.triton.dataflow import Def
from kanalyze.analyzer.triton.entities import Function, Launch
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import assigned_value

# Views that keep a tensor's element count (and its sizes, up to order).
SAME_NUMEL = {"contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
              "unsqueeze", "t", "transpose", "permute", "movedim", "swapaxes", "detach", "to", "cuda", "float",
              "half", "bfloat16", "type_as", "clone"}
_CONST_OPS = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b,
              cst.FloorDivide: lambda a, b: a // b if b else None, cst.LeftShift: lambda a, b: a << b if 0 <= b < 64 else None,
              cst.Power: lambda a, b: a ** b if 0 <= b < 64 else None}


def text_key(model: TritonModule, expr: cst.CSTNode) -> str:
    """An expression's source without whitespace, so two spellings of it compare equal."""
    text = node_text(model.module, expr)
    text = text if len(text) <= 200 else text[:199] + "…"
    return "".join(text.split())


# --- values --------------------------------------------------------------------

def values(reaching: Reaching, name: cst.Name) -> list[cst.BaseExpression | None]:
    """What each definition reaching `name` assigns it (None where unknown)."""
    defs = reaching.defs(name.value, name)
    return [assigned_value(d, name.value) if d.kind == "assign" else None for d in defs] or [None]


def constant(reaching: Reaching, expr: cst.BaseExpression, depth: int) -> int | None:
    """The integer `expr` always has: literals, arithmetic on them, a name whose reaching
    definitions all assign the same one."""
    literal = int_literal(expr)
    if literal is not None or depth <= 0:
        return literal
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _CONST_OPS:
        a, b = constant(reaching, expr.left, depth - 1), constant(reaching, expr.right, depth - 1)
        return None if a is None or b is None else _CONST_OPS[type(expr.operator)](a, b)
    if isinstance(expr, cst.Name):
        found = {constant(reaching, v, depth - 1) if v is not None else None for v in values(reaching, expr)}
        return found.pop() if len(found) == 1 else None
    return None


def resolve(reaching: Reaching, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> cst.BaseExpression:
    """A name's value when one assignment reaches it (for `grid = (nb,)`, `nb = n // B`)."""
    if isinstance(expr, cst.Name) and depth > 0:
        defs = reaching.defs(expr.value, at)
        if len(defs) == 1 and defs[0].kind == "assign" and defs[0].value is not None:
            return resolve(reaching, defs[0].value, defs[0].value, depth - 1)
    return expr


def names_behind(model: TritonModule, function: Function, expr: cst.BaseExpression) -> set[str]:
    """The names `expr` reads, and every name whose value flows into it."""
    flow = model.flow(function)
    return {n.value for n in walk(expr) if isinstance(n, cst.Name)} | {d.name for d in flow.upstream(expr)}


# --- which tensor a size belongs to ----------------------------------------------

def tensor_key(reaching: Reaching, expr: cst.BaseExpression, depth: int = 4) -> str:
    """`x`, also for `inp` after `inp = x.contiguous()` (views that keep the element count)."""
    while depth > 0:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in SAME_NUMEL:
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "data"):
            expr = expr.value
        elif isinstance(expr, cst.Name):
            found = values(reaching, expr)
            if len(found) != 1 or found[0] is None or not isinstance(found[0], (cst.Call, cst.Attribute, cst.Name)):
                break
            expr = found[0]
        else:
            break
        depth -= 1
    return text_key(reaching.model, expr)


def size_of(reaching: Reaching, expr: cst.BaseExpression, depth: int) -> tuple[str, str] | None:
    """(tensor, kind) when `expr` is a size of one tensor: kind "numel" for its
    element count (or that count over some of its sizes), "dims" for a product
    of its sizes; the tensor "*" for the literal 1, which is both."""
    if depth < 0:
        return None
    if int_literal(expr) == 1:
        return ("*", "dims")
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        attr, base = expr.func.attr.value, expr.func.value
        if attr in ("numel", "nelement") and not expr.args:
            return (tensor_key(reaching, base), "numel")
        if attr == "size" and len(expr.args) == 1:
            return (tensor_key(reaching, base), "dims")
    if isinstance(expr, cst.Call) and dotted(expr.func) in ("int", "math.prod", "prod") and len(expr.args) == 1:
        inner = size_of(reaching, expr.args[0].value, depth) if dotted(expr.func) == "int" else \
            shape_of(reaching, expr.args[0].value, depth)
        return inner if dotted(expr.func) == "int" else (None if inner is None else (inner, "dims"))
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        tensor = shape_of(reaching, expr.value, depth)
        return None if tensor is None else (tensor, "dims")
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Multiply, cst.FloorDivide)):
        a, b = size_of(reaching, expr.left, depth - 1), size_of(reaching, expr.right, depth - 1)
        if a is None or b is None or "*" not in (a[0], b[0]) and a[0] != b[0]:
            return None
        tensor = b[0] if a[0] == "*" else a[0]
        if isinstance(expr.operator, cst.FloorDivide):
            return (tensor, "numel") if a[1] == "numel" and b[1] == "dims" else None
        return (tensor, "dims")
    if isinstance(expr, cst.Name):
        found: set[tuple[str, str]] = set()
        for d in reaching.defs(expr.value, expr):
            value = assigned_value(d, expr.value) if d.kind == "assign" else d.value if d.kind == "augassign" else None
            if d.kind == "augassign" and d.operator != "*=":
                return None
            size = size_of(reaching, value, depth - 1) if value is not None else _unpacked_size(reaching, d, expr.value)
            if size is None:
                return None
            found.add(size)
        tensors = {t for t, _ in found if t != "*"}
        if len(tensors) > 1 or not found:
            return None
        kinds = {k for _, k in found}
        return (tensors.pop() if tensors else "*", "numel" if kinds == {"numel"} else "dims" if kinds == {"dims"} else "mixed")
    return None


def _unpacked_size(reaching: Reaching, d: Def, name: str) -> tuple[str, str] | None:
    """`B, T, D = x.shape`: each name is a size of `x`."""
    if d.kind != "assign" or not isinstance(d.node, cst.Assign):
        return None
    for target in d.node.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)) and \
                any(isinstance(e.value, cst.Name) and e.value.value == name for e in target.target.elements):
            tensor = shape_of(reaching, d.value, 3)
            return None if tensor is None else (tensor, "dims")
    return None


def shape_of(reaching: Reaching, expr: cst.BaseExpression, depth: int) -> str | None:
    """The tensor whose shape `expr` is: `x.shape`, `x.size()`, a name bound to one, a slice of one."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
        return tensor_key(reaching, expr.value)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size" and not expr.args:
        return tensor_key(reaching, expr.func.value)
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice):
        return shape_of(reaching, expr.value, depth)
    if isinstance(expr, cst.Name) and depth > 0:
        found = values(reaching, expr)
        if len(found) == 1 and found[0] is not None:
            return shape_of(reaching, found[0], depth - 1)
    return None


def size_keys(reaching: Reaching, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 3) -> set[str]:
    """Texts that name the size `expr` (its own, "numel:x" for `x.numel()`, and those of
    the one value assigned to it): two sizes sharing a key are the same size."""
    model = reaching.model
    keys = {text_key(model, expr)}
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("numel", "nelement"):
        keys.add("numel:" + text_key(model, expr.func.value))
    elif isinstance(expr, cst.Name) and depth > 0:
        defs = reaching.defs(expr.value, at)
        if len(defs) == 1 and defs[0].kind == "assign" and defs[0].value is not None:
            keys |= size_keys(reaching, defs[0].value, defs[0].value, depth - 1)
    return keys


def allocated_size_keys(reaching: Reaching, call: cst.Call) -> set[str]:
    """The `size_keys` of what a `torch.empty*` call allocates: "numel:x" for
    `empty_like(x)` and `empty(x.shape)`, a 1-d size's own keys; none for several sizes."""
    model = reaching.model
    name = model.call_name(call)
    if name == "torch.empty_like" and call.args:
        return {"numel:" + text_key(model, call.args[0].value)}
    sizes = [a.value for a in call.args if a.keyword is None]
    if name == "torch.empty_strided" or len(sizes) != 1:
        return set()
    size = sizes[0]
    if isinstance(size, (cst.Tuple, cst.List)):
        if len(size.elements) != 1:
            return set()
        size = size.elements[0].value
    if isinstance(size, cst.Attribute) and size.attr.value == "shape" or \
            isinstance(size, cst.Call) and isinstance(size.func, cst.Attribute) and size.func.attr.value == "size" and not size.args:
        base = size.value if isinstance(size, cst.Attribute) else size.func.value
        return {"numel:" + text_key(model, base)}
    return size_keys(reaching, size, call)


# --- grids -----------------------------------------------------------------------

def grid_elements(reaching: Reaching, grid: cst.BaseExpression, at: cst.CSTNode,
                  depth: int = 3) -> list[cst.BaseExpression]:
    """The dimensions of a launch grid (a tuple, a name bound to one, a `lambda meta:`),
    each resolved through the one assignment that reaches it; [] when unknown."""
    if isinstance(grid, cst.Lambda):
        return grid_elements(reaching, grid.body, at, depth)
    if isinstance(grid, (cst.Tuple, cst.List)):
        return [resolve(reaching, e.value, at, depth) for e in grid.elements]
    if isinstance(grid, cst.Name) and depth > 0:
        value = resolve(reaching, grid, at, depth)
        return [] if value is grid else grid_elements(reaching, value, at, depth - 1)
    return []


def floor_division(model: TritonModule, node: cst.CSTNode, element: cst.BaseExpression) -> bool:
    """`n // BLOCK` in the grid dimension `element`, but not the ceiling idiom
    `(n + BLOCK - 1) // BLOCK` nor `n // BLOCK + 1`."""
    if isinstance(node, cst.Call) and dotted(node.func) in ("int", "math.floor") and node.args:
        inner = node.args[0].value
        return isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Divide)
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
        return False
    left = node.left
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, (cst.Add, cst.Subtract)):
        return False
    parent = model.parent(node)
    return not (node is not element and isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Add))


def inside_ceiling(model: TritonModule, node: cst.CSTNode, element: cst.BaseExpression) -> bool:
    """`triton.cdiv(C // groups, BLOCK)`: the tail is rounded up by the `cdiv`
    around it; the quotient is an extent, not a count of blocks."""
    for a in model.ancestors(node):
        if isinstance(a, cst.Call) and a.args and (model.call_name(a) or dotted(a.func) or "").rpartition(".")[2] == "cdiv":
            return True
        if a is element:
            break
    return False


def exact_division(reaching: Reaching, node: cst.CSTNode) -> bool:
    """`a // b` that leaves no remainder: constants that divide (`16 // 8`,
    `M // 1`), or a tensor's element count over its own sizes
    (`x.numel() // x.shape[-1]`, `inp.numel() // M // N`)."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
        return False
    a, b = constant(reaching, node.left, 4), constant(reaching, node.right, 4)
    if b == 1 or (a is not None and b and a % b == 0):
        return True
    size = size_of(reaching, node, 4)
    return (size is not None and size[1] == "numel") or _viewed_whole(reaching, node)


def _viewed_whole(reaching: Reaching, node: cst.BinaryOperation) -> bool:
    """`M = x.numel() // N` and `x.view(M, N)` (or `.reshape`) in the same function: the view
    fails unless `M * N` is x's element count, so past it the division is exact.  `N`
    may be spelled again (`N = math.prod(shape)` beside `rows = x.numel() // math.prod(shape)`)."""
    model, left = reaching.model, node.left
    if not (isinstance(left, cst.Call) and isinstance(left.func, cst.Attribute) and left.func.attr.value == "numel"):
        return False
    tensor, quotient, divisor = (text_key(model, e) for e in (left.func.value, node, node.right))
    parent = model.parent(node)
    held = {t.target.value for t in parent.targets if isinstance(t.target, cst.Name)} \
        if isinstance(parent, cst.Assign) else set()

    def spells(expr: cst.BaseExpression, key: str, names: set[str]) -> bool:
        if text_key(model, expr) == key or (isinstance(expr, cst.Name) and expr.value in names):
            return True
        return isinstance(expr, cst.Name) and all(
            v is not None and text_key(model, v) == key for v in values(reaching, expr))

    for call in walk(reaching.root):
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and \
                call.func.attr.value in ("view", "reshape") and len(call.args) == 2 and \
                text_key(model, call.func.value) == tensor and \
                spells(call.args[0].value, quotient, held) and spells(call.args[1].value, divisor, set()):
            return True
    return False


def divisibility_checked(function: Function, model: TritonModule | None = None) -> bool:
    """`assert n % BLOCK == 0` (or an `if ...: raise`) makes floor division exact.  With
    `model`, a `backward` of a `torch.autograd.Function` also counts its `forward`'s
    checks: the tensors it gets (saved ones, gradients of outputs) have forward's sizes."""
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)
               for node in _checking_functions(function, model) for test in _size_checks(node)
               for n in walk(test))


def division_checked(model: TritonModule, function: Function, division: cst.BinaryOperation) -> bool:
    """Is `n // b` exact by a check of `n % b` in `function` (`assert n % b == 0`,
    `if n % b != 0: raise`), or in the `forward` of the autograd Function whose `backward`
    it is?  The operands are matched by their spelling."""
    n, b = text_key(model, division.left), text_key(model, division.right)
    return any(isinstance(m, cst.BinaryOperation) and isinstance(m.operator, cst.Modulo)
               and text_key(model, m.left) == n and text_key(model, m.right) == b
               for node in _checking_functions(function, model) for test in _size_checks(node) for m in walk(test))


def _checking_functions(function: Function, model: TritonModule | None) -> list[cst.FunctionDef]:
    """`function`, and the `forward` beside it when it is the `backward` of a class."""
    nodes = [function.node]
    if model is not None and function.name == "backward" and function.class_name is not None:
        nodes += [f.node for f in model.functions
                  if f.class_name == function.class_name and f.name == "forward" and f.node is not function.node]
    return nodes


def _size_checks(node: cst.FunctionDef):
    """The tests of the asserts and of the `if`s that raise in a function."""
    for statement in walk(node):
        if isinstance(statement, cst.Assert):
            yield statement.test
        elif isinstance(statement, cst.If) and any(isinstance(n, cst.Raise) for n in walk(statement.body)):
            yield statement.test


def block_follows_size(reaching: Reaching, launch: Launch, store: cst.Call) -> bool:
    """A constant grid whose block is sized from the runtime size
    (`BLOCK=triton.next_power_of_2(n)` on a `(1,)` grid) covers it; `reaching`
    is the launching wrapper's."""
    model, kernel, wrapper = reaching.model, launch.kernel, launch.wrapper
    assert wrapper is not None
    mask = keyword(store, "mask", 2)
    if mask is None:
        return False
    upstream = model.flow(kernel.function).upstream(mask)
    sizes = [launch.args[d.name] for d in upstream if d.kind == "param" and d.name in launch.args
             and not kernel.param(d.name).is_constexpr]
    blocks = [launch.args[d.name] for d in upstream if d.kind == "param" and d.name in launch.args
              and kernel.param(d.name).is_constexpr]
    size_names = set().union(*(names_behind(model, wrapper, e) for e in sizes)) if sizes else set()
    return any(constant(reaching, b, 4) is None and names_behind(model, wrapper, b) & size_names
               for b in blocks)
