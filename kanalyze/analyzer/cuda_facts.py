"""Facts over a CudaModule that several CUDA rules share.

- `taint(cuda, function)`: what each local variable's value depends on:
  "tid" (threadIdx, so it differs between the threads of a block), "bid"
  (blockIdx), "bdim"/"gdim" (blockDim/gridDim), "data" (read from memory),
  "param" (a kernel argument), "literal".  A loop-carried update joins in.
- launch geometry: the x dimension of a launch's block, grids that round
  down (`n / threads`), kernels that stride over the grid.
- which kernel parameter each launch argument binds to.
"""

from __future__ import annotations

from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda_model import BLOCK_BARRIERS, WARP_BARRIERS, CudaFunction, CudaLaunch, CudaModule, walk

BUILTINS = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim", "gridDim": "gdim"}
COMPARISONS = ("<", "<=", ">", ">=")
LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _cache(cuda: CudaModule) -> dict:
    cache = getattr(cuda, "_facts", None)
    if cache is None:
        cache = cuda._facts = {}
    return cache


def taint(cuda: CudaModule, function: CudaFunction) -> dict[str, frozenset[str]]:
    """Local name → the kinds of values it can hold (see the module docstring)."""
    cache = _cache(cuda)
    key = ("taint", function.node.id)
    if key in cache:
        return cache[key]
    sources: dict[str, list[ts.Node]] = {}
    for variable in function.locals.values():
        if variable.init is not None:
            sources.setdefault(variable.name, []).append(variable.init)
    if function.body is not None:
        start, end = function.node.start_byte, function.node.end_byte
        for node in cuda.nodes("assignment"):
            if start <= node.start_byte < end:
                left = node.child_by_field_name("left")
                right = node.child_by_field_name("right")
                if left is not None and left.type == "identifier" and right is not None:
                    sources.setdefault(cuda.text(left), []).append(right)
        for node in cuda.nodes("for"):  # `for (int i = tid; ...; i += stride)`: the update is an assignment too
            if start <= node.start_byte < end:
                update = node.child_by_field_name("update")
                if update is not None and update.type == "assignment_expression":
                    left = update.child_by_field_name("left")
                    if left is not None and left.type == "identifier":
                        sources.setdefault(cuda.text(left), []).append(update.child_by_field_name("right"))
    table: dict[str, frozenset[str]] = {p.name: frozenset({"param"}) for p in function.params}
    for name in sources:
        table.setdefault(name, frozenset())
    for _ in range(6):  # a fixed point; chains in kernels are short
        changed = False
        for name, values in sources.items():
            kinds = set(table.get(name, ()))
            for value in values:
                kinds |= expr_taint(cuda, value, function, table)
            frozen = frozenset(kinds)
            if frozen != table.get(name):
                table[name] = frozen
                changed = True
        if not changed:
            break
    cache[key] = table
    return table


def expr_taint(cuda: CudaModule, node: ts.Node | None, function: CudaFunction,
               table: dict[str, frozenset[str]] | None = None) -> set[str]:
    if node is None:
        return set()
    if table is None:
        table = taint(cuda, function)
    kinds: set[str] = set()
    for inner in walk(node):
        kind = inner.type
        if kind == "identifier":
            name = cuda.text(inner)
            if name in BUILTINS:
                kinds.add(BUILTINS[name])
            elif name in table:
                kinds |= table[name]
        elif kind == "subscript_expression" or (kind == "pointer_expression" and cuda.text(inner)[:1] == "*"):
            kinds.add("data")
        elif kind == "call_expression":
            callee = cuda.text(inner.child_by_field_name("function"))
            if callee.startswith(("__ldg", "__ldcs", "__ldcg", "__shfl", "atomic", "tex")):
                kinds.add("data")
        elif kind == "number_literal":
            kinds.add("literal")
    return kinds


def thread_dependent(cuda: CudaModule, node: ts.Node | None, function: CudaFunction) -> bool:
    return "tid" in expr_taint(cuda, node, function)


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


def block_x(cuda: CudaModule, launch: CudaLaunch) -> tuple[int | None, bool]:
    """(x threads per block, known?): known is False when the launch computes it at run time."""
    dims = cuda.dims(launch.config_at(1), launch.host)
    if not dims or dims[0] is None:
        return None, False
    return dims[0], True


def grid_strides(cuda: CudaModule, kernel: CudaFunction) -> bool:
    """Does the kernel loop over the grid (`i += blockDim.x * gridDim.x`)? Then any grid covers n."""
    if kernel.body is None:
        return False
    text = cuda.text(kernel.body)
    if any(name in text and "gridDim" in cuda.text(macro) for name, macro in cuda.macros.items()):
        return True  # `GRID_LOOP(i, n) { ... }` through a macro the unit defines
    return "gridDim" in text and any(kernel.node.start_byte <= n.start_byte < kernel.node.end_byte
                                     for n in cuda.nodes("for", "while"))


def floor_divisions(cuda: CudaModule, launch: CudaLaunch) -> list[tuple[ts.Node, ts.Node]]:
    """(division, the launch's grid expression) for grid dimensions computed as
    `size / block` with nothing rounding up (no `+ block - 1`, no `+ 1`)."""
    grid = launch.config_at(0)
    if grid is None:
        return []
    host = launch.host
    candidates: list[ts.Node] = []
    resolved = cuda.resolve(grid, host)
    if resolved is not None and resolved.type in ("argument_list", "parameter_list", "initializer_list"):
        candidates = list(resolved.named_children)
    elif resolved is not None and resolved.type == "call_expression" and \
            cuda.text(resolved.child_by_field_name("function")) == "dim3":
        args = resolved.child_by_field_name("arguments")
        candidates = list(args.named_children) if args is not None else []
    elif resolved is not None:
        candidates = [resolved]
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
    for node in walk(function.body):
        if node.type != "subscript_expression":
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
