"""CMP003: an unmasked load or store over a runtime size → `mask=offs < n` (and `other=0.0`),
and for a 2-D tile `mask=(offs_m[:, None] < M) & (offs_n[None, :] < N)`."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Fix, Fixer, Source, parse, with_keyword

_ACCESS = {f"{TL}.load": "load", f"{TL}.store": "store"}


class TailMask(Fixer):
    """Mask the tail: `tl.load(x_ptr + offs)` → `tl.load(x_ptr + offs, mask=offs < n, other=0.0)`,
    and a tile's every open dimension: `tl.load(a_ptr + offs_m[:, None] * stride_m + offs_k[None, :])`
    → `mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0`.

    Applies to the CMP003 findings on an unmasked `tl.load` / `tl.store` whose
    pointer is a sum of terms (`x_ptr + offs`, `x_ptr + row * stride + cols`;
    parenthesized sums and a pointer name assigned once from such a sum, never
    advanced, are read through), when the bound is plain:

    - one dimension: exactly one term is a name assigned once in the kernel from
      an expression with `tl.arange`, and the evidence names the `bound` it runs
      past (or its `bounds`, below, give that name, the only open one, its size);
    - a tile: the arange terms are such names broadcast as `offs_m[:, None]` or
      `offs_n[None, :]` (times a stride, or not), and the evidence's `bounds` give
      each open dimension its own size (`{"offs_m": "M", "offs_n": "N"}`, read by
      the rule from a comparison in the kernel, the loop that steps the name, or
      the grid that tiles it).  Only those dimensions get a mask term: one the
      rule finds covered exactly (`tl.arange(0, D)` with `D=x.shape[-1]`) needs none.

    Each bound must be a parameter of the kernel or a name assigned before the
    access.  Everything else is left for a person: a dimension of unknown bound,
    block pointers, an arange term that is an expression (`(k + offs_k)[None, :]`),
    another term that also moves a masked dimension (`k * BLOCK_K * stride_ak`
    beside `offs_k[None, :] * stride_ak`), a bound that is an expression.

    Unsafe: the masked lanes of a load read `other=0.0`, which is right for a
    sum and wrong for a max (it needs `-inf`), and the masked lanes of a store
    no longer write: both change what the kernel computes.
    """

    name = "tail-mask"
    codes = ("CMP003",)
    title = "Mask the tail of the access"
    applicability = UNSAFE
    BEFORE = "x = tl.load(x_ptr + offs)"
    AFTER = "x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)"

    def applies(self, finding: Finding) -> bool:
        evidence = finding.evidence
        bound, bounds = evidence.get("bound"), evidence.get("bounds")
        return finding.code in self.codes and evidence.get("access") in ("load", "store") and (
            (isinstance(bound, str) and bound.isidentifier()) or (isinstance(bounds, dict) and bool(bounds)))

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        call = source.node_at(finding, cst.Call)
        if call is None or source.qualify(call.func) not in _ACCESS or any(a.star for a in call.args):
            return None
        kind = _ACCESS[source.qualify(call.func)]
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        if "mask" in keywords or "boundary_check" in keywords or len(positional) > (1 if kind == "load" else 2):
            return None
        function = source.function_of(call)
        if function is None or not positional:
            return None
        terms = _terms(_read_through(source, function, positional[0].value, call))
        dims = [d for term in terms if (d := _dimension(source, function, term)) is not None]
        tile = any(isinstance(index, cst.Subscript) for index, _, _ in dims)
        if tile:
            mask = _tile_mask(source, function, call, finding.evidence.get("bounds"), terms, dims)
        else:
            mask = _tail_mask(source, function, call, finding.evidence.get("bound"), finding.evidence.get("bounds"),
                              terms)
        if mask is None:
            return None
        new = with_keyword(call, "mask", parse(mask))
        suffix = ", other=0.0" if kind == "load" and "other" not in keywords else ""
        if suffix:
            new = with_keyword(new, "other", parse("0.0"))
        return self.make(finding, [source.replace(call, new)],
                         title=f"Mask the {'tile' if tile else 'tail'}: `mask={mask}{suffix}`")


def _tail_mask(source: Source, function: cst.FunctionDef, call: cst.Call, bound, bounds,
               terms: list[cst.BaseExpression]) -> str | None:
    """`offs < n` where exactly one term is a name from `tl.arange` and `n` is the evidence's
    bound (else the one bound `bounds` give that name, when it is the only open dimension)."""
    offsets = [t.value for t in terms if isinstance(t, cst.Name) and _from_arange(source, function, t.value)]
    if len(offsets) != 1:
        return None
    if not (isinstance(bound, str) and bound.isidentifier()):
        bound = bounds.get(offsets[0]) if isinstance(bounds, dict) and set(bounds) == {offsets[0]} else None
    if not (isinstance(bound, str) and bound.isidentifier() and _in_scope(source, function, bound, call)):
        return None
    return f"{offsets[0]} < {bound}"


def _tile_mask(source: Source, function: cst.FunctionDef, call: cst.Call, bounds, terms: list[cst.BaseExpression],
               dims: list[tuple[cst.BaseExpression, str, frozenset[str]]]) -> str | None:
    """`(offs_m[:, None] < M) & (offs_n[None, :] < N)`: one comparison per open dimension, each
    indexed as the pointer indexes it, against the bound the evidence gives that dimension."""
    if not isinstance(bounds, dict) or not bounds or set(bounds) - {name for _, name, _ in dims}:
        return None  # an open dimension the pointer does not index by a name of its own
    if any(not (isinstance(b, str) and b.isidentifier() and _in_scope(source, function, b, call))
           for b in bounds.values()):
        return None
    others = [term for term in terms if _dimension(source, function, term) is None]
    strides = frozenset().union(*(stride for _, name, stride in dims if name in bounds))
    for term in others:
        read = {n.value for n in source.walk(term) if isinstance(n, cst.Name)}
        if strides & {_text(source, p) for p in _product(term)} or any(
                _from_arange(source, function, name) or any(isinstance(b, cst.AugAssign) for b in
                                                            _bindings(source, function, name)) for name in read):
            return None  # it moves a masked dimension (`k * BLOCK_K * stride_k`, `a_ptr += BLOCK_K`), or indexes too
    comparisons: list[str] = []
    for index, name, _ in dims:
        text = f"{_text(source, index)} < {bounds[name]}" if name in bounds else None
        if text is not None and text not in comparisons:
            comparisons.append(text)
    return comparisons[0] if len(comparisons) == 1 else " & ".join(f"({c})" for c in comparisons)


def _terms(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum `a + (b + c)`: `a`, `b`, `c`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _terms(expr.left) + _terms(expr.right)
    return [expr]


def _dimension(source: Source, function: cst.FunctionDef,
               term: cst.BaseExpression) -> tuple[cst.BaseExpression, str, frozenset[str]] | None:
    """(`offs_m[:, None]`, `offs_m`, the stride's texts) of a term `offs_m[:, None] * stride_m`, where
    `offs_m` is a name from `tl.arange` indexed as one dimension (`[:, None]`, `[None, :]`, or bare)."""
    parts = _product(term)
    indexed = [p for p in parts if (name := _indexed_name(p)) is not None and _from_arange(source, function, name)]
    if len(indexed) != 1:
        return None
    stride = frozenset(_text(source, p) for p in parts if p is not indexed[0])
    return indexed[0], _indexed_name(indexed[0]), stride


def _product(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The factors of a product `i * BLOCK * stride` (anything else is its own one factor)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _product(expr.left) + _product(expr.right)
    return [expr]


def _text(source: Source, node: cst.CSTNode) -> str:
    return " ".join(source.code(node).split())


def _indexed_name(expr: cst.BaseExpression) -> str | None:
    """`offs` of `offs`, `offs[:, None]`, `offs[None, :]` (one `:`, the rest `None`)."""
    if isinstance(expr, cst.Name):
        return expr.value
    if not (isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name)):
        return None
    kinds = []
    for element in expr.slice:
        part = element.slice
        if isinstance(part, cst.Slice) and part.lower is None and part.upper is None and part.step is None:
            kinds.append(":")
        elif isinstance(part, cst.Index) and isinstance(part.value, cst.Name) and part.value.value == "None":
            kinds.append("None")
        else:
            return None
    return expr.value.value if kinds.count(":") == 1 else None


def _bindings(source: Source, function: cst.FunctionDef, name: str) -> list[cst.CSTNode]:
    """Every statement of `function` that binds `name` (assignments, augmented ones, loops, `as`, walrus)."""
    found = []
    for node in source.walk(function.body):
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        else:
            continue
        if any(isinstance(n, cst.Name) and n.value == name for t in targets for n in source.walk(t)):
            found.append(node)
    return found


def _single_value(source: Source, function: cst.FunctionDef, name: str) -> cst.Assign | None:
    """The one `name = value` of `function`, where nothing else binds `name`."""
    bindings = _bindings(source, function, name)
    if len(bindings) == 1 and isinstance(bindings[0], cst.Assign) and len(bindings[0].targets) == 1 \
            and isinstance(bindings[0].targets[0].target, cst.Name):
        return bindings[0]
    return None


def _read_through(source: Source, function: cst.FunctionDef, pointer: cst.BaseExpression,
                  call: cst.Call) -> cst.BaseExpression:
    """The sum a pointer name stands for (`ptrs = x_ptr + offs`, assigned once before `call`, never advanced)."""
    if isinstance(pointer, cst.Name):
        assigned = _single_value(source, function, pointer.value)
        if assigned is not None and source.span(assigned)[1] <= source.span(call)[0]:
            return assigned.value
    return pointer


def _from_arange(source: Source, function: cst.FunctionDef, name: str) -> bool:
    """Is `name` assigned once in `function`, from an expression with `tl.arange`?"""
    assigned = _single_value(source, function, name)
    return assigned is not None and any(isinstance(n, cst.Call) and source.qualify(n.func) == f"{TL}.arange"
                                        for n in source.walk(assigned.value))


def _in_scope(source: Source, function: cst.FunctionDef, name: str, call: cst.Call) -> bool:
    """Is `name` a parameter of `function`, or assigned in it before `call`?"""
    params = function.params
    if any(p.name.value == name for p in (*params.params, *params.kwonly_params, *params.posonly_params)):
        return True
    before = source.span(call)[0]
    return any(source.span(node)[1] <= before for node in _bindings(source, function, name)
               if isinstance(node, cst.Assign))
