"""PRC002: an fp16/bf16 `tl.zeros` accumulator → fp32, rounded once at the store."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import TL, UNSAFE, Edit, Fix, Fixer, Source, parse

_INITS = {f"{TL}.zeros": 1, f"{TL}.full": 2}  # the dtype's position
_HALF = {f"{TL}.float16", f"{TL}.bfloat16"}
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply)
_AUGMENTED = (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)


class Fp32Accumulator(Fixer):
    """Accumulate in fp32 and round once: `tl.zeros(..., dtype=tl.float16)` → `dtype=tl.float32`,
    `tl.store(p, acc)` → `tl.store(p, acc.to(tl.float16))`.

    Applies to the PRC002 findings whose evidence points at the accumulator's
    initialisation, `acc = tl.zeros(shape, dtype=tl.float16)` (or `tl.full`,
    or bfloat16) with the dtype written out: a dtype from a constexpr or a
    variable is the caller's choice and is left alone.  Every use of `acc` in
    the kernel must be one the fix understands, or nothing is changed:
    updates of `acc` itself (`acc += x`, `acc = acc + x`, `acc = tl.dot(a, b,
    acc, ...)`, whose `out_dtype=tl.float16` is dropped so that the dot
    accumulates in fp32 too), explicit casts (`acc.to(...)`), and stores, whose
    value gets one `.to(<the old dtype>)` so that the output keeps its dtype.
    Anything else (`acc` passed as a dot operand, to a helper, returned,
    stored atomically, or copied into another variable) stops the fix: a
    loop-carried value that changed dtype halfway would not compile.

    Unsafe: the sums change (more accurate: one rounding at the end instead of
    one per step, the point of PRC002) and the accumulator takes twice the
    registers, which may spill or force smaller tiles.
    """

    name = "fp32-accumulator"
    codes = ("PRC002",)
    title = "Accumulate in fp32 and cast once at the store"
    applicability = UNSAFE
    BEFORE = "acc = tl.zeros((BLOCK,), dtype=tl.float16)\n...\ntl.store(out_ptr + offs, acc)"
    AFTER = "acc = tl.zeros((BLOCK,), dtype=tl.float32)\n...\ntl.store(out_ptr + offs, acc.to(tl.float16))"

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        init = source.node_at(finding, cst.Call)
        if init is None or source.qualify(init.func) not in _INITS:
            return None
        dtype = _argument(init, "dtype", _INITS[source.qualify(init.func)])
        if dtype is None or source.qualify(dtype) not in _HALF or not isinstance(dtype, cst.Attribute):
            return None
        assign = source.parent(init)
        function = source.function_of(init)
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)) or function is None:
            return None
        acc = assign.targets[0].target
        half = source.code(dtype).strip()
        edits = [source.replace(dtype, dtype.with_changes(attr=cst.Name("float32")))]
        for use in source.walk(function.body):
            if not (isinstance(use, cst.Name) and use.value == acc.value) or use is acc:
                continue
            edit = _use(source, use, acc.value, half)
            if edit is False:
                return None
            if isinstance(edit, Edit):
                edits.append(edit)
        edits = sorted(set(edits))
        if any(a.end > b.start for a, b in zip(edits, edits[1:])):
            return None
        return self.make(finding, edits)


def _argument(call: cst.Call, name: str, position: int) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position].value if position < len(positional) else None


def _use(source: Source, name: cst.Name, acc: str, half: str) -> Edit | bool | None:
    """What one occurrence of the accumulator needs: an edit, None (nothing), False (the fix stops)."""
    parent = source.parent(name)
    if (isinstance(parent, cst.Arg) and parent.keyword is name) or (isinstance(parent, cst.Attribute)
                                                                     and parent.attr is name):
        return None  # `acc=` of a call, `.acc` of an object: not the variable
    if isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value == "to":
        return None  # `acc.to(...)`: an explicit cast, whatever follows
    while parent is not None:
        if isinstance(parent, cst.AugAssign):
            target = parent.target
            if isinstance(target, cst.Name) and target.value == acc and isinstance(parent.operator, _AUGMENTED):
                return None  # `acc += x`: fp32 whatever x is
            return False
        if isinstance(parent, cst.Assign):
            target = parent.targets[0].target
            if not (len(parent.targets) == 1 and isinstance(target, cst.Name) and target.value == acc):
                return False  # copied into another variable, or unpacked
            return _update(source, parent.value, acc)
        if isinstance(parent, cst.Arg):
            call = source.parent(parent)
            qualified = source.qualify(call.func) if isinstance(call, cst.Call) else None
            if qualified == f"{TL}.store" and parent is _value_arg(call):
                return _cast(source, parent.value, half)
            if qualified == f"{TL}.dot" and not _dot_accumulates_into(call, parent):
                return False  # an operand of a dot: its dtype must match the other's
            if qualified is None or not qualified.startswith(TL + ".") or "atomic" in qualified:
                return False  # a helper, or an atomic: not followed
        if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False  # returned, tested, passed on: not followed
        parent = source.parent(parent)
    return False


def _cast(source: Source, value: cst.BaseExpression, half: str) -> Edit | None:
    """A stored value holding the accumulator, cast back to the old dtype (once)."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
        return None
    operand = value if isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or value.lpar else \
        value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return source.replace(value, cst.Call(func=cst.Attribute(value=operand, attr=cst.Name("to")),
                                          args=[cst.Arg(parse(half))]))


def _value_arg(call: cst.Call) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "value":
            return arg
    positional = [a for a in call.args if a.keyword is None]
    return positional[1] if len(positional) > 1 else None


def _dot_accumulates_into(call: cst.Call, arg: cst.Arg) -> bool:
    positional = [a for a in call.args if a.keyword is None]
    return (arg.keyword is not None and arg.keyword.value == "acc") or (len(positional) > 2 and positional[2] is arg)


def _update(source: Source, value: cst.BaseExpression, acc: str) -> Edit | bool | None:
    """`acc = <value>`: arithmetic on `acc` is fine; `tl.dot(a, b, acc, out_dtype=half)` loses its
    `out_dtype` (then it accumulates in fp32 as well); anything else stops the fix."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, _ARITHMETIC):
        operands = [value.left, value.right]
        while operands:
            operand = operands.pop()
            if isinstance(operand, cst.Name) and operand.value == acc:
                return None
            if isinstance(operand, cst.BinaryOperation) and isinstance(operand.operator, _ARITHMETIC):
                operands += [operand.left, operand.right]
        return False
    if isinstance(value, cst.Call) and source.qualify(value.func) == f"{TL}.dot":
        args = list(value.args)
        if not any(isinstance(a.value, cst.Name) and a.value.value == acc and _dot_accumulates_into(value, a)
                   for a in args):
            return False  # a fresh product, not added to `acc`
        keep = [a for a in args if not (a.keyword is not None and a.keyword.value == "out_dtype")]
        if len(keep) == len(args):
            return None
        if len(keep) == len(args) - 1 and args[-1].keyword is not None and args[-1].keyword.value == "out_dtype":
            keep[-1] = keep[-1].with_changes(comma=args[-1].comma)
        return source.replace(value, value.with_changes(args=keep))
    return False
