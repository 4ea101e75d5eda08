"""Tensors on the host side of a launch: their shapes, strides and extents as z3 terms.

A tensor the wrapper receives (`x`) gets one size symbol per dimension
(`x.shape[0]`, ...); its rank comes from how the wrapper (and the host helpers it
passes `x` to) read it: exact from `M, N = x.shape`, else the fewest dimensions
its indices need (`x.shape[1]`: 2-D); read only through `x.numel()` it is 1-D.
Tensors the wrapper makes (`torch.empty_like(x)`, `torch.empty((M, N))`,
`x.view(-1, N)`, `x.t()`) get the shape of their arguments; strides are
contiguous.  `TensorReads` is the part of `HostEval` (host.py) that does this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import libcst as cst
import z3

from kanalyze.analyzer.bounds.symbols import Unsupported
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.entities import Function

ALLOC = {"torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.empty_strided"}
ALLOC_LIKE = {"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.full_like",
              "torch.rand_like", "torch.randn_like"}
SAME_SHAPE = {"contiguous", "float", "half", "bfloat16", "double", "int", "long", "to", "cuda", "cpu",
              "detach", "clone", "type_as", "requires_grad_", "zero_", "fill_", "normal_", "uniform_"}
NEW = {"new_empty", "new_zeros", "new_ones", "new_full"}
# PyTorch's tensors have at most 64 dimensions: a read past that (`x.shape[1_000_000]`) is not
# a dimension to make a size symbol for (one per dimension up to it, a million).
MAX_RANK = 64
DTYPE_NAMES = {"float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16",
               "int32", "int64", "uint8", "bool", "long", "int", "float8_e4m3fn", "float8_e5m2"}


@dataclass(eq=False)
class HostTensor:
    label: str                 # how messages name it: `x`, `out`, `self.weight`
    shape: list                # z3 terms
    strides: list
    base: str | None = None    # the wrapper argument it views, if any

    @cached_property
    def numel(self):
        # One term per tensor: the proofs ask about it often, and z3 terms are costly to walk.
        return math.prod(self.shape, start=z3.IntVal(1)) if self.shape else z3.IntVal(1)


@dataclass(eq=False)
class HTuple:
    items: list


@dataclass(eq=False)
class HParam:
    """A wrapper argument whose type shows only by use (tensor or integer)."""

    name: str
    function: Function | None = None   # where it is a parameter (its rank is read there)


@dataclass(eq=False)
class HArith:
    """`a + b` of values whose type shows only by use: integers, or tensors
    (`x + self.bias` broadcasts)."""

    op: type
    left: object
    right: object


@dataclass(eq=False)
class HLambda:
    params: list[str]
    body: cst.BaseExpression
    function: Function | None


@dataclass(eq=False)
class HMeta:
    """`meta` of a grid lambda, `args` of a heuristic: a lookup by kernel parameter."""

    lookup: object


@dataclass(eq=False)
class HValue:
    """A non-integer Python value: a dtype, a string, None, a float, a device."""

    value: object


def contiguous_strides(shape: list) -> list:
    strides, running = [], z3.IntVal(1)
    for dim in reversed(shape):
        strides.append(running)
        running = running * dim
    return list(reversed(strides))


class TensorReads:
    """Tensor values for HostEval: it provides `model`, `function`, `env`, `bases`,
    `value`, `int` and `as_int`."""

    def as_tensor(self, value) -> HostTensor:
        if isinstance(value, HostTensor):
            return value
        if isinstance(value, HParam):
            return self.base_tensor(value.name, value.function)
        if isinstance(value, HArith):  # elementwise: the operand of higher rank gives the shape
            tensors = []
            for side in (value.left, value.right):
                try:
                    tensors.append(self.as_tensor(side))
                except Unsupported:
                    pass
            if not tensors:
                raise Unsupported("arithmetic that is not on tensors")
            widest = max(tensors, key=lambda t: len(t.shape))
            return HostTensor(widest.label, widest.shape, contiguous_strides(widest.shape))
        raise Unsupported("an argument that is not a tensor the wrapper receives or allocates")

    def base_tensor(self, name: str, function: Function | None = None) -> HostTensor:
        """A tensor the wrapper receives: one size symbol per dimension."""
        if name not in self.bases:
            rank = self._rank(name, function or self.function)
            if rank is None:
                shape = [self.env.symbol(f"{name}.numel()", "size", f"{name}.numel()")]
            else:
                shape = [self.env.symbol(f"{name}.shape[{i}]", "size", f"{name}.shape[{i}]") for i in range(rank)]
            self.bases[name] = HostTensor(name, shape, contiguous_strides(shape), base=name)
        return self.bases[name]

    def _rank(self, name: str, function: Function | None) -> int | None:
        """The rank of a received tensor, from how the wrapper (and the host helpers
        it passes the tensor to) read it: exact from `M, N = x.shape`, else the
        fewest dimensions its indices need; None when only `x.numel()` is read."""
        exact, indices = self._rank_reads(name, function, 2)
        if exact is not None:
            return _within_rank(name, exact)
        if not indices:
            return None
        positive = [i + 1 for i in indices if i >= 0]
        negative = [-i for i in indices if i < 0]
        rank = max(positive + negative)
        return _within_rank(name, max(rank, 2) if positive and negative else rank)

    def _rank_reads(self, name: str, function: Function | None, depth: int) -> tuple[int | None, set[int]]:
        if function is None:
            return None, set()
        indices: set[int] = set()
        model = self.model
        for node in model.nodes(cst.Assign):
            if model.function_of(node) is not function or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and _shape_of(node.value) == name \
                    and not any(isinstance(e, cst.StarredElement) for e in target.elements):
                return len(target.elements), indices
        for node in model.nodes(cst.Subscript, cst.Call):
            if model.function_of(node) is not function:
                continue
            index = None
            if isinstance(node, cst.Subscript) and _shape_of(node.value) == name and len(node.slice) == 1 \
                    and isinstance(node.slice[0].slice, cst.Index):
                index = int_literal(node.slice[0].slice.value)
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                    and node.func.attr.value in ("size", "stride") and dotted(node.func.value) == name and node.args:
                index = int_literal(node.args[0].value)
                if index is not None and index >= 0 and node.func.attr.value == "stride":
                    index += 1  # `x.stride(0)` is read because a dimension follows the first
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and depth > 0:
                callee = next((f for f in model.functions if f.name == node.func.value and f.class_name is None), None)
                positional = [a.value for a in node.args if a.keyword is None and not a.star]
                params = parameters_of(callee)
                for arg, param in zip(positional, params):
                    if dotted(arg) == name:
                        exact, inner = self._rank_reads(param.name.value, callee, depth - 1)
                        if exact is not None:
                            return exact, indices
                        indices |= inner
            if index is not None:
                indices.add(index)
        return None, indices

    def _tensor_method(self, tensor: HostTensor, method: str, call: cst.Call):
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if method in SAME_SHAPE:
            return HostTensor(self._label(call, tensor), tensor.shape, contiguous_strides(tensor.shape), tensor.base)
        if method in ("view", "reshape"):
            if args and self._is_dtype_view(args[0]):
                raise Unsupported(f"`{short_text(call)}` reinterprets the element type")
            return self._reshape(tensor, args, call)
        if method == "flatten" and not args:
            return HostTensor(self._label(call, tensor), [tensor.numel], [z3.IntVal(1)], tensor.base)
        if method in ("t", "transpose", "permute"):
            order = list(range(len(tensor.shape)))
            if method == "t":
                order.reverse()
            else:
                dims = [int_literal(a) for a in (args[0].elements if len(args) == 1 and isinstance(
                    args[0], (cst.Tuple, cst.List)) else args) for a in ([a.value] if isinstance(a, cst.Element)
                                                                           else [a])]
                if None in dims:
                    raise Unsupported(f"`{short_text(call)}` permutes by non-literal dimensions")
                dims = [d % len(order) for d in dims] if order else dims
                if method == "transpose" and len(dims) == 2:
                    order[dims[0]], order[dims[1]] = order[dims[1]], order[dims[0]]
                elif method == "permute" and sorted(dims) == order:
                    order = dims
                else:
                    raise Unsupported(f"`{short_text(call)}`")
            return HostTensor(self._label(call, tensor), [tensor.shape[i] for i in order],
                              [tensor.strides[i] for i in order], tensor.base)
        if method == "unsqueeze" and len(args) == 1 and int_literal(args[0]) is not None:
            dim = int_literal(args[0]) % (len(tensor.shape) + 1)
            shape = tensor.shape[:dim] + [z3.IntVal(1)] + tensor.shape[dim:]
            return HostTensor(self._label(call, tensor), shape, contiguous_strides(shape), tensor.base)
        if method in NEW:
            shape = self._shape_args(args[:1] if method == "new_full" else args, call)
            return HostTensor(self._label(call, None), shape, contiguous_strides(shape))
        if method == "numel":
            return tensor.numel
        if method == "dim":
            return z3.IntVal(len(tensor.shape))
        if method in ("size", "stride"):
            values = tensor.shape if method == "size" else tensor.strides
            if not args:
                return HTuple(list(values))
            return pick(values, int_literal(args[0]), call)
        if method == "element_size":
            raise Unsupported("`element_size()`")
        raise Unsupported(f"the tensor method `.{method}()`")

    def _reshape(self, tensor: HostTensor, args: list, call: cst.Call) -> HostTensor:
        dims = args[0].elements if len(args) == 1 and isinstance(args[0], (cst.Tuple, cst.List)) else None
        exprs = [e.value for e in dims] if dims is not None else args
        if len(exprs) == 1:
            value = self.value(exprs[0])
            if isinstance(value, HTuple):
                return self._with_shape(tensor, [self.as_int(v) for v in value.items], call)
        shape, infer = [], None
        for i, expr in enumerate(exprs):
            if int_literal(expr) == -1:
                infer = i
                shape.append(None)
            else:
                shape.append(self.int(expr))
        if infer is not None:
            known = math.prod([d for d in shape if d is not None], start=z3.IntVal(1))
            self.env.add_fact(tensor.numel % known == 0)  # else the view raises
            shape[infer] = tensor.numel / known
        else:
            self.env.add_fact(math.prod(shape, start=z3.IntVal(1)) == tensor.numel)
        return self._with_shape(tensor, shape, call)

    def _with_shape(self, tensor: HostTensor, shape: list, call) -> HostTensor:
        return HostTensor(self._label(call, tensor), shape, contiguous_strides(shape), tensor.base)

    def _shape_args(self, args: list, call) -> list:
        if len(args) == 1:
            value = self.value(args[0])
            if isinstance(value, HTuple):
                return [self.as_int(v) for v in value.items]
            return [self.as_int(value, args[0])]
        return [self.int(a) for a in args]

    def _is_dtype_view(self, expr) -> bool:
        name = dotted(expr) or ""
        return name.split(".")[-1] in DTYPE_NAMES and "." in name

    def _label(self, call, tensor: HostTensor | None) -> str:
        """The name a message uses: the variable the result is assigned to, if any."""
        parent = self.model.parent(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            return parent.targets[0].target.value
        return tensor.label if tensor is not None else short_text(call)

    def _allocation(self, name: str, args: list, call: cst.Call) -> HostTensor | None:
        """`torch.empty(...)` and its kind: a new contiguous tensor, or None if `call` is not one."""
        if name == "torch.empty_strided":
            raise Unsupported("`torch.empty_strided` with explicit strides")
        if name in ALLOC:
            shape = self._shape_args(args, call)
            return HostTensor(self._label(call, None), shape, contiguous_strides(shape))
        if name == "torch.full" and args:
            shape = self._shape_args(args[:1], call)
            return HostTensor(self._label(call, None), shape, contiguous_strides(shape))
        if name in ALLOC_LIKE and args:
            source = self.as_tensor(self.value(args[0]))
            return HostTensor(self._label(call, None), source.shape, contiguous_strides(source.shape))
        if name == "torch.arange" and len(args) == 1:
            shape = [self.int(args[0])]
            return HostTensor(self._label(call, None), shape, contiguous_strides(shape))
        return None


def pick(items: list, index: int | None, expr):
    if index is None or not -len(items) <= index < len(items):
        raise Unsupported(f"`{short_text(expr)}` indexes past the shape the wrapper reads")
    return items[index]


def _shape_of(expr) -> str | None:
    """`x` for `x.shape` and `x.size()`."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
        return dotted(expr.value)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size" \
            and not expr.args:
        return dotted(expr.func.value)
    return None


def parameters_of(function: Function | None) -> list[cst.Param]:
    if function is None:
        return []
    p = function.node.params
    return list(p.posonly_params) + list(p.params) + list(p.kwonly_params)


_EMPTY = cst.Module([])


def short_text(node) -> str:
    if node is None:
        return "?"
    text = " ".join(_EMPTY.code_for_node(node).split())
    return text if len(text) <= 60 else text[:59] + "…"


def _within_rank(name: str, rank: int) -> int:
    if rank > MAX_RANK:
        raise Unsupported(f"`{name}` read as a tensor of {rank} dimensions (PyTorch's have at most {MAX_RANK})")
    return rank
