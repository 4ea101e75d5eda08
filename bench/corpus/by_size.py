"""A manifest's pairs, smallest problem first: a GPU session with a fixed budget journals the
most pairs before it reaches KernelBench's largest problems.

    python bench/corpus/by_size.py .corpus/pairs.jsonl > .corpus/pairs-by-size.jsonl

A problem's size is its largest tensor in `get_inputs` (`torch.rand(batch_size, dim)`: the
product of the dimensions), read from the problem's file: module-level integer constants and
the literal shapes of torch's constructors, evaluated as integer arithmetic on those names
(nothing of the file is run).  A shape it cannot read counts as 0 (first).  Each line is
written as it came, with the size added (`input_elements`); ties keep the manifest's order.

    python bench/corpus/by_size.py --outputs .corpus/pairs.jsonl > .corpus/pairs-by-size.jsonl

With `--outputs` (torch needed), a problem's outputs count too: a tall-skinny matmul's
inputs are small and its output is 32768² elements.  Each problem's `Model` runs once on
torch's meta device (shapes only: nothing is computed or allocated), and the pair is placed
by the larger of its inputs and outputs (`output_elements` added; a problem that cannot run
there keeps its inputs' size).  KernelBench's problems are the benchmark's own code, as the
reference worker runs them.
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


def output_elements(path: str, seconds: int = 30) -> int | None:
    """The elements of the outputs of the problem at `path`, run on the meta device; None where
    it cannot run there (an op without a meta kernel, a `.cuda()` call) or takes over `seconds`."""
    import signal

    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from kanalyze.dynamic.loading import load_problem

    def out_of_time(*_):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(seconds)
    try:
        problem, _ = load_problem(path, {})   # at its own sizes
        with torch.device("meta"), torch.no_grad():
            out = problem.Model(*problem.get_init_inputs())(*problem.get_inputs())
        leaves = out if isinstance(out, (tuple, list)) else [out]
        return sum(t.numel() for t in leaves if isinstance(t, torch.Tensor))
    except BaseException:   # (the problem's own failure: its inputs' size stands)
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def main(manifest: str, outputs: bool = False) -> int:
    base = os.path.dirname(os.path.abspath(manifest))
    rows, found = [], {}
    with open(manifest, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                try:
                    with open(os.path.join(base, row["problem"]), encoding="utf-8") as problem:
                        row["input_elements"] = input_elements(problem.read())
                except (OSError, SyntaxError, KeyError, TypeError):
                    row["input_elements"] = 0
                if outputs and isinstance(row.get("problem"), str):
                    if row["problem"] not in found:
                        found[row["problem"]] = output_elements(os.path.join(base, row["problem"]))
                    row["output_elements"] = found[row["problem"]]
                rows.append(row)
    for row in sorted(rows, key=lambda r: max(r["input_elements"], r.get("output_elements") or 0)):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(main([a for a in arguments if a != "--outputs"][0], "--outputs" in arguments))
