"""Literal sizes and shape checks on the host and in a kernel: which ones pin the problem to
one shape, and which are tiles, halves, a test's chosen shape or a machine-sized grid.

Answers: is a value a block rounded up from a size (`next_power_of_2(n)`), is a modulus a tile
(`K % 64`) rather than another input's size (`HQ % H`), which conjuncts of a condition pin a
shape, is a grid divisor a block, does a fixed grid's block follow the input, is a function a
test or benchmark driver, does a literal in a reshape split a buffer padded to whole blocks.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.dataflow import Dataflow, names_read
from kanalyze.analyzer.triton.entities import Function, JitFunction, Launch
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shape_asserts import shape_pin
from kanalyze.analyzer.triton.shapes import assigned_value, constant_int, is_modulo, shape_kind, shape_kinds, single_value


def expr_text(model: TritonModule, node: cst.CSTNode, limit: int = 60) -> str:
    """The source text of an expression, shortened as a rule's message shortens it
    (`kanalyze.rules.base.expr_text`): tiles and bounds are compared by this text."""
    text = node_text(model.module, node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Host calls whose positional arguments are sizes (None: all of them; n: only the n-th).
SIZED = {"torch.empty": None, "torch.zeros": None, "torch.ones": None, "torch.full": 0, "torch.rand": None,
         "torch.randn": None, "torch.empty_strided": 0, "torch.reshape": 1}
RESHAPES = {"view": None, "reshape": None, "expand": None, "new_empty": None, "new_zeros": None,
            "new_ones": None, "new_full": 0}


# A grid sized by the machine (persistent kernels), not by the input.
MACHINE = re.compile(r"(?i)(^|_)(num_)?sms?($|_)|sm_count|multi_processor")


# Host calls that round a size up to a tile (`triton.next_power_of_2(n)`, `max(16, ...)`).
ROUNDING = re.compile(r"(?i)power_of_2|cdiv|ceil|round_up|align|(^|\.)max$|(^|\.)pow$")
# Calls that keep a size exact: shape reads, views, integer arithmetic.
EXACT_CALL = re.compile(r"^(int|len|min|abs|list|tuple|math\.isqrt|math\.prod|operator\.mul)$|(^|\.)(size|numel|"
                        r"stride|dim|view|reshape|contiguous|flatten|transpose|permute|squeeze|unsqueeze|t|to|float|"
                        r"half|bfloat16)$")
TILE_NAME = re.compile(r"(?i)block|tile")


def call_text(model: TritonModule, call: cst.Call) -> str:
    """The name a call goes by: its qualified name, else the attribute or name it calls."""
    return model.call_name(call) or (call.func.attr.value if isinstance(call.func, cst.Attribute) else
                                     call.func.value if isinstance(call.func, cst.Name) else "")


def rounded(model: TritonModule, fn: Function, expr) -> bool:
    """Does a host value come from rounding (`next_power_of_2(n)`, `max(BLOCK, n)`,
    `(n + B - 1) // B * B`)?  Then it is a tile, wider than the size it was made from."""
    for _, e in model.sources(fn, expr):
        for n in walk(e):
            if isinstance(n, cst.Call) and ROUNDING.search(call_text(model, n)):
                return True
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Power):
                return True
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply) and any(
                    isinstance(o, cst.BinaryOperation) and isinstance(o.operator, cst.FloorDivide)
                    and isinstance(o.left, cst.BinaryOperation) and isinstance(o.left.operator, cst.Add)
                    for o in (n.left, n.right)):
                return True
    return False


def is_harness(fn: Function) -> bool:
    """A pytest test or a benchmark driver: it sets the problem's shape on purpose."""
    return re.match(r"(?i)(test|bench)", fn.name) is not None


def grid_divisor_is_tile(model: TritonModule, flow: Dataflow, launch: Launch, expr) -> bool:
    """Is a grid divisor a block size: a literal, `meta['BLOCK']`, a constexpr argument?
    A divisor of 1 or another input size read as it is (`numel // shape[dim]`) counts rows exactly."""
    value = constant_int(flow, expr)
    keyed = isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and isinstance(
        expr.slice[0].slice, cst.Index) and isinstance(expr.slice[0].slice.value, cst.SimpleString)
    if value is not None or keyed:  # `meta["BLOCK"]`; `shape[-1]` is a size
        return value is None or value > 1
    if launch.wrapper is not None and shape_kind(model, launch.wrapper, expr) is not None \
            and not rounded(model, launch.wrapper, expr):
        return False
    text = expr_text(model, expr)
    if any(text == expr_text(model, launch.args[p]) for p in launch.kernel.constexpr_names if p in launch.args):
        return True
    if isinstance(expr, cst.Name):
        param, value = flow.param(expr.value), single_value(flow, expr.value)
        if param is not None and int_literal(param.node.default) is not None:
            return True
        if isinstance(value, cst.Call) and (model.call_name(value) or "").endswith("next_power_of_2"):
            return True
    return "BLOCK" in text


def block_follows_programs(model: TritonModule, launch: Launch, programs: int) -> bool:
    """`grid = (12,)` with `BLOCK = next_power_of_2(cdiv(N, 12))` (or `cdiv(N, grid)` with
    `grid = 12`): a fixed number of programs whose block is computed from the input, so the
    launch still covers every size."""
    for name, arg in launch.args.items():
        if name not in launch.kernel.constexpr_names or launch.wrapper is None:
            continue
        flow = model.flow(launch.wrapper)
        for _, e in model.sources(launch.wrapper, arg):
            for n in walk(e):
                operands = [a.value for a in n.args] if isinstance(n, cst.Call) else \
                    [n.left, n.right] if isinstance(n, cst.BinaryOperation) and isinstance(
                        n.operator, (cst.FloorDivide, cst.Divide)) else []
                if len(operands) == 2 and constant_int(flow, operands[1]) == programs \
                        and constant_int(flow, operands[0]) is None:
                    return True  # `cdiv(N, 12)`, `N // 12`: the block is the input split over the programs
    return False


def shape_pins(flow: Dataflow, test, size_like, assert_form: bool, tile) -> Iterator[tuple]:
    """The shape pins of each conjunct of a condition; a divisibility pins a shape only when
    its modulus is a tile (`n % BLOCK`, `K % 64`): `HQ % H` relates two inputs' sizes (grouped
    query heads), `N % num_groups` is the layer's definition."""
    if isinstance(test, cst.BooleanOperation):
        yield from shape_pins(flow, test.left, size_like, assert_form, tile)
        yield from shape_pins(flow, test.right, size_like, assert_form, tile)
        return
    pin = shape_pin(flow, test, size_like, assert_form)
    if pin is None:
        return
    if pin[0] == "divisibility":
        modulus = next((n.right for n in walk(test) if is_modulo(n) and n.left is pin[1]), None)
        if modulus is None or not tile(modulus):
            return
    yield pin


def host_tile(model: TritonModule, fn: Function, expr) -> bool:
    """Is a host modulus a tile the kernel was written for, not a size of the problem?"""
    flow = model.flow(fn)
    value = constant_int(flow, expr)
    if value is not None:
        return value > 2  # `% 2`: halves (a GLU's gate and up, rotary pairs), not a tile
    text = expr_text(model, expr)
    if TILE_NAME.search(text):
        return True
    if shape_kind(model, fn, expr) is not None:
        return rounded(model, fn, expr)  # another input's size, unless rounded into a block
    params = [flow.param(n) for n in names_read(expr)]
    return any(p is not None and (v := int_literal(p.node.default)) is not None and v > 2 for p in params)


def kernel_tile(model: TritonModule, jit: JitFunction, expr) -> bool:
    """Is a modulus inside a kernel a tile: a literal, or a constexpr not bound to a size at every launch?"""
    flow = model.flow(jit)
    value = constant_int(flow, expr)
    if value is not None:
        return value > 2
    names = names_read(expr) | {d.name for d in flow.upstream(expr)}
    for name in names & jit.constexpr_names:
        kinds = shape_kinds(model, jit, cst.Name(name))
        if not kinds or None in kinds or "computed" in kinds:
            return True
    return False  # runtime sizes, or constexprs every launch binds to the input's shape


def whole_blocks_of(flow: Dataflow, args: list, value: int) -> bool:
    """`x.view(num_blocks, 2048)` with `num_blocks = padded // 2048` and `padded` a multiple of
    2048 (`((n // 2048) + 1) * 2048`): rows of a buffer padded to whole blocks, not a size."""
    def values(expr) -> list:
        if not isinstance(expr, cst.Name):
            return [expr]
        found = [assigned_value(d, expr.value) for d in flow.defs_of(expr.value)]
        return found if found and None not in found else []

    def multiple(expr) -> bool:
        return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply) and value in (
            int_literal(expr.left), int_literal(expr.right))

    return any(all(isinstance(count, cst.BinaryOperation) and isinstance(count.operator, cst.FloorDivide)
                   and int_literal(count.right) == value and values(count.left)
                   and all(multiple(v) for v in values(count.left)) for count in values(arg)) and values(arg)
               for arg in args)
