"""A problem's size knobs: its module-level integers, constant expressions included.

KernelBench writes sizes as literals (`dim = 4096`) and as constant
expressions (`batch_size = 8192 * 2`, `N = 2 ** 20`, `M = 1024 * 16 - 1`): both
are knobs the harness may scale or perturb.  A size computed from another name
(`dim2 = dim * 2`) is not a knob of its own: it follows the knob it is made of
when the module runs.  Read with `ast`, never executed.
"""

from __future__ import annotations

import ast
import operator

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


def read_knobs(tree: ast.Module) -> dict[str, int]:
    """Module-level integer sizes, by name (names starting with `_` are private, not knobs)."""
    knobs: dict[str, int] = {}
    for node in tree.body:
        found = assignment(node)
        if found is None or found[0].startswith("_"):
            continue
        value = constant_int(found[1])
        if value is not None:
            knobs[found[0]] = value
    return knobs


def set_knobs(tree: ast.Module, sizes: dict[str, int]) -> None:
    """Rewrite the knobs' assignments in `tree` to the given sizes (the module then runs with them)."""
    for node in tree.body:
        found = assignment(node)
        if found is not None and found[0] in sizes and constant_int(found[1]) is not None:
            node.value = ast.copy_location(ast.Constant(int(sizes[found[0]])), found[1])
