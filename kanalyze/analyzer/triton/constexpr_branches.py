"""Branches of a kernel that no value of a constexpr the source shows can take.

    @triton.autotune(configs=[triton.Config({"SPLIT_K": 1, ...})], key=[...])
    @triton.jit
    def mm(..., SPLIT_K: tl.constexpr):
        if SPLIT_K == 1:
            tl.store(C, acc)
        else:
            tl.atomic_add(C, acc)      # never compiled: SPLIT_K is 1 in every config

`never_taken(model, jit, node)` is True when an `if` around `node` tests a constexpr
against an integer literal (`==`, `!=`, `<`, `<=`, `>`, `>=`) and every value the
constexpr can take sends control the other way.  The values are known only when all
of them are integer literals the source shows: every `triton.Config` of a literal
`configs=[...]` list names it, or a `@triton.heuristics` function whose every
`return` is a literal computes it (a lambda, or a `def` of this module), or every
launch in the checked tree passes it (or leaves it at its default).  Anything else
(a config list built by a function, a launch that passes a variable) keeps the
branch reachable.
"""

from __future__ import annotations

import operator

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import int_literal, string_literal
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule

AUTOTUNE = "triton.autotune"
HEURISTICS = "triton.heuristics"
COMPARE = {cst.Equal: operator.eq, cst.NotEqual: operator.ne, cst.LessThan: operator.lt,
           cst.LessThanEqual: operator.le, cst.GreaterThan: operator.gt, cst.GreaterThanEqual: operator.ge}


def never_taken(model: TritonModule, jit: JitFunction, node: cst.CSTNode) -> bool:
    """Does an `if` around `node` test a constexpr whose every value skips `node`?"""
    child = node
    for ancestor in model.ancestors(node):
        if ancestor is jit.function.node:
            break
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            taken = _outcomes(model, jit, ancestor.test)
            if taken is not None and (child is ancestor.body) not in taken:
                return True
        child = ancestor
    return False


def _outcomes(model: TritonModule, jit: JitFunction, test: cst.BaseExpression) -> set[bool] | None:
    """The values `NAME <op> literal` takes over every value of the constexpr NAME; None if unknown."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    compare = COMPARE.get(type(test.comparisons[0].operator))
    left, right = test.left, test.comparisons[0].comparator
    if compare is None:
        return None
    if isinstance(right, cst.Name) and int_literal(left) is not None:
        left, right = right, left
        compare = {operator.lt: operator.gt, operator.gt: operator.lt, operator.le: operator.ge,
                   operator.ge: operator.le}.get(compare, compare)
    bound = int_literal(right)
    if not isinstance(left, cst.Name) or bound is None or left.value not in jit.constexpr_names:
        return None
    values = constexpr_literals(model, jit, left.value)
    return {compare(v, bound) for v in values} if values else None


def constexpr_literals(model: TritonModule, jit: JitFunction, name: str) -> set[int] | None:
    """Every integer value constexpr `name` can take, when the source shows all of them."""
    for decorator in jit.function.node.decorators:
        call = decorator.decorator
        if not isinstance(call, cst.Call):
            continue
        qualname = model.qualify(call.func)
        if qualname == HEURISTICS:
            rule = _heuristic(call, name)
            if rule is not None:
                return _returned_literals(model, rule)
        if qualname == AUTOTUNE:
            values = _config_literals(call, name)
            if values:
                return values
    if not jit.launches:
        return None
    default = jit.param(name).default if jit.param(name) is not None else None
    values = set()
    for launch in jit.launches:
        value = int_literal(launch.args[name]) if name in launch.args else \
            (int_literal(default) if default is not None else None)
        if value is None:
            return None
        values.add(value)
    return values


def _heuristic(call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The function `@triton.heuristics({name: f})` (or `values=`) computes `name` with."""
    table = call.args[0].value if call.args else None
    if not isinstance(table, cst.Dict):
        return None
    for element in table.elements:
        if isinstance(element, cst.DictElement) and string_literal(element.key) == name:
            return element.value
    return None


def _returned_literals(model: TritonModule, rule: cst.BaseExpression) -> set[int] | None:
    if isinstance(rule, cst.Lambda):
        value = int_literal(rule.body)
        return {value} if value is not None else None
    if not isinstance(rule, cst.Name):
        return None
    defs = [f for f in model.functions if f.name == rule.value and f.class_name is None]
    if len(defs) != 1:
        return None
    returns = [n.value for n in walk(defs[0].node.body) if isinstance(n, cst.Return)]
    values = [int_literal(r) if r is not None else None for r in returns]
    return set(values) if values and None not in values else None  # type: ignore[arg-type]


def _config_literals(call: cst.Call, name: str) -> set[int] | None:
    """`name`'s values over a literal `configs=[triton.Config({...}), ...]`; None unless
    every config gives it as an integer literal."""
    configs = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "configs"), None)
    if not isinstance(configs, (cst.List, cst.Tuple)) or not configs.elements:
        return None
    values = set()
    for element in configs.elements:
        config = element.value
        table = config.args[0].value if isinstance(config, cst.Call) and config.args else None
        if not isinstance(table, cst.Dict):
            return None
        entry = {string_literal(e.key): e.value for e in table.elements if isinstance(e, cst.DictElement)}
        value = int_literal(entry[name]) if name in entry else None
        if value is None:
            return None
        values.add(value)
    return values
