"""CMP003: an unmasked load or store over a runtime size → `mask=offs < n` (and `other=0.0`)."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Fix, Fixer, Source, parse, with_keyword

_ACCESS = {f"{TL}.load": "load", f"{TL}.store": "store"}


class TailMask(Fixer):
    """Mask the tail: `tl.load(x_ptr + offs)` → `tl.load(x_ptr + offs, mask=offs < n, other=0.0)`.

    Applies to the CMP003 findings on an unmasked `tl.load` / `tl.store` whose
    evidence names the `bound` the offsets run past, when that is plain: the
    pointer is a sum of terms (`x_ptr + offs`, `x_ptr + row * stride + cols`)
    of which exactly one is a name assigned once in the kernel from an
    expression with `tl.arange`, and the bound is a parameter of the kernel
    (or a name assigned before the access).  Everything else (2-D tiles such as
    `offs_m[:, None] * stride + offs_n[None, :]`, block pointers, a bound that
    is an expression) is left for a person: the right mask is not mechanical.

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
        return finding.code in self.codes and evidence.get("access") in ("load", "store") \
            and isinstance(evidence.get("bound"), str) and evidence["bound"].isidentifier()

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
        pointer = positional[0].value if positional else None
        bound = finding.evidence["bound"]
        if function is None or pointer is None or not _in_scope(source, function, bound, call):
            return None
        offsets = [term for term in _terms(pointer) if isinstance(term, cst.Name)
                   and _from_arange(source, function, term.value)]
        if len(offsets) != 1:
            return None
        new = with_keyword(call, "mask", parse(f"{offsets[0].value} < {bound}"))
        if kind == "load" and "other" not in keywords:
            new = with_keyword(new, "other", parse("0.0"))
        suffix = ", other=0.0" if kind == "load" and "other" not in keywords else ""
        return self.make(finding, [source.replace(call, new)],
                         title=f"Mask the tail: `mask={offsets[0].value} < {bound}{suffix}`")


def _terms(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum `a + b + c` (parentheses kept as one term)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) and not expr.lpar:
        return _terms(expr.left) + _terms(expr.right)
    return [expr]


def _assigned(source: Source, function: cst.FunctionDef, name: str) -> list[cst.Assign]:
    return [node for node in source.walk(function.body) if isinstance(node, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)]


def _from_arange(source: Source, function: cst.FunctionDef, name: str) -> bool:
    """Is `name` assigned once in `function`, from an expression with `tl.arange`?"""
    assigned = _assigned(source, function, name)
    if len(assigned) != 1 or any(isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Name)
                                 and n.target.value == name for n in source.walk(function.body)):
        return False
    return any(isinstance(n, cst.Call) and source.qualify(n.func) == f"{TL}.arange"
               for n in source.walk(assigned[0].value))


def _in_scope(source: Source, function: cst.FunctionDef, name: str, call: cst.Call) -> bool:
    """Is `name` a parameter of `function`, or assigned in it before `call`?"""
    params = function.params
    if any(p.name.value == name for p in (*params.params, *params.kwonly_params, *params.posonly_params)):
        return True
    before = source.span(call)[0]
    return any(source.span(node)[1] <= before for node in _assigned(source, function, name))
