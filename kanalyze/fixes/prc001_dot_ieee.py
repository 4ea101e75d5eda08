"""PRC001: `tl.dot` in TF32 → `input_precision="ieee"`."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Fix, Fixer, Source, with_keyword

_IEEE = '"ieee"'


class DotInputPrecision(Fixer):
    """Multiply fp32 tiles in IEEE fp32: `input_precision="ieee"` on a TF32 `tl.dot`.

    Applies to the PRC001 findings on a `tl.dot` call (evidence `precision`
    `tf32 (default)` or `tf32`): the keyword is added when the call passes
    neither `input_precision` nor `allow_tf32`; `allow_tf32=True` becomes
    `input_precision="ieee"` (Triton refuses both at once); a literal
    `input_precision="tf32"` becomes `"ieee"`.  A precision read from a variable
    is left alone.

    Unsafe.  IEEE fp32 products are never less accurate than TF32 ones (the
    operands are no longer rounded to a 10-bit mantissa, so the error bound
    shrinks by about three orders of magnitude), which argues for safe; but the
    results change in their low bits, and the dot leaves the tensor cores for
    FMA units on NVIDIA GPUs: several times slower, with different register use
    and tile sizes that may no longer fit.  Ruff calls a fix that changes what
    the program computes unsafe, and this one changes both the numbers and the
    speed, so it waits for `--unsafe-fixes` (or a click in the editor).
    """

    name = "dot-input-precision"
    codes = ("PRC001",)
    title = 'Pass `input_precision="ieee"` to `tl.dot`'
    applicability = UNSAFE
    BEFORE = "acc += tl.dot(a, b)"
    AFTER = 'acc += tl.dot(a, b, input_precision="ieee")'

    def applies(self, finding: Finding) -> bool:
        return finding.code in self.codes and finding.evidence.get("precision") in ("tf32 (default)", "tf32")

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        call = source.node_at(finding, cst.Call)
        if call is None or source.qualify(call.func) != f"{TL}.dot":
            return None
        ieee = cst.SimpleString(_IEEE)
        args = list(call.args)
        for index, arg in enumerate(args):
            if arg.keyword is None:
                continue
            if arg.keyword.value == "allow_tf32":
                if any(a.keyword is not None and a.keyword.value == "input_precision" for a in args):
                    return None
                args[index] = arg.with_changes(keyword=cst.Name("input_precision"), value=ieee)
                return self.make(finding, [source.replace(call, call.with_changes(args=args))])
            if arg.keyword.value == "input_precision":
                value = arg.value
                if not (isinstance(value, cst.SimpleString) and value.evaluated_value in ("tf32", "tf32x3")):
                    return None  # a variable, a constexpr: the caller decides what it holds
                quote = value.quote
                new = value.with_changes(value=f"{value.prefix}{quote}ieee{quote}")
                args[index] = arg.with_changes(value=new)
                return self.make(finding, [source.replace(call, call.with_changes(args=args))])
        positional = [a for a in args if a.keyword is None]
        if len(positional) > 3 or any(a.star for a in args):
            return None  # the precision passed positionally, or inside *args / **kwargs
        return self.make(finding, [source.replace(call, with_keyword(call, "input_precision", ieee))])
