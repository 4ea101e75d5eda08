"""EXC001: NaN-dropping `tl.maximum` / `tl.minimum` / `tl.clamp` → `propagate_nan=tl.PropagateNan.ALL`."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Fix, Fixer, Source, parse, with_keyword

_ELEMENTWISE = {f"{TL}.maximum", f"{TL}.minimum", f"{TL}.clamp"}
_BUILTIN = {"max": "maximum", "min": "minimum"}


class PropagateNan(Fixer):
    """Keep NaN through a min/max: `propagate_nan=tl.PropagateNan.ALL`.

    Applies to the EXC001 findings of pattern `nan-dropping-minmax` and
    `nan-dropping-clamp`: `tl.maximum(x, y)`, `tl.minimum(x, y)`, `tl.clamp(x,
    lo, hi)` get the keyword (an explicit `propagate_nan=tl.PropagateNan.NONE`
    has its value replaced), and the builtin `max(x, y)` / `min(x, y)` inside a
    kernel becomes `tl.maximum(x, y, propagate_nan=...)`.  The module is spelt as
    the file imports triton.language (`tl` by default).

    Unsafe: the result changes wherever an operand is NaN (NaN instead of the
    other operand), which is the point (torch.maximum, torch.relu and
    torch.clamp propagate NaN) but a change of values all the same; the
    reductions (`tl.max(x, axis=0)`) are left alone: they need a `tl.reduce`
    with a combine function, no mechanical edit.
    """

    name = "propagate-nan"
    codes = ("EXC001",)
    title = "Pass `propagate_nan=tl.PropagateNan.ALL`"
    applicability = UNSAFE
    BEFORE = "y = tl.maximum(x, 0.0)"
    AFTER = "y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)"

    def applies(self, finding: Finding) -> bool:
        return finding.code in self.codes and \
            finding.evidence.get("pattern") in ("nan-dropping-minmax", "nan-dropping-clamp")

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        call = source.node_at(finding, cst.Call)
        if call is None or any(arg.star for arg in call.args):
            return None
        tl = source.tl()
        original, title = call, None
        if isinstance(call.func, cst.Name) and call.func.value in _BUILTIN:
            if len(call.args) != 2 or any(arg.keyword is not None for arg in call.args):
                return None
            function = f"{tl}.{_BUILTIN[call.func.value]}"
            call = call.with_changes(func=parse(function))
            title = f"Use `{function}` with `propagate_nan={tl}.PropagateNan.ALL`"
        elif source.qualify(call.func) not in _ELEMENTWISE:
            return None
        new = with_keyword(call, "propagate_nan", parse(f"{tl}.PropagateNan.ALL"))
        return self.make(finding, [source.replace(original, new)], title=title)
