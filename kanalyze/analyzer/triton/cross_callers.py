"""What the other checked modules pass to a module's kernel launchers.

    # kernels.py                              # api.py
    def fwd(q, k):                            from .kernels import fwd
        kernel[grid](q, k, ...)               def attention(q, k):
                                                  assert q.dtype in (torch.float16, torch.bfloat16)
                                                  return fwd(q, k)

Seen alone, kernels.py does not show what `fwd` is handed: its parameters, and the
kernel pointers they reach, have no dtype.  The project index (project_index.py)
asks this module, once per check, what every call of such a launcher found in the
other checked modules passes, and hands kernels.py the union per parameter
(`Linked.passed_to`); host_dtypes.py adds it to what the callers in the file pass.
One caller that passes what its own file does not show (or a file that cannot be
read) leaves the parameter's dtype unknown: the evidence counts only when every
call site found agrees.

A launcher is a top-level function, not a kernel, of a module that has a `dot(`
and launches a kernel in its body (`...](`).  A caller is a call in another
checked module of a name bound to it by an import (`from .kernels import fwd`,
`from . import kernels as K; K.fwd(...)`, `import pkg.kernels; pkg.kernels.fwd(...)`),
followed through re-exports a few steps.  What a caller passes is its own file's
host dtype evidence (dtype_flow.py: creations, casts, the caller's asserts and
raises, the callers of the caller in its file); a caller's own cross-module callers
are not followed.  Calls the imports do not show (`getattr`, a callable passed
around) are not seen.  Nothing is imported or run: the callers' files are parsed.
A kernel that another module launches itself, with no launcher between: cross_launches.py.
"""

from __future__ import annotations

import ast
from typing import Mapping

from kanalyze.analyzer.sources import may_contain_triton

# The project index's `_Linker` (project_index.py imports this module: no import back, not
# even for the annotations): `files`, `folded`, `summary(path)`, `module_at`, `known`, `_modules(...)`.
_Linker = object

UNKNOWN = "?"  # dtype_names.UNKNOWN, without importing the triton analyzer at index time
REEXPORT_STEPS = 4
Launcher = tuple[list[str], set[str]]  # parameter names in order, those whose default is None
Passed = dict[str, dict[str, dict[str, set[str]]]]  # launcher's file → launcher → parameter → dtypes


def passed_to_launchers(linker: _Linker, folded: Mapping[str, str]) -> Passed:
    """For each checked module that launches kernels from top-level functions: what the
    other checked modules pass to each of those functions, per parameter."""
    launchers: dict[str, dict[str, Launcher]] = {}
    for path, text in folded.items():
        if "dot(" in text and "](" in text and may_contain_triton(text):
            found = _launchers(linker.files[path])
            if found:
                launchers[path] = found
    passed: Passed = {}
    for path in calling_files(linker, folded, launchers):
        _callers_in(linker, path, launchers, passed)
    return passed


def calling_files(linker: _Linker, folded: Mapping[str, str], targets) -> list[str]:
    """The checked files that name one of `targets` (file → name → Launcher) and import it, or
    a module whose attribute they name as one (a text scan, then `ast` only)."""
    names = {name for found in targets.values() for name in found}
    found: list[str] = []
    for path, text in folded.items() if names else ():
        mentioned = {name for name in names if _mentions(text, name)}
        summary = linker.summary(path) if mentioned else None
        if summary is not None and _may_call(linker, path, summary, targets, mentioned):
            found.append(path)
    return found


def _mentions(text: str, name: str) -> bool:
    """Whether `text` holds the identifier `name` (str.find: no regular expression per name)."""
    start = text.find(name)
    while start >= 0:
        end = start + len(name)
        if not (start and (text[start - 1].isalnum() or text[start - 1] == "_")) \
                and not (end < len(text) and (text[end].isalnum() or text[end] == "_")):
            return True
        start = text.find(name, end)
    return False


def _may_call(linker: _Linker, path: str, summary, launchers, mentioned: set[str]) -> bool:
    """Whether an import of `path` binds a launcher of another module, or a module whose
    attribute the file names as one (cheap: `ast` only, before the file is parsed for calls)."""
    for local, bindings in summary.bindings.items():
        for name in mentioned:
            if any(b.name == name for b in bindings) and _resolve(linker, path, local, launchers):
                return True
            if any(b.name != name for b in bindings) and _mentions_attribute(linker.folded[path], local, name) \
                    and _resolve(linker, path, f"{local}.{name}", launchers):
                return True
    return False


def _mentions_attribute(text: str, local: str, name: str) -> bool:
    """Whether `text` holds `local.name` (the module alias's attribute), spaces aside."""
    return f"{local}.{name}" in text or (f".{name}" in text and _mentions(text, local))


def _launchers(text: str) -> dict[str, Launcher]:
    try:
        tree = ast.parse(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # not this index's to report: the file's own analysis does
        return {}
    from kanalyze.analyzer.module_imports import _is_kernel_decorator
    lines = text.split("\n")
    defined: dict[str, int] = {}  # a top-level name → how many times it is bound
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = defined.get(node.name, 0) + 1
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    defined[n.id] = defined.get(n.id, 0) + 1
    found: dict[str, Launcher] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or defined[node.name] != 1:
            continue  # defined twice, or rebound: a call of the name may be something else
        if any(_is_kernel_decorator(d) for d in node.decorator_list):
            continue
        if "](" not in "\n".join(lines[node.lineno - 1:node.end_lineno or node.lineno]):
            continue  # launches no kernel
        args = node.args
        params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        none = {name for name, d in defaults.items() if isinstance(d, ast.Constant) and d.value is None}
        found[node.name] = (params, none)
    return found


def _resolve(linker: _Linker, path: str, dotted: str, launchers, steps: int = REEXPORT_STEPS):
    """(file, launcher name) that `dotted`, loaded in `path`, refers to through its imports."""
    summary = linker.summary(path)
    if summary is None:
        return None
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        bindings = summary.bindings.get(".".join(parts[:i]))
        if not bindings:
            continue
        for binding in bindings:
            for module in linker._modules(path, binding.level, binding.module):
                full = module + ((binding.name,) if binding.name is not None else ()) + tuple(parts[i:])
                if not any(full[-1] in found for found in launchers.values()):
                    continue  # re-exports are followed under the launcher's own name only
                target = _in_module(linker, full, launchers, steps)
                if target is not None:
                    return target
        return None
    return None


def _in_module(linker: _Linker, full: tuple[str, ...], launchers, steps: int):
    """`full` as (module file, name): the launcher itself, or a name the module re-exports."""
    if len(full) < 2:
        return None
    file = linker.module_at.get(full[:-1])
    if file is None:
        return None
    name = full[-1]
    if name in launchers.get(file, {}):
        return file, name
    if steps > 0 and full not in linker.known:
        return _resolve(linker, file, name, launchers, steps - 1)
    return None


def caller_flow(linker: _Linker, path: str):
    """(model, DtypeFlow) of a calling file (this step and cross_launches.py); raises what the
    parse raises.  Not kept: holding every caller's tree slows the garbage collector more than
    the few files both steps read would save."""
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
    from kanalyze.analyzer.triton.model import TritonModule

    model = TritonModule.from_source(path, linker.files[path])
    return model, DtypeFlow(model)


def _callers_in(linker: _Linker, path: str, launchers, passed: Passed) -> None:
    """Add what the calls in `path` of other modules' launchers pass."""
    from kanalyze.analyzer.names import dotted
    from kanalyze.analyzer.triton.calls import bind_call_args

    try:
        model, flow = caller_flow(linker, path)
        for site in model.calls:
            name = dotted(site.node.func)
            target = _resolve(linker, path, name, launchers) if name else None
            if target is None or target[0] == path:
                continue
            params, none_default = launchers[target[0]][target[1]]
            bound = bind_call_args(site.node, params)
            starred = any(a.star for a in site.node.args)
            into = passed.setdefault(target[0], {}).setdefault(target[1], {})
            for param in params:
                arg = bound.get(param)
                if arg is not None:
                    into.setdefault(param, set()).update(flow.host_tensor(site.function, arg))
                elif starred or param not in none_default:
                    into.setdefault(param, set()).add(UNKNOWN)  # unpacked, or a default that is not None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a file the index cannot read: its calls, if any, pass what nobody knows
        unknown_from(linker, path, launchers, passed)


def unknown_from(linker: _Linker, path: str, targets, passed: Passed) -> None:
    """Every parameter of each of `targets` (file → name → Launcher) of another module that
    `path` names is passed what nobody knows: the file could not be read."""
    for file, found in targets.items():
        for name, (params, _) in found.items():
            if file != path and _mentions(linker.folded[path], name):
                into = passed.setdefault(file, {}).setdefault(name, {})
                for param in params:
                    into.setdefault(param, set()).add(UNKNOWN)
