"""MEM004: int32 offset arithmetic that wraps → one operand widened with `.to(tl.int64)`."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import SAFE, TL, Fix, Fixer, Source, parse

_ARITHMETIC = (cst.Multiply, cst.Add, cst.Subtract)
# Calls that return a tensor whatever their arguments are (never a constexpr).
_TENSOR_CALLS = {f"{TL}.{name}" for name in ("program_id", "num_programs", "arange", "load", "cast", "full", "zeros",
                                              "multiple_of", "max_contiguous", "where", "maximum", "minimum")}
_DEPTH = 8


class WidenOffsets(Fixer):
    """Compute the overflowing offset in int64: `pid * stride` → `pid.to(tl.int64) * stride`.

    Applies to MEM004 findings whose operation (the evidence's `expression`, at
    the finding's span) is a `*`, `+` or `-`.  The fix widens one leaf of that
    operation: the first operand, looking through parenthesised `+ - *` (so
    `(i_t * H + i_h) * D` becomes `(i_t.to(tl.int64) * H + i_h) * D`, which widens
    the inner product and the sum too), skipping operands that may be constexpr
    (literals, `tl.constexpr` parameters, names of unknown origin) because a
    constexpr has no `.to`; a scalar argument counts as a constexpr too, since
    Triton may specialise one equal to 1.  Widened: `tl.program_id(...)`,
    `tl.arange(...)` and the like, loop variables of `range`, and names
    assigned once from such values.  Where no operand qualifies, no fix.

    Safe: every value that did not overflow stays the same (int64 holds every
    int32), the values that did are now right, and pointers accept int64
    offsets; the only cost is 64-bit index arithmetic (a second register per
    widened index), which changes no result.
    """

    name = "widen-offsets"
    codes = ("MEM004",)
    title = "Compute the offset in int64 (`.to(tl.int64)`)"
    applicability = SAFE
    BEFORE = "offs = pid * BLOCK + tl.arange(0, BLOCK)"
    AFTER = "offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)"

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        node = source.node_at(finding, cst.BinaryOperation)
        if node is None or not isinstance(node.operator, _ARITHMETIC):
            return None
        function = source.function_of(node)
        if function is None or any(_is_widened(n) for n in source.walk(node)):
            return None  # widened already: a second `.to(tl.int64)` would change nothing
        leaf = _widenable_leaf(source, function, node, 0)
        if leaf is None:
            return None
        tl = source.tl()
        wrapped = leaf.with_changes(lpar=[], rpar=[])
        new = cst.Call(func=cst.Attribute(value=wrapped, attr=cst.Name("to")), args=[cst.Arg(parse(f"{tl}.int64"))],
                       lpar=getattr(leaf, "lpar", ()), rpar=getattr(leaf, "rpar", ()))
        scope = f"{source.span(function)[0]}:"
        reads = frozenset(scope + n.value for n in source.walk(node) if isinstance(n, cst.Name))
        return self.make(finding, [source.replace(leaf, new)],
                         title=f"Compute `{source.code(leaf).strip()}` in int64 (`.to({tl}.int64)`)",
                         provides=frozenset(scope + name for name in _assigned_by(source, node)), depends=reads)


def _is_widened(node: cst.CSTNode) -> bool:
    """`x.to(tl.int64)` (any spelling of the module)."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to" \
        and bool(node.args) and isinstance(node.args[0].value, cst.Attribute) \
        and node.args[0].value.attr.value in ("int64", "uint64")


def _assigned_by(source: Source, node: cst.CSTNode) -> list[str]:
    """The name whose value holds `node` (`offs = pid * BLOCK + ...` → offs), if any."""
    current = source.parent(node)
    while current is not None and not isinstance(current, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        current = source.parent(current)
    if isinstance(current, cst.Assign):
        return [t.target.value for t in current.targets if isinstance(t.target, cst.Name)]
    if isinstance(current, (cst.AugAssign, cst.AnnAssign)) and isinstance(current.target, cst.Name):
        return [current.target.value]
    return []


def _widenable_leaf(source: Source, function: cst.FunctionDef, node: cst.BaseExpression,
                    depth: int) -> cst.BaseExpression | None:
    """The first operand of the arithmetic `node` that is surely a tensor."""
    if depth > _DEPTH:
        return None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _ARITHMETIC):
        return _widenable_leaf(source, function, node.left, depth + 1) or \
            _widenable_leaf(source, function, node.right, depth + 1)
    return node if _is_tensor(source, function, node, depth) else None


def _is_tensor(source: Source, function: cst.FunctionDef, node: cst.BaseExpression, depth: int) -> bool:
    """Is `node` a Triton tensor whatever the launch passes (never a constexpr)?"""
    if depth > _DEPTH:
        return False
    if isinstance(node, cst.Call):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
            return _is_tensor(source, function, node.func.value, depth + 1)
        return source.qualify(node.func) in _TENSOR_CALLS
    if isinstance(node, cst.BinaryOperation):
        return _is_tensor(source, function, node.left, depth + 1) or \
            _is_tensor(source, function, node.right, depth + 1)
    if isinstance(node, cst.Subscript):
        return _is_tensor(source, function, node.value, depth + 1)
    if not isinstance(node, cst.Name):
        return False
    values = _assignments(source, function, node.value)
    if values is None or len(values) != 1:
        return False
    value = values[0]
    if value == "range":
        return True
    return _is_tensor(source, function, value, depth + 1)


def _assignments(source: Source, function: cst.FunctionDef, name: str) -> list | None:
    """What `name` is bound to in `function`: assigned values, or "range" for a
    loop variable of `range`/`tl.range`; None when it is a parameter or bound otherwise."""
    if any(p.name.value == name for p in (*function.params.params, *function.params.kwonly_params,
                                          *function.params.posonly_params)):
        return None
    found: list = []
    for node in source.walk(function.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name) and target.target.value == name:
                    found.append(node.value)
                elif name in {n.value for n in source.walk(target.target) if isinstance(n, cst.Name)}:
                    value = _unpacked(target.target, node.value, name)
                    if value is None:
                        return None  # stored into, or unpacked from a value of unknown shape
                    found.append(value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name) \
                and node.target.value == name:
            if isinstance(node, cst.AnnAssign) and node.value is not None:
                found.append(node.value)
            elif isinstance(node, cst.AugAssign):
                continue  # `offs += BLOCK` keeps a tensor a tensor
            else:
                return None
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name) and node.target.value == name:
            iterator = node.iter
            if isinstance(iterator, cst.Call) and (source.qualify(iterator.func) in ("range", f"{TL}.range")):
                found.append("range")
            else:
                return None  # `tl.static_range` gives constexprs
    return found


def _unpacked(target: cst.BaseExpression, value: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
    """`i_t, i_h = tl.program_id(0), tl.program_id(1)`: the value `name` gets."""
    if not (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List))
            and len(target.elements) == len(value.elements)):
        return None
    for element, assigned in zip(target.elements, value.elements):
        if isinstance(element.value, cst.Name) and element.value.value == name and not isinstance(
                element, cst.StarredElement) and not isinstance(assigned, cst.StarredElement):
            return assigned.value
    return None
