"""CMP003 in CUDA C++: sizes and bounds fixed to the benchmark's shape, grids
that round down, shared arrays and indexing tied to one block size."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst
import tree_sitter as ts

from kanalyze.analyzer.cuda.build import read_declaration
from kanalyze.analyzer.cuda.entities import Variable
from kanalyze.analyzer.cuda.facts import (
    COMPARISONS, dim3_parts, expr_taint, floor_divisions, grid_strides, launches_of, shared_index_dims,
)
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.cuda.types import eval_int
from kanalyze.rules.base import Report, source
from kanalyze.rules.cmp003_shape_specialized import ShapeSpecialized
from kanalyze.rules.cuda_rule import CudaRule, kernel_name

SIZE_NAME = re.compile(
    r"^(?:[NMKBCHWDL]|n|m|size|numel|num_?el(?:ement)?s|n_?elem(?:ent)?s|total|length|len|batch(?:_?size)?|"
    r"dim\d?|hidden(?:_?size|_?dim)?|in_?features|out_?features|features|rows|cols|n_?rows|n_?cols|"
    r"seq_?len|channels|height|width|vocab(?:_?size)?|input_?size|output_?size)$", re.IGNORECASE)
NOT_A_SIZE = re.compile(r"TILE|BLOCK|THREAD|WARP|UNROLL|VEC|STRIDE|STAGE|PAD|LANE|ITEMS|PER_", re.IGNORECASE)
_AXES = {"x": 0, "y": 1, "z": 2}


class ShapeSpecializedCuda(CudaRule, clause=ShapeSpecialized):
    docs = """
    Flags sizes fixed in the source (`int N = 4096;`, `const int size = ...`,
    `#define N 4096`) when they act as a runtime size (bounds, grids, kernel
    arguments) and either are named like one or equal a size the Python file
    fixes (`N = 4096` at module level); bounds on a global index against a
    literal (`if (idx < 4096)`); grids computed by floor division
    (`n / threads`) for kernels that do not stride over the grid; `__shared__`
    arrays indexed by `threadIdx` but sized for fewer threads than a launch
    uses (or a launch whose block size is computed at run time); and indexing
    that assumes `blockDim.x` is a literal (`blockIdx.x * 256 + threadIdx.x`)
    when a launch uses another block size.

    Not flagged: loop counters and warp arithmetic (`for (int offset = 16;
    offset > 0; offset /= 2) __shfl_down_sync(...)` is not a size), a
    constant the code routes on (`if (k == 4) specialised<<<...>>> else
    general<<<...>>>` in the host code, `kernel_size == 4` in the Python file,
    or a `TORCH_CHECK` on it whose extension call the Python file wraps in a
    `try`), and `blockIdx.x * TILE` where each block covers TILE elements
    (threads times items per thread) and the grid is divided by the same
    TILE. A `TORCH_CHECK` alone is named in the message: other shapes fail
    instead of computing.

    ```cuda
    int blocks = n / threads;                        // flagged: drops n % threads elements
    int blocks = (n + threads - 1) / threads;        // instead
    ```
    """
    VALID = [source("""
        __global__ void scale(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i];
        }
        void launch(const float* x, float* y, int n) {
            int threads = 256;
            int blocks = (n + threads - 1) / threads;
            scale<<<blocks, threads>>>(x, y, n);
        }
        """), source("""
        #define THREADS 128
        #define ITEMS 4
        #define TILE (THREADS * ITEMS)
        __global__ void scale(const float* x, float* y, int n) {
            for (int k = 0; k < ITEMS; ++k) {
                int i = blockIdx.x * TILE + k * THREADS + threadIdx.x;
                if (i < n) y[i] = 2.0f * x[i];
            }
        }
        void launch(const float* x, float* y, int n) {
            scale<<<(n + TILE - 1) / TILE, THREADS>>>(x, y, n);
        }
        """)]
    INVALID = [source("""
        __global__ void scale(const float* x, float* y) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < 4096) y[i] = 2.0f * x[i];
        }
        """), source("""
        __global__ void scale(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i];
        }
        void launch(const float* x, float* y, int n) {
            scale<<<n / 256, 256>>>(x, y, n);
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        yield from self._fixed_sizes(cuda)
        yield from self._literal_bounds(cuda)
        for launch in cuda.launches:
            if launch.kernel is not None and grid_strides(cuda, launch.kernel):
                continue
            for division, _ in floor_divisions(cuda, launch):
                text = cuda.text(division, 50)
                numerator = cuda.text(division.child_by_field_name("left"), 30)
                block = cuda.text(division.child_by_field_name("right"), 30)
                yield self.report_at(
                    cuda, division,
                    f"grid `{text}` rounds down: when {numerator} is not a multiple of {block} the last elements "
                    f"get no thread; use `({numerator} + {block} - 1) / {block}`",
                    kernel=launch.kernel_name, expression=text)
        for kernel in cuda.kernel_functions():
            yield from self._shared_extents(cuda, kernel)
            yield from self._assumed_block(cuda, kernel)

    # -- sizes written into the source ----------------------------------------

    def _fixed_sizes(self, cuda: CudaModule) -> Iterator[Report]:
        problem: dict[int, list[str]] = {}   # value -> the problem's knobs of that value
        for knob, size in cuda.problem_sizes.items():
            if size >= 2:
                problem.setdefault(size, []).append(knob)
        candidates: list[tuple[str, int, ts.Node, str]] = []
        for name, value_node in cuda.defines.items():
            value = eval_int(cuda.text(value_node))
            if value is not None:
                candidates.append((name, value, value_node.parent, f"#define {name} {cuda.text(value_node)}"))
        for variable in _int_declarations(cuda):
            value = cuda.int_value(variable.init, cuda.function_of(variable.node))
            if value is not None and variable.init.type == "number_literal":
                candidates.append((variable.name, value, variable.declaration, cuda.text(variable.declaration, 50)))
        for name, value, node, text in candidates:
            if value < 2 or NOT_A_SIZE.search(name):
                continue
            python = _same_knob(name, problem.get(value, []))
            if not SIZE_NAME.match(name) and python is None:
                continue
            if _varies(cuda, name, node) or _warp_arithmetic(cuda, name):
                continue  # `for (int offset = 16; offset > 0; offset /= 2)`: a counter, not a size
            use = _size_use(cuda, name, node)
            if use is None:
                continue
            guard = _guard(cuda, name, value, python)
            if guard is not None and guard[0] == "route":
                continue  # other sizes take another path (a general kernel, PyTorch)
            matches = f", the problem's `{python} = {value}`" if python is not None else ""
            if guard is not None:
                consequence = (f"`{cuda.text(guard[1], 50)}` rejects every other size, so any other shape fails "
                               f"instead of computing")
            else:
                consequence = "any other shape reads or writes the wrong elements"
            yield self.report_at(
                cuda, node,
                f"`{text}` fixes the size `{name}` at {value}{matches}, and the code uses it as a runtime size "
                f"(`{cuda.text(use, 40)}`): {consequence}; take it from the "
                f"tensor (`x.size(0)`) and pass it to the kernel",
                kernel=kernel_name(cuda, cuda.function_of(node)), name=name, value=value,
                guarded=guard is not None)

    def _literal_bounds(self, cuda: CudaModule) -> Iterator[Report]:
        # A literal on the left starts after no letter or digit: a match begun inside a long
        # number would rescan the rest of it from every digit (quadratic).
        for node in cuda.find(rb"[<>]=?\s*[0-9]|(?<![0-9A-Za-z_'])[0-9][0-9a-zA-Z']*\s*[<>]", "binary_expression"):
            function = cuda.function_of(node)
            if function is None or not function.is_device:
                continue
            if cuda.text(node.child_by_field_name("operator")) in COMPARISONS:
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                literal, index = (right, left) if right is not None and right.type == "number_literal" else (left, right)
                if literal is None or literal.type != "number_literal" or index is None:
                    continue
                value = eval_int(cuda.text(literal))
                if value is None or value < 2 or "bid" not in expr_taint(cuda, index, function):
                    continue
                text = cuda.text(node, 50)
                yield self.report_at(
                    cuda, node,
                    f"`{text}` bounds a global index by the literal {value}: at any other size the kernel skips "
                    f"elements or runs past the tensor; compare with a size argument (`{cuda.text(index, 20)} < n`)",
                    kernel=kernel_name(cuda, function), expression=text, value=value)

    # -- block size assumptions -----------------------------------------------

    def _shared_extents(self, cuda: CudaModule, kernel) -> Iterator[Report]:
        launches = launches_of(cuda, kernel)
        if not launches:
            return
        for variable in cuda.shared:
            if not (kernel.node.start_byte <= variable.node.start_byte < kernel.node.end_byte) or not variable.dims:
                continue
            for subscript, position, axis in shared_index_dims(cuda, kernel, variable.name):
                if position >= len(variable.dims) or variable.dims[position] is None:
                    continue
                extent = cuda.int_value(variable.dims[position], kernel)
                if extent is None:
                    continue
                problem = _block_mismatch(cuda, launches, axis, extent)
                if problem is None:
                    continue
                yield self.report_at(
                    cuda, variable.declaration,
                    f"`{cuda.text(variable.declaration, 50)}` holds {extent} elements along the dimension indexed "
                    f"by `threadIdx.{axis}`, but {problem}: threads past {extent - 1} write outside it; size it "
                    f"from the same constant as the launch (or use `extern __shared__` with the launch's size)",
                    kernel=kernel.name, array=variable.name, extent=extent)
                break

    def _assumed_block(self, cuda: CudaModule, kernel) -> Iterator[Report]:
        launches = launches_of(cuda, kernel)
        if not launches or kernel.body is None:
            return
        for node in cuda.find(rb"blockIdx\.x\s*\*|\*\s*blockIdx\.x", "binary_expression"):
            if not kernel.contains(node) or cuda.text(node.child_by_field_name("operator")) != "*":
                continue
            sides = [node.child_by_field_name("left"), node.child_by_field_name("right")]
            texts = [cuda.text(s) for s in sides]
            if "blockIdx.x" not in texts:
                continue
            other = sides[1 - texts.index("blockIdx.x")]
            value = cuda.int_value(other, kernel)
            if value is None or value < 2:
                continue
            problem = _block_mismatch(cuda, launches, "x", value, exact=True)
            if problem is None or all(_grid_per(cuda, launch, 0, value) for launch in launches):
                continue  # each block covers `value` elements (threads × items per thread) and the grid agrees
            text = cuda.text(node, 40)
            yield self.report_at(
                cuda, node,
                f"`{text}` assumes {value} threads per block, but {problem}; use `blockIdx.x * blockDim.x`",
                kernel=kernel.name, expression=text, assumed=value)


def _block_mismatch(cuda: CudaModule, launches, axis: str, extent: int, exact: bool = False) -> str | None:
    """Why the launches do not fit `extent` threads along `axis`, or None when they all do."""
    for launch in launches:
        dims = cuda.dims(launch.config_at(1), launch.host)
        index = _AXES.get(axis, 0)
        if dims is None:
            return f"the launch `{cuda.text(launch.node, 40)}` computes its block size at run time"
        size = dims[index] if index < len(dims) else 1
        if size is None:
            return f"the launch `{cuda.text(launch.node, 40)}` computes its block size at run time"
        if size > extent or (exact and size != extent):
            return f"`{cuda.text(launch.node, 40)}` launches {size} threads along {axis}"
    return None


def _same_knob(name: str, knobs: list[str]) -> str | None:
    """Of the problem's knobs of a constant's value, the one its name names (`IN_CHANNELS`:
    `in_channels`, not `kernel_size`, where both are 3), else the last."""
    def flat(text: str) -> str:
        return text.lower().replace("_", "")

    def names(a: str, b: str) -> bool:   # (a short name, `N`, names nothing by itself)
        return len(a) >= 3 and a in b

    named = [k for k in knobs if names(flat(k), flat(name)) or names(flat(name), flat(k))]
    return (named or knobs or [None])[-1]


def _int_declarations(cuda: CudaModule) -> Iterator[Variable]:
    """Integer variables initialised with a number (`int N = 4096;`)."""
    for node in cuda.find(rb"\b\w+\s*=\s*[0-9][0-9a-fA-FxXuUlL']*\s*[;,]", "declaration"):
        for variable in read_declaration(cuda, node, local=cuda.function_of(node) is not None):
            if variable.init is not None and variable.ctype.base == "int" and not variable.ctype.pointers \
                    and not variable.dims:
                yield variable


def _size_use(cuda: CudaModule, name: str, declaration: ts.Node) -> ts.Node | None:
    """A use of `name` as a size: compared with an index, in a launch, or passed to a kernel or allocation."""
    for match in re.finditer(rf"\b{re.escape(name)}\b", cuda.unit.text):
        start = len(cuda.unit.text[: match.start()].encode("utf-8", "surrogatepass"))
        if declaration.start_byte <= start < declaration.end_byte:
            continue
        node = cuda.root.descendant_for_byte_range(start, start + len(name.encode()))
        if node is None or node.type not in ("identifier", "type_identifier"):
            continue
        parent = node.parent
        while parent is not None and parent.type in ("parenthesized_expression", "binary_expression") \
                and cuda.text(parent.child_by_field_name("operator")) not in COMPARISONS:
            parent = parent.parent
        if parent is None:
            continue
        if parent.type == "binary_expression" or parent.type in ("argument_list", "kernel_call_syntax",
                                                                 "initializer_list", "init_declarator"):
            return parent
    return None


# -- what makes a fixed size not one ------------------------------------------------

SHUFFLES = ("__shfl_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync", "__shfl_down", "__shfl_up",
            "__shfl_xor", "__shfl")
CHECKS = ("TORCH_CHECK", "assert", "AT_ASSERT", "AT_ASSERTM", "TORCH_INTERNAL_ASSERT", "CHECK_EQ", "TORCH_CHECK_EQ")
_EQUALITIES = ("==", "!=")


def _varies(cuda: CudaModule, name: str, declaration: ts.Node) -> bool:
    """Is the variable assigned after its declaration (a loop counter)?  Then its
    initial value is where an iteration starts, not a size."""
    function = cuda.function_of(declaration)
    return function is not None and bool(function.assignments(name))


def _warp_arithmetic(cuda: CudaModule, name: str) -> bool:
    """Is the constant a shuffle offset or width (`__shfl_down_sync(mask, v, offset)`)?
    Warp arithmetic (warpSize / 2, lane masks) is tied to the warp, not to the problem."""
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    return any(any(pattern.search(cuda.text(a)) for a in call.args[2:] or call.args[1:])
               for call in cuda.calls_named(*SHUFFLES))


def _guard(cuda: CudaModule, name: str, value: int, python: str | None) -> tuple[str, ts.Node] | None:
    """A check of the runtime size against the fixed one: ("route", node) when other sizes
    take another path (an `if` in the host code or in the Python file, a `try` around the
    extension call in Python), ("raise", node) when they are rejected (`TORCH_CHECK`)."""
    names = {name.lower()} | ({python.lower()} if python else set())
    raised = None
    for call in cuda.calls_named(*CHECKS):
        if call.function is not None and not call.function.is_device and call.args and \
                _compares(cuda, call.args[0], name, value):
            raised = call.node
            break
    for function in cuda.functions:
        if function.is_device or function.body is None:
            continue
        for statement in cuda.nodes_in(function, "if_statement"):
            condition = statement.child_by_field_name("condition")
            if condition is None or not _compares(cuda, condition, name, value):
                continue
            body = cuda.text(statement.child_by_field_name("consequence"))
            if re.search(r"\b(?:throw|TORCH_CHECK|AT_ERROR|TORCH_INTERNAL_ASSERT)\b", body) and \
                    statement.child_by_field_name("alternative") is None:
                raised = raised or condition
                continue
            return "route", condition
    host = cuda.host
    if host is not None:
        for match in re.finditer(rf"(?:\b([A-Za-z_][\w.]*)\s*[=!]=\s*{value}\b|(?<![\w.]){value}\s*[=!]=\s*"
                                 rf"([A-Za-z_][\w.]*))", host.text):
            compared = (match.group(1) or match.group(2)).rsplit(".", 1)[-1].lower()
            line = host.text[host.text.rfind("\n", 0, match.start()) + 1: match.start()].strip()
            if compared in names and not line.startswith("assert"):
                return "route", cuda.root
        if raised is not None and _caught(cuda):
            return "route", raised
    return ("raise", raised) if raised is not None else None


def _compares(cuda: CudaModule, condition: ts.Node, name: str, value: int) -> bool:
    """Does `condition` test a runtime value for equality with `name` (or with `value`)?"""
    for node in walk(condition):
        if node.type != "binary_expression" or cuda.text(node.child_by_field_name("operator")) not in _EQUALITIES:
            continue
        sides = [node.child_by_field_name("left"), node.child_by_field_name("right")]
        if any(s is None for s in sides):
            continue
        fixed = [s.type == "identifier" and cuda.text(s) == name or
                 s.type == "number_literal" and eval_int(cuda.text(s)) == value for s in sides]
        literal = [s.type == "number_literal" or s.type == "identifier" and cuda.text(s) == name for s in sides]
        if (fixed[0] and not literal[1]) or (fixed[1] and not literal[0]):
            return True
    return False


def _caught(cuda: CudaModule) -> bool:
    """Does the Python file call the extension inside a `try` (whose handler then does the work)?"""
    host, ext = cuda.host, cuda.unit.extension
    if host is None or ext is None or not ext.functions:
        return False
    for call in host.calls:
        last = (dotted(call.node.func) or "").rsplit(".", 1)[-1]
        if last in ext.functions and any(isinstance(a, cst.Try) for a in host.ancestors(call.node)):
            return True
    return False


def _grid_per(cuda: CudaModule, launch, axis: int, value: int) -> bool:
    """Is the launch's grid along `axis` a division by `value` (`(w + TILE - 1) / TILE`)?"""
    grid = launch.config_at(0)
    if grid is None:
        return False
    resolved = cuda.resolve(grid, launch.host)
    if resolved is not None and resolved.type == "identifier":
        variable = cuda.variable(cuda.text(resolved), launch.host)
        resolved = variable.init if variable is not None else None
    parts = dim3_parts(cuda, resolved)
    if axis >= len(parts):
        return False
    expr = cuda.resolve(parts[axis], launch.host)
    if expr is None or expr.type != "binary_expression" or cuda.text(expr.child_by_field_name("operator")) != "/":
        return False
    return cuda.int_value(expr.child_by_field_name("right"), launch.host) == value
