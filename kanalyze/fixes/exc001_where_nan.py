"""EXC001: a `tl.where` that sends NaN lanes to the constant → the comparison flipped, the branches swapped."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Fix, Fixer, Source

# The negation of each ordered comparison for every operand but NaN.
_FLIP = {cst.GreaterThan: cst.LessThanEqual, cst.GreaterThanEqual: cst.LessThan,
         cst.LessThan: cst.GreaterThanEqual, cst.LessThanEqual: cst.GreaterThan}


def _key(source: Source, node: cst.CSTNode) -> str:
    return "".join(source.code(node).split()).strip("()")


def _computed(source: Source, call: cst.Call, name: str) -> bool:
    """Is `name` assigned in the function around `call` (a value that may hold NaN), not a parameter?"""
    function = source.function_of(call)
    return function is None or any(
        isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For))
        and isinstance(getattr(node, "target", None), cst.Name) and node.target.value == name
        for node in source.walk(function.body))


class WhereKeepsNan(Fixer):
    """Let NaN lanes take the value branch: `tl.where(x > 0, x, 0.0)` → `tl.where(x <= 0, 0.0, x)`.

    Applies to the EXC001 findings of pattern `compare` whose condition is one
    ordered comparison written inside the call (`>`, `>=`, `<`, `<=`), with the
    tested value as one branch.  Every comparison with NaN is False, so the
    original sends a NaN `x` to the constant branch; the negated comparison
    with the branches swapped picks the same branch for every other value and
    keeps NaN.  Left alone: a condition held in a variable (`tl.where(positive,
    h, 0.0)`, which may be used elsewhere), `==`/`!=`, a negated condition, and
    the running max `tl.where(v > m, v, m)`, where both sides may hold NaN:
    flipping it only moves the NaN from one iteration to the next.

    Unsafe: values change in the NaN lanes (the point of the fix, but a change).
    Whitespace and comments inside the call stay where they were: only the
    operator and the two branch expressions move.
    """

    name = "where-keeps-nan"
    codes = ("EXC001",)
    title = "Flip the comparison and swap the branches so that NaN lanes keep the value"
    applicability = UNSAFE
    BEFORE = "y = tl.where(x > 0, x, 0.0)"
    AFTER = "y = tl.where(x <= 0, 0.0, x)"

    def applies(self, finding: Finding) -> bool:
        return finding.code in self.codes and finding.evidence.get("pattern") == "compare"

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        call = source.node_at(finding, cst.Call)
        if call is None or source.qualify(call.func) != f"{TL}.where":
            return None
        args = list(call.args)
        if len(args) != 3 or any(a.keyword is not None or a.star for a in args):
            return None
        condition = args[0].value
        if not (isinstance(condition, cst.Comparison) and len(condition.comparisons) == 1):
            return None
        target = condition.comparisons[0]
        flipped = _FLIP.get(type(target.operator))
        if flipped is None:
            return None
        sides = [_key(source, condition.left), _key(source, target.comparator)]
        kept, other = _key(source, args[1].value), _key(source, args[2].value)
        if kept not in sides:
            return None  # not `where(x > c, x, y)`: a mask or a step function
        if other in sides and isinstance(args[2].value, cst.Name) and _computed(source, call, args[2].value.value):
            return None  # `where(v > m, v, m)`: m carries NaN of its own (a running max)
        operator = flipped(whitespace_before=target.operator.whitespace_before,
                           whitespace_after=target.operator.whitespace_after)
        condition = condition.with_changes(comparisons=[target.with_changes(operator=operator)])
        args[0] = args[0].with_changes(value=condition)
        args[1], args[2] = args[1].with_changes(value=args[2].value), args[2].with_changes(value=args[1].value)
        new = call.with_changes(args=args)
        return self.make(finding, [source.replace(call, new)])
