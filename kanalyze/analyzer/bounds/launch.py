"""One launch configuration, bound: the kernel's parameters as symbolic values.

For `kernel[grid](args...)` in a wrapper and one constexpr configuration (the
launch's own values, or one `triton.Config` of `@triton.autotune`), this binds
every kernel parameter to what the wrapper passes:
  - pointer parameters to the tensor passed (its extent in elements),
  - constexprs to compile-time constants (symbolic when they follow a size,
    `BLOCK=triton.next_power_of_2(n)`),
  - integer parameters to runtime values (int32 or int64 by value),
and reads the grid and the wrapper's shape asserts (`assert K % 16 == 0` is a
precondition of the proof).  The result is a root `Frame` for the kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
import z3

from kanalyze.analyzer.bounds.host import HArith, HLambda, HMeta, HostEval, HostTensor, HParam, HTuple, HValue
from kanalyze.analyzer.bounds.kernel import ACCESSES, Frame, LaunchContext, to_kernel_value
from kanalyze.analyzer.bounds.symbols import Env, Unsupported, variables
from kanalyze.analyzer.bounds.terms import Opaque, Pointer, PyValue, Tile, constant
from kanalyze.analyzer.cstwalk import body_nodes, node_text
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.entities import JitFunction, Launch
from kanalyze.analyzer.triton.model import TritonModule

# Configurations proved per launch; an autotune list longer than this is checked in part.
MAX_CONFIGS = 8
_SHAPE_TEXT = re.compile(r"shape|size|numel|stride|dim|len\(|%")


@dataclass(eq=False)
class BoundLaunch:
    launch: Launch
    config_index: int | None          # the autotune config, or None
    env: Env
    frame: Frame
    ctx: LaunchContext
    runtime: dict = field(default_factory=dict)    # runtime integer parameter → z3 term
    constexprs: dict = field(default_factory=dict)  # constexpr parameter → z3 term (integers only)
    read: set = field(default_factory=set)          # size symbols the launch reads
    inexact: list = field(default_factory=list)     # shape asserts that could not be read
    grid_reason: str | None = None                  # why the grid is not read, if it is not


def configurations(jit: JitFunction) -> tuple[list[tuple[int | None, dict]], int]:
    """(index, constexpr overrides) per configuration, and how many exist."""
    configs = jit.autotune_configs
    if not configs:
        return [(None, {})], 1
    return list(enumerate(configs))[:MAX_CONFIGS], len(configs)


def pointer_parameters(model: TritonModule, jit: JitFunction) -> set[str]:
    """Parameters that are the base of an access: the leftmost term of the pointer
    sum (`x_ptr + row * stride + cols`), through local names and helper calls."""
    names = {p.name for p in jit.params if "ptr" in p.name.lower()}
    params = {p.name for p in jit.params}
    flow = model.flow(jit)
    for site in model.calls_in(jit):
        if site.qualname not in ACCESSES:
            continue
        stack, budget = [keyword(site.node, "pointer", 0)], 32
        while stack and budget:
            expr, budget = stack.pop(), budget - 1
            while isinstance(expr, (cst.BinaryOperation, cst.Subscript)):
                expr = expr.left if isinstance(expr, cst.BinaryOperation) else expr.value
            if isinstance(expr, cst.Name):
                if expr.value in params:
                    names.add(expr.value)
                stack += [d.value for d in flow.defs_of(expr.value) if d.value is not None and d.kind == "assign"]
    for helper_name in jit.calls_helpers:  # `_load(x_ptr + ...)` inside a helper: bound at the call site
        helper = model.jit.get(helper_name)
        if helper is None or helper is jit:
            continue
        inner = pointer_parameters(model, helper) if helper_name != jit.name else set()
        for _, call in helper.called_from:
            if model.function_of(call) is jit.function:
                from kanalyze.analyzer.triton.calls import bind_call_args
                for param, arg in bind_call_args(call, helper.params).items():
                    if param in inner:
                        while isinstance(arg, (cst.BinaryOperation, cst.Subscript)):
                            arg = arg.left if isinstance(arg, cst.BinaryOperation) else arg.value
                        if isinstance(arg, cst.Name) and arg.value in params:
                            names.add(arg.value)
    return names


def bind(model: TritonModule, launch: Launch, config_index: int | None, config: dict,
         pointers: set[str]) -> BoundLaunch:
    jit = launch.kernel
    env = Env()
    host = HostEval(model, launch.wrapper, env)
    module = HostEval(model, None, env)
    ctx = LaunchContext(model, env, None, {}, lambda expr: module.value(expr))
    bound = BoundLaunch(launch, config_index, env, None, ctx)  # type: ignore[arg-type]
    host_values: dict[str, object] = {}
    bindings: dict[str, object] = {}

    for param in jit.params:
        if param.name in jit.heuristics and param.name not in config and param.name not in launch.args:
            continue  # after the others: a heuristic reads them
        if param.name in config:
            expr, scope = config[param.name], module
        elif param.name in launch.args:
            expr, scope = launch.args[param.name], host
        elif param.default is not None:
            expr, scope = param.default, module
        else:
            bindings[param.name] = Opaque(f"`{param.name}` is not passed at the launch")
            continue
        bindings[param.name] = _bind_one(bound, param, expr, scope, pointers, host_values)

    for name, body in _heuristics(model, jit).items():
        if name in bindings:
            continue
        param = jit.param(name)
        if param is None:
            continue  # a heuristic for a name the kernel does not take (`{b"N": ...}`: bytes)
        lookup = HMeta(lambda key: _lookup(key, host_values))
        scope = HostEval(model, None, env, {body[0]: lookup})
        bindings[name] = _bind_one(bound, param, body[1], scope, pointers, host_values)

    try:
        ctx.grid = _grid(host, launch, host_values)
    except Unsupported as exc:
        ctx.grid = None
        bound.grid_reason = exc.reason
    for tensor in list(ctx.tensors.values()) + list(host.bases.values()):
        if all(tensor is not t for t in env.tensors):
            env.tensors.append(tensor)
    _asserts(bound, host, launch)
    frame = Frame(ctx, jit, bindings)
    bound.frame = frame
    terms = list(bound.runtime.values()) + list(bound.constexprs.values()) + list(ctx.grid or []) + env.facts
    bound.read = _closure(env, variables(*terms)) if terms else set()
    return bound


def _bind_one(bound: BoundLaunch, param, expr, scope: HostEval, pointers: set[str], host_values: dict):
    env, ctx = bound.env, bound.ctx
    try:
        value = scope.value(expr)
    except Unsupported as exc:
        if param.is_constexpr or param.name in pointers:
            return Opaque(f"`{_text(expr)}` passed to `{param.name}`: {exc.reason}")
        value = env.free(f"`{_text(expr)}` passed to `{param.name}` ({exc.reason})")
    host_values[param.name] = value
    if isinstance(value, HValue) and value.value is None:
        return PyValue(None)
    if param.name in pointers or isinstance(value, HostTensor):
        try:
            ctx.tensors[param.name] = scope.as_tensor(value)
        except Unsupported as exc:
            return Opaque(f"`{_text(expr)}` passed to `{param.name}`: {exc.reason}")
        return Pointer(param.name, constant(0))
    if isinstance(value, (HParam, HArith)):
        try:
            value = scope.as_int(value)
        except Unsupported as exc:
            return Opaque(f"`{_text(expr)}` passed to `{param.name}`: {exc.reason}")
    kernel_value = to_kernel_value(value, runtime=not param.is_constexpr)
    if isinstance(kernel_value, Tile) and kernel_value.kind == "int":
        term = kernel_value.at(())[0]
        (bound.constexprs if param.is_constexpr else bound.runtime)[param.name] = term
    return kernel_value


def _lookup(key: str, host_values: dict):
    if key not in host_values:
        raise Unsupported(f"`{key}` is not a parameter bound at the launch")
    return host_values[key]


def _heuristics(model: TritonModule, jit: JitFunction) -> dict[str, tuple[str, cst.BaseExpression]]:
    """`@triton.heuristics({"EVEN_N": lambda args: ...})` → name → (lambda parameter, body)."""
    found = {}
    for decorator in jit.node.decorators:
        call = decorator.decorator
        if not isinstance(call, cst.Call) or model.call_name(call) != "triton.heuristics" or not call.args:
            continue
        table = call.args[0].value
        if not isinstance(table, cst.Dict):
            continue
        for element in table.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and isinstance(element.value, cst.Lambda) and len(element.value.params.params) == 1:
                found[element.key.evaluated_value] = (element.value.params.params[0].name.value, element.value.body)
    return found


def _grid(host: HostEval, launch: Launch, host_values: dict) -> list:
    value = host.value(launch.grid)
    if isinstance(value, HLambda):
        value = host.apply(value, [HMeta(lambda key: _lookup(key, host_values))])
    items = value.items if isinstance(value, HTuple) else [value]
    if not 1 <= len(items) <= 3:
        raise Unsupported("a grid of more than three axes")
    return [host.as_int(item) for item in items]


def _asserts(bound: BoundLaunch, host: HostEval, launch: Launch) -> None:
    """What the wrapper guarantees before it launches: `assert cond`, `if cond: raise`
    anywhere in it, and on the way to the launch an enclosing `if`/`else` and an
    earlier `if cond: return fallback(...)`."""
    wrapper = launch.wrapper
    if wrapper is None:
        return
    conditions = []
    for node in body_nodes(wrapper.node):
        if isinstance(node, cst.Assert):
            conditions.append((node.test, True))
        elif isinstance(node, cst.If) and _ends_in(node.body, cst.Raise):
            conditions.append((node.test, False))
    child = launch.call
    for ancestor in bound.ctx.model.ancestors(launch.call):
        if ancestor is wrapper.node:
            break
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            conditions.append((ancestor.test, child is ancestor.body))
        if isinstance(ancestor, cst.IndentedBlock):
            for statement in ancestor.body:
                if statement is child:
                    break
                if isinstance(statement, cst.If) and _ends_in(statement.body, cst.Return):
                    conditions.append((statement.test, False))
        child = ancestor
    for test, holds in conditions:
        try:
            condition = host.condition(test)
        except Unsupported:
            if _SHAPE_TEXT.search(_text(test)):
                bound.inexact.append(f"the check `{_text(test)}` in `{wrapper.name}` is not modeled")
            continue
        bound.env.add_fact(condition if holds else z3.Not(condition))


def _ends_in(body: cst.BaseSuite, kind: type) -> bool:
    statements = list(body.body)
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, kind)


def _closure(env: Env, names: set[str]) -> set[str]:
    """Names plus the names their defining facts mention (`pow2(n)` reads `n`)."""
    found, pending = set(), list(names)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        symbol = env.symbols.get(name)
        if symbol is not None and symbol.facts:
            pending.extend(variables(*symbol.facts) - found)
    return found


_EMPTY = cst.Module([])


def _text(node) -> str:
    text = node_text(_EMPTY, node)
    return text if len(text) <= 60 else text[:59] + "…"


__all__ = ["BoundLaunch", "bind", "configurations", "pointer_parameters"]
