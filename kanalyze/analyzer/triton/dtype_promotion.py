"""Which dtype does a Triton operation produce from its operands' dtypes?

`a op b` follows Triton's promotion (semantic.computation_type_impl): a Python
number is weak and does not widen a tensor of its kind, fp16 with bf16 gives
float32, `/` of floats computes in float32.  The `tl` function families say
which functions return int32, a float, or their argument's dtype.  DtypeFlow
(dtype_flow.py) applies these to the values it follows.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.dtype_names import UNKNOWN

FLOAT_RANK = {"float8": 0, "float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
INT_RANK = {"bool": 0, "int8": 1, "uint8": 1, "int16": 2, "int32": 3, "uint32": 3, "int64": 4}
TL = "triton.language."
TL_INT = {"program_id", "num_programs", "arange", "argmax", "argmin", "cdiv", "umulhi", "randint", "histogram"}
TL_FLOAT = {"exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos", "sigmoid", "softmax", "erf",
            "fdiv", "div_rn", "tanh", "log1p", "expm1", "pow", "floor", "ceil"}
TL_SAME = {"sum", "cumsum", "cumprod", "xor_sum", "reduce", "max", "min", "abs", "reshape", "view", "trans",
           "permute", "broadcast_to", "expand_dims", "ravel", "multiple_of", "max_contiguous", "max_constancy",
           "flip", "sort", "associative_scan", "join", "interleave", "zeros_like", "full_like", "atomic_add",
           "atomic_max", "atomic_min", "atomic_xchg", "split"}
TL_JOIN = {"maximum", "minimum", "clamp", "fma"}
METHOD_SAME = {"sum", "reshape", "trans", "permute", "broadcast_to", "expand_dims", "ravel", "max", "min",
               "cumsum", "view", "abs"}


SCALAR = "scalar"  # a kernel's scalar argument: an int or a float32 (Python floats are passed as fp32)


def promote(a: str, b: str, a_weak: bool = False, b_weak: bool = False, division: bool = False) -> str:
    """Triton's result dtype of `a op b` (semantic.computation_type_impl): a weak side is a
    Python number, which does not widen a tensor of its kind or above; `/` and `%` of floats
    compute in float32."""
    if SCALAR in (a, b):
        other = b if a == SCALAR else a
        if other in ("float32", "float64"):
            return other
        return "float32" if division and other != UNKNOWN and other != SCALAR else UNKNOWN
    if UNKNOWN in (a, b):
        return UNKNOWN
    if division and (a in FLOAT_RANK or b in FLOAT_RANK) and "float64" not in (a, b):
        return "float32"
    if a_weak and not b_weak:
        return "float32" if a in FLOAT_RANK and b in INT_RANK else b
    if b_weak and not a_weak:
        return "float32" if b in FLOAT_RANK and a in INT_RANK else a
    if a in FLOAT_RANK or b in FLOAT_RANK:
        if a not in FLOAT_RANK or b not in FLOAT_RANK:
            return a if a in FLOAT_RANK else b
        if a != b and FLOAT_RANK[a] == FLOAT_RANK[b]:
            return "float32"  # fp16 with bf16
        return a if FLOAT_RANK[a] >= FLOAT_RANK[b] else b
    return a if INT_RANK.get(a, 3) >= INT_RANK.get(b, 3) else b


def is_number_literal(expr: cst.BaseExpression) -> bool:
    """`2`, `-1.0`, `float("inf")`: a Python number written in the source (weak in arithmetic)."""
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float)) or (
        isinstance(expr, cst.Call) and dotted(expr.func) == "float" and bool(expr.args)
        and isinstance(expr.args[0].value, cst.SimpleString))
