"""Does the NaN a max/min drops reach an output by no other path?

`fmaxf(m, x[i])` returns `m` for a NaN `x[i]`; whether that matters depends on what
the result feeds.  `NanPaths(cuda).reaches_output(call, function)` answers it per
call: False when every output that reads the dropped result also reads the NaN
another way (the max of a softmax, `expf(x - m)`; the relu6 in `x * relu6(x + 3) / 6`),
following a device helper's `return` into its callers.  Also the vocabulary that
analysis and EXC001 share: the NaN-dropping max/min, the NaN tests, the atomics.
"""

from __future__ import annotations

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.values import walk

# max/min that return the other operand for a NaN one: always, and when an operand is a float
FLOAT_ONLY = {"fmaxf", "fminf", "__hmax", "__hmin", "__hmax2", "__hmin2"}
ANY_TYPE = {"fmax", "fmin", "max", "min", "std::max", "std::min", "::max", "::min", "std::fmax", "std::fmin"}
NAN_TEST_WORDS = ["isnan", "isinf", "isfinite", "__isnanf", "__isinff", "__isnan", "__isinf", "__hisnan", "__hisinf"]

# atomic → the position of the value it writes
ATOMICS = {**{n: 1 for n in ("atomicAdd", "atomicSub", "atomicExch", "atomicMax", "atomicMin", "atomicAdd_block",
                             "atomicAdd_system", "unsafeAtomicAdd", "atomicExch_block", "atomicExch_system")},
           "atomicCAS": 2, "atomicCAS_block": 2, "atomicCAS_system": 2}
_CONTROL_OPERATORS = frozenset({"<", ">", "<=", ">=", "==", "!=", "&&", "||"})
_NAN_FREE_CALLS = frozenset(NAN_TEST_WORDS) | {"std::isnan", "std::isinf", "std::isfinite", "signbit", "sizeof",
                                               "__popc", "__ballot_sync", "__any_sync", "__all_sync"}


class _Def:
    """One value written in a function: `T v = e`, `v = e`, `v += e`, `a[i] = e` (a local
    or `__shared__` array: the array's name), or an output (`out[i] = e` through a
    pointer, `*p = e`, an atomic's value, a device function's `return e`)."""

    __slots__ = ("target", "expr", "compound", "sink", "returned")

    def __init__(self, target: str | None, expr: ts.Node, compound: bool = False, returned: bool = False) -> None:
        self.target, self.expr, self.compound, self.returned = target, expr, compound, returned
        self.sink = target is None


class NanPaths:
    """Whether the NaN a max/min drops reaches an output by no other path, per call.

    Name-level and flow-insensitive, like the rest of the CUDA model: a variable is
    one node whatever its definitions.  For the call `c`:
      - `sources`: what its operands are computed from (the data whose NaN it drops);
      - `carrying`: what holds a NaN of the sources along a path that does not go
        through `c` (not through another NaN-dropping max/min either, nor through a
        comparison, a condition or an index);
      - then from `c` forward: each definition that reads `c`'s result either also
        reads something carrying the NaN (`x * relu6(x + 3) / 6`, `expf(x - m)`,
        `m + logf(sum)`: the NaN is back, the path ends there) or passes the dropped
        result on; an output reached that way is a finding.  A device function's
        return is followed into its callers (a `warp_max` helper's result only ever
        subtracted from the data it reduced is not one); with no caller it counts
        as an output."""

    DEPTH = 4

    def __init__(self, cuda: CudaModule) -> None:
        self.cuda = cuda
        self._defs: dict[int, list[_Def]] = {}
        self._memo: dict[int, bool] = {}
        self._ints: dict[tuple[int, str], bool] = {}

    def reaches_output(self, call: ts.Node, function: CudaFunction, depth: int = 0) -> bool:
        if call.id in self._memo:
            return self._memo[call.id]
        self._memo[call.id] = True  # a call cycle: as before, flagged
        result = self._reaches(call, function, depth)
        self._memo[call.id] = result
        return result

    def _reaches(self, call: ts.Node, function: CudaFunction, depth: int) -> bool:
        defs = self._defs_of(function)
        arguments = call.child_by_field_name("arguments")
        operands = list(arguments.named_children) if arguments is not None else []
        direct = [d for d in defs if d.expr.start_byte <= call.start_byte and call.end_byte <= d.expr.end_byte]
        written = {d.target for d in direct if d.target is not None}
        found: set[str] = set()
        for operand in operands:
            found |= self._reads(operand, function, nan=False)
        sources = self._upstream(found, [d for d in defs if d not in direct], function)
        carrying = self._carrying(sources - written, defs, function, call, written)
        holders: set[str] = set()
        returned = False
        for d in direct:
            reads = self._reads(d.expr, function, nan=True, skip=call, keep=self._holding(holders, call))
            if d.compound and d.target is not None:
                reads.add(d.target)
            # `x = x * fminf(fmaxf(x + 3, 0), 6) / 6`: the x read here is the one before the write
            if reads & (carrying | (sources & {d.target})):
                continue
            if d.sink:
                if not d.returned:
                    return True
                returned = True
            else:
                holders.add(d.target)
        done = {id(d) for d in direct}
        changed = bool(holders)
        while changed:
            changed = False
            for d in defs:
                if id(d) in done:
                    continue
                reads = self._reads(d.expr, function, nan=False)
                if d.compound and d.target is not None:
                    reads.add(d.target)
                if not reads & holders:
                    continue
                done.add(id(d))
                nan_reads = self._reads(d.expr, function, nan=True, keep=self._holding(holders, None))
                if d.compound and d.target is not None:
                    nan_reads.add(d.target)
                if nan_reads & carrying:
                    continue  # the NaN is back in this value
                if d.sink:
                    if not d.returned:
                        return True
                    returned = True
                elif d.target not in holders:
                    holders.add(d.target)
                    changed = True
        if not returned or function.is_kernel:
            return False
        callers = [c for c in self.cuda.calls_named(function.name)
                   if c.function is not None and c.function is not function and c.function.is_device]
        if not callers or depth >= self.DEPTH:
            return True
        return any(self.reaches_output(c.node, c.function, depth + 1) for c in callers)

    def _holding(self, holders: set[str], call: ts.Node | None):
        """Keep a NaN-dropping call's operands open when they hold the dropped result:
        `fmaxf(m + logf(sum), 0.0f)` sums the NaN back in before its own max."""
        def keep(node: ts.Node) -> bool:
            if call is not None and node.start_byte <= call.start_byte and call.end_byte <= node.end_byte:
                return True
            return any(n.type == "identifier" and self.cuda.text(n) in holders for n in walk(node))
        return keep

    def _upstream(self, names: set[str], defs: list[_Def], function: CudaFunction) -> set[str]:
        """`names` and everything their values are computed from."""
        by_target: dict[str, list[_Def]] = {}
        for d in defs:
            if d.target is not None:
                by_target.setdefault(d.target, []).append(d)
        seen = set(names)
        stack = list(names)
        while stack:
            name = stack.pop()
            for d in by_target.get(name, ()):
                for read in self._reads(d.expr, function, nan=False):
                    if read not in seen:
                        seen.add(read)
                        stack.append(read)
        return seen

    def _carrying(self, sources: set[str], defs: list[_Def], function: CudaFunction, call: ts.Node,
                  written: set[str]) -> set[str]:
        carrying = set(sources)
        changed = True
        while changed:
            changed = False
            for d in defs:
                if d.sink or d.target in carrying or d.target in written:
                    continue
                reads = self._reads(d.expr, function, nan=True, skip=call)
                if reads & carrying:
                    carrying.add(d.target)
                    changed = True
        return carrying

    # -- what a function writes and an expression reads ----------------------------

    def _defs_of(self, function: CudaFunction) -> list[_Def]:
        found = self._defs.get(function.node.id)
        if found is not None:
            return found
        cuda = self.cuda
        found = self._defs[function.node.id] = []
        for node in cuda.nodes_in(function, "declaration", "assignment_expression", "return_statement"):
            if node.type == "declaration":
                for variable in cuda.read_declaration(node):
                    if variable.init is not None:
                        found.append(_Def(variable.name, variable.init))
            elif node.type == "assignment_expression":
                right = node.child_by_field_name("right")
                if right is None:
                    continue
                operator = cuda.text(node.child_by_field_name("operator"))
                target = self._target(node.child_by_field_name("left"), function)
                found.append(_Def(target, right, compound=operator != "="))
            elif not function.is_kernel and node.named_children:
                found.append(_Def(None, node.named_children[0], returned=True))
        for call in cuda.calls_in(function, *ATOMICS):
            position = ATOMICS.get(call.name, 1)
            if len(call.args) > position:
                found.append(_Def(None, call.args[position]))
        return found

    def _target(self, left: ts.Node | None, function: CudaFunction) -> str | None:
        """The local a write goes to; None for memory the caller sees (an output)."""
        node, through = left, False
        while node is not None and node.type in ("subscript_expression", "field_expression",
                                                 "parenthesized_expression"):
            if node.type == "field_expression" and cuda_text(self.cuda, node.child_by_field_name("operator")) == "->":
                return None
            through = through or node.type == "subscript_expression"
            node = node.child_by_field_name("argument") if node.type != "parenthesized_expression" else \
                (node.named_children[0] if node.named_children else None)
        if node is None or node.type != "identifier":
            return None
        name = self.cuda.text(node)
        variable = self.cuda.variable(name, function)
        if variable is None:
            return None
        is_param = any(p.name == name for p in function.params)
        if is_param and variable.node.parent is not None and variable.node.parent.type == "reference_declarator":
            return None  # `float& out`: the caller's variable
        if through and not (variable.shared or (variable.dims and not is_param) or
                            (not is_param and self._into_shared(variable, function))):
            return None  # through a pointer: global memory
        if not through and left.type == "field_expression" and variable.ctype.pointers:
            return None
        return name

    def _into_shared(self, variable, function: CudaFunction) -> bool:
        """`float* s = reinterpret_cast<float*>(smem);`: a pointer into `__shared__` memory."""
        if variable.init is None or not variable.ctype.pointers:
            return False
        for node in walk(variable.init):
            if node.type == "identifier":
                other = self.cuda.variable(self.cuda.text(node), function)
                if other is not None and other.shared:
                    return True
        return False

    def _reads(self, expr: ts.Node, function: CudaFunction, nan: bool, skip: ts.Node | None = None,
               keep=None) -> set[str]:
        """The float variables whose values flow into `expr`: not through a comparison,
        a `?:` condition, an index or a NaN test; with `nan`, not through the operands
        of a NaN-dropping max/min either (unless `keep` says they hold the dropped value)."""
        cuda = self.cuda
        found: set[str] = set()
        stack = [expr]
        while stack:
            node = stack.pop()
            if skip is not None and node.id == skip.id:
                continue
            kind = node.type
            if kind == "identifier":
                name = cuda.text(node)
                if not self._integer(function, name):
                    found.add(name)
            elif kind == "subscript_expression":
                argument = node.child_by_field_name("argument")
                if argument is not None:
                    stack.append(argument)
            elif kind == "field_expression":
                argument = node.child_by_field_name("argument")
                if argument is not None:
                    stack.append(argument)
            elif kind == "binary_expression" and cuda.text(node.child_by_field_name("operator")) in _CONTROL_OPERATORS:
                continue
            elif kind == "unary_expression" and cuda.text(node.child_by_field_name("operator")) == "!":
                continue
            elif kind == "conditional_expression":
                stack += [c for c in (node.child_by_field_name("consequence"), node.child_by_field_name("alternative"))
                          if c is not None]
            elif kind in ("sizeof_expression", "string_literal", "number_literal"):
                continue
            elif kind == "call_expression":
                callee = cuda.text(node.child_by_field_name("function"))
                arguments = node.child_by_field_name("arguments")
                args = list(arguments.named_children) if arguments is not None else []
                if callee in _NAN_FREE_CALLS:
                    continue
                if nan and callee in (FLOAT_ONLY | ANY_TYPE) and not (keep is not None and keep(node)):
                    continue
                if callee.startswith("__shfl") and len(args) > 1:
                    args = [args[1]]
                stack += args
            else:
                stack.extend(node.named_children)
        return found

    def _integer(self, function: CudaFunction, name: str) -> bool:
        """Does `name` hold no NaN of the data (not a variable, an integer, a kernel's scalar argument)?"""
        key = (function.node.id, name)
        known = self._ints.get(key)
        if known is None:
            variable = self.cuda.variable(name, function)
            if variable is None:  # a macro (`INFINITY`), an enumerator, a function name
                self._ints[key] = True
                return True
            scalar = not variable.dims and variable.ctype.pointers == 0
            # a kernel's scalar arguments are sizes and hyperparameters (a scale, a clamp bound): NaN-free
            known = self._ints[key] = scalar and (variable.ctype.base in ("int", "bool") or function.is_kernel and any(
                p is variable for p in function.params))
        return known


def cuda_text(cuda: CudaModule, node: ts.Node | None) -> str:
    return cuda.text(node) if node is not None else ""
