"""A manifest's pairs, smallest problem first: a GPU session with a fixed budget journals the
most pairs before it reaches KernelBench's largest problems.

    python bench/corpus/by_size.py .corpus/pairs.jsonl > .corpus/pairs-by-size.jsonl

A problem's size is its largest tensor in `get_inputs` (`torch.rand(batch_size, dim)`: the
product of the dimensions), read from the problem's file: module-level integer constants and
the literal shapes of torch's constructors, evaluated as integer arithmetic on those names
(nothing of the file is run).  A shape it cannot read counts as 0 (first).  Each line is
written as it came, with the size added (`input_elements`); ties keep the manifest's order.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import os
import sys

CONSTRUCTORS = {"rand", "randn", "randint", "ones", "zeros", "empty", "full", "randn_like", "rand_like"}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Pow: operator.pow}


def integer(node: ast.AST, names: dict[str, int]) -> int | None:
    """The value of an integer expression of literals and known names, or None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = integer(node.left, names), integer(node.right, names)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
            return None
        return OPERATORS[type(node.op)](left, right) if not (isinstance(node.op, ast.FloorDiv) and right == 0) else None
    return None


def dimensions(args: list[ast.AST], names: dict) -> list[int] | None:
    """The integers of a shape: each argument an integer, a tuple of them, or `*name` of one."""
    dims: list[int] = []
    for arg in args:
        if isinstance(arg, ast.Starred) or isinstance(arg, (ast.Tuple, ast.List)):
            inner = arg.value if isinstance(arg, ast.Starred) else arg
            found = names.get(inner.id) if isinstance(inner, ast.Name) else dimensions(getattr(inner, "elts", []), names)
            if not isinstance(found, (tuple, list)):
                return None
            dims += list(found)
        else:
            value = integer(arg, names)
            if value is None:
                return None
            dims.append(value)
    return dims


def input_elements(source: str) -> int:
    tree = ast.parse(source)
    names: dict = {}   # module-level name -> an integer or a tuple of integers
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if len(node.targets) > 1 and all(isinstance(t, ast.Name) for t in node.targets):   # height = width = 128
            for name in node.targets:
                if integer(node.value, names) is not None:
                    names[name.id] = integer(node.value, names)
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, (ast.Tuple, ast.List)):
            found = dimensions(value.elts, names)
            if found is not None:
                names[target.id] = tuple(found)
        elif isinstance(target, ast.Name) and integer(value, names) is not None:
            names[target.id] = integer(value, names)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for name, item in zip(target.elts, value.elts):   # depth, height, width = 24, 48, 48
                if isinstance(name, ast.Name) and integer(item, names) is not None:
                    names[name.id] = integer(item, names)
    largest = 0
    for function in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if getattr(call.func, "attr", None) not in CONSTRUCTORS:
                continue
            only = len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List))
            dims = dimensions(call.args[0].elts if only else call.args, names)
            if dims:
                largest = max(largest, math.prod(dims))
    return largest


def main(manifest: str) -> int:
    base = os.path.dirname(os.path.abspath(manifest))
    rows = []
    with open(manifest, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                try:
                    with open(os.path.join(base, row["problem"]), encoding="utf-8") as problem:
                        row["input_elements"] = input_elements(problem.read())
                except (OSError, SyntaxError, KeyError, TypeError):
                    row["input_elements"] = 0
                rows.append(row)
    for row in sorted(rows, key=lambda r: r["input_elements"]):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
