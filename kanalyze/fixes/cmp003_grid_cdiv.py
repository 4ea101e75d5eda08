"""CMP003 / MEM001: a launch grid rounded down (`n // BLOCK`) → `triton.cdiv(n, BLOCK)`."""

from __future__ import annotations

import libcst as cst

from kanalyze.findings import Finding
from kanalyze.fixes.base import SAFE, TL, UNSAFE, Edit, Fix, Fixer, Source, parse

_ACCESSES = {f"{TL}.{name}" for name in ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_and",
                                          "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas")}
_MASK_POSITION = {f"{TL}.load": 1, f"{TL}.store": 2}  # atomics: (pointer, value, mask)


class GridCdiv(Fixer):
    """Round the grid up: `kernel[(n // BLOCK,)]` → `kernel[(triton.cdiv(n, BLOCK),)]`.

    Applies to the CMP003 findings on a floor division of a launch grid, and to
    the MEM001 findings of reason `grid` (an output the rounded-down grid leaves
    partly unwritten) when their wrapper has exactly one such division: both
    give the same edit, applied once.  `triton.cdiv` is spelt as the file
    imports triton; a file that does not import it gets `(n + BLOCK - 1) //
    BLOCK` instead, which needs no import.

    Safe when the extra program is harmless: the division is used by the grid
    alone (inside the launch's `[...]`, or in a name used only there) and every
    kernel launched with it is in this file and masks every load, store and
    atomic (so the last, partial block stays inside the tensors).  Otherwise
    unsafe: an unmasked kernel would read and write past the end in the new
    program, and a count used elsewhere (`num_blocks` passed to the kernel)
    changes more than the grid.
    """

    name = "grid-cdiv"
    codes = ("CMP003", "MEM001")
    title = "Round the grid up with `triton.cdiv`"
    applicability = SAFE
    BEFORE = "kernel[(n // BLOCK,)](x, out, n, BLOCK=BLOCK)"
    AFTER = "kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)"

    def applies(self, finding: Finding) -> bool:
        evidence = finding.evidence
        if finding.code == "MEM001":
            return evidence.get("reason") == "grid"
        return finding.code == "CMP003" and "//" in str(evidence.get("expression", "")) and \
            not {"assertion", "literal", "bound", "parameter"} & set(evidence)

    def fix(self, finding: Finding, source: Source) -> Fix | None:
        if finding.code == "MEM001":
            node = self._division_for_output(finding, source)
        else:
            node = source.node_at(finding, cst.BinaryOperation)
        if node is None or not isinstance(node.operator, cst.FloorDivide):
            return None
        function = source.function_of(node)
        launches = _launches_using(source, function, node) if function is not None else None
        safe = launches is not None and all(_masks_every_access(source, kernel) for kernel in launches)
        return self.make(finding, [_rounded_up(source, node)], SAFE if safe else UNSAFE,
                         title=f"Round the grid up: `{_rounded_up_text(source, node)}`")

    def _division_for_output(self, finding: Finding, source: Source) -> cst.BinaryOperation | None:
        anchor = source.node_at(finding)
        function = source.function_of(anchor) if anchor is not None else None
        if function is None:
            return None
        found = [n for n in source.walk(function.body) if isinstance(n, cst.BinaryOperation)
                 and isinstance(n.operator, cst.FloorDivide) and not _rounds_up(n)
                 and _launches_using(source, function, n, need_grid_only=False)]
        return found[0] if len(found) == 1 else None


def _rounds_up(node: cst.BinaryOperation) -> bool:
    left = node.left
    return isinstance(left, cst.UnaryOperation) or (isinstance(left, cst.BinaryOperation)
                                                    and isinstance(left.operator, (cst.Add, cst.Subtract)))


def _operand(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if isinstance(node, cst.BinaryOperation) else node


def _rounded_up_node(source: Source, node: cst.BinaryOperation) -> cst.BaseExpression:
    cdiv = source.module_name("triton.cdiv")
    left, right = _operand(node.left), _operand(node.right)
    if cdiv is not None:
        return cst.Call(func=parse(cdiv), args=[
            cst.Arg(left, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(right)],
            lpar=node.lpar, rpar=node.rpar)
    code = f"({source.module.code_for_node(node.left)} + {source.module.code_for_node(node.right)} - 1)"
    return node.with_changes(left=parse(code))


def _rounded_up(source: Source, node: cst.BinaryOperation) -> Edit:
    return source.replace(node, _rounded_up_node(source, node))


def _rounded_up_text(source: Source, node: cst.BinaryOperation) -> str:
    return " ".join(source.module.code_for_node(_rounded_up_node(source, node)).split())


def _launches_using(source: Source, function: cst.FunctionDef, node: cst.CSTNode,
                    need_grid_only: bool = True, depth: int = 0) -> list[str] | None:
    """The kernels launched with a grid that holds `node` (directly in `kernel[...]`, or
    through a name assigned in `function`); None where `node` is (or may be) used
    elsewhere too and `need_grid_only`, or where no launch uses it."""
    launches: list[str] = []
    if depth > 3:
        return None
    current: cst.CSTNode | None = node
    while current is not None and current is not function:
        parent = source.parent(current)
        if isinstance(parent, cst.SubscriptElement) or isinstance(parent, cst.Index):
            subscript = source.parent(source.parent(parent)) if isinstance(parent, cst.Index) else \
                source.parent(parent)
            kernel = _launched(source, subscript)
            if kernel is not None:
                return [kernel]
        if isinstance(parent, cst.Assign):
            if len(parent.targets) != 1 or not isinstance(parent.targets[0].target, cst.Name):
                return None
            name = parent.targets[0].target.value
            for use in source.walk(function.body):
                if not (isinstance(use, cst.Name) and use.value == name) or use is parent.targets[0].target:
                    continue
                kernels = _launches_using(source, function, use, need_grid_only, depth + 1)
                if kernels is None:
                    if need_grid_only:
                        return None
                    continue
                launches += kernels
            return launches or None
        if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return None
        current = parent
    return None


def _launched(source: Source, subscript: cst.CSTNode | None) -> str | None:
    """`kernel` when `subscript` is the `kernel[grid]` of a launch `kernel[grid](...)`."""
    if not isinstance(subscript, cst.Subscript):
        return None
    call = source.parent(subscript)
    if not (isinstance(call, cst.Call) and call.func is subscript and isinstance(subscript.value, cst.Name)):
        return None
    return subscript.value.value


def _masks_every_access(source: Source, kernel: str) -> bool:
    """Does the module-level function `kernel` mask each of its loads, stores and atomics
    (and call no other function of this file, whose accesses it would not see)?"""
    defined = {n.name.value: n for n in source.module.body if isinstance(n, cst.FunctionDef)}
    function = defined.get(kernel)
    if function is None:
        return False
    accesses = 0
    for node in source.walk(function.body):
        if not isinstance(node, cst.Call):
            continue
        name = source.qualify(node.func)
        if isinstance(node.func, cst.Name) and node.func.value in defined:
            return False
        if name in (f"{TL}.make_block_ptr", f"{TL}.make_tensor_descriptor"):
            return False
        if name in _ACCESSES:
            accesses += 1
            position = _MASK_POSITION.get(name, 2)
            positional = [a for a in node.args if a.keyword is None]
            masked = any(a.keyword is not None and a.keyword.value == "mask" for a in node.args) or \
                len(positional) > position
            if not masked:
                return False
    return accesses > 0
