"""Facts over a CudaModule that several CUDA rules share.

- `name_taint` / `expr_taint`: what a local variable or an expression depends on:
  "tid" (threadIdx, so it differs between the threads of a block), "bid"
  (blockIdx), "bdim"/"gdim" (blockDim/gridDim), "data" (read from memory),
  "param" (a kernel argument), "literal".  A loop-carried update joins in.
- launch geometry: the x dimension of a launch's block, grids that round
  down (`n / threads`), kernels that stride over the grid.
- which kernel parameter each launch argument binds to.
"""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import BLOCK_BARRIERS, CudaFunction, CudaLaunch, WARP_BARRIERS
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk

_LOOP_WORD = re.compile(r"\b(?:for|while)\b")
BUILTINS = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim", "gridDim": "gdim"}
COMPARISONS = ("<", "<=", ">", ">=")
LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _cache(cuda: CudaModule) -> dict:
    cache = getattr(cuda, "_facts", None)
    if cache is None:
        cache = cuda._facts = {}
    return cache


def _definitions(cuda: CudaModule, function: CudaFunction, name: str) -> list[ts.Node]:
    """Every value assigned to a local: its initialiser, `=`, `+=`, a for loop's update."""
    found = []
    variable = function.variable(name)
    if variable is not None and variable.init is not None:
        found.append(variable.init)
    for node in function.assignments(name):
        right = node.child_by_field_name("right")
        if right is not None:
            found.append(right)
    return found


def name_taint(cuda: CudaModule, function: CudaFunction, name: str) -> frozenset[str]:
    """What a local or parameter can hold, from its definitions, computed when first asked.
    A name met again while it is being computed (a loop-carried `i += stride`) adds nothing more."""
    cache = _cache(cuda)
    key = ("taint", function.node.id, name)
    known = cache.get(key)
    if known is not None:
        return known
    cache[key] = frozenset()  # in progress
    kinds: set[str] = set()
    if any(p.name == name for p in function.params):
        kinds.add("param")
    for value in _definitions(cuda, function, name):
        kinds |= expr_taint(cuda, value, function)
    result = cache[key] = frozenset(kinds)
    return result


def expr_taint(cuda: CudaModule, node: ts.Node | None, function: CudaFunction) -> set[str]:
    if node is None:
        return set()
    cache = _cache(cuda)
    key = ("expr", node.id)
    cached = cache.get(key)
    if cached is not None:
        return set(cached)
    kinds: set[str] = set()
    for inner in walk(node):
        kind = inner.type
        if kind == "identifier":
            name = cuda.text(inner)
            if name in BUILTINS:
                kinds.add(BUILTINS[name])
            else:
                kinds |= name_taint(cuda, function, name)
        else:
            kinds |= leaf_taint(cuda, inner)
    cache[key] = frozenset(kinds)
    return kinds


def leaf_taint(cuda: CudaModule, node: ts.Node) -> set[str]:
    """What a node other than a name contributes to an expression's taint: a memory read
    (`a[i]`, `*p`, `__ldg`, a shuffle, an atomic, a texture fetch) is data, a number a literal."""
    kind = node.type
    if kind == "subscript_expression" or (kind == "pointer_expression" and cuda.text(node)[:1] == "*"):
        return {"data"}
    if kind == "call_expression":
        callee = cuda.text(node.child_by_field_name("function"))
        return {"data"} if callee.startswith(("__ldg", "__ldcs", "__ldcg", "__shfl", "atomic", "tex")) else set()
    return {"literal"} if kind == "number_literal" else set()


def conditions_above(cuda: CudaModule, node: ts.Node, function: CudaFunction) -> Iterator[tuple[ts.Node, ts.Node]]:
    """(condition, statement) of every `if`, loop and `?:` that decides whether `node` runs."""
    child = node
    for parent in _ancestors(node, function):
        kind = parent.type
        if kind == "if_statement":
            condition = parent.child_by_field_name("condition")
            if condition is not None and condition.id != child.id:
                yield condition, parent
        elif kind in ("while_statement", "do_statement"):
            condition = parent.child_by_field_name("condition")
            if condition is not None:
                yield condition, parent
        elif kind == "for_statement":
            condition = parent.child_by_field_name("condition")
            if condition is not None and condition.id != child.id:
                yield condition, parent
        elif kind == "conditional_expression":
            condition = parent.child_by_field_name("condition")
            if condition is not None and condition.id != child.id:
                yield condition, parent
        child = parent


def _ancestors(node: ts.Node, function: CudaFunction) -> Iterator[ts.Node]:
    current = node.parent
    while current is not None and current.id != function.node.id:
        yield current
        current = current.parent


def is_barrier(cuda: CudaModule, node: ts.Node, warp: bool = True) -> bool:
    """A statement or expression that is a `__syncthreads()` (or `__syncwarp()` with `warp`)."""
    if node.type == "expression_statement" and node.named_children:
        node = node.named_children[0]
    if node.type != "call_expression":
        return False
    name = cuda.text(node.child_by_field_name("function"))
    return name in BLOCK_BARRIERS or name.endswith(".sync") or (warp and name in WARP_BARRIERS)


# --- launches ----------------------------------------------------------------------


def bound_params(launch: CudaLaunch) -> dict[str, ts.Node]:
    """Kernel parameter name → the launch argument passed for it."""
    if launch.kernel is None:
        return {}
    return {p.name: a for p, a in zip(launch.kernel.params, launch.args)}


def launches_of(cuda: CudaModule, kernel: CudaFunction) -> list[CudaLaunch]:
    return [l for l in cuda.launches if l.kernel is kernel]


def grid_strides(cuda: CudaModule, kernel: CudaFunction) -> bool:
    """Does the kernel loop over the grid (`i += blockDim.x * gridDim.x`)? Then any grid covers n."""
    if kernel.body is None:
        return False
    cache = _cache(cuda)
    key = ("strides", kernel.node.id)
    if key not in cache:
        cache[key] = _grid_strides(cuda, kernel)
    return cache[key]


def _grid_strides(cuda: CudaModule, kernel: CudaFunction) -> bool:
    text = cuda.text(kernel.body)
    if any(name in text and "gridDim" in cuda.text(macro) for name, macro in cuda.macros.items()):
        return True  # `GRID_LOOP(i, n) { ... }` through a macro the unit defines
    return "gridDim" in text and _LOOP_WORD.search(text) is not None


def floor_divisions(cuda: CudaModule, launch: CudaLaunch) -> list[tuple[ts.Node, ts.Node]]:
    """(division, the launch's grid expression) for grid dimensions computed as
    `size / block` with nothing rounding up (no `+ block - 1`, no `+ 1`).  Read once per launch."""
    cache = _cache(cuda)
    key = ("floor", launch.node.id)
    if key not in cache:
        cache[key] = _floor_divisions(cuda, launch)
    return cache[key]


def dim3_parts(cuda: CudaModule, resolved: ts.Node | None) -> list[ts.Node]:
    """The components of a launch dimension: `{x, y}`, `dim3(x, y)`, or one value."""
    if resolved is None:
        return []
    if resolved.type in ("argument_list", "parameter_list", "initializer_list"):
        return list(resolved.named_children)
    if resolved.type == "call_expression" and cuda.text(resolved.child_by_field_name("function")) == "dim3":
        args = resolved.child_by_field_name("arguments")
        return list(args.named_children) if args is not None else []
    return [resolved]


def _floor_divisions(cuda: CudaModule, launch: CudaLaunch) -> list[tuple[ts.Node, ts.Node]]:
    grid = launch.config_at(0)
    if grid is None:
        return []
    host = launch.host
    candidates = dim3_parts(cuda, cuda.resolve(grid, host))
    found = []
    for candidate in candidates:
        expr = cuda.resolve(candidate, host)
        if expr is None or expr.type != "binary_expression":
            continue
        operator = expr.child_by_field_name("operator")
        if operator is None or operator.type != "/":
            continue
        numerator = cuda.resolve(expr.child_by_field_name("left"), host)
        if numerator is None or cuda.int_value(numerator, host) is not None:
            continue  # a constant grid is a choice, not a rounding
        if any(n.type == "binary_expression" and cuda.text(n.child_by_field_name("operator")) == "+"
               for n in walk(numerator)):
            continue  # (n + b - 1) / b
        found.append((expr, grid))
    return found


def shared_index_dims(cuda: CudaModule, function: CudaFunction, name: str) -> Iterator[tuple[ts.Node, int, str]]:
    """(subscript, position, "x"/"y"/"z") for each index of shared array `name` that is
    exactly a thread index (`threadIdx.x`, or a local holding only it)."""
    if function.body is None:
        return
    for node in cuda.find_words([name], "subscript_expression"):
        if not function.contains(node):
            continue
        chain: list[ts.Node] = []
        current = node
        while current is not None and current.type == "subscript_expression":
            chain.append(current)
            current = current.child_by_field_name("argument")
        if current is None or cuda.text(current) != name or node.parent is not None and \
                node.parent.type == "subscript_expression" and node.parent.child_by_field_name("argument") == node:
            continue
        chain.reverse()  # outermost dimension first
        for position, subscript in enumerate(chain):
            indices = subscript.child_by_field_name("indices")
            index = indices.named_children[0] if indices is not None and indices.named_children else None
            axis = _thread_axis(cuda, cuda.resolve(index, function) if index is not None else None)
            if axis is not None:
                yield subscript, position, axis


def _thread_axis(cuda: CudaModule, node: ts.Node | None) -> str | None:
    if node is None or node.type != "field_expression":
        return None
    if cuda.text(node.child_by_field_name("argument")) != "threadIdx":
        return None
    return cuda.text(node.child_by_field_name("field"))
