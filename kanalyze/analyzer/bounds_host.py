"""The host side of a launch as z3 terms: tensors, sizes, grid, constexpr values.

`HostEval` reads the wrapper that launches a kernel (never running it) and
turns the launch's arguments into symbolic values:
  - a tensor the wrapper receives (`x`) gets one size symbol per dimension
    (`x.shape[0]`, ...); its rank comes from how the wrapper reads it
    (`M, N = x.shape`, `x.shape[1]`); read only through `x.numel()` it is 1-D;
  - tensors the wrapper allocates (`torch.empty_like(x)`, `torch.empty((M, N))`,
    `x.view(-1, N)`) get the shape of their arguments, contiguous strides;
  - integers: `x.numel()`, `x.shape[i]`, `x.stride(i)`, literals, arithmetic,
    `triton.cdiv`, `triton.next_power_of_2`, `min`/`max`, module constants;
  - the grid, also as `lambda meta: (...)` or a `def grid(meta)`.
What it cannot read raises `Unsupported`; the caller decides whether that makes
an access unknown or becomes a free symbol (a sound over-approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import libcst as cst
import z3

from kanalyze.analyzer.bounds_terms import Env, Unsupported, concrete, int_term
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.reaching import Reaching
from kanalyze.analyzer.triton import Function, TritonModule, int_literal

ALLOC = {"torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.empty_strided"}
ALLOC_LIKE = {"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.full_like",
              "torch.rand_like", "torch.randn_like"}
SAME_SHAPE = {"contiguous", "float", "half", "bfloat16", "double", "int", "long", "to", "cuda", "cpu",
              "detach", "clone", "type_as", "requires_grad_", "zero_", "fill_", "normal_", "uniform_"}
NEW = {"new_empty", "new_zeros", "new_ones", "new_full"}
DTYPE_NAMES = {"float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16",
               "int32", "int64", "uint8", "bool", "long", "int", "float8_e4m3fn", "float8_e5m2"}


@dataclass(eq=False)
class HostTensor:
    label: str                 # how messages name it: `x`, `out`, `self.weight`
    shape: list                # z3 terms
    strides: list
    base: str | None = None    # the wrapper argument it views, if any

    @property
    def numel(self):
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


class HostEval:
    """Evaluates host expressions of one function (or module scope) to symbolic values."""

    def __init__(self, model: TritonModule, function: Function | None, env: Env,
                 locals_: dict | None = None) -> None:
        self.model, self.function, self.env = model, function, env
        self.locals = locals_ or {}
        self.reaching = Reaching(model, function) if function is not None else None
        self.bases: dict[str, HostTensor] = {}
        self.defaults = {p.name.value: p.default for p in _params(function)} if function else {}

    # --- entry points --------------------------------------------------------

    def int(self, expr: cst.BaseExpression) -> z3.ArithRef:
        return self.as_int(self.value(expr), expr)

    def tensor(self, expr: cst.BaseExpression) -> HostTensor:
        return self.as_tensor(self.value(expr))

    def as_int(self, value, expr=None) -> z3.ArithRef:
        if isinstance(value, HParam):
            return self.env.symbol(value.name, "size", value.name)
        if isinstance(value, HArith):
            return _arith(value.op, self.as_int(value.left), self.as_int(value.right), expr)
        if isinstance(value, bool):
            return z3.IntVal(int(value))
        if isinstance(value, int):
            return z3.IntVal(value)
        if isinstance(value, z3.ArithRef):
            return value
        raise Unsupported(f"`{_text(expr)}` is not an integer the wrapper computes" if expr is not None
                          else "a value that is not an integer")

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

    # --- tensors -------------------------------------------------------------

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
            return exact
        if not indices:
            return None
        positive = [i + 1 for i in indices if i >= 0]
        negative = [-i for i in indices if i < 0]
        rank = max(positive + negative)
        return max(rank, 2) if positive and negative else rank

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
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and depth > 0:
                callee = next((f for f in model.functions if f.name == node.func.value and f.class_name is None), None)
                positional = [a.value for a in node.args if a.keyword is None and not a.star]
                params = _params(callee)
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
                raise Unsupported(f"`{_text(call)}` reinterprets the element type")
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
                    raise Unsupported(f"`{_text(call)}` permutes by non-literal dimensions")
                dims = [d % len(order) for d in dims] if order else dims
                if method == "transpose" and len(dims) == 2:
                    order[dims[0]], order[dims[1]] = order[dims[1]], order[dims[0]]
                elif method == "permute" and sorted(dims) == order:
                    order = dims
                else:
                    raise Unsupported(f"`{_text(call)}`")
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
            return _pick(values, int_literal(args[0]), call)
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
        return tensor.label if tensor is not None else _text(call)

    # --- expressions ---------------------------------------------------------

    def value(self, expr: cst.BaseExpression):
        if isinstance(expr, cst.Integer):
            return int(expr.evaluated_value)
        if isinstance(expr, cst.Float):
            return HValue(float(expr.evaluated_value))
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            return HValue(expr.evaluated_value)
        if isinstance(expr, cst.Name):
            return self._name(expr)
        if isinstance(expr, (cst.Tuple, cst.List)):
            if any(isinstance(e, cst.StarredElement) for e in expr.elements):
                raise Unsupported("a starred tuple")
            return HTuple([self.value(e.value) for e in expr.elements])
        if isinstance(expr, cst.Lambda):
            return HLambda([p.name.value for p in expr.params.params], expr.body, self.function)
        if isinstance(expr, cst.Attribute):
            return self._attribute(expr)
        if isinstance(expr, cst.Subscript):
            return self._subscript(expr)
        if isinstance(expr, cst.Call):
            return self._call(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self._binary(expr)
        if isinstance(expr, cst.UnaryOperation):
            inner = self.value(expr.expression)
            if isinstance(expr.operator, cst.Minus):
                return -self.as_int(inner, expr.expression) if not isinstance(inner, int) else -inner
            if isinstance(expr.operator, cst.Not):
                return z3.Not(self.condition(expr.expression))
            return inner
        if isinstance(expr, (cst.Comparison, cst.BooleanOperation)):
            return self.condition(expr)
        if isinstance(expr, cst.IfExp):
            return z3.If(self.condition(expr.test), self.int(expr.body), self.int(expr.orelse))
        raise Unsupported(f"`{_text(expr)}`")

    def condition(self, expr: cst.BaseExpression) -> z3.BoolRef:
        if isinstance(expr, cst.BooleanOperation):
            left, right = self.condition(expr.left), self.condition(expr.right)
            return z3.And(left, right) if isinstance(expr.operator, cst.And) else z3.Or(left, right)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            return z3.Not(self.condition(expr.expression))
        if isinstance(expr, cst.Comparison):
            terms, left = [], self.int(expr.left)
            for comparison in expr.comparisons:
                right = self.int(comparison.comparator)
                op = type(comparison.operator)
                ops = {cst.LessThan: left < right, cst.LessThanEqual: left <= right, cst.GreaterThan: left > right,
                       cst.GreaterThanEqual: left >= right, cst.Equal: left == right, cst.NotEqual: left != right}
                if op not in ops:
                    raise Unsupported(f"`{_text(expr)}`")
                terms.append(ops[op])
                left = right
            return z3.And(terms) if len(terms) > 1 else terms[0]
        value = self.value(expr)
        if isinstance(value, z3.BoolRef):
            return value
        if isinstance(value, (bool, int)):
            return z3.BoolVal(bool(value))
        return self.as_int(value, expr) != 0  # `if n % BLOCK:` is a truth test of an integer

    def _name(self, node: cst.Name):
        name = node.value
        if name in self.locals:
            return self.locals[name]
        if name in ("True", "False"):
            return name == "True"
        if name == "None":
            return HValue(None)
        return self._resolve(name, node)

    def _resolve(self, name: str, at: cst.CSTNode):
        defs = self.reaching.defs(name, at) if self.reaching is not None else []
        if not defs:
            return self._module_value(name, at)
        if len(defs) != 1:
            raise Unsupported(f"`{name}` has several definitions that reach the launch")
        d = defs[0]
        if d.kind == "param":
            default = self.defaults.get(name)
            if default is not None and int_literal(default) is not None:
                return int_literal(default)  # `block=1024`: callers rarely pass it
            return HParam(name, self.function)
        if d.kind == "augassign" and d.operator in ("+=", "-=", "*=", "//="):
            before = self._resolve(name, d.node)
            op = {"+=": cst.Add, "-=": cst.Subtract, "*=": cst.Multiply, "//=": cst.FloorDivide}[d.operator]
            return self._combine(op, before, self.value(d.value), d.node)
        if d.kind != "assign":
            raise Unsupported(f"`{name}` is bound by a `{d.kind}`")
        return self._assigned(d.node, name)

    def _assigned(self, statement: cst.CSTNode, name: str):
        targets = statement.targets if isinstance(statement, cst.Assign) else [statement]
        for t in targets:
            target = t.target
            if isinstance(target, cst.Name) and target.value == name:
                return self.value(statement.value)
            if isinstance(target, (cst.Tuple, cst.List)):
                elements = list(target.elements)
                names = [e.value.value if isinstance(e.value, cst.Name) else None for e in elements]
                if name not in names:
                    continue
                position = names.index(name)
                star = next((i for i, e in enumerate(elements) if isinstance(e, cst.StarredElement)), None)
                value = self.value(statement.value)
                if not isinstance(value, HTuple):
                    raise Unsupported(f"unpacking `{_text(statement.value)}`")
                if star is None:
                    if len(value.items) != len(elements):
                        raise Unsupported(f"unpacking `{_text(statement.value)}` into {len(elements)} names")
                    return value.items[position]
                if position == star:
                    raise Unsupported("a starred target")
                return value.items[position] if position < star else value.items[position - len(elements)]
        raise Unsupported(f"the assignment of `{name}`")

    def _module_value(self, name: str, node):
        for statement in self.model.module.body:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            value = None
            if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets):
                value = small.value
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                    and small.target.value == name:
                value = small.value
            if value is not None:
                return HostEval(self.model, None, self.env).value(value)
        for function in self.model.functions:  # `def grid(meta): return (...)`
            if function.name == name and function.class_name is None:
                returns = [n for n in function.node.body.body if isinstance(n, cst.SimpleStatementLine)
                           and isinstance(n.body[0], cst.Return)]
                if len(returns) == 1 and returns[0].body[0].value is not None:
                    return HLambda([p.name.value for p in _params(function)], returns[0].body[0].value, function)
        raise Unsupported(f"`{name}` is not defined in the wrapper")

    def _attribute(self, expr: cst.Attribute):
        attr = expr.attr.value
        qualified = self.model.qualify(expr) or ""
        if qualified.startswith("torch.") and attr in DTYPE_NAMES:
            return HValue(qualified)
        if dotted(expr) is not None and dotted(expr).startswith("self.") and dotted(expr).count(".") == 1 \
                and attr not in ("shape", "T", "mT", "ndim"):
            return HParam(dotted(expr), self.function)  # `self.weight`: a module attribute, typed by its use
        owner = self.value(expr.value)
        if attr in ("shape",):
            return HTuple(list(self.as_tensor(owner).shape))
        if attr == "ndim":
            return z3.IntVal(len(self.as_tensor(owner).shape))
        if attr in ("T", "mT"):
            tensor = self.as_tensor(owner)
            return HostTensor(tensor.label + "." + attr, tensor.shape[::-1], tensor.strides[::-1], tensor.base)
        if attr in ("device", "dtype", "is_cuda"):
            return HValue(attr)
        raise Unsupported(f"`{_text(expr)}`")

    def _subscript(self, expr: cst.Subscript):
        owner = self.value(expr.value)
        if len(expr.slice) != 1:
            raise Unsupported(f"`{_text(expr)}`")
        index = expr.slice[0].slice
        if isinstance(owner, HMeta) and isinstance(index, cst.Index):
            key = self.value(index.value)
            if isinstance(key, HValue) and isinstance(key.value, str):
                return owner.lookup(key.value)
        if isinstance(owner, HTuple):
            if isinstance(index, cst.Index):
                return _pick(owner.items, concrete(self.int(index.value)), expr)
            if isinstance(index, cst.Slice) and index.step is None:
                lower = concrete(self.int(index.lower)) if index.lower is not None else None
                upper = concrete(self.int(index.upper)) if index.upper is not None else None
                return HTuple(owner.items[lower:upper])
        raise Unsupported(f"`{_text(expr)}`")

    def _binary(self, expr: cst.BinaryOperation):
        return self._combine(type(expr.operator), self.value(expr.left), self.value(expr.right), expr)

    def _combine(self, op: type, left, right, expr):
        if isinstance(left, HTuple) and isinstance(right, HTuple) and op is cst.Add:
            return HTuple(left.items + right.items)
        if isinstance(left, int) and isinstance(right, int) and op in _PY_OPS:
            try:
                return _PY_OPS[op](left, right)
            except ZeroDivisionError as exc:
                raise Unsupported(f"`{_text(expr)}` divides by zero") from exc
        if any(isinstance(side, (HParam, HostTensor, HArith)) for side in (left, right)):
            return HArith(op, left, right)  # an integer or a tensor: its use decides
        return _arith(op, self.as_int(left), self.as_int(right), expr)

    def _call(self, call: cst.Call):
        name = self.model.call_name(call) or ""
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if isinstance(call.func, cst.Attribute) and not name.startswith(("torch.", "triton.", "math.")):
            owner = self.value(call.func.value)
            if isinstance(owner, (HostTensor, HParam, HArith)):
                return self._tensor_method(self.as_tensor(owner), call.func.attr.value, call)
            raise Unsupported(f"`{_text(call)}`")
        if isinstance(call.func, cst.Name) and name in self.locals and isinstance(self.locals[name], HLambda):
            return self.apply(self.locals[name], [self.value(a) for a in args])
        if name in ("triton.cdiv", "triton.language.cdiv") and len(args) == 2:
            a, b = self.int(args[0]), self.int(args[1])
            return (a + b - 1) / b
        if name == "math.ceil" and len(args) == 1 and isinstance(args[0], cst.BinaryOperation) \
                and isinstance(args[0].operator, cst.Divide):
            a, b = self.int(args[0].left), self.int(args[0].right)
            return (a + b - 1) / b
        if name == "triton.next_power_of_2" and len(args) == 1:
            of = self.int(args[0])
            value = concrete(of)
            if value is not None:
                return 1 if value <= 1 else 1 << (value - 1).bit_length()
            return self.env.pow2(of, _text(args[0]))
        if name in ("min", "max") and len(args) >= 2:
            terms = [self.int(a) for a in args]
            result = terms[0]
            for term in terms[1:]:
                result = z3.If(term < result, term, result) if name == "min" else z3.If(term > result, term, result)
            return result
        if name == "int" and len(args) == 1:
            return self.int(args[0])
        if name == "triton.language.constexpr" and len(args) == 1:
            return self.value(args[0])
        if name == "len" and len(args) == 1:
            value = self.value(args[0])
            if isinstance(value, HTuple):
                return len(value.items)
            return self.as_tensor(value).shape[0]
        if name in ALLOC:
            size_args = [a for a in call.args if a.keyword is None and not a.star]
            size = size_args[:1] if name == "torch.empty_strided" else size_args
            shape = self._shape_args([a.value for a in size], call)
            if name == "torch.empty_strided":
                raise Unsupported("`torch.empty_strided` with explicit strides")
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
        if isinstance(call.func, cst.Name) and name not in self.locals:
            try:
                target = self._module_value(call.func.value, call)
            except Unsupported:
                target = None
            if isinstance(target, HLambda):
                return self.apply(target, [self.value(a) for a in args])
        raise Unsupported(f"`{_text(call)}`")

    def apply(self, function: HLambda, values: list):
        if len(values) != len(function.params):
            raise Unsupported("a call with a different number of arguments")
        inner = HostEval(self.model, function.function, self.env, dict(zip(function.params, values)))
        inner.bases = self.bases
        return inner.value(function.body)


def _arith(op: type, a, b, expr):
    if op is cst.Add:
        return a + b
    if op is cst.Subtract:
        return a - b
    if op is cst.Multiply:
        return a * b
    if op is cst.FloorDivide:
        return a / b   # Python floors; so does z3 for a positive divisor
    if op is cst.Modulo:
        return a % b
    raise Unsupported(f"`{_text(expr)}`")


_PY_OPS = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b,
           cst.FloorDivide: lambda a, b: a // b, cst.Modulo: lambda a, b: a % b, cst.Power: lambda a, b: a ** b,
           cst.LeftShift: lambda a, b: a << b, cst.RightShift: lambda a, b: a >> b}


def _pick(items: list, index: int | None, expr):
    if index is None or not -len(items) <= index < len(items):
        raise Unsupported(f"`{_text(expr)}` indexes past the shape the wrapper reads")
    return items[index]


def _shape_of(expr) -> str | None:
    """`x` for `x.shape` and `x.size()`."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
        return dotted(expr.value)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size" \
            and not expr.args:
        return dotted(expr.func.value)
    return None


def _params(function: Function | None) -> list[cst.Param]:
    if function is None:
        return []
    p = function.node.params
    return list(p.posonly_params) + list(p.params) + list(p.kwonly_params)


_EMPTY = cst.Module([])


def _text(node) -> str:
    if node is None:
        return "?"
    text = " ".join(_EMPTY.code_for_node(node).split())
    return text if len(text) <= 60 else text[:59] + "…"


__all__ = ["HLambda", "HMeta", "HParam", "HTuple", "HValue", "HostEval", "HostTensor", "contiguous_strides",
           "int_term"]
