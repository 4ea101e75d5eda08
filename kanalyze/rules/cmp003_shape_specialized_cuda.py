"""CMP003 in CUDA C++: sizes and bounds fixed to the benchmark's shape, grids
that round down, shared arrays and indexing tied to one block size."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.build import read_declaration
from kanalyze.analyzer.cuda.entities import Variable
from kanalyze.analyzer.cuda.facts import (
    COMPARISONS, expr_taint, floor_divisions, grid_strides, launches_of, shared_index_dims,
)
from kanalyze.analyzer.cuda.model import CudaModule
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
        problem = {v: k for k, v in cuda.problem_sizes.items() if v >= 2}
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
            python = problem.get(value)
            if not SIZE_NAME.match(name) and python is None:
                continue
            use = _size_use(cuda, name, node)
            if use is None:
                continue
            matches = f", the problem's `{python} = {value}`" if python is not None else ""
            yield self.report_at(
                cuda, node,
                f"`{text}` fixes the size `{name}` at {value}{matches}, and the code uses it as a runtime size "
                f"(`{cuda.text(use, 40)}`): any other shape reads or writes the wrong elements; take it from the "
                f"tensor (`x.size(0)`) and pass it to the kernel",
                kernel=kernel_name(cuda, cuda.function_of(node)), name=name, value=value)

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
            if problem is None:
                continue
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
