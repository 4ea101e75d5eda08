"""What the host code knows about sizes where it picks a kernel.

A wrapper often chooses a kernel by comparing sizes: `if BT == 64: fn = merge_64_kernel`,
`if col_block == n_cols: mask_free_kernel[grid](...)`, or through a helper's flag
(`block, use_fused = plan(n_cols)` whose `True` is returned only past
`if block < n_cols or pow2 > n_cols: return ..., False`).  Answers: at every place the host
names a kernel (a launch, or the kernel passed on as a value), which order facts between
sizes hold there (`a <= b`, read from the enclosing branches, the early exits and asserts
before it, `x = min(a, b)`, and a helper's returns that yield the flag the branch tests);
what each of the kernel's parameters is bound to there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import int_literal
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.shapes import assigned_value
from kanalyze.analyzer.triton.size_literals import expr_text

_EXITS = (cst.Return, cst.Raise)


@dataclass
class Facts:
    """Order facts `a <= b` between host values (names, literals), read at one place, and the
    literal values a name can still have (`BT in [16, 32, 64]`, then not 16, not 32)."""

    edges: set[tuple[str, str]] = field(default_factory=set)
    values: dict[str, set[int]] = field(default_factory=dict)
    excluded: dict[str, set[int]] = field(default_factory=dict)

    def le(self, a: str, b: str) -> bool:
        """Does `a <= b` follow (transitively, literals ordered by value)?"""
        literals = sorted({v for e in self.edges for v in e if _int(v) is not None} | {
            v for v in (a, b) if _int(v) is not None}, key=_int)
        seen, stack = {a}, [a]
        while stack:
            node = stack.pop()
            if node == b:
                return True
            following = [y for x, y in self.edges if x == node]
            if _int(node) is not None:
                following += [v for v in literals if _int(v) >= _int(node)]
            for nxt in following:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    def equal(self, a: str, b: str) -> bool:
        return self.le(a, b) and self.le(b, a)

    def possible(self, a: str) -> set[int] | None:
        """The literal values `a` can have here, where a membership test or an equality says."""
        found = None
        for term, values in self.values.items():
            if term == a or self.equal(term, a):
                found = values if found is None else found & values
        if found is None:
            return None
        return found - set().union(*(v for t, v in self.excluded.items() if t == a or self.equal(t, a)))

    def lower_bound(self, a: str) -> int | None:
        """The largest literal known to be `<= a`."""
        found = [v for x, _ in self.edges for v in [_int(x)] if v is not None and self.le(x, a)]
        if (values := self.possible(a)):
            found.append(min(values))
        return max(found) if found else None

    def exact(self, a: str) -> int | None:
        """The one literal `a` equals here (`BT == 64`, or `BT in [16, 32, 64]` but not 16 or 32)."""
        for literal in {v for e in self.edges for v in e if _int(v) is not None}:
            if self.equal(a, literal):
                return _int(literal)
        values = self.possible(a)
        return next(iter(values)) if values and len(values) == 1 else None


@dataclass
class Reference:
    """One place the host names a kernel: the function, the node, and what each kernel
    parameter is bound to there (launch arguments, else the host name of the same name)."""

    function: Function
    node: cst.CSTNode
    bindings: dict[str, cst.BaseExpression]
    facts: Facts


def references(model: TritonModule, jit: JitFunction) -> list[Reference]:
    """Every launch of the kernel, and every other place a host function names it
    (`merge_fn = merge_64_kernel`, `launch(kernel, kernel_kwargs=...)`), with the facts there."""
    key = ("dispatch_references", jit.name)
    memo = model.flow(jit).memo
    if key in memo:
        return memo[key]
    found, launch_calls = [], set()
    for launch in jit.launches:
        launch_calls.add(id(launch.call))
        if launch.wrapper is not None:
            found.append(Reference(launch.wrapper, launch.call, dict(launch.args),
                                   facts_at(model, launch.wrapper, launch.call)))
    for fn in model.host_functions:
        flow = model.flow(fn)
        for node in walk(fn.node):
            if not (isinstance(node, cst.Name) and node.value == jit.name) or any(
                    id(a) in launch_calls for a in model.ancestors(node)):
                continue
            parent = model.parent(node)
            if isinstance(parent, cst.FunctionDef) or (isinstance(parent, cst.Attribute) and parent.attr is node):
                continue
            bindings = {p.name: cst.Name(p.name) for p in jit.params if flow.defs_of(p.name)}
            found.append(Reference(fn, node, bindings, facts_at(model, fn, node)))
    memo[key] = found
    return found


def facts_at(model: TritonModule, fn: Function, at: cst.CSTNode) -> Facts:
    """The order facts that hold where `at` runs in `fn`."""
    facts = Facts()
    _assignment_facts(model, fn, facts, {})
    for test, truth in path_conditions(model, fn, at):
        _condition(model, fn, test, truth, facts, {}, depth=2)
    return facts


def path_conditions(model: TritonModule, fn: Function, at: cst.CSTNode) -> list[tuple[cst.BaseExpression, bool]]:
    """The tests that hold at `at`: enclosing `if` tests (negated in an `else`), asserts and
    early exits (`if cond: return`) before it in the suites around it."""
    found, child = [], at
    for node in model.ancestors(at):
        if node is fn.node:
            break
        if isinstance(node, cst.If):
            if child is node.body:
                found.append((node.test, True))
            elif child is node.orelse:
                found.append((node.test, False))
        if isinstance(node, cst.IndentedBlock):
            for statement in node.body:
                if statement is child:
                    break
                if isinstance(statement, cst.If) and statement.orelse is None and _exits(statement.body):
                    found.append((statement.test, False))
                elif isinstance(statement, cst.SimpleStatementLine):
                    found += [(s.test, True) for s in statement.body if isinstance(s, cst.Assert)]
        child = node
    return found


def _exits(block) -> bool:
    body = getattr(block, "body", ())
    last = body[-1] if body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], _EXITS)


def _condition(model: TritonModule, fn: Function, test, truth: bool, facts: Facts, rename: dict,
               depth: int) -> None:
    """Add the facts `test == truth` gives."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        _condition(model, fn, test.expression, not truth, facts, rename, depth)
    elif isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And) == truth:  # `a and b` true, `a or b` false: both parts
            _condition(model, fn, test.left, truth, facts, rename, depth)
            _condition(model, fn, test.right, truth, facts, rename, depth)
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        a, b = _term(model, test.left, rename), _term(model, test.comparisons[0].comparator, rename)
        op = test.comparisons[0].operator
        if isinstance(op, (cst.Equal, cst.NotEqual)):
            if isinstance(op, cst.Equal) == truth:
                facts.edges |= {(a, b), (b, a)}
            elif _int(b) is not None:
                facts.excluded.setdefault(a, set()).add(_int(b))
        elif isinstance(op, cst.In) and truth and isinstance(test.comparisons[0].comparator, (cst.List, cst.Tuple,
                                                                                              cst.Set)):
            members = [int_literal(e.value) for e in test.comparisons[0].comparator.elements]
            if members and None not in members:
                facts.values[a] = facts.values.get(a, set(members)) & set(members)
        elif isinstance(op, (cst.LessThan, cst.LessThanEqual)):
            facts.edges.add((a, b) if truth else (b, a))
        elif isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
            facts.edges.add((b, a) if truth else (a, b))
    elif isinstance(test, cst.Name) and depth > 0:
        for d in model.flow(fn).defs_of(test.value):
            if d.kind != "assign" or len(model.flow(fn).defs_of(test.value)) != 1:
                return
            value = assigned_value(d, test.value)
            if value is not None:
                _condition(model, fn, value, truth, facts, rename, depth - 1)
            else:
                _helper_flag(model, fn, d.node, test.value, truth, facts, rename, depth - 1)


def _helper_flag(model: TritonModule, fn: Function, statement, name: str, truth: bool, facts: Facts,
                 rename: dict, depth: int) -> None:
    """`block, ok = plan(n)` then `if ok:`: the facts common to every return of `plan`
    whose flag can be `truth`, in the caller's names."""
    if not (isinstance(statement, cst.Assign) and len(statement.targets) == 1
            and isinstance(statement.value, cst.Call) and isinstance(statement.value.func, cst.Name)):
        return
    target = statement.targets[0].target
    targets = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
    index = next((i for i, t in enumerate(targets) if isinstance(t, cst.Name) and t.value == name), None)
    helper = next((f for f in model.host_functions if f.name == statement.value.func.value
                   and f.class_name is None), None)
    if index is None or helper is None:
        return
    # In the caller's names: the helper's parameters are the call's arguments, the parts of
    # what it returns are the targets; its other locals are its own.
    params = [p.name.value for p in helper.node.params.params]
    args = [a.value for a in statement.value.args if a.keyword is None and not a.star]
    inner = {p: _term(model, a, rename) for p, a in zip(params, args)}
    inner[""] = helper.name + ":"  # the helper's own locals
    common = None
    for ret in (n for n in walk(helper.node) if isinstance(n, cst.Return) and n.value is not None):
        parts = [e.value for e in ret.value.elements] if isinstance(ret.value, cst.Tuple) else [ret.value]
        if len(parts) != len(targets):
            return
        flag = parts[index]
        if isinstance(flag, cst.Name) and flag.value in ("True", "False") and (flag.value == "True") != truth:
            continue  # this return never yields the flag the branch wants
        local = dict(inner)
        local.update({expr_text(model, p): _term(model, t, rename) for p, t in zip(parts, targets)
                      if isinstance(p, cst.Name) and p.value not in inner})
        mine = Facts()
        _assignment_facts(model, helper, mine, local)
        for test, holds in path_conditions(model, helper, ret):
            _condition(model, helper, test, holds, mine, local, depth)
        if not (isinstance(flag, cst.Name) and flag.value in ("True", "False")):
            _condition(model, helper, flag, truth, mine, local, depth)
        common = mine.edges if common is None else common & mine.edges
    facts.edges |= common or set()


def _assignment_facts(model: TritonModule, fn: Function, facts: Facts, rename: dict) -> None:
    """`x = min(a, b)` gives `x <= a` and `x <= b`; `x = max(a, b)` the other way; `x = y`
    and `B, T, H, BT = A.shape` (`BT` is `A.shape[3]`, `A.shape[-1]`) both ways, for names
    assigned once."""
    flow = model.flow(fn)
    for node in walk(fn.node):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0].target, node.value
        if isinstance(target, cst.Tuple) and isinstance(value, cst.Attribute) and value.attr.value == "shape" \
                and all(isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement) for e in target.elements):
            base, last = _term(model, value, rename), len(target.elements) - 1
            for i, e in enumerate(target.elements):
                if len(flow.defs_of(e.value.value)) == 1:
                    x = _term(model, e.value, rename)
                    for index in (i, -1) if i == last else (i,):
                        facts.edges |= {(x, f"{base}[{index}]"), (f"{base}[{index}]", x)}
            continue
        if not isinstance(target, cst.Name) or len(flow.defs_of(target.value)) != 1:
            continue
        x = _term(model, target, rename)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("min", "max"):
            for arg in value.args:
                y = _term(model, arg.value, rename)
                facts.edges.add((x, y) if value.func.value == "min" else (y, x))
        elif isinstance(value, cst.Name) or int_literal(value) is not None:
            facts.edges |= {(x, _term(model, value, rename)), (_term(model, value, rename), x)}


def _term(model: TritonModule, expr, rename: dict) -> str:
    """An expression's text in the caller's names (`rename`; its "" entry prefixes the rest)."""
    text = expr_text(model, expr, limit=200).replace(" ", "")
    return rename.get(text, text if _int(text) is not None else rename.get("", "") + text)


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None
