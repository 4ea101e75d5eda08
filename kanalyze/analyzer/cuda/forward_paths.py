"""Which branches of a Python forward path a GPU run executes, and which calls there return their input.

A CUDA extension's `forward` often keeps PyTorch beside the extension for runs that
never happen in the benchmark: the CPU path of `if x.is_cuda:` / `if not x.is_cuda:`,
the `if self.ext is None:` fallback (or a stream, or a build flag set False only in
the build's `except`), the `else` of `if torch.cuda.is_available():`, the training
branch of a model whose `__init__` calls `self.eval()`.  `OnGpu(host, extensions)`
answers, with inputs on the GPU and the extension built: `dead(function)`, the
statements and expressions never reached; `truth(test, function)`, a test's value
on every such run; `identity(function, call)`, a layer that returns its input
(`nn.Dropout(p=0.0)`, `F.dropout(x, p=0)`).  Read with LibCST; nothing is run.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import child_nodes, walk
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.model import TritonModule

_DROPOUTS = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}


class OnGpu:
    """What a forward path does when its inputs are CUDA tensors and its extension built,
    as the benchmark runs it: which branches it never takes (`if not x.is_cuda:`,
    `if self.ext is None:`, `else` of `if torch.cuda.is_available():`, a training-only
    branch of a model whose `__init__` calls `self.eval()`), and which layers are the
    identity (`nn.Dropout(p=0.0)`)."""

    def __init__(self, host: TritonModule, extensions: list[Extension]) -> None:
        self.host = host
        self.extensions = extensions
        self._present: set[str] | None = None
        self._flags: set[str] | None = None
        self._evals: set[str | None] | None = None

    # -- branches -------------------------------------------------------------

    def dead(self, function) -> set[int]:
        """ids of the statements and expressions of `function` a GPU run never reaches."""
        dead: set[int] = set()
        for node in walk(function.node):
            if isinstance(node, cst.If):
                truth = self.truth(node.test, function)
                if truth is True and node.orelse is not None:
                    dead.add(id(node.orelse))
                elif truth is False:
                    dead.add(id(node.body))
            elif isinstance(node, cst.IfExp):
                truth = self.truth(node.test, function)
                if truth is not None:
                    dead.add(id(node.orelse if truth else node.body))
            elif isinstance(node, cst.IndentedBlock) or isinstance(node, cst.Module):
                statements = list(node.body)
                for index, statement in enumerate(statements):
                    if isinstance(statement, cst.If) and self.truth(statement.test, function) is True and \
                            _ends(statement.body):
                        dead.update(id(s) for s in statements[index + 1:])
                        break
        return dead

    def truth(self, test: cst.BaseExpression, function) -> bool | None:
        """True/False when `test` has that value on every GPU run, else None."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.truth(test.expression, function)
            return None if inner is None else not inner
        if isinstance(test, cst.BooleanOperation):
            left, right = self.truth(test.left, function), self.truth(test.right, function)
            if isinstance(test.operator, cst.And):
                return False if False in (left, right) else True if left is True and right is True else None
            return True if True in (left, right) else False if left is False and right is False else None
        if isinstance(test, cst.Attribute):
            if test.attr.value == "is_cuda":
                return True
            if test.attr.value == "is_cpu":
                return False
            if dotted(test) == "self.training":
                return False if self._eval_mode(function) else None
            return True if (dotted(test) or "") in self._flag_names() else None
        if isinstance(test, cst.Name):
            return True if test.value in self._flag_names() else None
        if isinstance(test, cst.Call):
            name = self.host.call_name(test) or dotted(test.func) or ""
            return True if name in ("torch.cuda.is_available", "cuda.is_available") else None
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            target = test.comparisons[0]
            operator, right = target.operator, target.comparator
            left = test.left
            if isinstance(operator, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and right.value == "None":
                if (dotted(left) or "") in self._present_names():
                    return isinstance(operator, cst.IsNot)
                return None
            if isinstance(operator, (cst.Equal, cst.NotEqual)):
                kind = string_literal(right) if _is_device(left) else \
                    string_literal(left) if _is_device(right) else None
                if kind in ("cuda", "cpu"):
                    same = kind == "cuda"
                    return same if isinstance(operator, cst.Equal) else not same
        return None

    def _eval_mode(self, function) -> bool:
        """Does the class's `__init__` call `self.eval()`, and nothing call `.train()`?"""
        if function is None or function.class_name is None:
            return False
        if self._evals is None:
            self._evals, trains = set(), False
            for site in self.host.calls:
                name = dotted(site.node.func) or ""
                if site.function is not None and site.function.name == "__init__" and name == "self.eval":
                    self._evals.add(site.function.class_name)
                trains = trains or name.endswith(".train") or name == "train"
            if trains:
                self._evals = set()
            # `self.eval()` reaches the submodules built before it: the classes an eval'd class names
            classes = {f.class_name for f in self.host.host_functions if f.class_name is not None}
            stack = list(self._evals)
            while stack:
                owner = stack.pop()
                for method in self.host.host_functions:
                    if method.class_name != owner:
                        continue
                    for node in walk(method.node):
                        if isinstance(node, cst.Name) and node.value in classes and node.value not in self._evals:
                            self._evals.add(node.value)
                            stack.append(node.value)
        return function.class_name in self._evals

    def _present_names(self) -> set[str]:
        """Names that hold the extension or a CUDA stream on a GPU run: bound to
        `load_inline(...)` or `torch.cuda.Stream()`, set to None only before that or in
        an `except` handler."""
        if self._present is None:
            self._present = set()  # while it is computed (an `IfExp` test asks again)
            bound: set[str] = set()
            for ext in self.extensions:
                bound |= ext.bindings
            nones: list[tuple[str, cst.CSTNode]] = []
            for node in walk(self.host.module):
                if not isinstance(node, cst.Assign):
                    continue
                targets = [t for t in (dotted(t.target) for t in node.targets) if t]
                value = node.value
                if isinstance(value, cst.IfExp) and self.truth(value.test, None) is True:
                    value = value.body
                if isinstance(value, cst.Call) and (self.host.call_name(value) or dotted(value.func) or "").endswith(
                        ("cuda.Stream", "cuda.Event", "load_inline", "cpp_extension.load")):
                    bound.update(targets)
                elif isinstance(value, cst.Name) and value.value == "None":
                    nones += [(t, node) for t in targets]
            handlers = {id(n) for h in walk(self.host.module) if isinstance(h, cst.ExceptHandler) for n in walk(h)}
            self._present = {name for name in bound if not any(
                t == name and id(node) not in handlers and not self._before_binding(node, name)
                for t, node in nones)}
        return self._present

    def _before_binding(self, node: cst.CSTNode, name: str) -> bool:
        """`self.ext = None` followed, in the same function, by the binding (`self.ext = load_inline(...)`)."""
        if any(self._else_on_gpu(a) for a in self.host.ancestors(node)):
            return True  # `else: self.stream = None` under `if torch.cuda.is_available():`
        function = self.host.function_of(node)
        scope = function.node if function is not None else self.host.module
        seen = False
        for other in _in_order(scope):
            if other is node:
                seen = True
            elif seen and isinstance(other, cst.Assign) and name in {dotted(t.target) for t in other.targets} and \
                    not (isinstance(other.value, cst.Name) and other.value.value == "None"):
                return True
        return False

    def _flag_names(self) -> set[str]:
        """Flags that say the extension built: set True (or to the build) in a `try` that
        builds it, False only in its `except` handler (`CUDA_AVAILABLE`)."""
        if self._flags is None:
            self._flags = set()
            flags: set[str] = set()
            for node in walk(self.host.module):
                if not isinstance(node, cst.Try):
                    continue
                builds = any(isinstance(n, cst.Call) and (self.host.call_name(n) or dotted(n.func) or "").endswith(
                    ("load_inline", "cpp_extension.load")) for n in walk(node.body))
                if not builds:
                    continue
                trues = {t for n in walk(node.body) if isinstance(n, cst.Assign) and isinstance(n.value, cst.Name)
                         and n.value.value == "True" for t in (dotted(x.target) for x in n.targets) if t}
                falses = {t for h in node.handlers for n in walk(h) if isinstance(n, cst.Assign)
                          and isinstance(n.value, cst.Name) and n.value.value == "False"
                          for t in (dotted(x.target) for x in n.targets) if t}
                flags |= trues & falses
            for node in walk(self.host.module):
                if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == "False":
                    for target in node.targets:
                        name = dotted(target.target)
                        if name in flags and not any(isinstance(a, cst.ExceptHandler) or self._else_on_gpu(a)
                                                     for a in self.host.ancestors(node)):
                            flags.discard(name)
            self._flags = flags
        return self._flags

    def _else_on_gpu(self, node: cst.CSTNode) -> bool:
        """The `else` of `if torch.cuda.is_available():` (the CPU set-up of a module)."""
        parent = self.host.parents.get(id(node))
        return isinstance(parent, cst.If) and parent.orelse is node and \
            self.truth(parent.test, self.host.function_of(parent)) is True

    # -- identity layers -----------------------------------------------------------

    def identity(self, function, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        name = self.host.call_name(node) or ""
        if name.rsplit(".", 1)[-1] in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout") and \
                name.startswith("torch."):
            p = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "p"), None)
            if p is None and len(node.args) > 1 and node.args[1].keyword is None:
                p = node.args[1].value
            return p is not None and _zero(p)
        target = dotted(node.func) or ""
        if not target.startswith("self.") or function.class_name is None:
            return False
        for other in self.host.host_functions:
            if other.class_name != function.class_name or other.name != "__init__":
                continue
            for assign in walk(other.node):
                if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call) and \
                        any(dotted(t.target) == target for t in assign.targets):
                    layer = (self.host.call_name(assign.value) or "").rsplit(".", 1)[-1]
                    if layer not in _DROPOUTS:
                        return False
                    args = assign.value.args
                    p = next((a.value for a in args if a.keyword is not None and a.keyword.value == "p"), None)
                    if p is None and args and args[0].keyword is None:
                        p = args[0].value
                    return p is not None and _zero(p)
        return False


def _in_order(node: cst.CSTNode):
    """`node` and the nodes under it in the order of the text."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(child_nodes(current)))


def _zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value) == 0.0


def _ends(block: cst.BaseSuite) -> bool:
    """Does the block always leave (its last statement a `return` or `raise`)?"""
    body = block.body if isinstance(block, cst.IndentedBlock) else getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body)
    if isinstance(last, cst.SimpleStatementSuite):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body)
    return False


def _is_device(expr: cst.BaseExpression) -> bool:
    """`x.device.type`, `str(x.device)`."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "type" and isinstance(expr.value, cst.Attribute) \
            and expr.value.attr.value == "device":
        return True
    return isinstance(expr, cst.Call) and dotted(expr.func) == "str" and len(expr.args) == 1 and \
        isinstance(expr.args[0].value, cst.Attribute) and expr.args[0].value.attr.value == "device"


