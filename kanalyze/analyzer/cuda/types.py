"""C++ types as far as the CUDA rules need them: which values are float,
half, integer or a pointer to one.

A type is a normalised base name plus a pointer depth.  `half`, `__half`,
`at::Half` and `c10::Half` are all "half"; every integer spelling is "int".
A template parameter (`T`, `scalar_t`) stays itself; the model resolves it
to the types it is instantiated with.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache

_BASES = {
    "float": "float", "double": "double", "long double": "double",
    "half": "half", "__half": "half", "at::Half": "half", "c10::Half": "half", "__nv_half": "half",
    "nv_half": "half",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "at::BFloat16": "bfloat16", "c10::BFloat16": "bfloat16",
    "half2": "half2", "__half2": "half2", "__nv_bfloat162": "bfloat162", "nv_bfloat162": "bfloat162",
    "bool": "bool", "void": "void", "dim3": "dim3",
}
_INTEGER = re.compile(r"^(?:(?:un)?signed|short|long|int|char|size_t|ssize_t|ptrdiff_t|u?int(?:8|16|32|64)_t|"
                      r"int64_t|uint|unsigned\s+\w+|long\s+long|index_t|std::size_t|std::int64_t|std::u?int\d+_t)"
                      r"(?:\s+(?:long|int|unsigned))*$")
FLOATS = frozenset({"float", "double", "half", "bfloat16", "half2", "bfloat162"})
LOW_PRECISION = frozenset({"half", "bfloat16", "half2", "bfloat162"})
VECTORS = {f"{t}{n}": t for t in ("float", "double", "int", "uint", "char", "uchar", "short", "long")
           for n in (1, 2, 3, 4)}

# Return types of CUDA and libm functions (None: the type of the first argument).
_RETURNS = {
    **{n: "half" for n in ("__float2half", "__float2half_rn", "__float2half_rz", "__float2half_rd", "__float2half_ru",
                           "__double2half", "__int2half_rn", "__hadd", "__hsub", "__hmul", "__hdiv", "__hfma", "__hneg",
                           "__hmax", "__hmin", "hexp", "hlog", "hsqrt", "__low2half", "__high2half", "__ushort_as_half")},
    **{n: "half2" for n in ("__float2half2_rn", "__floats2half2_rn", "__halves2half2", "__hadd2", "__hmul2", "__hfma2",
                            "__hsub2", "__h2div", "__hmax2", "__hmin2", "__half2half2")},
    **{n: "bfloat16" for n in ("__float2bfloat16", "__float2bfloat16_rn", "__float2bfloat16_rz", "__double2bfloat16")},
    "__floats2bfloat162_rn": "bfloat162", "__float22bfloat162_rn": "bfloat162",
    **{n: "float" for n in ("__half2float", "__bfloat162float", "__low2float", "__high2float", "__int2float_rn",
                            "__uint2float_rn", "__int_as_float", "__fdividef", "__expf", "__logf", "__exp10f",
                            "__log2f", "__log10f", "__powf", "__sinf", "__cosf", "__tanf", "__fadd_rn", "__fmul_rn",
                            "__fmaf_rn", "__frcp_rn", "__fsqrt_rn", "__saturatef", "tanhf", "erff")},
    **{n: "double" for n in ("__longlong_as_double", "__hiloint2double")},
    **{n: "int" for n in ("__float2int_rn", "__float2int_rz", "__float_as_int", "__popc", "__clz", "__ffs",
                          "__ballot_sync", "__any_sync", "__all_sync", "__activemask", "__float_as_uint",
                          "__double_as_longlong", "__half_as_ushort", "__syncthreads_count", "__isnan", "__isinf")},
    **{n: "bool" for n in ("isnan", "isinf", "isfinite", "__hisnan", "__hisinf", "signbit")},
}
_FLOAT_SUFFIXED = re.compile(r"^[a-z0-9_]+f$")  # expf, fmaxf, sqrtf, rsqrtf ...
_DOUBLE_MATH = frozenset("exp exp2 expm1 log log2 log10 log1p sqrt rsqrt cbrt sin cos tan tanh sinh cosh asin acos "
                         "atan atan2 erf erfc pow fabs fmax fmin fma floor ceil round trunc fmod hypot".split())


@dataclass(frozen=True)
class CType:
    base: str
    pointers: int = 0

    @property
    def element(self) -> "CType":
        return CType(self.base, max(self.pointers - 1, 0))

    def pointer(self) -> "CType":
        return CType(self.base, self.pointers + 1)

    @property
    def is_scalar(self) -> bool:
        return self.pointers == 0

    @property
    def is_float(self) -> bool:
        return self.pointers == 0 and self.base in FLOATS

    @property
    def is_low_precision(self) -> bool:
        return self.pointers == 0 and self.base in LOW_PRECISION

    @property
    def is_integer(self) -> bool:
        return self.pointers == 0 and self.base == "int"


UNKNOWN = CType("?")
INT = CType("int")
FLOAT = CType("float")
DOUBLE = CType("double")
BOOL = CType("bool")


def normalize(type_text: str) -> str:
    """`const __half` → "half", `unsigned int` → "int", `float4` → "float4"."""
    cached = _NORMALIZED.get(type_text)
    if cached is not None:
        return cached
    text = _QUALIFIER_WORDS.sub(" ", type_text)
    text = " ".join(text.replace("&", " ").split())
    _NORMALIZED[type_text] = result = _normalize(text)
    return result


def _normalize(text: str) -> str:
    if text.startswith("std::"):
        text = text if _INTEGER.match(text) else text[5:]
    if text in _BASES:
        return _BASES[text]
    if _INTEGER.match(text):
        return "int"
    return text or "?"


_QUALIFIER_WORDS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|static|extern|inline|"
                              r"__shared__|__constant__|__device__|constexpr|register|struct|typename)\b")
_NORMALIZED: dict[str, str] = {}


def return_type(name: str) -> str | None:
    """The base type a known function returns; None when it is its argument's type."""
    last = name.rsplit("::", 1)[-1]
    if last in _RETURNS:
        return _RETURNS[last]
    if last in _DOUBLE_MATH or last in ("max", "min", "abs", "__ldg", "__ldcs", "__ldcg", "__shfl_sync",
                                        "__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync", "atomicAdd"):
        return None
    if _FLOAT_SUFFIXED.match(last) and last[:-1] in _DOUBLE_MATH | {"fdivide", "sincos", "norm3d", "rnorm"}:
        return "float"
    return "?"


def literal_type(text: str) -> CType:
    t = text.lower().replace("'", "")
    if t.startswith("0x"):
        return INT
    if t.endswith("f") and any(c in t for c in ".e"):
        return FLOAT
    if "." in t or "e" in t:
        return DOUBLE
    return INT


_C_SUFFIX = re.compile(r"(?<=[0-9])(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b")
# A comment after a `#define`'s value is part of tree-sitter's `preproc_arg`: not of the value.
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


# A C integer constant holds at most 64 bits (a wider literal does not compile):
# past that a value is unknown, which also keeps `#define N 999...9` and chains
# of defines that square each other from costing time and memory.
MAX_C_INT = 2**64


def eval_int(text: str, names: dict[str, int] | None = None) -> int | None:
    """An integer constant expression (`(1 << 12)`, `16*16`, `4096u`), or None.
    Read with Python's parser and evaluated node by node: nothing is executed."""
    text = (_C_COMMENT.sub(" ", text) if "/" in text else text).strip()
    if text.isascii() and text.isdigit():
        return int(text) if len(text) <= len(str(MAX_C_INT)) and int(text) < MAX_C_INT else None
    if names:
        return _eval_parsed(text, names)
    return _eval_constant(text)


@lru_cache(maxsize=4096)
def _eval_constant(text: str) -> int | None:
    return _eval_parsed(text, {})


def _eval_parsed(text: str, names: dict[str, int]) -> int | None:
    source = _C_SUFFIX.sub("", text)
    if not source or len(source) > 200:
        return None
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError):
        return None
    return _eval(tree.body, names)


def _eval(node: ast.AST, names: dict[str, int]) -> int | None:
    value = _eval_node(node, names)
    return value if value is not None and -MAX_C_INT < value < MAX_C_INT else None


def _eval_node(node: ast.AST, names: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, names)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names), _eval(node.right, names)
        if left is None or right is None:
            return None
        op = type(node.op)
        if op is ast.Add:
            return left + right
        if op is ast.Sub:
            return left - right
        if op is ast.Mult:
            return left * right
        if op in (ast.Div, ast.FloorDiv) and right:
            quotient = abs(left) // abs(right)  # C truncates toward zero
            return quotient if (left < 0) == (right < 0) else -quotient
        if op is ast.Mod and right:
            return left % right
        if op is ast.LShift and 0 <= right < 64:
            return left << right
        if op is ast.RShift and 0 <= right < 64:
            return left >> right
    return None


# --- the type of an expression ---------------------------------------------------

_BUILTIN_VECTORS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
_DISPATCH = re.compile(r"\bAT_DISPATCH_(\w+)\s*\(([^;]*)")


def type_of(model, node, function, depth: int = 0) -> CType:
    """The static type of an expression in `function` (UNKNOWN when it cannot be told)."""
    if node is None or depth > 12:
        return UNKNOWN
    kind = node.type
    if kind == "identifier":
        variable = model.variable(model.text(node), function)
        if variable is not None:
            return CType(variable.ctype.base, variable.ctype.pointers + len(variable.dims))
        define = model.defines.get(model.text(node))
        return literal_type(model.text(define)) if define is not None and define.type == "preproc_arg" \
            and re.fullmatch(r"[\d.eEfFxXuUlL+\-()]+", model.text(define)) else UNKNOWN
    if kind == "number_literal":
        return literal_type(model.text(node))
    if kind in ("true", "false"):
        return BOOL
    if kind == "parenthesized_expression" and node.named_children:
        return type_of(model, node.named_children[-1], function, depth + 1)
    if kind == "subscript_expression":
        return type_of(model, node.child_by_field_name("argument"), function, depth + 1).element
    if kind == "pointer_expression":
        inner = type_of(model, node.child_by_field_name("argument"), function, depth + 1)
        operator = node.child_by_field_name("operator")
        return inner.pointer() if operator is not None and operator.type == "&" else inner.element
    if kind == "field_expression":
        argument = node.child_by_field_name("argument")
        if argument is not None and model.text(argument) in _BUILTIN_VECTORS:
            return INT
        owner = type_of(model, argument, function, depth + 1)
        if owner.base in VECTORS:
            return CType(VECTORS[owner.base])
        if owner.base in ("half2", "bfloat162"):
            return CType(owner.base[:-1] if owner.base != "bfloat162" else "bfloat16")
        return UNKNOWN
    if kind == "cast_expression":
        return _descriptor(model, node.child_by_field_name("type"))
    if kind == "conditional_expression":
        return type_of(model, node.child_by_field_name("consequence"), function, depth + 1)
    if kind in ("assignment_expression", "update_expression"):
        return type_of(model, node.child_by_field_name("left") or node.child_by_field_name("argument"), function,
                       depth + 1)
    if kind == "unary_expression":
        operator = node.child_by_field_name("operator")
        if operator is not None and operator.type == "!":
            return BOOL
        return type_of(model, node.child_by_field_name("argument"), function, depth + 1)
    if kind == "binary_expression":
        operator = node.child_by_field_name("operator")
        op = operator.type if operator is not None else ""
        if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||"):
            return BOOL
        left = type_of(model, node.child_by_field_name("left"), function, depth + 1)
        right = type_of(model, node.child_by_field_name("right"), function, depth + 1)
        return promote(left, right)
    if kind == "call_expression":
        return _call_type(model, node, function, depth)
    return UNKNOWN


def promote(left: CType, right: CType) -> CType:
    if left.pointers or right.pointers:
        return left if left.pointers else right
    bases = {left.base, right.base}
    for wide in ("double", "float"):
        if wide in bases:
            return CType(wide)
    if "?" in bases:
        return UNKNOWN
    if bases <= {"half", "int"} and "half" in bases:
        return CType("half")
    if bases <= {"bfloat16", "int"} and "bfloat16" in bases:
        return CType("bfloat16")
    if len(bases) == 1:
        return left
    return UNKNOWN


def _descriptor(model, node) -> CType:
    if node is None:
        return UNKNOWN
    type_node = node.child_by_field_name("type")
    pointers = model.text(node).count("*")
    return CType(normalize(model.text(type_node) if type_node is not None else model.text(node)), pointers)


def _call_type(model, node, function, depth: int) -> CType:
    callee = node.child_by_field_name("function")
    if callee is None:
        return UNKNOWN
    if callee.type == "template_function":
        name = model.text(callee.child_by_field_name("name"))
        if name in ("static_cast", "reinterpret_cast", "const_cast"):
            args = callee.child_by_field_name("arguments")
            if args is not None and args.named_children:
                return _descriptor(model, args.named_children[0])
    name = model.text(callee)
    if callee.type == "field_expression":
        return UNKNOWN
    arguments = node.child_by_field_name("arguments")
    args = arguments.named_children if arguments is not None else []
    known = return_type(name)
    if known is None:
        if not args:
            return UNKNOWN
        index = 1 if name.rsplit("::", 1)[-1].startswith("__shfl") and len(args) > 1 else 0
        first = type_of(model, args[index], function, depth + 1)
        if name.rsplit("::", 1)[-1] in ("__ldg", "__ldcs", "__ldcg", "atomicAdd"):
            return first.element
        if name.rsplit("::", 1)[-1] in ("max", "min", "fmax", "fmin") and len(args) > 1:
            return promote(first, type_of(model, args[1], function, depth + 1))
        return first
    if known != "?":
        return CType(known)
    user = model.device_functions.get(name) or model.kernels.get(name)
    if user is not None:
        return user.return_type
    if normalize(name) in FLOATS or name in VECTORS:
        return CType(normalize(name))  # a functional cast: `float(x)`, `half(x)`
    return UNKNOWN


def possible_bases(model, ctype: CType, function) -> set[str]:
    """The concrete base types `ctype` can stand for: itself, or for a template
    parameter the types it is instantiated with (`k<float><<<...>>>`,
    `template __global__ void k<half>(...)`, AT_DISPATCH_* macros for `scalar_t`)."""
    base = ctype.base
    if function is None or (base not in function.template_params and base != "scalar_t"):
        return {base}
    found: set[str] = set()
    if base in function.template_params:
        index = function.template_params.index(base)
        for args in model.instantiations.get(function.name, ()):
            if index < len(args):
                found.add(normalize(args[index]))
    if "scalar_t" in found or base == "scalar_t":
        found.discard("scalar_t")
        found |= dispatched_types(model)
    return found or {"?"}


def dispatched_types(model) -> set[str]:
    """What `scalar_t` becomes under the AT_DISPATCH_* macros of the unit."""
    found: set[str] = set()
    for match in _DISPATCH.finditer(model.unit.text):
        kind, args = match.group(1), match.group(2)
        if "FLOATING" in kind and "REDUCED" not in kind:
            found |= {"float", "double"}
        if "REDUCED_FLOATING" in kind:
            found |= {"half", "bfloat16"}
        if "ALL_TYPES" in kind:
            found |= {"float", "double", "int"}
        if "INTEGRAL" in kind:
            found.add("int")
        if "HALF" in kind or re.search(r"\bk?Half\b", args):
            found.add("half")
        if "BFLOAT16" in kind or re.search(r"\bk?BFloat16\b", args):
            found.add("bfloat16")
    return found
