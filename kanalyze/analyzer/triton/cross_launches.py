"""What the other checked modules pass to a module's kernels when they launch them directly.

    # kernels.py                              # api.py
    @triton.jit                               from .kernels import attn_kernel
    def attn_kernel(q_ptr, k_ptr, ...):       def attention(q, k):
        ... tl.dot(q, k) ...                      assert q.dtype in (torch.float16, torch.bfloat16)
                                                  attn_kernel[grid](q, k, ...)

Seen alone, kernels.py never launches `attn_kernel`: its pointers point into tensors of no
known dtype.  cross_callers.py follows the calls of a module's launcher functions; this
module follows the launches themselves.  For each kernel that its own module does not
launch (a top-level jit function of a module with a `dot(`), the project index asks every
other checked module that imports it how it launches it, and hands kernels.py the union
per parameter, under the kernel's name (`Linked.passed_to(kernel, param)`); dtype_flow.py
uses it for a pointer parameter of a kernel that its file never launches.

A launch is `K[grid](...)` or `mod.K[grid](...)` of a name an import binds to the kernel
(followed through re-exports as for launchers), or a call that a local alias `kernel =
K[grid]` reaches (`kernel(...)`).  Arguments bind by position and by keyword; a params
object unpacked at the launch (`kernel(*params.args())`) gives its slots in order
(slot_args.py).  What an argument passes is its file's host dtype evidence (dtype_flow.py),
as for launchers.  The evidence counts only when every use found agrees: one launch that
passes what its file does not show, an unpacking that is not a params object, any other
use of the kernel in that module (an argument, a dict value, `K.run`, an alias used
otherwise than called) or a file the index cannot read leaves the parameter unknown.
Launches the imports do not show (a kernel fetched with `getattr`, handed to a dispatcher
in a third module) are not seen.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Mapping

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.cross_callers import (UNKNOWN, Launcher, Passed, _Linker, _resolve, caller_flow,
                                                     calling_files, unknown_from)

if TYPE_CHECKING:  # the triton analyzer is imported only when a calling file is read, as in cross_callers.py
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
    from kanalyze.analyzer.triton.model import TritonModule

Kernels = dict[str, dict[str, Launcher]]  # the kernel's file → kernel name → its parameters


def passed_to_kernels(linker: _Linker, folded: Mapping[str, str], unlaunched: Mapping[str, set[str]],
                      passed: Passed) -> None:
    """Add to `passed` what the other checked modules pass to each kernel that its module
    does not launch, per parameter.  `unlaunched`: kernel name → the files that may define
    it without launching it (the project index's text scan)."""
    kernels: Kernels = {}
    for name, files in unlaunched.items():
        for path in files:
            if "dot(" in folded[path] and (params := _parameters(linker, path, name)) is not None:
                kernels.setdefault(path, {})[name] = params
    for path in calling_files(linker, folded, kernels):
        _launches_in(linker, path, kernels, passed)


def _parameters(linker: _Linker, path: str, name: str) -> Launcher | None:
    """The kernel's parameter names in order, and those whose default is None; None when the
    file does not define `name` under a kernel decorator.  (The text scan that found `name`
    already left out the functions that return a value: `summary.is_kernel`'s own walk of
    each body would cost more than the rest of this step.)"""
    summary = linker.summary(path)
    node = summary.decorated.get(name) if summary is not None else None
    if node is None:
        return None
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    none = {a.arg for a, d in defaults if isinstance(d, ast.Constant) and d.value is None}
    return [a.arg for a in (*positional, *args.kwonlyargs)], none


def _launches_in(linker: _Linker, path: str, kernels: Kernels, passed: Passed) -> None:
    """Add what the launches in `path` of other modules' kernels pass (every parameter of a
    kernel used otherwise: unknown)."""
    try:
        model, flow = caller_flow(linker, path)
        for target, call in _uses(linker, path, model, kernels):
            params, none_default = kernels[target[0]][target[1]]
            into = passed.setdefault(target[0], {}).setdefault(target[1], {})
            bound = _bound(flow, call, params) if call is not None else {}
            keywords_unpacked = call is None or any(a.star == "**" for a in call.args)
            for param in params:
                if param in bound:
                    into.setdefault(param, set()).update(bound[param])
                elif keywords_unpacked or param not in none_default:
                    into.setdefault(param, set()).add(UNKNOWN)  # in `**kwargs`, a default, or not seen
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a file the index cannot read: its launches, if any, pass what nobody knows
        unknown_from(linker, path, kernels, passed)


def _uses(linker: _Linker, path: str, model: TritonModule,
          kernels: Kernels) -> list[tuple[tuple[str, str], cst.Call | None]]:
    """(the kernel's file and name, the launch call) for each use in `path` of a kernel of
    another module; the call is None for a use that is not a launch."""
    names = {name for found in kernels.values() for name in found}
    uses: list[tuple[tuple[str, str], cst.Call | None]] = []
    for node in model.nodes(cst.Name):
        if node.value not in names or _not_a_load(model, node):
            continue
        holder = model.parent(node)
        expr = holder if isinstance(holder, cst.Attribute) and holder.attr is node else node  # `mod.K`
        name = dotted(expr)
        target = _resolve(linker, path, name, kernels) if name else None
        if target is None or target[0] == path:
            continue
        grid = model.parent(expr)
        launch = model.parent(grid) if isinstance(grid, cst.Subscript) and grid.value is expr else None
        if isinstance(launch, cst.Call) and launch.func is grid:
            uses.append((target, launch))  # `K[grid](...)`
            continue
        calls = _alias_calls(model, launch) if isinstance(launch, cst.Assign) and launch.value is grid else None
        if calls is None:
            uses.append((target, None))  # handed on, stored, `K.run`: what it is passed is not seen
        else:
            uses.extend((target, call) for call in calls)  # `kernel = K[grid]; kernel(...)`
    return uses


def _not_a_load(model: TritonModule, node: cst.Name) -> bool:
    """A name that is not a read of the kernel: in an import, a parameter's or a `def`'s name,
    a keyword, an assignment's target, a local of the function or comprehension around it."""
    holder = model.parent(node)
    if isinstance(holder, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.AssignTarget)) \
            or (isinstance(holder, cst.Arg) and holder.keyword is node):
        return True
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.Import, cst.ImportFrom)):
            return True
        if isinstance(ancestor, (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)):
            loop = ancestor.for_in
            while loop is not None:  # `for k in ...` of a comprehension: a local `k`
                if any(isinstance(n, cst.Name) and n.value == node.value for n in walk(loop.target)):
                    return True
                loop = loop.inner_for_in
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            function = model.function_of(node) if isinstance(ancestor, cst.FunctionDef) else None
            return function is not None and bool(model.flow(function).defs_of(node.value))  # a local of that name
    return False


def _alias_calls(model: TritonModule, assign: cst.Assign) -> list[cst.Call] | None:
    """The calls of `kernel` that `kernel = K[grid]` (in a function) reaches; None when the
    alias is used otherwise (returned, handed on: the launch is not seen)."""
    from kanalyze.analyzer.triton.reaching import Reaching

    function = model.function_of(assign)
    if function is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    alias = assign.targets[0].target.value
    reaching = Reaching.of(model, function)
    calls: list[cst.Call] = []
    for node in walk(function.node.body):
        if not isinstance(node, cst.Name) or node.value != alias or isinstance(model.parent(node), cst.AssignTarget):
            continue
        if not any(d.node is assign for d in reaching.defs(alias, node)):
            continue  # a read of another definition (`kernel = kernel(...)`'s result)
        call = model.parent(node)
        if not (isinstance(call, cst.Call) and call.func is node):
            return None
        calls.append(call)
    return calls


def _bound(flow: DtypeFlow, call: cst.Call, params: list[str]) -> dict[str, set[str]]:
    """Parameter → the dtypes the launch `call` passes it, for the parameters it binds: by
    position (a params object unpacked with `*` gives its slots, anything else unpacked leaves
    the parameters from there on unknown), then by keyword."""
    from kanalyze.analyzer.triton.slot_args import slot_values

    function = flow.model.function_of(call)
    values: dict[str, list | None] = {}  # parameter → [(function, expression)], or None: unknown
    index = 0
    for arg in call.args:
        if arg.keyword is not None or arg.star == "**":
            continue
        if arg.star == "*":
            slots = slot_values(flow.model, function, arg.value)
            for slot in slots if slots is not None else [None] * (len(params) - index):
                if index < len(params):
                    values[params[index]] = slot
                    index += 1
            continue
        if index < len(params):
            values[params[index]] = [(function, arg.value)]
            index += 1
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in params:
            values[arg.keyword.value] = [(function, arg.value)]
    return {param: {UNKNOWN} if found is None else
            set().union(*(flow.host_tensor(where, expr) for where, expr in found))
            for param, found in values.items()}
