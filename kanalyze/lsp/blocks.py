"""What one top-level block of a Python document says, read with `ast` (never run),
whatever its place in the file: the facts layout.py joins blocks by.

A block is a statement at the top level of the module with the decorators above
it (layout.py cuts the text into blocks).  A `def` or a `class` is a *unit*;
anything else is *context*.  For each block, read once and cached by its text:

  - `mentions`: every identifier-like word of its text (strings and comments
    too), less the one occurrence that each `def` or `class` statement spells
    its own name with: a class that defines `forward` does not mention
    `forward`, one that calls it does;
  - `names`: what other blocks may reach it by: the names of every `def` and
    `class` in it (methods and nested ones too) and the names bound in a class
    body; for a statement, apart (`bound`), the names it binds at the module level;
  - `writes`: module-level names a function declares `global` or writes
    through a key (`_CACHE[k] = v`, `_CACHE.update(...)`: INT001's state kept
    across calls);
  - `keys`: names whose mere presence in two blocks ties them, mention or not:
    its own name and every class name (facts are kept per class name);
  - `jit_bindings`: every decorated `def` and every `X = f(...)`, with the
    decorator or `f`: a jit function, kept by name in the model, when that is
    `triton.jit` (joins.py resolves it with the file's imports);
  - the imports it makes (a unit's are inside it, but the model's import map
    is the file's);
  - its launch-like calls `f[...](...)`, in order, and whether each is surely a
    launch on the candidate path (RES001's messages name the first one);
  - the names it passes bare to launches, and the tensors whose shape it pins
    with `==` in an `assert` or `if` (CMP003 matches the two by name across the
    file: tile_extents.fixed_arity);
  - whether it defines `class ModelNew`, or a `forward` or `__call__`.
"""

from __future__ import annotations

import ast
import re
import unicodedata
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from kanalyze.analyzer.module_imports import dotted_name
from kanalyze.analyzer.triton.cached_results import STORE_METHODS
from kanalyze.analyzer.triton.entities import REFERENCE_CLASS, REFERENCE_FUNCTION

IDENTIFIER = re.compile(r"[^\W\d]\w*")
BLOCK_FACTS_CACHE = 4096
# `x.shape`, `x.size(0)`: what a shape pin reads (analyzer/triton/shapes.py's SHAPE_ATTRS).
_SHAPE_ATTRS = {"shape", "size", "numel", "stride"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class LaunchCall:
    """`f[...](...)`, which the model records as a launch when `f`'s last part `name`
    is a jit function and the subscript is one index (`possible`).  `sure` when it is
    one index and sits in a function that is not a reference or test: a launch on the
    candidate path whenever `name` is a jit function."""

    name: str | None
    possible: bool
    sure: bool


@dataclass(frozen=True)
class BlockFacts:
    problem: str | None                    # why no file holding this block can be cut
    name: str | None                       # a unit's name: the top-level `def` or `class`
    is_function: bool                      # a top-level `def` (a jit function if its decorators say so)
    decorators: tuple[str | None, ...]     # each decorator's dotted name (a call's callee), for a `def`
    imports: tuple[tuple[str, str], ...]   # (local name, what it names), in order, anywhere in the block
    tokens: frozenset[str]                 # every identifier-like word, strings and comments too
    mentions: frozenset[str]
    names: frozenset[str]
    keys: frozenset[str]
    writes: frozenset[str]                 # module-level names it declares `global` or writes through a key
    bound: frozenset[str]                  # a statement's names bound at the module level
    jit_bindings: tuple[tuple[str, str], ...]  # `@f def X`, `X = f(...)` at any depth: (X, dotted f)
    launches: tuple[LaunchCall, ...]
    launch_args: frozenset[str]
    pinned_tensors: frozenset[str]
    defines_model_new: bool
    defines_forward: bool


def unparsable() -> BlockFacts:
    empty = frozenset()
    return BlockFacts("a block that does not parse alone", None, False, (), (), empty, empty, empty, empty,
                      empty, empty, (), (), empty, empty, False, False)


@lru_cache(maxsize=BLOCK_FACTS_CACHE)
def block_facts(text: str, single: bool) -> BlockFacts:
    """Read one block: whole statements at the top level, so it parses alone.  `single`:
    the block is one statement (not several sharing a line)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `"\d"` and the like warn; the pipeline does not care
            statements = ast.parse(text).body
    except Exception:  # `from __future__` past the top, say: parsed in the file, not alone
        return unparsable()
    if not statements:   # nothing but a comment or a line continuation once cut out
        return unparsable()
    words = IDENTIFIER.findall(text if text.isascii() else unicodedata.normalize("NFKC", text))
    top = statements[0]
    unit = single and len(statements) == 1 and isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    reader = _Reader(text)
    try:
        for statement in statements:
            reader.visit(statement, function=None, klass=None)
    except RecursionError:   # nested deeper than the reader follows: the file is analysed whole
        return unparsable()
    counts = Counter(words)
    counts.subtract(reader.defined)
    names = set(reader.defined) | reader.class_bound
    keys = set(reader.classes)
    if unit:
        keys.add(top.name)
    is_function = unit and isinstance(top, ast.FunctionDef)
    decorators = tuple(dotted_name(d.func if isinstance(d, ast.Call) else d) for d in top.decorator_list) \
        if is_function else ()
    return BlockFacts(
        problem=None, name=top.name if unit else None,
        is_function=is_function, decorators=decorators, imports=tuple(reader.imports), tokens=frozenset(words),
        mentions=frozenset(w for w, n in counts.items() if n > 0), names=frozenset(names), keys=frozenset(keys),
        writes=frozenset(reader.declared_global | reader.keyed_writes),
        bound=frozenset() if unit else frozenset(reader.module_bound), jit_bindings=tuple(reader.jit_bindings),
        launches=tuple(reader.launches),
        launch_args=frozenset(reader.launch_args), pinned_tensors=frozenset(reader.pinned),
        defines_model_new="ModelNew" in reader.classes, defines_forward=bool(reader.forward))


def bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(local name, qualified name) as kanalyze's ImportMap records an import."""
    if isinstance(node, ast.Import):
        return [(a.asname, a.name) if a.asname else (a.name.split(".")[0],) * 2 for a in node.names]
    if node.level or node.module is None or any(a.name == "*" for a in node.names):
        return []
    return [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]


class _Reader:
    """One walk over a block, in source order, collecting the facts above."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.defined: list[str] = []          # every def and class statement's name, once each
        self.classes: set[str] = set()
        self.forward = False
        self.class_bound: set[str] = set()
        self.module_bound: set[str] = set()
        self.declared_global: set[str] = set()
        self.keyed_writes: set[str] = set()
        self.imports: list[tuple[str, str]] = []
        self.jit_bindings: list[tuple[str, str]] = []
        self.launches: list[LaunchCall] = []
        self.launch_args: set[str] = set()
        self.pinned: set[str] = set()

    def visit(self, node: ast.AST, function: ast.AST | None, klass: str | None, method_of: str | None = None) -> None:
        """`function`: the innermost def or lambda; `klass`: the class whose body `node` is
        directly in; `method_of`: the class whose body directly holds `function`."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.defined.append(node.name)
            if isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
            else:
                for decorator in node.decorator_list:
                    callee = dotted_name(decorator.func if isinstance(decorator, ast.Call) else decorator)
                    if callee is not None:
                        self.jit_bindings.append((node.name, callee))
            if node.name in ("forward", "__call__") and not isinstance(node, ast.ClassDef):
                self.forward = True
            for decorator in node.decorator_list:
                self.visit(decorator, function, klass, method_of)
            if isinstance(node, ast.ClassDef):
                for child in [*node.bases, *node.keywords]:
                    self.visit(child, function, klass, method_of)
                for child in node.body:
                    self.visit(child, function, node.name, method_of)
                return
            for child in ast.iter_child_nodes(node.args):
                self.visit(child, function, klass, method_of)
            if node.returns is not None:
                self.visit(node.returns, function, klass, method_of)
            self._function(node)
            for child in node.body:
                self.visit(child, node, None, klass)
            return
        if isinstance(node, ast.Lambda):
            for child in ast.iter_child_nodes(node.args):
                self.visit(child, function, klass, method_of)
            self._function(node)
            self.visit(node.body, node, None, None)
            return
        self._statement(node, function, klass, method_of)
        for child in ast.iter_child_nodes(node):
            self.visit(child, function, klass, method_of)

    def _statement(self, node: ast.AST, function, klass: str | None, method_of: str | None) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports.extend(bindings(node))
        elif isinstance(node, ast.Global):
            self.declared_global.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and function is None:
            (self.class_bound if klass is not None else self.module_bound).add(node.id)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and function is None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:  # `a.b = ...`, `a[k] = ...` at the module level or in a class body
                head = _head(target)
                if head is not None:
                    (self.class_bound if klass is not None else self.module_bound).add(head)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call):
            callee = dotted_name(node.value.func)
            if callee is not None:
                self.jit_bindings.append((node.targets[0].id, callee))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            self._launch(node, function, method_of)
        elif isinstance(node, (ast.Assert, ast.If)) and function is not None:
            for compare in ast.walk(node.test):
                if isinstance(compare, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq)) for o in compare.ops):
                    self.pinned.update(n.value.id for n in ast.walk(compare) if isinstance(n, ast.Attribute)
                                       and n.attr in _SHAPE_ATTRS and isinstance(n.value, ast.Name))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        """Module-level names the function writes through a key, or through a method that
        stores (`_CACHE[k] = v`, `_CACHE.update(...)`): names it does not bind itself."""
        local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        body = node.body if isinstance(node.body, list) else [node.body]
        own = list(_own_nodes(body))
        local |= {n.id for n in own if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in own:
            holder = None
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)):
                holder = n.value
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in STORE_METHODS:
                holder = n.func.value
            if isinstance(holder, ast.Name) and holder.id not in local:
                self.keyed_writes.add(holder.id)

    def _launch(self, call: ast.Call, function, method_of: str | None) -> None:
        subscript = call.func
        name = dotted_name(subscript.value)
        self.launch_args.update(a.id for a in call.args if isinstance(a, ast.Name))
        self.launch_args.update(k.value.id for k in call.keywords if isinstance(k.value, ast.Name))
        one = self._one_index(subscript.slice)
        if name is None or one is False:
            return  # never a launch in the model: nothing to place
        wrapper = function.name if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        sure = (one is True and wrapper is not None and not REFERENCE_FUNCTION.match(wrapper)
                and not REFERENCE_CLASS.match(method_of or ""))
        self.launches.append(LaunchCall(name.split(".")[-1], True, sure))

    def _one_index(self, index: ast.expr) -> bool | None:
        """Is the subscript one index, as LibCST reads it (`k[g]`, `k[(a, b)]`, `k[n,]`), and
        not a slice or several (`k[a, b]`)?  None where that is not plain (a star)."""
        if isinstance(index, ast.Slice):
            return False
        if not isinstance(index, ast.Tuple):
            return True
        if any(isinstance(e, ast.Starred) for e in index.elts):
            return None
        segment = ast.get_source_segment(self.text, index) or ""
        if segment.startswith("(") and segment.endswith(")"):
            try:  # the two parentheses belong together when what they hold parses alone
                ast.parse(segment[1:-1], mode="eval")
                return True
            except SyntaxError:
                pass
        return len(index.elts) == 1  # `k[n,]`: one element and its comma; `k[a, b]`: two


def _own_nodes(body: list[ast.AST]):
    """The nodes of a function's body, not descending into nested defs, lambdas or classes."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_SCOPES, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _head(target: ast.AST) -> str | None:
    """The name at the root of `a.b[c].d`."""
    while isinstance(target, (ast.Attribute, ast.Subscript, ast.Starred)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None
