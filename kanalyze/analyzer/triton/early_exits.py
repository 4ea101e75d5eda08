"""Which programs of a kernel leave their part unwritten: the early `return`s that
skip a program's stores, and the program-id arithmetic that decides them.

Answers "does `if pid * BLOCK >= n: return` skip work?" (no: the tile starts past
the end), "does `if tl.load(flag) == 0: return` skip work?" (yes: it depends on
data), "is every store in a loop that would run zero times?", and the other side
of the grid question: does a persistent kernel's loop step over every tile
whatever the grid (`grid_stride`)?
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.host_sizes import text_key
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching
from kanalyze.analyzer.triton.shapes import PROGRAM_ID, TL, assigned_value, reaches


def is_pid_call(name: str | None) -> bool:
    """Is `name` the qualified name of `tl.program_id` (or of any `.program_id`)?"""
    return bool(name) and (name == PROGRAM_ID or name.endswith(".program_id"))


def pid_index(model: TritonModule, kernel: JitFunction, expr: cst.BaseExpression, depth: int) -> bool:
    """Is `expr` index arithmetic (`i_t * BT + i_i * BC`) on a program id,
    on at least one path (not a value loaded at such an index)?"""
    if depth < 0:
        return False
    if isinstance(expr, cst.Call):
        func = expr.func
        if is_pid_call(model.call_name(expr)):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            return pid_index(model, kernel, func.value, depth)
        return False
    if isinstance(expr, cst.BinaryOperation) and isinstance(
            expr.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)):
        return pid_index(model, kernel, expr.left, depth) or pid_index(model, kernel, expr.right, depth)
    if isinstance(expr, cst.Name):
        for d in model.flow(kernel.function).defs_of(expr.value):
            value = assigned_value(d, expr.value)
            if value is not None and value is not expr and pid_index(model, kernel, value, depth - 1):
                return True
    return False


def early_return(reaching: Reaching, kernel: JitFunction, writes: list[cst.Call]) -> cst.BaseExpression | None:
    """The test of an `if` whose `return` skips the kernel's `writes` in some programs
    that had work to do, or None; `reaching` is the kernel's."""
    if not writes:
        return None
    model = reaching.model
    last_write = max(reaching.span(w)[0] for w in writes)
    for node in walk(kernel.node):
        if not isinstance(node, cst.Return) or reaching.span(node)[0] > last_write:
            continue
        branch = next((a for a in model.ancestors(node) if isinstance(a, cst.If)), None)
        if branch is None:
            continue
        suite = branch.body if reaching.inside(node, branch.body) else branch.orelse
        if suite is not None and any(reaching.inside(w, suite) and reaching.span(w)[0] < reaching.span(node)[0]
                                     for w in writes):
            continue  # the branch writes its part (`tl.store(out, 0.0)` in a loop) before returning
        if no_work_left(model, branch.test, writes):
            continue
        if skips_work(model, kernel, branch.test):
            return branch.test
    return None


def no_work_left(model: TritonModule, test: cst.BaseExpression, writes: list[cst.Call]) -> bool:
    """`if count == 0: return` where every store sits in `for r in range(count)`
    (or `if a == b` over `range(a, b)`): the skipped program had nothing to write."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    op, left, right = test.comparisons[0].operator, test.left, test.comparisons[0].comparator
    if isinstance(op, (cst.LessThanEqual, cst.Equal)) and int_literal(right) == 0:
        bounds = {("0", text_key(model, left))}
    elif isinstance(op, (cst.GreaterThanEqual, cst.Equal)) and int_literal(left) == 0:
        bounds = {("0", text_key(model, right))}
    elif isinstance(op, cst.Equal):
        bounds = {(text_key(model, left), text_key(model, right)), (text_key(model, right), text_key(model, left))}
    elif isinstance(op, cst.GreaterThanEqual):
        bounds = {(text_key(model, left), text_key(model, right))}
    elif isinstance(op, cst.LessThanEqual):
        bounds = {(text_key(model, right), text_key(model, left))}
    else:
        return False

    def empty_loop(write: cst.Call) -> bool:
        for a in model.ancestors(write):
            if isinstance(a, cst.For) and isinstance(a.iter, cst.Call) and dotted(a.iter.func) == "range":
                args = [x.value for x in a.iter.args if x.keyword is None]
                start, stop = ("0", text_key(model, args[0])) if len(args) == 1 else \
                    (text_key(model, args[0]), text_key(model, args[1])) if len(args) in (2, 3) else (None, None)
                if (start, stop) in bounds or (int_literal(args[0]) == 0 and len(args) > 1 and ("0", stop) in bounds):
                    return True
        return False
    return all(empty_loop(w) for w in writes)


def skips_work(model: TritonModule, kernel: JitFunction, test: cst.BaseExpression) -> bool:
    """A data-dependent test, or a program-id test that is not the usual
    `pid >= limit` guard against an over-sized grid, nor `start >= T` for a
    tile that starts past the end of its (possibly loaded) extent."""
    parts = _disjuncts(test)
    if all(past_end(model, kernel, p) for p in parts):
        return False
    if reaches(model, kernel, test, TL + "load"):
        return True
    for node in walk(test):
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            op, right = node.comparisons[0].operator, node.comparisons[0].comparator
            pid_left = reaches(model, kernel, node.left, PROGRAM_ID)
            pid_right = reaches(model, kernel, right, PROGRAM_ID)
            guard = (pid_left and isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual))) or \
                    (pid_right and isinstance(op, (cst.LessThan, cst.LessThanEqual)))
            if (pid_left or pid_right) and not guard:
                return True
    return False


def _disjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _disjuncts(test.left) + _disjuncts(test.right)
    return [test]


def past_end(model: TritonModule, kernel: JitFunction, test: cst.BaseExpression) -> bool:
    """`start >= extent` (or `extent <= start`) where `start` is index
    arithmetic on the program id: the tile begins past the end, so it owns
    no element of the output (the extent may be loaded, as in varlen)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    op, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
        start, extent = test.left, right
    elif isinstance(op, (cst.LessThan, cst.LessThanEqual)):
        start, extent = right, test.left
    else:
        return False
    return int_literal(extent) is None and pid_index(model, kernel, start, 4)


def grid_stride(model: TritonModule, kernel: JitFunction) -> bool:
    """A grid-stride loop, whose programs step over every tile whatever the grid:
    `while tile < n: ...; tile += tl.num_programs(0)`,
    `for j in range(...): t = pid + j * tl.num_programs(0)`, or
    `for tile in range(pid, num_tiles, NUM_SMS)`."""
    flow = model.flow(kernel.function)
    strided = {d.name for d in flow.defs if d.value is not None and
               any(isinstance(c, cst.Call) and (model.call_name(c) or "").endswith(".num_programs")
                   for c in walk(d.value))}
    for node in walk(kernel.node):
        if isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and \
                (model.call_name(node.iter) or dotted(node.iter.func) or "").rpartition(".")[2] in ("range", "static_range"):
            args = [a.value for a in node.iter.args if a.keyword is None]
            if len(args) >= 3 and int_literal(args[2]) != 1 and pid_index(model, kernel, args[0], 4):
                return True
        if isinstance(node, (cst.For, cst.While)):
            for inner in walk(node):
                if isinstance(inner, cst.Call) and (model.call_name(inner) or "").endswith(".num_programs"):
                    return True
                if isinstance(inner, cst.Name) and inner.value in strided:
                    return True
    return False
