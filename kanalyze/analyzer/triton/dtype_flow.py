"""What dtype does a value have?  A kernel value, the elements a kernel pointer
points into, a host tensor, or what a dtype expression names through constexprs,
launches and configs.

`DtypeFlow` reads them from the source: `tl.load` of a pointer takes the element
type of the tensor the wrapper passes, a cast takes its target, arithmetic
follows Triton's promotion (dtype_promotion.py), host tensors their factory
call or cast (host_dtypes.py).  Each answer is a set of dtype names; `UNKNOWN`
in it means some value whose dtype the source does not show.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, keyword
from kanalyze.analyzer.triton.dtype_names import UNKNOWN, cast_target, literal_dtype
from kanalyze.analyzer.triton.dtype_promotion import (INT_RANK, METHOD_SAME, SCALAR, TL, TL_FLOAT, TL_INT, TL_JOIN,
                                                      TL_SAME, is_number_literal, promote)
from kanalyze.analyzer.triton.entities import Function, JitFunction
from kanalyze.analyzer.triton.helper_returns import helper_returns, unpacked_at
from kanalyze.analyzer.triton.host_checks import branch_dtypes
from kanalyze.analyzer.triton.host_dtypes import host_tensor_dtypes, launched_elsewhere
from kanalyze.analyzer.triton.model import TritonModule


class DtypeFlow:
    """The dtypes a value can have, read from the source: in a kernel (`tl.load` of
    a pointer takes the element type of the tensor the wrapper passes, a cast takes
    its target, `x.to(y.dtype)` takes y's dtype, `x.to(P.dtype.element_ty)` and
    `x.to(P.type.element_ty)` P's element type, a jit helper's call what it returns:
    helper_returns.py), and on the host (`torch.zeros(..., dtype=torch.int32)`, `.half()`,
    `torch.empty(n)` is the default float32, a parameter what the file's callers pass).
    Each answer is a set of dtype names; `UNKNOWN` in it means some value whose dtype
    the source does not show.  Nothing is guessed: a tensor handed in by a caller
    outside the file is UNKNOWN."""

    def __init__(self, model: TritonModule, depth: int = 12) -> None:
        self.model = model
        self.depth = depth
        self._active: set[tuple] = set()
        self._cycles = 0
        self._memo: dict[tuple, frozenset[str]] = {}
        self._module_values: dict[str, list[cst.BaseExpression]] | None = None
        self._reachings: dict[int, object] = {}  # function node → its Reaching
        self._pointer_cache: dict = {}  # pointer_bases' own cache, kept across questions
        self.host_caches: dict[str, dict] = {"checks": {}, "callers": {}}  # host_dtypes' helpers' caches

    # -- plumbing -------------------------------------------------------------

    def _guard(self, kind: str, func: Function | None, expr: cst.CSTNode | None, depth: int, compute) -> frozenset[str]:
        if expr is None or depth < 0:
            return frozenset({UNKNOWN})
        key = (kind, id(func.node) if func is not None else 0, id(expr))
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            self._cycles += 1
            return frozenset()  # a loop-carried value: what its other definitions say
        self._active.add(key)
        cycles = self._cycles
        try:
            found = frozenset(compute())
        finally:
            self._active.discard(key)
        found = found or frozenset({UNKNOWN})
        if self._cycles == cycles or not self._active:
            self._memo[key] = found  # complete: no answer inside it was cut short by a cycle
        return found

    def _jit(self, func: Function | None) -> JitFunction | None:
        if func is None:
            return None
        jit = self.model.jit.get(func.name)
        return jit if jit is not None and jit.function is func else None

    def _module_assigned(self, name: str) -> list[cst.BaseExpression]:
        if self._module_values is None:
            self._module_values = {}
            for node in self.model.nodes(cst.Assign):
                if self.model.function_of(node) is not None:
                    continue
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        self._module_values.setdefault(target.target.value, []).append(node.value)
        return self._module_values.get(name, [])

    @staticmethod
    def unpacked(d, value: cst.BaseExpression) -> cst.BaseExpression | None:
        """The element a tuple-unpacking assignment gives `d.name`; the value itself for a plain one."""
        node = d.node
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else \
            [node.target] if isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.NamedExpr)) else []
        for target in targets:
            if isinstance(target, cst.Name) and target.value == d.name:
                return value
            if isinstance(target, (cst.Tuple, cst.List)):
                names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
                if d.name in names and isinstance(value, (cst.Tuple, cst.List)) \
                        and len(value.elements) == len(names):
                    return value.elements[names.index(d.name)].value
                return None
        return value if not targets else None

    # -- what dtype an expression names -----------------------------------------

    def named(self, func: Function | None, expr: cst.BaseExpression | None, depth: int | None = None) -> frozenset[str]:
        """The dtypes a dtype expression can name: `tl.float16`, `torch.int32`, a constexpr
        followed to its launch values, `x.dtype`, `P.dtype.element_ty`, a ternary, a dict lookup."""
        depth = self.depth if depth is None else depth
        return self._guard("named", func, expr, depth, lambda: self._named(func, expr, depth))

    def _named(self, func: Function | None, expr: cst.BaseExpression, depth: int) -> set[str]:
        model = self.model
        direct = literal_dtype(model, expr)
        if direct is not None:
            return {direct}
        if isinstance(expr, cst.IfExp):
            return set(self.named(func, expr.body, depth - 1) | self.named(func, expr.orelse, depth - 1))
        if isinstance(expr, cst.Attribute):
            if expr.attr.value == "dtype":
                if self._jit(func) is not None:
                    return set(self.value(func, expr.value, depth - 1))
                return set(self.host_tensor(func, expr.value, depth - 1))
            if expr.attr.value == "element_ty" and isinstance(expr.value, cst.Attribute) \
                    and expr.value.attr.value in ("dtype", "type") and self._jit(func) is not None:
                return set(self.pointer_element(func, expr.value.value, depth - 1))
            return {UNKNOWN}
        if isinstance(expr, cst.Call):
            return self._named_call(func, expr, depth)
        if isinstance(expr, cst.Subscript):
            return self._table_values(func, expr.value, depth)
        if not isinstance(expr, cst.Name):
            return {UNKNOWN}
        if func is None:
            values = self._module_assigned(expr.value)
            return set().union(*(self.named(None, v, depth - 1) for v in values)) if values else {UNKNOWN}
        defs = model.flow(func).defs_of(expr.value)
        if not defs:
            values = self._module_assigned(expr.value)
            return set().union(*(self.named(None, v, depth - 1) for v in values)) if values else {UNKNOWN}
        found = set()
        for d in defs:
            if d.kind == "param":
                found |= self._param_named(func, d.name, depth)
            elif d.value is not None and (value := self.unpacked(d, d.value)) is not None:
                found |= self.named(func, value, depth - 1)
            else:
                found.add(UNKNOWN)
        if self._jit(func) is None:  # `dtype=dtype` under `elif dtype == torch.int64:` (host_checks.py)
            allowed = branch_dtypes(model, expr)
            if allowed:
                found = set(allowed) if UNKNOWN in found or not found & allowed else found & allowed
        return found

    def _named_call(self, func: Function | None, call: cst.Call, depth: int) -> set[str]:
        """`table.get(key, None)` on a dict of dtypes (its values), or a call of a host function of
        this module (`get_triton_type(x.dtype)`): what its `return`s name."""
        callee = call.func
        if isinstance(callee, cst.Attribute) and callee.attr.value == "get" and call.args:
            return self._table_values(func, callee.value, depth)  # a miss gives None, which no kernel takes
        helper = self._module_function(callee)
        if helper is None:
            return {UNKNOWN}
        returns = [n.value for n in walk(helper.node.body) if isinstance(n, cst.Return) and n.value is not None]
        found: set[str] = set()
        for value in returns:
            found |= self.named(helper, value, depth - 1)
        return found or {UNKNOWN}

    def _table_values(self, func: Function | None, table: cst.BaseExpression, depth: int) -> set[str]:
        """The dtypes a lookup in a dict can give: a dict literal, or one a name holds
        (`type_map = {torch.float16: tl.float16, ...}`), its values."""
        values: list[cst.BaseExpression] = [table] if isinstance(table, cst.Dict) else []
        if isinstance(table, cst.Name):
            local = [d.value for d in self.model.flow(func).defs_of(table.value)] if func is not None else []
            values = [v for v in local if v is not None] or self._module_assigned(table.value)
        if not values or not all(isinstance(v, cst.Dict) for v in values):
            return {UNKNOWN}
        found: set[str] = set()
        for d in values:
            for element in d.elements:
                found |= self.named(func, element.value, depth - 1) if isinstance(element, cst.DictElement) \
                    else {UNKNOWN}
        return found

    def _module_function(self, callee: cst.BaseExpression) -> Function | None:
        """The module-level host function a bare name calls, when exactly one `def` has that name."""
        if not isinstance(callee, cst.Name):
            return None
        found = [f for f in self.model.host_functions if f.name == callee.value and f.class_name is None
                 and self.model.function_of(f.node) is None]
        return found[0] if len(found) == 1 else None

    def _param_named(self, func: Function, name: str, depth: int) -> set[str]:
        jit = self._jit(func)
        if jit is None:
            return {UNKNOWN}
        found: set[str] = set()
        launched = []
        for launch in jit.launches:
            if name in launch.args:
                launched.append(launch.args[name])
                found |= self.named(launch.wrapper, launch.args[name], depth - 1)
            else:
                p = jit.param(name)
                if p is None or p.default is None:
                    found.add(UNKNOWN)
        for caller, call in jit.called_from:
            arg = bind_call_args(call, jit.params).get(name)
            if arg is not None:
                found |= self.named(caller, arg, depth - 1)
        for config in jit.autotune_configs:
            if name in config:
                found |= self.named(None, config[name], depth - 1)
        p = jit.param(name)
        if p is not None and p.default is not None and (not jit.launches or len(launched) < len(jit.launches)):
            found |= self.named(func, p.default, depth - 1)
        if name in jit.heuristics:
            found.add(UNKNOWN)
        return found or {UNKNOWN}

    # -- host tensors -----------------------------------------------------------

    def host_tensor(self, func: Function | None, expr: cst.BaseExpression | None,
                    depth: int | None = None) -> frozenset[str]:
        """The dtypes of a torch tensor expression in host code."""
        depth = self.depth if depth is None else depth
        return self._guard("host", func, expr, depth, lambda: host_tensor_dtypes(self, func, expr, depth))


    # -- pointers -----------------------------------------------------------------

    def pointer_element(self, func: Function, ptr: cst.BaseExpression | None,
                        depth: int | None = None) -> frozenset[str]:
        """The element dtypes of the tensors a kernel pointer expression points into,
        read from the wrappers' launches (UNKNOWN where a launch does not show it)."""
        depth = self.depth if depth is None else depth
        return self._guard("ptr", func, ptr, depth, lambda: self._pointer(func, ptr, depth))

    def _pointer(self, func: Function, ptr: cst.BaseExpression, depth: int) -> set[str]:
        from kanalyze.analyzer.triton.pointers import pointer_bases  # pointers imports the model

        jit = self._jit(func)
        if jit is None:
            return {UNKNOWN}
        found: set[str] = set()
        for kernel_name, param in pointer_bases(self.model, jit, ptr, cache=self._pointer_cache):
            kernel = self.model.jit.get(kernel_name)
            if kernel is None:
                found.add(UNKNOWN)
                continue
            if kernel.called_from and not kernel.launches:
                continue  # a helper's parameter: its callers' arguments are among the bases
            if not kernel.launches:  # launched from another checked module, or unknown
                found |= launched_elsewhere(self.model, kernel_name, param)
            for launch in kernel.launches:
                arg = launch.args.get(param)
                found |= self.host_tensor(launch.wrapper, arg, depth - 1) if arg is not None and \
                    launch.wrapper is not None else {UNKNOWN}
        return found or {UNKNOWN}

    # -- kernel values ------------------------------------------------------------

    def value(self, func: Function, expr: cst.BaseExpression | None, depth: int | None = None) -> frozenset[str]:
        """The dtypes a value in a jit function can have."""
        found = self._raw(func, expr, depth)
        return found if SCALAR not in found else (found - {SCALAR}) | {UNKNOWN}

    def _raw(self, func: Function, expr: cst.BaseExpression | None, depth: int | None = None) -> frozenset[str]:
        depth = self.depth if depth is None else depth
        return self._guard("value", func, expr, depth, lambda: self._value(func, expr, depth))

    def _value(self, func: Function, expr: cst.BaseExpression, depth: int) -> set[str]:
        if isinstance(expr, cst.Integer):
            return {"int32"}
        if isinstance(expr, cst.Float):
            return {"float32"}
        if isinstance(expr, (cst.Comparison, cst.BooleanOperation)):
            return {"bool"}
        if isinstance(expr, cst.Name):
            if expr.value in ("True", "False"):
                return {"bool"}
            return self._name_value(func, expr.value, depth, expr)
        if isinstance(expr, cst.Subscript):
            return set(self._raw(func, expr.value, depth - 1))
        if isinstance(expr, cst.Attribute):
            return set(self._raw(func, expr.value, depth - 1)) if expr.attr.value == "T" else {UNKNOWN}
        if isinstance(expr, cst.UnaryOperation):
            return {"bool"} if isinstance(expr.operator, cst.Not) else set(self._raw(func, expr.expression, depth - 1))
        if isinstance(expr, cst.IfExp):
            return set(self._raw(func, expr.body, depth - 1) | self._raw(func, expr.orelse, depth - 1))
        if isinstance(expr, cst.BinaryOperation):
            return self._binary(func, expr.left, expr.right, depth, isinstance(expr.operator, cst.Divide))
        if isinstance(expr, cst.Call):
            return self._call_value(func, expr, depth)
        return {UNKNOWN}

    def _binary(self, func: Function, left: cst.BaseExpression, right: cst.BaseExpression, depth: int,
                true_division: bool = False) -> set[str]:
        lw, rw = self._weak(func, left), self._weak(func, right)
        found = set()
        for a in self._raw(func, left, depth - 1):
            for b in self._raw(func, right, depth - 1):
                t = promote(a, b, lw, rw, true_division)
                found.add("float32" if true_division and t in INT_RANK else t)
        return found

    def _weak(self, func: Function, expr: cst.BaseExpression) -> bool:
        """A Python number: a literal, or a constexpr parameter (its value is one)."""
        if is_number_literal(expr):
            return True
        jit = self._jit(func)
        return isinstance(expr, cst.Name) and jit is not None and expr.value in jit.constexpr_names

    def _ordered_defs(self, func: Function, name: str, at: cst.Name | None) -> list:
        """The definitions of `name` that reach `at` (source order, branches, loops: reaching.py)."""
        if at is None:
            return self.model.flow(func).defs_of(name)
        from kanalyze.analyzer.triton.reaching import Reaching  # reaching imports the model

        reaching = self._reachings.get(id(func.node))
        if reaching is None:
            reaching = self._reachings[id(func.node)] = Reaching(self.model, func)
        return reaching.defs(name, at) or self.model.flow(func).defs_of(name)

    def _name_value(self, func: Function, name: str, depth: int, at: cst.Name | None = None) -> set[str]:
        found: set[str] = set()
        for d in self._ordered_defs(func, name, at):
            if d.kind == "augassign" and d.value is not None and isinstance(d.node.target, cst.Name):
                found |= self._augmented(func, d, depth)
            else:
                found |= self._def_value(func, d, depth)
        return found or {UNKNOWN}

    def _augmented(self, func: Function, d, depth: int) -> set[str]:
        """`x += v` is `x = x + v`: each dtype `x` gets from its other definitions, promoted
        with `v`'s (`b_A += rows == cols` keeps b_A's float32; so does `acc += tl.dot(...)`)."""
        starts = {t for o in self.model.flow(func).defs_of(d.name) if o.kind != "augassign"
                  for t in self._def_value(func, o, depth)} or {UNKNOWN}
        weak, divide = self._weak(func, d.value), d.operator == "/="
        found = {promote(a, b, False, weak, divide) for a in starts for b in self._raw(func, d.value, depth - 1)}
        return {"float32" if divide and t in INT_RANK else t for t in found}

    def _def_value(self, func: Function, d, depth: int) -> set[str]:
        """The dtypes one definition gives its name (an augmented one: its value's)."""
        if d.kind == "param":
            jit = self._jit(func)
            if jit is not None and jit.called_from and not jit.launches:
                found: set[str] = set()
                for caller, call in jit.called_from:
                    arg = bind_call_args(call, jit.params).get(d.name)
                    found |= self._raw(caller, arg, depth - 1) if arg is not None else {UNKNOWN}
                return found
            if jit is not None and d.name in jit.constexpr_names:
                return {UNKNOWN}  # a Python number, weak in arithmetic (`_weak`)
            return {SCALAR}  # a scalar argument of the launch
        if d.kind == "for":
            return {"int32"}
        if d.kind == "augassign" and d.value is not None:
            return set(self._raw(func, d.value, depth - 1))
        if d.value is not None and (value := self.unpacked(d, d.value)) is not None:
            return set(self._raw(func, value, depth - 1))
        if isinstance(d.value, cst.Call) and (at := unpacked_at(d.node, d.name)) is not None:   # `a, b = f(...)`
            return helper_returns(self.model, d.value, lambda f, value: self._raw(f, value, depth - 1), at)
        return {UNKNOWN}

    def _call_value(self, func: Function, call: cst.Call, depth: int) -> set[str]:
        model = self.model
        target = cast_target(model, call)
        if target is not None:
            return set(self.named(func, target, depth - 1))
        name = model.call_name(call) or ""
        leaf = name[len(TL):] if name.startswith(TL) else None
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if leaf == "load":
            return set(self.pointer_element(func, keyword(call, "pointer", 0), depth - 1))
        if leaf == "_experimental_descriptor_load":  # (desc, offsets, shape, dtype): the dtype it reads as
            return set(self.named(func, keyword(call, "dtype", 3), depth - 1))
        if leaf in ("zeros", "full"):
            return set(self.named(func, keyword(call, "dtype", 1 if leaf == "zeros" else 2), depth - 1))
        if leaf == "dot":
            out = keyword(call, "out_dtype")
            if out is not None:
                return set(self.named(func, out, depth - 1))
            acc = keyword(call, "acc", 2)
            if acc is not None:
                return set(self._raw(func, acc, depth - 1))
            operands = self._raw(func, keyword(call, "input", 0), depth - 1) | \
                self._raw(func, keyword(call, "other", 1), depth - 1)
            if operands and operands <= {"int8", "uint8"}:
                return {"int32"}
            return {"float64"} if operands == {"float64"} else {"float32"}
        if leaf in TL_INT or name == "int":
            return {"int32"}
        if name == "float":
            return {"float32"}
        if leaf in ("rand", "randn"):
            return {"float32"}
        if leaf in TL_FLOAT or name.startswith(TL + "extra.") or ".libdevice." in f".{name}.":
            first = self._raw(func, args[0], depth - 1) if args else {UNKNOWN}
            return {"float32" if t in INT_RANK or t == SCALAR else t for t in first}
        if leaf in TL_SAME and args:
            return set(self._raw(func, args[1] if leaf.startswith("atomic_") and len(args) > 1 else args[0],
                                  depth - 1))
        if leaf in TL_JOIN and args:
            found = set(self._raw(func, args[0], depth - 1))
            for other in args[1:]:
                found = {promote(a, b) for a in found for b in self._raw(func, other, depth - 1)}
            return found
        if leaf == "where" and len(args) >= 3:
            return self._binary(func, args[1], args[2], depth)
        if leaf is None and isinstance(call.func, cst.Attribute) and call.func.attr.value in METHOD_SAME:
            return set(self._raw(func, call.func.value, depth - 1))
        return helper_returns(model, call, lambda helper, value: self._raw(helper, value, depth - 1))
