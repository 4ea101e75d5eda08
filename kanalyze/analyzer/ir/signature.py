"""What a kernel's parameters are at a launch, read statically from the wrapper.

Triton compiles a kernel for a signature (`x_ptr: *fp16`, `n: i32`) and
constexpr values (`BLOCK=1024`).  At run time they come from the actual
arguments; ahead of time, from what the source shows:

  - the argument at the launch site, traced back through the wrapper's
    assignments: `torch.empty(..., dtype=torch.float16)`, `x.half()`,
    `x.to(torch.bfloat16)` give a pointer's element type; `x.shape[0]`,
    `x.stride(0)`, `x.numel()`, an int literal give `i32`; a float literal or
    `float(...)` gives `fp32`;
  - failing that, how the kernel uses the parameter (a pointer into
    `tl.load` / `tl.store` / `tl.atomic_*`) and its name;
  - constexpr values: a literal, a module constant, or a local the wrapper
    assigns once; `triton.next_power_of_2(N)` of a runtime `N` has no static
    value.

Whatever is assumed rather than read is recorded, so each IR result can say
which configuration it is for.
"""

from __future__ import annotations

import re

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import bind_call_args
from kanalyze.analyzer.triton.dataflow import names_read, own_value
from kanalyze.analyzer.triton.dtypes import literal_dtype
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule

TL = "triton.language."
MEMORY_OPS = {TL + "load", TL + "store"} | {TL + f"atomic_{op}" for op in
                                             ("add", "max", "min", "and", "or", "xor", "xchg", "cas")}

# Triton's signature spelling of each canonical dtype name (kanalyze.analyzer.triton.dtypes).
SIGNATURE_TYPE = {
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint32": "u32",
    "bool": "i1",
}
_TL_DTYPE = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
             "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
             "uint32": "uint32", "bool": "int1"}
_FP8 = {"float8_e4m3fn": "float8e4nv", "float8_e5m2": "float8e5", "float8e4nv": "float8e4nv",
        "float8e5": "float8e5", "float8e4b15": "float8e4b15"}
_CAST_METHODS = {"half": "float16", "float": "float32", "bfloat16": "bfloat16", "double": "float64",
                 "int": "int32", "long": "int64", "bool": "bool", "short": "int16", "byte": "uint8"}
_ALIASING = {"contiguous", "view", "reshape", "flatten", "t", "transpose", "permute", "expand", "clone", "cuda",
             "detach", "squeeze", "unsqueeze", "view_as", "reshape_as", "expand_as", "narrow", "as_strided"}
_INT_METHODS = {"stride", "size", "numel", "dim", "nelement", "element_size", "item"}
_INT_CALLS = {"len", "int", "triton.cdiv", "triton.next_power_of_2", "math.prod", "max", "min"}
_FLOAT_CALLS = {"float", "math.sqrt", "math.log", "math.exp"}

_POINTER_NAME = re.compile(r"(^|_)(ptr|pointer|p)$|ptr", re.IGNORECASE)
_FLOAT_NAME = re.compile(r"^(eps|epsilon|scale|alpha|beta|gamma|momentum|slope|negative_slope|temperature|"
                         r"sm_scale|softmax_scale|dropout_p|p_drop|theta|lr|weight_decay)$", re.IGNORECASE)
_BOOL_CONSTEXPR = re.compile(r"^(HAS|IS|USE|ENABLE|EVEN|APPLY|WITH|DO|CAUSAL|TRANS)", re.IGNORECASE)
_BLOCK_CONSTEXPR = re.compile(r"BLOCK|TILE|SIZE|GROUP|^B[MNKD]?$|^B_|_B$|CHUNK|SPLIT", re.IGNORECASE)

GUESSED_BLOCK = 64  # small enough that a guessed tile never exceeds a budget by itself


def pointer_params(model: TritonModule, kernel: JitFunction) -> set[str]:
    """Parameters the kernel (or a helper it calls) loads, stores or atomically
    updates through: the base of the pointer argument, `ptr` in `ptr + offs * stride`
    (a name under `*`, `//` or `%`, or inside another call, is an offset, not a base)."""
    found: set[str] = set()
    for jit, param in _pointer_bases(model, kernel, depth=3):
        if jit is kernel:
            found.add(param)
    return found


def _likely_bases(names: set[str]) -> set[str]:
    """`x_ptr + offs` where `offs = start + ...`: both are added; a name that says
    pointer settles which is the base."""
    named = {n for n in names if _POINTER_NAME.search(n)}
    return named or names


def _pointer_bases(model: TritonModule, jit: JitFunction, depth: int) -> set[tuple[JitFunction, str]]:
    bases: set[tuple[JitFunction, str]] = set()
    for site in model.calls_in(jit, *MEMORY_OPS):
        args = [a for a in site.node.args if a.keyword is None or a.keyword.value == "pointer"]
        if args:
            bases |= {(jit, name) for name in _likely_bases(_base_names(model, jit, args[0].value))}
    if depth > 0:
        for helper_name in jit.calls_helpers:
            helper = model.jit.get(helper_name)
            if helper is None:
                continue
            for owner, param in _pointer_bases(model, helper, depth - 1):
                if owner is not helper:
                    bases.add((owner, param))
                    continue
                for caller, call in helper.called_from:
                    if caller is not jit.function:
                        continue
                    arg = bind_call_args(call, helper.params).get(param)
                    if arg is not None:
                        bases |= {(jit, name) for name in _likely_bases(_base_names(model, jit, arg))}
    return bases


def _base_names(model: TritonModule, jit: JitFunction, expr: cst.BaseExpression) -> set[str]:
    """Parameters of `jit` that `expr` is a pointer offset from."""
    flow = model.flow(jit.function)
    found: set[str] = set()
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, (cst.Add, cst.Subtract)):
                stack += [node.left, node.right]
        elif isinstance(node, cst.Subscript):
            stack.append(node.value)
        elif isinstance(node, cst.Name):
            for d in flow.defs_of(node.value):
                if id(d) in seen:
                    continue
                seen.add(id(d))
                if d.kind == "param":
                    found.add(d.name)
                elif d.value is not None and d.kind in ("assign", "augassign"):
                    stack.append(d.value)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
            stack.append(node.func.value)  # `ptr.to(tl.pointer_type(...))`
    return found


def index_pointers(model: TritonModule, kernel: JitFunction) -> set[str]:
    """Pointer parameters whose loaded values are used as offsets into memory or as
    loop bounds (`tl.load(idx_ptr + i)` added to another pointer, `range(start, end)`):
    integer tensors, whatever the wrapper shows."""
    flow = model.flow(kernel.function)
    loaded: dict[str, set[str]] = {}   # local name → pointer params its value was loaded from
    for d in flow.defs:
        if d.value is None or d.kind not in ("assign", "augassign"):
            continue
        for node in walk(d.value):
            if isinstance(node, cst.Call) and model.call_name(node) == TL + "load" and node.args:
                bases = _base_names(model, kernel, node.args[0].value)
                if bases:
                    loaded.setdefault(d.name, set()).update(bases)
    if not loaded:
        return set()
    found: set[str] = set()
    for d in flow.defs:   # values computed from loaded ones carry their origin
        if d.value is not None and d.name not in loaded:
            origins = set().union(*(loaded.get(n, set()) for n in names_read(d.value)))
            if origins:
                loaded[d.name] = origins
    uses = [site.node.args[0].value for site in model.calls_in(kernel, *MEMORY_OPS) if site.node.args]
    uses += [a.value for site in model.calls_in(kernel, "range", TL + "range", TL + "static_range")
             for a in site.node.args]
    for d in flow.defs:
        if d.kind == "for" and d.value is not None:
            uses.append(d.value)
    for helper_name in kernel.calls_helpers:   # `_scatter_add(out_ptr, idx, ...)`: offsets used in a helper
        helper = model.jit.get(helper_name)
        if helper is None:
            continue
        offsets = set().union(*(names_read(site.node.args[0].value) for site in model.calls_in(helper, *MEMORY_OPS)
                                if site.node.args)) - {p for _, p in _pointer_bases(model, helper, 0)}
        for caller, call in helper.called_from:
            if caller is kernel.function:
                uses += [arg for name, arg in bind_call_args(call, helper.params).items() if name in offsets]
    for expr in uses:
        for name in names_read(expr):
            found |= loaded.get(name, set())
    return found


def dtype_text(model: TritonModule, expr: cst.BaseExpression) -> str | None:
    """`torch.float16` / `tl.float16` / `"fp16"` as Triton source: `triton.language.float16`."""
    name = model.qualify(expr) if not isinstance(expr, cst.SimpleString) else None
    leaf = (name or "").rpartition(".")[2]
    if leaf in _FP8:
        return TL + _FP8[leaf]
    dtype = literal_dtype(model, expr)
    if dtype in _TL_DTYPE:
        return TL + _TL_DTYPE[dtype]
    return None


class LaunchReader:
    """Reads parameter types and constexpr values at one launch (or none)."""

    def __init__(self, model: TritonModule, kernel: JitFunction, pointer_dtype: str = "fp32") -> None:
        self.model = model
        self.kernel = kernel
        self.pointer_dtype = pointer_dtype
        self.pointers = pointer_params(model, kernel)
        self.indexes = index_pointers(model, kernel)
        self._function: Function | None = None   # the wrapper being read (for `n - count`)
        self.module_names = self._module_assignments()

    def _module_assignments(self) -> dict[str, cst.BaseExpression]:
        found: dict[str, cst.BaseExpression] = {}
        for statement in self.model.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name):
                        name = small.targets[0].target.value
                        found[name] = small.value if name not in found else None  # reassigned: unknown
        return {k: v for k, v in found.items() if v is not None}

    # --- parameter types ----------------------------------------------------

    def param_type(self, name: str, arg: cst.BaseExpression | None,
                   wrapper: Function | None) -> tuple[str, str | None]:
        """(signature type, note when assumed)."""
        kind, dtype = (None, None)
        if arg is not None:
            kind, dtype = self._classify(wrapper, arg)
        if kind is None and name in self.pointers:
            kind = "ptr"
        if kind == "ptr":
            if dtype is None and name in self.indexes:
                return "*i32", "*i32 assumed (its values index memory or bound a loop)"
            if dtype is None:
                where = f"`{self._text(arg)}`" if arg is not None else "no launch"
                return f"*{self.pointer_dtype}", f"*{self.pointer_dtype} assumed (element type not visible: {where})"
            return f"*{SIGNATURE_TYPE.get(dtype, self.pointer_dtype)}", None
        if kind in ("i32", "i64", "fp32", "i1", "none"):
            return kind, None
        if _POINTER_NAME.search(name):
            return f"*{self.pointer_dtype}", f"*{self.pointer_dtype} assumed from the name"
        if _FLOAT_NAME.match(name):
            return "fp32", "fp32 assumed from the name"
        return "i32", ("i32 assumed" + (f" (`{self._text(arg)}`)" if arg is not None else ""))

    def _classify(self, function: Function | None, expr: cst.BaseExpression,
                  depth: int = 0) -> tuple[str | None, str | None]:
        """(kind, element dtype) of a wrapper expression: the expression itself,
        else the nearest definitions of the name it is (not every value that ever
        flowed into it: `K` of `M, K = a.shape` is an int even though `a = a.half()`)."""
        self._function = function
        kind, dtype = self._classify_one(expr)
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and kind in (None, "ptr") \
                and dtype is None and expr.func.attr.value in _ALIASING and depth < 6:
            inner = self._classify(function, expr.func.value, depth + 1)   # `x.contiguous()`: x's dtype
            return ("ptr", inner[1]) if inner[0] in (None, "ptr") else inner
        if kind is not None or function is None or not isinstance(expr, cst.Name) or depth >= 6:
            return kind, dtype
        for d in self.model.flow(function).defs_of(expr.value):
            if d.kind == "param":
                k, t = self._param_annotation(function, d.name)
            elif d.value is not None and d.kind in ("assign", "walrus", "with"):
                k, t = self._classify(function, own_value(d), depth + 1)
            else:
                continue
            if t is not None and dtype is None:
                dtype = t
            if k == "ptr" or kind is None:
                kind = k or kind
        return kind, dtype

    def _classify_one(self, e: cst.BaseExpression) -> tuple[str | None, str | None]:
        model = self.model
        if isinstance(e, cst.Integer):
            return ("i64" if abs(int(e.evaluated_value)) >= 2**31 else "i32"), None
        if isinstance(e, cst.Float):
            return "fp32", None
        if isinstance(e, cst.Name) and e.value in ("True", "False"):
            return "i1", None
        if isinstance(e, cst.Name) and e.value == "None":
            return "none", None
        if isinstance(e, cst.Subscript) and isinstance(e.value, cst.Attribute) and e.value.attr.value == "shape":
            return "i32", None
        if isinstance(e, cst.Attribute) and e.attr.value == "shape":  # `M, K = a.shape`
            return "i32", None
        if isinstance(e, cst.BinaryOperation):
            function = self._function
            left, right = self._classify(function, e.left, 5)[0], self._classify(function, e.right, 5)[0]
            if "fp32" in (left, right):
                return "fp32", None
            if left in ("i32", "i64") or right in ("i32", "i64"):
                return "i32", None
            return None, None
        if not isinstance(e, cst.Call):
            return None, None
        name = model.call_name(e) or ""
        func = e.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _CAST_METHODS and not e.args:
                return "ptr", _CAST_METHODS[method]
            if method == "to":
                for arg in e.args:
                    if arg.keyword is None or arg.keyword.value == "dtype":
                        dtype = literal_dtype(model, arg.value)
                        if dtype is not None:
                            return "ptr", dtype
                return "ptr", None
            if method in _INT_METHODS:
                return "i32", None
        if name in _INT_CALLS:
            return "i32", None
        if name in _FLOAT_CALLS:
            return "fp32", None
        if name.startswith("torch."):
            for arg in e.args:
                if arg.keyword is not None and arg.keyword.value == "dtype":
                    return "ptr", literal_dtype(model, arg.value)
            return "ptr", None
        return None, None

    def _param_annotation(self, function: Function, name: str) -> tuple[str | None, str | None]:
        for p in [*function.node.params.params, *function.node.params.kwonly_params]:
            if p.name.value != name:
                continue
            annotation = dotted(p.annotation.annotation) if p.annotation is not None else None
            if annotation in ("torch.Tensor", "Tensor"):
                return "ptr", None
            if annotation == "int":
                return "i32", None
            if annotation == "float":
                return "fp32", None
            if annotation == "bool":
                return "i1", None
            if p.default is not None:
                return self._classify_one(p.default)
        return None, None

    # --- constexpr values ---------------------------------------------------

    def value_text(self, function: Function | None, expr: cst.BaseExpression, depth: int = 0) -> str | None:
        """Python source for `expr`'s value that the scratch module can evaluate,
        or None when it is only known at run time."""
        if depth > 4:
            return None
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return expr.value
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, (cst.Integer, cst.Float)):
            return self._text(expr)
        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return expr.value
        dtype = dtype_text(self.model, expr)
        if dtype is not None:
            return dtype
        if isinstance(expr, cst.Name):
            if function is not None:
                flow = self.model.flow(function)
                if flow.defs_of(expr.value):
                    value = flow.single_value(expr.value)
                    return self.value_text(function, value, depth + 1) if value is not None else None
            if expr.value in self.module_names:
                value = self.module_names[expr.value]
                return self.value_text(None, value, depth + 1) or None
            return None
        if isinstance(expr, cst.BinaryOperation):
            left = self.value_text(function, expr.left, depth + 1)
            right = self.value_text(function, expr.right, depth + 1)
            if left is not None and right is not None:
                operator = _OPERATORS.get(type(expr.operator))
                return f"({left}) {operator} ({right})" if operator else None
            return None
        if isinstance(expr, cst.Call) and self.model.call_name(expr) in ("triton.next_power_of_2", "triton.cdiv",
                                                                         "min", "max"):
            args = [self.value_text(function, a.value, depth + 1) for a in expr.args if a.keyword is None]
            if args and all(a is not None for a in args):
                return f"{self.model.call_name(expr)}({', '.join(args)})"
        return None

    def guess(self, name: str, expr: cst.BaseExpression | None) -> tuple[str, str] | None:
        """A stand-in value for a constexpr with no static value, and why."""
        shown = f" (the launch passes `{self._text(expr)}`)" if expr is not None else ""
        boolean = isinstance(expr, (cst.Comparison, cst.BooleanOperation)) or (
            isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not))
        if boolean or _BOOL_CONSTEXPR.match(name):
            return "True", f"{name}=True assumed{shown}"
        shape_like = expr is not None and any(word in self._text(expr) for word in
                                              ("next_power_of_2", ".shape", ".size(", ".stride(", "numel"))
        if _BLOCK_CONSTEXPR.search(name) or shape_like:
            return str(GUESSED_BLOCK), f"{name}={GUESSED_BLOCK} assumed{shown}"
        return None

    def _text(self, expr: cst.CSTNode | None) -> str:
        if expr is None:
            return ""
        text = node_text(self.model.module, expr)
        return text if len(text) <= 50 else text[:49] + "…"


_OPERATORS = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//", cst.Divide: "/",
              cst.Power: "**", cst.LeftShift: "<<", cst.RightShift: ">>", cst.Modulo: "%"}

