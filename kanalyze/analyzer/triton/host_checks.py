"""What a host function's own dtype checks say about its tensors.

    assert q.dtype in (torch.float16, torch.bfloat16)      q is fp16 or bf16 from here on
    assert Q.dtype == torch.float16 and K.dtype == ...     each of them
    if x.dtype not in (torch.float16,): raise ValueError   x is fp16 past the `if`
    assert q_dtype == k.dtype  (with q_dtype = q.dtype)    k is whatever q is
    assert q.dtype == torch.float16 or q.dtype == torch.bfloat16   either
    if a: raise ... elif b: raise ...                      neither a nor b past the chain
    for t in (q, k): assert t.dtype == torch.float16      each name of the literal tuple
    assert all(t.dtype == torch.float16 for t in (q, k))  the same

are read at the top level of the function body (also inside its `with` blocks): the
function runs past them only with those dtypes, so each read of the name in it is taken
to have them.  A read inside a branch that tests the dtype sees that branch's dtypes:
`x_` in `else: x_tc = x_` under `if x_.dtype != torch.float16:`, or the body of
`x if x.dtype == torch.float16 else x.half()`; the `else` of
`if torch.is_floating_point(x):` sees an integer x (also `dtype` there, with `dtype = x.dtype`).

`function_checks(model, function, cache)` gives name → the dtypes its checks allow;
`branch_dtypes(model, name_node)` the dtypes the tests around one read allow.  Tests
that exclude a dtype (`x.dtype != torch.float32` in an assert) say nothing here.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.triton.dtype_names import INTEGERS, literal_dtype
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.model import TritonModule

Allowed = dict[str, frozenset[str]]
# What a tensor that is not floating point can be, as a kernel reads it (no complex in Triton).
NON_FLOATS = frozenset(INTEGERS)


def function_checks(model: TritonModule, function: Function, cache: dict) -> Allowed:
    """Name → the dtypes the function's top-level asserts and raise-guards allow it
    (kept in `cache`, the caller's: one per model)."""
    key = id(function.node)
    if key not in cache:
        aliases = _dtype_aliases(function)
        allowed: Allowed = {}
        equal: list[tuple[str, str]] = []
        for statement in _body(function.node):
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assert):
                        _read(model, small.test, True, aliases, allowed, equal)
            elif isinstance(statement, cst.If):
                for test in _raising_tests(statement):
                    _read(model, test, False, aliases, allowed, equal)
            elif isinstance(statement, cst.For):
                _read_loop(model, statement, aliases, allowed, equal)
        changed = True
        while changed:  # `assert q.dtype == k.dtype`: what one is allowed, the other is
            changed = False
            for a, b in equal + [(b, a) for a, b in equal]:
                if a in allowed and allowed.get(b) != allowed[a] and (b not in allowed or allowed[a] < allowed[b]):
                    allowed[b] = allowed[a]
                    changed = True
        cache[key] = allowed
    return cache[key]


def branch_dtypes(model: TritonModule, read: cst.Name) -> frozenset[str] | None:
    """The dtypes `read` can have where it is read, by the `if`/ternary tests around it on
    the `.dtype` of that same name; None when no test says."""
    allowed: frozenset[str] | None = None
    child: cst.CSTNode = read
    function = model.function_of(read)
    aliases = _dtype_aliases(function) if function is not None else {}
    for ancestor in model.ancestors(read):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        branch = None
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            branch = child is ancestor.body
        if branch is not None:
            found: Allowed = {}
            _read(model, ancestor.test, branch, aliases, found, [])
            # a read of the tensor, or of a name holding its dtype (`dtype = x.dtype`)
            tensor = read.value if read.value in found else aliases.get(read.value)
            if tensor in found:
                allowed = found[tensor] if allowed is None else allowed & found[tensor]
        child = ancestor
    return allowed


# -- reading a test -----------------------------------------------------------


def _read(model: TritonModule, test: cst.BaseExpression, holds: bool, aliases: dict[str, str],
          allowed: Allowed, equal: list[tuple[str, str]]) -> None:
    """What `test` says about dtypes when it evaluates to `holds`, added to `allowed`/`equal`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        _read(model, test.expression, not holds, aliases, allowed, equal)
        return
    if isinstance(test, cst.BooleanOperation):
        # `a and b` holding (or `a or b` failing) says both; `a or b` holding (or `a and b`
        # failing) says, of a tensor both sides restrict, that it is one of either's dtypes.
        if isinstance(test.operator, cst.And) == holds:
            _read(model, test.left, holds, aliases, allowed, equal)
            _read(model, test.right, holds, aliases, allowed, equal)
            return
        sides: list[Allowed] = [{}, {}]
        for side, found in zip((test.left, test.right), sides):
            _read(model, side, holds, aliases, found, [])
        for name in sides[0].keys() & sides[1].keys():
            either = sides[0][name] | sides[1][name]
            allowed[name] = allowed[name] & either if name in allowed else either
        return
    if isinstance(test, cst.Call) and holds and _called(test, "all") and len(test.args) == 1 \
            and isinstance(test.args[0].value, cst.GeneratorExp):
        _read_all(model, test.args[0].value, aliases, allowed, equal)  # `all(t.dtype == ... for t in (q, k))`
        return
    floating = _floating_test(test, aliases)
    if floating is not None and not holds:  # `torch.is_floating_point(x)` failing: x is an integer
        allowed[floating] = allowed[floating] & NON_FLOATS if floating in allowed else NON_FLOATS
        return
    if not isinstance(test, cst.Comparison):
        return
    sides = [test.left] + [c.comparator for c in test.comparisons]
    if len(sides) > 2 and not holds:
        return  # `a == b == c` failing: which link failed is not known
    for (left, right), target in zip(zip(sides, sides[1:]), test.comparisons):
        op = target.operator
        positive = isinstance(op, (cst.Equal, cst.Is, cst.In))
        if not positive and not isinstance(op, (cst.NotEqual, cst.IsNot, cst.NotIn)):
            continue
        if positive != holds:
            continue  # `x.dtype != torch.float32` holding excludes one dtype: nothing allowed for sure
        a, b = _tensor_of(left, aliases), _tensor_of(right, aliases)
        if a is not None and b is not None:
            equal.append((a, b))
            continue
        name, other = (a, right) if a is not None else (b, left)
        dtypes = _dtype_set(model, other, membership=isinstance(op, (cst.In, cst.NotIn)))
        if name is not None and dtypes:
            allowed[name] = allowed[name] & dtypes if name in allowed else dtypes


def _floating_test(test: cst.BaseExpression, aliases: dict[str, str]) -> str | None:
    """The tensor `torch.is_floating_point(x)`, `x.is_floating_point()` or
    `x.dtype.is_floating_point` (also through `dtype = x.dtype`) tests; else None."""
    if isinstance(test, cst.Call):
        func = test.func
        if isinstance(func, cst.Attribute) and func.attr.value == "is_floating_point":
            if test.args and isinstance(test.args[0].value, cst.Name):
                return test.args[0].value.value  # `torch.is_floating_point(x)`
            if not test.args and isinstance(func.value, cst.Name):
                return func.value.value          # `x.is_floating_point()`
        return None
    if isinstance(test, cst.Attribute) and test.attr.value == "is_floating_point":
        return _tensor_of(test.value, aliases)
    return None


def _tensor_of(expr: cst.BaseExpression, aliases: dict[str, str]) -> str | None:
    """`x.dtype` → "x"; a name assigned `x.dtype` once (`q_dtype = q.dtype`) → "q"."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype" and isinstance(expr.value, cst.Name):
        return expr.value.value
    if isinstance(expr, cst.Name):
        return aliases.get(expr.value)
    return None


def _dtype_set(model: TritonModule, expr: cst.BaseExpression, membership: bool) -> frozenset[str]:
    """The dtypes a literal names: `torch.float16`, or every member of `(torch.float16, torch.bfloat16)`."""
    if membership:
        if not isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            return frozenset()
        names = [literal_dtype(model, e.value) for e in expr.elements]
        return frozenset(names) if names and all(names) else frozenset()
    name = literal_dtype(model, expr)
    return frozenset({name}) if name else frozenset()


def _dtype_aliases(function: Function) -> dict[str, str]:
    """Names the function assigns a tensor's dtype to, once: `q_dtype = q.dtype`."""
    seen: dict[str, list[cst.BaseExpression]] = {}
    for statement in _body(function.node):
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and isinstance(small.targets[0].target, cst.Name):
                    seen.setdefault(small.targets[0].target.value, []).append(small.value)
    return {name: values[0].value.value for name, values in seen.items()
            if len(values) == 1 and _tensor_of(values[0], {}) is not None}


def _read_loop(model: TritonModule, loop: cst.For, aliases: dict[str, str], allowed: Allowed,
               equal: list[tuple[str, str]]) -> None:
    """`for t in (q, k): assert t.dtype == torch.float16` (asserts at the top of the loop's
    body, over a literal tuple of names): what they say of `t`, each of the names."""
    names = _literal_names(loop.iter)
    if not isinstance(loop.target, cst.Name) or not names or loop.orelse is not None:
        return
    found: Allowed = {}
    for statement in _block(loop.body):
        if not isinstance(statement, cst.SimpleStatementLine) \
                or any(isinstance(small, (cst.Continue, cst.Break)) for small in statement.body):
            break  # past a branch or a `continue`, an assert may be skipped for some names
        for small in statement.body:
            if isinstance(small, cst.Assert):
                _read(model, small.test, True, aliases, found, [])
    _spread(found.get(loop.target.value), names, allowed)


def _read_all(model: TritonModule, generator: cst.GeneratorExp, aliases: dict[str, str], allowed: Allowed,
              equal: list[tuple[str, str]]) -> None:
    """`all(t.dtype == torch.float16 for t in (q, k))` holding: each of q and k."""
    loop = generator.for_in
    names = _literal_names(loop.iter)
    if not isinstance(loop.target, cst.Name) or not names or loop.ifs or loop.inner_for_in is not None:
        return
    found: Allowed = {}
    _read(model, generator.elt, True, aliases, found, [])
    _spread(found.get(loop.target.value), names, allowed)


def _spread(dtypes: frozenset[str] | None, names: list[str], allowed: Allowed) -> None:
    if dtypes:
        for name in names:
            allowed[name] = allowed[name] & dtypes if name in allowed else dtypes


def _literal_names(expr: cst.BaseExpression) -> list[str]:
    """The names of `(q, k)` / `[q, k]`; empty unless every element is a plain name."""
    if not isinstance(expr, (cst.Tuple, cst.List)) or not expr.elements:
        return []
    names = [e.value.value for e in expr.elements if isinstance(e.value, cst.Name) and isinstance(e, cst.Element)]
    return names if len(names) == len(expr.elements) else []


def _called(call: cst.Call, name: str) -> bool:
    return isinstance(call.func, cst.Name) and call.func.value == name


def _raising_tests(statement: cst.If) -> list[cst.BaseExpression]:
    """The tests of an `if`/`elif` chain's leading branches that raise: past the chain, each
    of them failed (`if a: raise ... elif b: raise ...`).  A branch that does not raise ends
    the list: past it, the tests after it may have held."""
    tests: list[cst.BaseExpression] = []
    branch: cst.If | cst.Else | None = statement
    while isinstance(branch, cst.If) and _raises(branch.body):
        tests.append(branch.test)
        branch = branch.orelse
    return tests


def _body(node: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The statements that run whenever the function runs past them: its body, and the
    bodies of `with` blocks in it (`with torch.cuda.device(x.device): assert ...`)."""
    return _block(node.body)


def _block(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    found: list[cst.BaseStatement] = []
    for statement in (suite.body if isinstance(suite, cst.IndentedBlock) else ()):
        found.extend(_block(statement.body) if isinstance(statement, cst.With) else [statement])
    return found


def _raises(block: cst.BaseSuite) -> bool:
    """Does the block end by raising (`if bad: raise ValueError(...)`)?"""
    statements = list(block.body) if isinstance(block, cst.IndentedBlock) else [block]
    last = statements[-1] if statements else None
    small = last.body if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else ()
    return bool(small) and isinstance(small[-1], cst.Raise)
