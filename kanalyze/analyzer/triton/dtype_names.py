"""What dtype does an expression name?  (`tl.float16`, `torch.bfloat16`, `"fp16"`, a
constexpr whose default or launch value is one, the target of a cast, ...)

The dtype vocabulary the other dtype modules share: canonical names (`float16`,
`bfloat16`, `float8`, `int32`, ...), `UNKNOWN` for a value whose dtype the source
does not show, and `describe` for a dtype set as messages write it.

Everything here is static: a dtype we cannot see is `None`, never a guess.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule

_DTYPE_NAMES = {
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float64": "float64", "double": "float64", "fp64": "float64",
    "float8e4nv": "float8", "float8e5": "float8", "float8e4b15": "float8",
    "float8_e4m3fn": "float8", "float8_e5m2": "float8",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint32": "uint32", "int1": "bool", "bool": "bool",
}

LOW_PRECISION_FLOATS = {"float16", "bfloat16", "float8"}
INTEGERS = {"int8", "int16", "int32", "int64", "uint8", "uint32", "bool"}


def literal_dtype(model: TritonModule, expr: cst.BaseExpression | None) -> str | None:
    """`tl.float16` / `torch.float16` / `"fp16"` → "float16"; else None."""
    if expr is None:
        return None
    if isinstance(expr, cst.SimpleString):
        value = string_literal(expr)
        return _DTYPE_NAMES.get(value) if value is not None else None
    name = model.qualify(expr)
    if name is None:
        return None
    module, _, leaf = name.rpartition(".")
    if module in ("triton.language", "torch", "tl", "triton.language.dtype") and leaf in _DTYPE_NAMES:
        return _DTYPE_NAMES[leaf]
    return None


def resolve_dtypes(model: TritonModule, function: Function | JitFunction, expr: cst.BaseExpression | None) -> set[str]:
    """Every dtype `expr` can name, following local assignments and constexpr
    parameters to their defaults, launch values and autotune configs."""
    if expr is None:
        return set()
    direct = literal_dtype(model, expr)
    if direct is not None:
        return {direct}
    name = dotted(expr)
    if name is None or "." in name:
        return set()
    func = function.function if isinstance(function, JitFunction) else function
    found: set[str] = set()
    flow = model.flow(func)
    for d in flow.defs_of(name):
        if d.kind == "param":
            jit = model.jit.get(func.name)
            if jit is not None and jit.function is func:
                for value in jit.constexpr_values(name):
                    # Launch values live in the wrapper: resolve them there.
                    launch_func = next((l.wrapper for l in jit.launches if l.args.get(name) is value and l.wrapper), None)
                    if launch_func is not None and launch_func is not func:
                        found |= resolve_dtypes(model, launch_func, value)
                    else:
                        found |= {t for t in [literal_dtype(model, value)] if t}
        elif d.value is not None and d.value is not expr:
            found |= {t for t in [literal_dtype(model, d.value)] if t}
    return found


def cast_target(model: TritonModule, call: cst.Call) -> cst.BaseExpression | None:
    """For `x.to(tl.float16)` / `x.to(dtype=...)` / `tl.cast(x, tl.float16)`,
    the dtype expression; else None."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "to":
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value == "dtype":
                return arg.value
    if model.call_name(call) == "triton.language.cast" and len(call.args) >= 2:
        return call.args[1].value
    return None


def cast_operand(call: cst.Call) -> cst.BaseExpression | None:
    """The value being cast: `x` in `x.to(...)` or `tl.cast(x, ...)`."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
        return call.func.value
    if call.args:
        return call.args[0].value
    return None


UNKNOWN = "?"  # a member of a dtype set: some value whose dtype the source does not show


def describe(dtypes: frozenset[str] | set[str]) -> str:
    """`float32`, `float16 or bfloat16`, `unknown`: a dtype set as evidence and messages write it."""
    known = sorted(t for t in dtypes if t != UNKNOWN)
    if not known or UNKNOWN in dtypes:
        return "unknown"
    return " or ".join(known)
