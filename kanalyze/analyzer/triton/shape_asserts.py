"""Conditions that pin a shape: `assert x.shape[0] == 4096`, `assert K % 64 == 0`,
`if n % BLOCK: raise`, and which host values are sizes worth pinning."""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text, walk
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.dataflow import Dataflow
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import SHAPE_ATTRS, constant_int, is_modulo

# Attributes that read a tensor's rank, dtype or element size: checking them pins no shape.
NOT_SIZES = {"dim", "ndim", "ndimension", "element_size", "itemsize", "dtype", "device"}


def host_size_like(model: TritonModule, fn: Function, expr) -> bool:
    """Is a host expression a size: read from a tensor's shape, or a parameter of the
    wrapper without a literal default (rank, dtype and tile checks are not)?"""
    nodes = [n for _, e in model.sources(fn, expr) for n in walk(e)]
    attrs = {n.attr.value for n in nodes if isinstance(n, cst.Attribute)}
    if attrs & NOT_SIZES or any(isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len"
                                for n in nodes):
        return False  # rank, dtype or element-size checks do not pin a shape
    if attrs & SHAPE_ATTRS:
        return True
    param = model.flow(fn).param(expr.value) if isinstance(expr, cst.Name) else None
    return param is not None and expr.value != "self" and "BLOCK" not in expr.value.upper() and \
        int_literal(param.node.default) is None  # `BLOCK_SIZE=1024`: a tile, not a size


def shape_pin(flow: Dataflow, test, size_like, assert_form: bool):
    """("equality" | "divisibility", size, value) when a condition pins a shape.  `assert_form`:
    the condition must hold (`assert`); otherwise it is the failure (`if ...: raise`)."""
    if isinstance(test, cst.BooleanOperation):
        return (shape_pin(flow, test.left, size_like, assert_form)
                or shape_pin(flow, test.right, size_like, assert_form))
    if not assert_form and is_modulo(test) and size_like(test.left):
        return "divisibility", test.left, plain_text(test.right)  # `if n % BLOCK: raise`
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(
            test.comparisons[0].operator, cst.Equal if assert_form else cst.NotEqual):
        return None
    sides = (test.left, test.comparisons[0].comparator)
    for a, b in (sides, sides[::-1]):
        if is_modulo(a) and constant_int(flow, b) == 0 and size_like(a.left):
            return "divisibility", a.left, plain_text(a.right)
        value = constant_int(flow, b)
        if isinstance(b, (cst.Tuple, cst.List)):  # `x.shape == (16, 1024)`
            values = [constant_int(flow, e.value) for e in b.elements]
            value = max(values) if values and None not in values else None
            value = plain_text(b) if value is not None and value >= 2 else None
        if value is not None and (isinstance(value, str) or value >= 2) and size_like(a):
            return "equality", a, value
    return None


_EMPTY_MODULE = cst.Module([])


def plain_text(node) -> str:
    """The source text of a node, without the module it came from."""
    return node_text(_EMPTY_MODULE, node)

