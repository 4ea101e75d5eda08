"""The host side of a launch as z3 terms: tensors, sizes, grid, constexpr values.

`HostEval` reads the wrapper that launches a kernel (never running it) and
turns the launch's arguments into symbolic values:
  - tensors (tensors.py): a received `x` with one size symbol per dimension,
    allocations and views with the shapes of their arguments;
  - integers: `x.numel()`, `x.shape[i]`, `x.stride(i)`, literals, arithmetic,
    `triton.cdiv`, `triton.next_power_of_2`, `min`/`max`, module constants;
  - the grid, also as `lambda meta: (...)` or a `def grid(meta)`.
What it cannot read raises `Unsupported`; the caller decides whether that makes
an access unknown or becomes a free symbol (a sound over-approximation).
"""

from __future__ import annotations


import libcst as cst
import z3

from kanalyze.analyzer.bounds.symbols import Env, Unsupported, concrete, literal_value
from kanalyze.analyzer.bounds.symbols import reaching
from kanalyze.analyzer.bounds.tensors import (DTYPE_NAMES, HArith, HLambda, HMeta, HostTensor, HParam, HTuple,
                                              HValue, TensorReads, parameters_of, pick, short_text, contiguous_strides)
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import MAX_LITERAL_BITS, int_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule


class HostEval(TensorReads):
    """Evaluates host expressions of one function (or module scope) to symbolic values."""

    def __init__(self, model: TritonModule, function: Function | None, env: Env,
                 locals_: dict | None = None) -> None:
        self.model, self.function, self.env = model, function, env
        self.locals = locals_ or {}
        self.reaching = reaching(model, function) if function is not None else None
        self.bases: dict[str, HostTensor] = {}
        self.defaults = {p.name.value: p.default for p in parameters_of(function)} if function else {}

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
        raise Unsupported(f"`{short_text(expr)}` is not an integer the wrapper computes" if expr is not None
                          else "a value that is not an integer")

    # --- expressions ---------------------------------------------------------

    def value(self, expr: cst.BaseExpression):
        if isinstance(expr, cst.Integer):
            value = int_literal(expr)
            if value is None:  # thousands of hex digits: no size, and z3 cannot take its decimal text
                raise Unsupported(f"`{short_text(expr)}` is too wide an integer to be a size")
            return value
        if isinstance(expr, cst.Float):
            return HValue(float(expr.evaluated_value))
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            return HValue(literal_value(expr))
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
        raise Unsupported(f"`{short_text(expr)}`")

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
                    raise Unsupported(f"`{short_text(expr)}`")
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
                    raise Unsupported(f"unpacking `{short_text(statement.value)}`")
                if star is None:
                    if len(value.items) != len(elements):
                        raise Unsupported(f"unpacking `{short_text(statement.value)}` into {len(elements)} names")
                    return value.items[position]
                if position == star:
                    raise Unsupported("a starred target")
                if len(value.items) < len(elements) - 1:  # the starred name takes none: still too few
                    raise Unsupported(f"unpacking `{short_text(statement.value)}` into {len(elements)} names")
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
                    return HLambda([p.name.value for p in parameters_of(function)], returns[0].body[0].value, function)
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
        raise Unsupported(f"`{short_text(expr)}`")

    def _subscript(self, expr: cst.Subscript):
        owner = self.value(expr.value)
        if len(expr.slice) != 1:
            raise Unsupported(f"`{short_text(expr)}`")
        index = expr.slice[0].slice
        if isinstance(owner, HMeta) and isinstance(index, cst.Index):
            key = self.value(index.value)
            if isinstance(key, HValue) and isinstance(key.value, str):
                return owner.lookup(key.value)
        if isinstance(owner, HTuple):
            if isinstance(index, cst.Index):
                return pick(owner.items, concrete(self.int(index.value)), expr)
            if isinstance(index, cst.Slice) and index.step is None:
                lower = concrete(self.int(index.lower)) if index.lower is not None else None
                upper = concrete(self.int(index.upper)) if index.upper is not None else None
                return HTuple(owner.items[lower:upper])
        raise Unsupported(f"`{short_text(expr)}`")

    def _binary(self, expr: cst.BinaryOperation):
        return self._combine(type(expr.operator), self.value(expr.left), self.value(expr.right), expr)

    def _combine(self, op: type, left, right, expr):
        if isinstance(left, HTuple) and isinstance(right, HTuple) and op is cst.Add:
            return HTuple(left.items + right.items)
        if isinstance(left, int) and isinstance(right, int) and op in _PY_OPS:
            if op in (cst.Power, cst.LeftShift) and _too_wide(op, left, right):
                raise Unsupported(f"`{short_text(expr)}` is too wide an integer to be a size")
            try:
                return _PY_OPS[op](left, right)
            except ZeroDivisionError as exc:
                raise Unsupported(f"`{short_text(expr)}` divides by zero") from exc
            except ValueError as exc:  # `1 << -1`
                raise Unsupported(f"`{short_text(expr)}`: {exc}") from exc
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
            raise Unsupported(f"`{short_text(call)}`")
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
            return self.env.pow2(of, short_text(args[0]))
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
        tensor = self._allocation(name, args, call)
        if tensor is not None:
            return tensor
        if isinstance(call.func, cst.Name) and name not in self.locals:
            try:
                target = self._module_value(call.func.value, call)
            except Unsupported:
                target = None
            if isinstance(target, HLambda):
                return self.apply(target, [self.value(a) for a in args])
        raise Unsupported(f"`{short_text(call)}`")

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
    raise Unsupported(f"`{short_text(expr)}`")


def _too_wide(op: type, left: int, right: int) -> bool:
    """Would `left ** right` or `left << right` pass MAX_LITERAL_BITS?  Computing
    `10 ** 10**9` or `1 << 10**12` takes minutes, or all the memory, in C."""
    bits = right * max(abs(left).bit_length() - 1, 0) if op is cst.Power else right + left.bit_length()
    return bits > MAX_LITERAL_BITS


_PY_OPS = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b,
           cst.FloorDivide: lambda a, b: a // b, cst.Modulo: lambda a, b: a % b, cst.Power: lambda a, b: a ** b,
           cst.LeftShift: lambda a, b: a << b, cst.RightShift: lambda a, b: a >> b}


__all__ = ["HArith", "HLambda", "HMeta", "HParam", "HTuple", "HValue", "HostEval", "HostTensor",
           "contiguous_strides"]
