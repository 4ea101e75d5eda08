"""A kernel's dense path, where a constexpr switches its coordinates to a table.

Variable-length kernels (flash-linear-attention's, and the attention kernels written
after them) take each program's coordinates from one of two places under a constexpr:

    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    if IS_VARLEN:
        i_n, i_t = tl.load(chunk_indices + i_t * 2), tl.load(chunk_indices + i_t * 2 + 1)
        bos, eos = tl.load(cu_seqlens + i_n), tl.load(cu_seqlens + i_n + 1)
        T = eos - bos
    else:
        i_n = i_bh // H
        bos, eos = i_n * T, i_n * T + T

The dense arm computes the coordinates from the program ids; the table arm reads the
same names from memory: the table lists the (sequence, chunk) pairs the dense grid
would enumerate, each once, and `cu_seqlens` increases.  What the code shows is the
dense arm; the table's contents are data.  `table_arms(model, jit)` gives the arms to
set aside to read a kernel on its dense path: every arm, under a constexpr such a
switch tests, on the side that reads from memory (the other `if IS_VARLEN:` blocks of
the kernel included, which use `bos` without loading it).

A constexpr is such a switch when some `if FLAG:` (or `if not FLAG:`) of the kernel
has both arms, the one reads the two ends of a range from a table (`t + i` and
`t + i + 1`) and assigns a name from a load of one element (no mask, no `tl.arange`:
a coordinate, not data), and the other assigns the same name a value
computed without one (not `None`: `if USE_GATE: g = tl.load(...) else: g = None` is an
optional input, not a switch of coordinates).
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

LOAD = "triton.language.load"
ARANGE = "triton.language.arange"


def table_arms(model: TritonModule, jit: JitFunction) -> set[int]:
    """ids of the blocks (an `if`'s body or its `else`) a dense reading sets aside."""
    tests = [(node, *_flag(node.test)) for node in walk(jit.node) if isinstance(node, cst.If)]
    tests = [(node, flag, negated) for node, flag, negated in tests if flag in jit.constexpr_names]
    table_value: dict[str, bool] = {}  # flag -> the value at which the kernel reads the table
    for node, flag, negated in tests:
        if not isinstance(node.orelse, cst.Else):
            continue
        body, orelse = _assigned(model, node.body), _assigned(model, node.orelse.body)
        shared = body.keys() & orelse.keys()
        if any(body[n] and not orelse[n] for n in shared) and _reads_ranges(model, node.body):
            table_value.setdefault(flag, not negated)  # the body runs when FLAG is `not negated`
        elif any(orelse[n] and not body[n] for n in shared) and _reads_ranges(model, node.orelse):
            table_value.setdefault(flag, negated)
    arms: set[int] = set()
    for node, flag, negated in tests:
        if flag not in table_value:
            continue
        if table_value[flag] == (not negated):
            arms.add(id(node.body))
        elif isinstance(node.orelse, cst.Else):
            arms.add(id(node.orelse))
    return arms


def in_arm(model: TritonModule, node: cst.CSTNode, arms: set[int]) -> bool:
    """Is `node` inside one of `arms`?"""
    return bool(arms) and any(id(a) in arms for a in model.ancestors(node))


def _flag(test: cst.BaseExpression) -> tuple[str | None, bool]:
    """(NAME, negated) for a test `NAME` or `not NAME`; (None, False) otherwise."""
    if isinstance(test, cst.Name):
        return test.value, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and isinstance(test.expression,
                                                                                                 cst.Name):
        return test.expression.value, True
    return None, False


def _assigned(model: TritonModule, block: cst.BaseSuite) -> dict[str, bool]:
    """The names a block assigns a value (not `None`), each with whether that value reads a
    coordinate from memory: a `tl.load` of one element (no `mask=`, no `tl.arange`)."""
    found: dict[str, bool] = {}
    for node in walk(block):
        if not isinstance(node, cst.Assign) or isinstance(node.value, cst.Name) and node.value.value == "None":
            continue
        loads = any(_scalar_load(model, n) for n in walk(node.value))
        for target in node.targets:
            names = target.target.elements if isinstance(target.target, cst.Tuple) else [target.target]
            for name in names:
                name = name.value if isinstance(name, cst.Element) else name
                if isinstance(name, cst.Name):
                    found[name.value] = found.get(name.value, False) or loads
    return found


def _reads_ranges(model: TritonModule, block: cst.CSTNode) -> bool:
    """Does the block load the two ends of a range, `t[i]` and `t[i + 1]` (`cu_seqlens + i_n`
    and `cu_seqlens + i_n + 1`, `chunk_indices + i_t * 2` and `... + 1`)?  That is an
    offsets table's shape; a lone index read (`row = tl.load(index + pid)`, an embedding's
    backward) is a gather whose repeats are data."""
    pointers = {node_text(model.module, n.args[0].value).replace(" ", "") for n in walk(block)
                if _scalar_load(model, n) and n.args}
    return any(p + "+1" in pointers for p in pointers)


def _scalar_load(model: TritonModule, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call) or model.call_name(node) != LOAD:
        return False
    if any(a.keyword is not None and a.keyword.value == "mask" for a in node.args) or len(node.args) > 1 and \
            node.args[1].keyword is None:
        return False
    return not any(isinstance(n, cst.Call) and model.call_name(n) == ARANGE for n in walk(node))
