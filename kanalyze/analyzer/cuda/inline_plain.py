"""The fast way into a Python file that builds CUDA: Python's own `ast` (a C
parser) instead of LibCST, for files whose Python side is *plain*.

Most `load_inline` solutions are a string of CUDA, a `load_inline(...)` call
and a `ModelNew` whose `forward` returns `self.ext.fn(x, ...)`.  Their Python
side cannot hold a Python-side finding, so the LibCST model (about four times
the cost of tree-sitter parsing the CUDA) buys nothing for them.
`read_plain(path, text)` recognises exactly that shape and returns the
extensions with their units, mapped character by character to the file as the
LibCST reader (inline.py) maps them; for anything else it returns None
and the pipeline takes the LibCST path.

Plain means every module-level statement is one of: a docstring; an import of
torch / torch.nn / torch.utils.cpp_extension (`load_inline`), os or math; a
name assigned once, to a constant, a list of constants or a `load_inline(...)`
call whose source, name, functions and flag arguments are string literals
(implicit concatenation included), lists of them, or such names; a class whose
only methods are `__init__` (`super().__init__()`, `self.ext = <extension>`,
`self.alpha = alpha`) and `forward` (`return <extension>.fn(x.contiguous(),
self.alpha)`: its parameters, `.contiguous()` of them and what `__init__`
stored), where `forward` calls every extension that exports functions.  f-strings, `+`, `.format`,
cupy, `load(sources=...)`, decorators, other functions, control flow: LibCST.
tests/test_cuda_plain.py checks that both paths give the same findings.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from kanalyze.analyzer.cuda.fold import Folded, concat, decode_escapes
from kanalyze.analyzer.cuda.inline import FLAG_KEYWORDS
from kanalyze.analyzer.cuda.sources import (
    LOAD_INLINE_CPP_PRELUDE, LOAD_INLINE_CUDA_PRELUDE, CudaUnit, Extension, Flag, SourceMap, Span, line_starts,
)
from kanalyze.analyzer.module_imports import dotted_name
from kanalyze.analyzer.spelling import python_spelling

_MODULES = frozenset({"torch", "torch.nn", "torch.nn.functional", "torch.utils.cpp_extension", "os", "math"})
_FROM = {"torch": frozenset({"nn"}), "torch.utils": frozenset({"cpp_extension"}),
         "torch.utils.cpp_extension": frozenset({"load_inline"})}
_LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
_LONE_CR = re.compile(r"\r(?!\n)")
_PREFIX = re.compile(r"[rRbBuUfF]{0,2}")


@dataclass(eq=False)
class PyPlace:
    """A piece of the Python file by character offsets, standing in for a LibCST node
    (the locator reads `start`/`end` directly)."""

    start: int
    end: int


class NotPlain(Exception):
    """The file needs the LibCST path."""


def read_plain(path: str, text: str) -> tuple[list[Extension], dict[str, int]] | None:
    """(extensions with their units, module-level integer constants) of a plain
    file; None when the file is not plain (or does not parse: LibCST says why)."""
    if "\r" in text and _LONE_CR.search(text):
        return None  # Python and LibCST split lines alike except for a lone "\r": leave it to LibCST
    if python_spelling(text).respellings:
        return None  # a name Python folds (`ｔｏｒｃｈ` is `torch`) is an INT001 finding: LibCST's path reports it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in CUDA strings warn; LibCST says nothing either
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        return _Reader(path, text).module(tree)
    except NotPlain:
        return None
    except (RecursionError, MemoryError, IndexError, ValueError):  # odd input: the LibCST path reports it
        return None


class _Reader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.starts = line_starts(text)
        self.lines: list[bytes] | None = None if text.isascii() else [
            text[a:b].encode("utf-8", "surrogatepass") for a, b in zip(self.starts, self.starts[1:] + [len(text)])]
        self.aliases: dict[str, str] = {}        # local name → what it imports
        self.values: dict[str, ast.expr] = {}    # module-level name → its only value
        self.extensions: dict[str, Extension] = {}  # binding → extension
        self.sizes: dict[str, int] = {}
        self.called: set[int] = set()             # id() of the extensions a forward calls

    # -- the module -------------------------------------------------------------

    def module(self, tree: ast.Module) -> tuple[list[Extension], dict[str, int]]:
        # Every module-level name is bound once, so that a name means one thing (only
        # `import torch` and `import torch.nn` bind `torch` twice, to the same package).
        bound: set[str] = set()
        roots: set[str] = set()
        for statement in tree.body:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a docstring
            if isinstance(statement, ast.Import):
                names = [a.asname for a in statement.names if a.asname]
                new_roots = {a.name.split(".", 1)[0] for a in statement.names if not a.asname}
                if new_roots & bound:
                    raise NotPlain
                roots |= new_roots
            elif isinstance(statement, ast.ImportFrom):
                names = [a.asname or a.name for a in statement.names]
            elif isinstance(statement, ast.Assign):
                names = [t.id for t in statement.targets if isinstance(t, ast.Name)]
                if len(names) != len(statement.targets):
                    raise NotPlain
            elif isinstance(statement, ast.ClassDef):
                names = [statement.name]
            else:
                raise NotPlain
            if (bound | roots).intersection(names) or len(set(names)) != len(names):
                raise NotPlain
            bound.update(names)
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                self._import(statement)
            elif isinstance(statement, ast.Assign):
                self._assign(statement, names)
            else:
                self._class(statement)
        if any(ext.functions and id(ext) not in self.called for ext in self.extensions.values()):
            raise NotPlain  # an extension forward never calls: RES001's Python side reports it
        unique = list(dict.fromkeys(self.extensions.values()))
        return unique, self.sizes

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in _MODULES:
                    raise NotPlain
                local = alias.asname or alias.name.split(".", 1)[0]
                self.aliases[local] = alias.name if alias.asname else local
            return
        allowed = _FROM.get(node.module or "")
        if node.level or allowed is None or any(a.name not in allowed for a in node.names):
            raise NotPlain
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _assign(self, node: ast.Assign, names: list[str]) -> None:
        value = node.value
        if isinstance(value, ast.Call):
            ext = self._builder(value)
            for name in names:
                self.extensions[name] = ext
            ext.bindings.update(names)
            return
        if not _constant(value):
            raise NotPlain
        for name in names:
            self.values[name] = value
            if type(value) is ast.Constant and type(value.value) is int:
                self.sizes[name] = value.value  # `N = 4096`: a size the problem fixes

    def _class(self, node: ast.ClassDef) -> None:
        if node.decorator_list or node.keywords or not all(dotted_name(b) for b in node.bases):
            raise NotPlain
        extensions: dict[str, Extension] = {}   # self.attr → the extension it holds
        values: set[str] = set()                 # self.attr holding an `__init__` argument or a constant
        methods = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                   and not isinstance(s, ast.Pass)]
        for method in methods:
            if not isinstance(method, ast.FunctionDef) or method.name not in ("__init__", "forward"):
                raise NotPlain
        for method in sorted(methods, key=lambda m: m.name != "__init__"):  # __init__ first: forward reads it
            params = self._params(method)
            for statement in method.body:
                if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                                       and isinstance(statement.value, ast.Constant)):
                    continue
                if method.name == "__init__":
                    self._init_statement(statement, params, extensions, values)
                else:
                    self._forward_statement(statement, params, extensions, values)

    def _params(self, method: ast.FunctionDef) -> set[str]:
        args = method.args
        if method.decorator_list or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg \
                or not args.args or args.args[0].arg != "self" \
                or not all(isinstance(d, ast.Constant) for d in args.defaults):
            raise NotPlain
        if any(a.annotation is not None and not dotted_name(a.annotation) for a in args.args) or \
                (method.returns is not None and not dotted_name(method.returns)):
            raise NotPlain
        return {a.arg for a in args.args[1:]}

    def _init_statement(self, statement: ast.stmt, params: set[str], extensions: dict[str, Extension],
                        values: set[str]) -> None:
        """`super().__init__()`, `self.ext = <extension>`, `self.alpha = alpha` (an argument or a constant)."""
        if isinstance(statement, ast.Expr) and _super_init(statement.value):
            return
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                    and target.attr not in extensions and target.attr not in values:
                if isinstance(value, ast.Name) and value.id in self.extensions:
                    ext = self.extensions[value.id]
                    extensions[target.attr] = ext
                    ext.bindings.add(f"self.{target.attr}")
                    return
                if (isinstance(value, ast.Name) and value.id in params) or \
                        (isinstance(value, ast.Constant) and not isinstance(value.value, str)):
                    values.add(target.attr)
                    return
        raise NotPlain

    def _forward_statement(self, statement: ast.stmt, params: set[str], extensions: dict[str, Extension],
                           values: set[str]) -> None:
        """`return <extension>.fn(x, x.contiguous(), self.alpha)`."""
        call = statement.value if isinstance(statement, ast.Return) else None
        if not isinstance(call, ast.Call) or call.keywords or not isinstance(call.func, ast.Attribute):
            raise NotPlain
        for arg in call.args:
            if isinstance(arg, ast.Call) and not arg.args and not arg.keywords and \
                    isinstance(arg.func, ast.Attribute) and arg.func.attr == "contiguous":
                arg = arg.func.value  # a layout call: the tensor itself
            elif _self_attr(arg) in values:
                continue
            if not (isinstance(arg, ast.Name) and arg.id in params):
                raise NotPlain
        receiver = call.func.value
        ext = self.extensions.get(receiver.id) if isinstance(receiver, ast.Name) else \
            extensions.get(_self_attr(receiver) or "")
        if ext is None or call.func.attr not in ext.functions:
            raise NotPlain
        self.called.add(id(ext))

    # -- the builder call ---------------------------------------------------------

    def _builder(self, call: ast.Call) -> Extension:
        name = dotted_name(call.func)
        head, _, rest = (name or "").partition(".")
        qualified = self.aliases.get(head, "") + (f".{rest}" if rest else "")
        if qualified != _LOAD_INLINE or any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg is None for k in call.keywords):
            raise NotPlain
        ext = Extension("load_inline", self._place(call))
        value = _keyword(call, "name", 0)
        if value is not None:
            ext.name = self._fold(value).text
        functions = _keyword(call, "functions")
        if functions is not None:
            if isinstance(functions, ast.Dict):
                items = [self._fold(k) for k in functions.keys if k is not None]
            else:
                items = self._fold_list(functions)
            ext.functions = [i.text for i in items if i.text]
        for keyword, index, language, prelude in (("cpp_sources", 1, "c++", LOAD_INLINE_CPP_PRELUDE),
                                                  ("cuda_sources", 2, "cuda", LOAD_INLINE_CUDA_PRELUDE)):
            value = _keyword(call, keyword, index)
            if value is None or (isinstance(value, ast.Constant) and value.value is None):
                continue
            folded = concat(self._fold_list(value), "\n")
            if folded.text.strip():
                ext.units.append(CudaUnit(self.path, folded.text, f"load_inline:{keyword}", language,
                                          SourceMap(folded.spans), ext, [], prelude))
        for keyword in FLAG_KEYWORDS:
            value = _keyword(call, keyword)
            for item in self._fold_list(value) if value is not None else []:
                node = item.spans[0].node if item.spans else self._place(value)
                ext.flags.extend(Flag(keyword, flag, node) for flag in item.text.split())
        return ext

    # -- constant strings ---------------------------------------------------------

    def _fold_list(self, node: ast.expr, depth: int = 0) -> list[Folded]:
        """As Folder.fold_list: a list or tuple of strings, or one string."""
        if depth > 8:
            raise NotPlain
        if isinstance(node, ast.Name):
            return self._fold_list(self._value(node), depth + 1)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._fold(e, depth + 1) for e in node.elts]
        return [self._fold(node, depth + 1)]

    def _fold(self, node: ast.expr, depth: int = 0) -> Folded:
        """As Folder.fold, for string literals, names of them and lists of them."""
        if depth > 8:
            raise NotPlain
        if isinstance(node, ast.Name):
            return self._fold(self._value(node), depth + 1)
        if isinstance(node, (ast.List, ast.Tuple)):
            return concat([self._fold(e, depth + 1) for e in node.elts], "\n")
        if isinstance(node, ast.Constant) and type(node.value) is str:
            return self._literal(node)
        raise NotPlain

    def _value(self, name: ast.Name) -> ast.expr:
        value = self.values.get(name.id)
        if value is None:
            raise NotPlain  # assigned later, in a function, or not a constant
        return value

    def _literal(self, node: ast.Constant) -> Folded:
        """A string constant, piece by piece (`"a" "b"` is two literals): each
        character keeps its offset in the file, as LibCST's SimpleStrings give it."""
        start, end = self._offset(node.lineno, node.col_offset), self._offset(node.end_lineno, node.end_col_offset)
        source, i, parts = self.text, start, []
        while i < end:
            c = source[i]
            if c in " \t\n\r\f(":
                i += 1
                continue
            if c == "#":
                i = source.find("\n", i)
                i = end if i < 0 else i
                continue
            if c == "\\":
                i += 1
                continue
            prefix = _PREFIX.match(source, i).group(0)
            quote_at = i + len(prefix)
            quote = source[quote_at: quote_at + 3]
            if quote not in ('"""', "'''"):
                quote = source[quote_at: quote_at + 1]
            if quote not in ('"', "'", '"""', "'''") or "b" in prefix.lower() or "f" in prefix.lower():
                raise NotPlain
            body_at = quote_at + len(quote)
            j = _close(source, body_at, quote)
            if j < 0 or j >= end:
                raise NotPlain
            raw = source[body_at: j]
            if "r" in prefix.lower():
                value, offsets = raw, None
            else:
                value, offsets = decode_escapes(raw)
            place = PyPlace(i, j + len(quote))
            parts.append(Folded(value, [Span(0, len(value), place, len(prefix) + len(quote), 0, offsets)]
                                if value else []))
            i = j + len(quote)
        folded = concat(parts)
        if folded.text != node.value:
            raise NotPlain  # an escape read differently from Python: LibCST's reader says what it makes of it
        return folded

    def _offset(self, lineno: int, column: int) -> int:
        """Character offset of ast's (1-based line, UTF-8 byte column)."""
        base = self.starts[lineno - 1]
        if self.lines is None:
            return base + column
        return base + len(self.lines[lineno - 1][:column].decode("utf-8", "surrogatepass"))

    def _place(self, node: ast.expr) -> PyPlace:
        return PyPlace(self._offset(node.lineno, node.col_offset), self._offset(node.end_lineno, node.end_col_offset))


def _close(source: str, start: int, quote: str) -> int:
    """The first `quote` at or after `start` that no odd run of backslashes escapes."""
    j = start
    while True:
        k = source.find(quote, j)
        if k < 0:
            return k
        run = 0
        while k - 1 - run >= start and source[k - 1 - run] == "\\":
            run += 1
        if run % 2 == 0:
            return k
        j = k + 1


def _constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(isinstance(e, ast.Constant) for e in node.elts)
    return False


def _keyword(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    """As triton.keyword: the argument passed as `name=`, or at `position`."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def _self_attr(node: ast.expr) -> str | None:
    """`attr` of `self.attr`."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _super_init(node: ast.expr) -> bool:
    """`super().__init__()` or `super(Cls, self).__init__()`."""
    if not isinstance(node, ast.Call) or node.args or node.keywords or not isinstance(node.func, ast.Attribute):
        return False
    inner = node.func.value
    return node.func.attr == "__init__" and isinstance(inner, ast.Call) and dotted_name(inner.func) == "super" \
        and not inner.keywords and all(isinstance(a, ast.Name) for a in inner.args)
