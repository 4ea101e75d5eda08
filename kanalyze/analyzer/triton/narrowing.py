"""When is a cast to fp16/bf16/fp8 a precision downgrade, and when is it the problem's own dtype?

A narrowing loses precision only where a float32 value is computed with after
it.  Not a downgrade: a bitcast (`bitcast=True` reinterprets bits), a target that
follows an input's dtype (`x.to(y.dtype)`, a constexpr the wrapper picks from
`q.dtype`), a cast whose value is only stored (`only_stored`, through ordered
reaching definitions), a cast feeding `tl.dot` whose other operand is visibly
loaded in that dtype, a cast taken only when a tensor's `.dtype` is the
target (`under_dtype_test`), and a float32 value widened from data the target
holds exactly (`exact_round_trip`: fp8 → fp32 → fp16).  PRC001 reports the rest,
naming the kernel flag that switches a narrowing on where its name asks for one
(`precision_flag`: `if fp16:`), which the library profile folds as a requested precision.
"""

from __future__ import annotations

import re

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import bind_call_args, calls_within, keyword
from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
from kanalyze.analyzer.triton.dtype_names import UNKNOWN, cast_operand, cast_target, literal_dtype, resolve_dtypes
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.host_callers import host_callers
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching

DOT = "triton.language.dot"
LOAD = "triton.language.load"
STORE = "triton.language.store"
TRANS = "triton.language.trans"


def is_loaded_or_fp32(model: TritonModule, jit: JitFunction, operand: cst.BaseExpression) -> bool:
    """Does a value whose dtype is not visible come from loaded data, a product or a sum, or
    a `tl.zeros`/`tl.full` buffer of float32 (so that narrowing it may round fp32 data)?"""
    for _, expr in model.sources(jit, operand):
        for call, name in calls_within(model, expr):
            if name in (LOAD, DOT, "triton.language.sum"):
                return True
            if name in ("triton.language.zeros", "triton.language.full") and \
                    resolve_dtypes(model, jit, keyword(call, "dtype", 1)) == {"float32"}:
                return True
    return False


def matches_dot_partner(model: TritonModule, flow: DtypeFlow, jit: JitFunction, cast: cst.Call,
                        narrow_to: frozenset[str]) -> bool:
    """`tl.dot(p.to(tl.float16), v)` with `v` visibly float16: the cast is what the product needs."""
    uses: list[tuple[cst.Call, cst.BaseExpression]] = []
    parent = model.parent(cast)
    if isinstance(parent, cst.Arg) and isinstance(call := model.parent(parent), cst.Call):
        uses.append((call, cast))
    elif isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        for site in model.calls_in(jit, DOT):
            for arg in site.node.args[:2]:
                if isinstance(arg.value, cst.Name) and arg.value.value == name:
                    uses.append((site.node, arg.value))
    dots = [(c, e) for c, e in uses if model.call_name(c) == DOT]
    if not dots or len(dots) != len(uses):
        return False
    for dot, operand in dots:
        others = [a.value for a in dot.args[:2] if a.value is not operand]
        if len(others) != 1:
            return False
        if not _loaded_as(model, flow, jit, others[0], narrow_to):
            return False
    return True


def only_stored(model: TritonModule, cast: cst.Call, reachings: dict, depth: int = 3) -> bool:
    """Is the cast's value only ever written out (`tl.store(p, x.to(...))`), also through
    further casts (`v = v.to(tl.float8e5); v = v.to(tl.uint8, bitcast=True); tl.store(p, v)`)?"""
    parent = model.parent(cast)
    if isinstance(parent, cst.Arg):
        call = model.parent(parent)
        return isinstance(call, cst.Call) and _writes_value(model, call, cast)
    if isinstance(parent, cst.Call) and cast_target(model, parent) is not None and parent.func.value is cast:
        return depth > 0 and only_stored(model, parent, reachings, depth - 1)  # `x.to(a).to(b)`
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)):
        return False
    function = model.function_of(cast)
    if function is None:
        return False
    name = parent.targets[0].target.value
    reaching = _reaching(model, function, reachings)
    defs = set(id(d) for d in reaching.flow.defs_at(parent) if d.name == name)
    reads = [n for n in walk(function.node.body) if isinstance(n, cst.Name) and n.value == name
             and not isinstance(model.parent(n), cst.AssignTarget)
             and any(id(d) in defs for d in _reaching_defs(model, reaching, name, n))]
    for read in reads:  # none: the narrowed value is never used, so nothing computes with it
        holder = model.parent(read)
        if isinstance(holder, cst.Arg):
            call = model.parent(holder)
            if isinstance(call, cst.Call) and _writes_value(model, call, read):
                continue
            return False
        if isinstance(holder, cst.Attribute) and holder.value is read and \
                isinstance(call := model.parent(holder), cst.Call) and cast_target(model, call) is not None:
            if depth > 0 and only_stored(model, call, reachings, depth - 1):
                continue
        return False
    return True


# What each narrow dtype holds exactly: a value widened from one of these and narrowed back loses nothing.
EXACTLY_IN = {"float16": {"float16", "float8", "int8", "uint8", "bool"},
              "bfloat16": {"bfloat16", "float8", "int8", "uint8", "bool"},
              "float8": {"float8"}}


def exact_round_trip(model: TritonModule, flow: DtypeFlow, jit: JitFunction, operand: cst.BaseExpression,
                     narrow: str, reachings: dict) -> bool:
    """Is the value cast to `narrow` a float32 widening of data `narrow` holds exactly (`w =
    w.to(tl.float8e5, bitcast=True); w = w.to(tl.float32); w = w.to(tl.float16)`)?  Then the
    narrowing gives back the same numbers: no bit is lost."""
    reaching = _reaching(model, jit.function, reachings)

    def values_of(expr: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
        """What `expr` holds where it is read: the definitions that reach it (a name), or itself."""
        if not isinstance(expr, cst.Name):
            return [expr] if expr is not None else None
        defs = _reaching_defs(model, reaching, expr.value, expr)
        if not defs or any(d.kind != "assign" or d.value is None for d in defs):
            return None
        return [d.value for d in defs]

    widenings = values_of(operand)
    if not widenings:
        return False
    for value in widenings:
        if not isinstance(value, cst.Call) or literal_dtype(model, cast_target(model, value)) != "float32":
            return False
        sources = values_of(cast_operand(value))
        if not sources:
            return False
        held = frozenset().union(*(flow.value(jit.function, source) for source in sources))
        if UNKNOWN in held or not held <= EXACTLY_IN.get(narrow, set()):
            return False
    return True


def _reaching(model: TritonModule, function, reachings: dict) -> Reaching:
    """The function's `Reaching`, kept in `reachings` (the caller's: one per model)."""
    if id(function.node) not in reachings:
        reachings[id(function.node)] = Reaching(model, function)
    return reachings[id(function.node)]


def under_dtype_test(model: TritonModule, node: cst.CSTNode, narrow: str) -> bool:
    """Is `node` evaluated only when a tensor's `.dtype` equals `narrow` (an `if`/ternary on it)?"""
    child = node
    for ancestor in model.ancestors(node):
        test = None
        if isinstance(ancestor, cst.IfExp) and child is ancestor.body:
            test = ancestor.test
        elif isinstance(ancestor, cst.If) and child is ancestor.body:
            test = ancestor.test
        if test is not None and all(_tests_dtype_is(model, t, narrow) for t in _test_values(model, test)):
            return True
        if isinstance(ancestor, cst.FunctionDef):
            return False
        child = ancestor
    return False


# A kernel flag whose name asks for a reduced precision: `fp16`, `USE_BF16`, `half`, `amp`.
_PRECISION_FLAG = re.compile(r"(^|_)(fp16|bf16|f16|half|amp|autocast|low_?precision|mixed_?precision)(_|$)",
                             re.IGNORECASE)


def precision_flag(model: TritonModule, jit: JitFunction, node: cst.CSTNode) -> str | None:
    """The kernel flag `node` is evaluated under when that flag's name asks for a reduced
    precision (`if fp16: x = x.to(tl.float16)`, `x.to(tl.float16) if fp16 else x`): the
    caller switches the narrowing on, as under autocast.  None elsewhere."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body:
            test = ancestor.test
            if isinstance(test, cst.Name) and _PRECISION_FLAG.search(test.value) and \
                    jit.param(test.value) is not None:
                return test.value
        if isinstance(ancestor, cst.FunctionDef):
            return None
        child = ancestor
    return None


def _test_values(model: TritonModule, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The test itself, or, for a jit parameter (`if fp8_v:`), every value its launches and
    callers pass (`fp8_v=V.dtype.element_ty == tl.float8e5`) when each of them is visible;
    a wrapper's name assigned once stands for its value (`use_tc = x.dtype in (...)`)."""
    if not isinstance(test, cst.Name):
        return [test]
    function = model.function_of(test)
    jit = model.jit_of(test) if function is not None else None
    if jit is None or not any(d.kind == "param" for d in model.flow(jit.function).defs_of(test.value)):
        return [test]
    values = [bind_call_args(call, jit.params).get(test.value) for _, call in jit.called_from]
    values += [_assigned_once(model, l.wrapper, l.args.get(test.value)) for l in jit.launches]
    if not values or any(v is None for v in values):
        return [test]
    return values


def _assigned_once(model: TritonModule, function, value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """A name's only value in `function` (`use_tc = x.dtype in (...)`), else `value` itself."""
    if isinstance(value, cst.Name) and function is not None:
        defs = model.flow(function).defs_of(value.value)
        if len(defs) == 1 and defs[0].kind == "assign" and defs[0].value is not None:
            return DtypeFlow.unpacked(defs[0], defs[0].value)
    return value


def _tests_dtype_is(model: TritonModule, test: cst.BaseExpression, narrow: str) -> bool:
    for node in walk(test):
        if not isinstance(node, cst.Comparison):
            continue
        sides = [node.left] + [c.comparator for c in node.comparisons]
        ops = [c.operator for c in node.comparisons]
        if not all(isinstance(op, (cst.Equal, cst.Is, cst.In)) for op in ops):
            continue
        reads_dtype = any(isinstance(n, cst.Attribute) and n.attr.value == "dtype" for side in sides for n in walk(side))
        names = {literal_dtype(model, n) for side in sides for n in walk(side) if isinstance(n, cst.BaseExpression)}
        if reads_dtype and narrow in names:
            return True
    return False


def _reaching_defs(model: TritonModule, reaching: Reaching, name: str, read: cst.Name) -> list:
    """`reaching.defs`, less the definitions carried round a loop to a read that an unconditional
    definition earlier in the same iteration always overwrites (`v = tl.load(...)` at the top
    of the body hides last iteration's `v = v.to(...)`)."""
    found = [d for d in reaching.defs(name, read) if not _exclusive_branches(model, d.node, read)]
    start = reaching.span(read)[0]
    earlier = [d for d in found if d.kind != "param" and reaching.time(d) < start]
    later = [d for d in found if d.kind != "param" and reaching.time(d) >= start]
    if not later:
        return found
    read_suites = _suites(model, read)
    killed = set()
    for d in later:
        loops = [a for a in model.ancestors(read) if isinstance(a, (cst.For, cst.While))
                 and reaching.inside(d.node, a)]
        if loops and any(reaching.inside(e.node, loops[0]) and _suites(model, e.node) <= read_suites
                         and not isinstance(e.node, cst.For) for e in earlier):
            killed.add(id(d))
    return [d for d in found if id(d) not in killed]


def _exclusive_branches(model: TritonModule, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Are `a` and `b` in different branches of one `if`/`elif`/`else` (never both in one pass)?"""
    a_path = {id(n): child for child, n in _with_parents(model, a)}
    for child, node in _with_parents(model, b):
        if isinstance(node, cst.If) and id(node) in a_path:
            a_child = a_path[id(node)]
            return {id(child), id(a_child)} == {id(node.body), id(node.orelse)} if node.orelse is not None else False
        if isinstance(node, cst.FunctionDef):
            return False
    return False


def _with_parents(model: TritonModule, node: cst.CSTNode):
    child = node
    for parent in model.ancestors(node):
        yield child, parent
        child = parent


def _suites(model: TritonModule, node: cst.CSTNode) -> set[int]:
    found = set()
    for a in model.ancestors(node):
        if isinstance(a, cst.FunctionDef):
            break
        if isinstance(a, cst.BaseSuite):
            found.add(id(a))
    return found


def _writes_value(model: TritonModule, call: cst.Call, value: cst.BaseExpression) -> bool:
    """Is `value` what `call` writes to memory (`tl.store(p, value)`, `tl.atomic_add(p, value)`)?"""
    name = model.call_name(call) or ""
    if name == STORE:
        return keyword(call, "value", 1) is value
    if name.startswith("triton.language.atomic_"):
        return keyword(call, "val", 1) is value
    return False


def bitcast(call: cst.Call) -> bool:
    flag = keyword(call, "bitcast")
    return flag is not None and dotted(flag) == "True"


def follows_tensor_dtype(model: TritonModule, function, expr: cst.BaseExpression | None, depth: int = 6) -> bool:
    """Is a cast's target read from a tensor's dtype (`y.dtype`, `P.dtype.element_ty`, a pointer's
    `P.type.element_ty`, a constexpr the wrapper sets to `tl.float16 if x.dtype == torch.float16
    else tl.bfloat16`, a helper's mapping of an input's dtype: `get_triton_type(elem_type)` with
    `elem_type` a wrapper's parameter its caller in the file passes `mat1.dtype`)?"""
    if expr is None or depth < 0:
        return False
    if any(isinstance(n, cst.Attribute) and (n.attr.value == "dtype" or n.attr.value == "element_ty"
                                             and isinstance(n.value, cst.Attribute) and n.value.attr.value == "type")
           for n in walk(expr)):
        return True
    if not isinstance(expr, cst.Name):
        return any(follows_tensor_dtype(model, function, n, depth) for n in walk(expr)
                   if isinstance(n, cst.Name) and not isinstance(model.parent(n), cst.Attribute))
    if function is None:
        return False
    for d in model.flow(function).defs_of(expr.value):
        if d.kind != "param":
            if d.value is not None and follows_tensor_dtype(model, function, d.value, depth - 1):
                return True
            continue
        jit = model.jit.get(function.name)
        if jit is None or jit.function is not function:
            if any(bound.get(d.name) is not None and follows_tensor_dtype(model, caller, bound[d.name], depth - 1)
                   for caller, bound, _ in host_callers(model, function, {})):
                return True  # a host function's parameter: what its callers in the file pass
            continue
        for launch in jit.launches:
            value = launch.args.get(d.name)
            if value is not None and launch.wrapper is not None and \
                    follows_tensor_dtype(model, launch.wrapper, value, depth - 1):
                return True
        for caller, call in jit.called_from:
            arg = bind_call_args(call, jit.params).get(d.name)
            if arg is not None and follows_tensor_dtype(model, caller, arg, depth - 1):
                return True
    return False


def _loaded_as(model: TritonModule, flow: DtypeFlow, jit: JitFunction, expr: cst.BaseExpression,
               dtypes: frozenset[str], depth: int = 3) -> bool:
    """Is `expr` data loaded from tensors that the wrappers show are of `dtypes` (not a cast)?"""
    while isinstance(expr, (cst.Subscript, cst.Attribute)) or (
            isinstance(expr, cst.Call) and model.call_name(expr) in (TRANS, "triton.language.permute",
                                                                    "triton.language.reshape")):
        expr = expr.value if not isinstance(expr, cst.Call) else expr.args[0].value
    if isinstance(expr, cst.Call) and model.call_name(expr) == LOAD:
        element = flow.pointer_element(jit.function, keyword(expr, "pointer", 0))
        return UNKNOWN not in element and element <= dtypes
    if isinstance(expr, cst.Name) and depth > 0:
        defs = model.flow(jit.function).defs_of(expr.value)
        return bool(defs) and all(d.kind == "assign" and d.value is not None and
                                  _loaded_as(model, flow, jit, d.value, dtypes, depth - 1) for d in defs)
    return False
