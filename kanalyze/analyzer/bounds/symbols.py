"""Symbols of the bounds proofs: sizes, program ids, lanes, loop iterations, as z3 constants.

`Env` is the symbol table of one launch configuration, with the facts that
define each symbol (a program id lies in the grid, `pow2(n)` is
`triton.next_power_of_2(n)`, a loop iteration keeps the loop running) and the
approximations made (free symbols, each with the reason).  The helpers below
read z3 terms: which symbols a term mentions, whether it is a constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import z3

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# Triton refuses tiles of more elements than this (TRITON_MAX_TENSOR_NUMEL).
MAX_TILE = 2**20


class Unsupported(Exception):
    """A construct the extraction does not model: the access is "unknown"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def literal_value(expr):
    """The value of a string literal node; Unsupported where Python refuses the
    literal (`b"é"`, `"\\N{no such name}"`) and LibCST raises computing it."""
    try:
        return expr.evaluated_value
    except (SyntaxError, ValueError) as exc:
        raise Unsupported(f"a string literal Python refuses ({exc})") from None


@dataclass
class Symbol:
    name: str
    term: z3.ExprRef
    # size: a runtime size the wrapper reads (a dimension, a numel, an integer argument)
    # free: a value the extraction could not model (an over-approximation)
    # pow2: triton.next_power_of_2(...) of a size; pid, lane, iter: kernel-side
    kind: str
    label: str
    facts: list = field(default_factory=list)


class Env:
    """Symbols of one launch configuration, and the facts that define them."""

    def __init__(self) -> None:
        self.symbols: dict[str, Symbol] = {}
        self.facts: list[z3.BoolRef] = []      # preconditions: asserts, view divisibility
        self.free_reasons: dict[str, str] = {}
        self.shown: list[tuple[str, z3.ArithRef]] = []  # loop variables worth naming in a counterexample
        self.tensors: list = []                          # every tensor of the launch (MEM004 bounds their size)

    def symbol(self, name: str, kind: str, label: str | None = None, *, boolean: bool = False,
               facts: Callable[[z3.ExprRef], list] | None = None) -> z3.ExprRef:
        found = self.symbols.get(name)
        if found is not None:
            return found.term
        term = z3.Bool(name) if boolean else z3.Int(name)
        symbol = Symbol(name, term, kind, label or name)
        self.symbols[name] = symbol
        if facts is not None:
            symbol.facts = list(facts(term))
        return term

    def free(self, reason: str, *, boolean: bool = False) -> z3.ExprRef:
        """An unknown value: any value is possible, so a proof over it still holds,
        but a counterexample that uses it is not concrete."""
        name = f"?{len(self.free_reasons)}"
        self.free_reasons[name] = reason
        return self.symbol(name, "free", reason, boolean=boolean)

    def pow2(self, of: z3.ArithRef, label: str) -> z3.ArithRef:
        """`triton.next_power_of_2(of)`: the power of two P with of <= P < 2*of."""
        def facts(p):
            return [z3.Or([p == 2**i for i in range(0, 41)]), p >= of, z3.Or(p == 1, p < 2 * of)]
        return self.symbol(f"pow2({label})", "pow2", f"next_power_of_2({label})", facts=facts)

    def add_fact(self, fact: z3.BoolRef) -> None:
        self.facts.append(fact)


# id of a z3 term → (the term, kept alive so that the id is not reused; its names).
# Walking z3 terms through the Python API is slow and the proofs ask about the
# same subterms again and again; `fresh_context()` empties it per file.
_VARIABLES: dict[int, tuple] = {}
# Every cache keyed by term ids (this one, screen.py's): ids belong to a context.
TERM_CACHES: list = [_VARIABLES]


def fresh_context() -> None:
    """A new z3 context for each file.  Which model z3 returns among many depends on
    the order terms were created in; with a context of its own, a file gives the
    same counterexample whatever was analyzed before it in the process."""
    for cache in TERM_CACHES:
        cache.clear()
    z3.z3._main_ctx = None  # z3.main_ctx() makes the next one


def variables(*terms: z3.ExprRef) -> set[str]:
    """Names of the uninterpreted constants in `terms`."""
    found: set[str] = set()
    for term in terms:
        found |= _variables(term)
    return found


def _variables(root: z3.ExprRef) -> frozenset:
    cached = _VARIABLES.get(root.get_id())
    if cached is not None:
        return cached[1]
    # Post-order without recursion, over z3's raw C handles: wrapping every subterm
    # in an ExprRef (reference counts, sort checks) cost ten times the walk itself.
    # Subterms stay alive with their root, which the cache keeps.
    ctx = root.ctx_ref()
    stack = [(root.as_ast(), False)]
    while stack:
        ast, expanded = stack.pop()
        key = _ast_id(ctx, ast)
        if key in _VARIABLES:
            continue
        if _ast_kind(ctx, ast) != z3.Z3_APP_AST:  # a numeral
            _VARIABLES[key] = (None, frozenset())
            continue
        count = _num_args(ctx, ast)
        if count == 0:
            decl = _app_decl(ctx, ast)
            names = frozenset([_symbol_string(ctx, _decl_name(ctx, decl))]) \
                if _decl_kind(ctx, decl) == z3.Z3_OP_UNINTERPRETED else frozenset()
            _VARIABLES[key] = (None, names)
            continue
        children = [_app_arg(ctx, ast, i) for i in range(count)]
        if not expanded:
            stack.append((ast, True))
            stack.extend((c, False) for c in children if _ast_id(ctx, c) not in _VARIABLES)
            continue
        _VARIABLES[key] = (None, frozenset().union(*(_VARIABLES[_ast_id(ctx, c)][1] for c in children)))
    _VARIABLES[root.get_id()] = (root, _VARIABLES[root.get_id()][1])  # keep the root (and its subterms) alive
    return _VARIABLES[root.get_id()][1]


_ast_id, _ast_kind = z3.z3core.Z3_get_ast_id, z3.z3core.Z3_get_ast_kind
_num_args, _app_arg, _app_decl = z3.z3core.Z3_get_app_num_args, z3.z3core.Z3_get_app_arg, z3.z3core.Z3_get_app_decl
_decl_kind, _decl_name, _symbol_string = (z3.z3core.Z3_get_decl_kind, z3.z3core.Z3_get_decl_name,
                                          z3.z3core.Z3_get_symbol_string)


def reaching(model, function):
    """The ordered reaching definitions of a function, built once per file (every
    launch configuration reads the same wrapper and kernel)."""
    from kanalyze.analyzer.triton.reaching import Reaching

    cache = model.__dict__.setdefault("_bounds_reaching", {})
    if id(function.node) not in cache:
        cache[id(function.node)] = Reaching(model, function)
    return cache[id(function.node)]


def concrete(term) -> int | None:
    """The integer a term always has, if z3's simplifier sees it."""
    if isinstance(term, int):
        return term
    if isinstance(term, z3.ArithRef):
        key = term.get_id()
        if key not in _CONCRETE:  # the same terms are asked about again and again
            simple = term if z3.is_int_value(term) else z3.simplify(term)
            _CONCRETE[key] = (term, simple.as_long() if z3.is_int_value(simple) else None)
        return _CONCRETE[key][1]
    return None


_CONCRETE: dict[int, tuple] = {}   # term id → (the term, kept alive; its value or None)
TERM_CACHES.append(_CONCRETE)


def int_term(value) -> z3.ArithRef:
    return z3.IntVal(value) if isinstance(value, int) else value


def fits32(term) -> z3.BoolRef | bool:
    value = concrete(term)
    if value is not None:
        return INT32_MIN <= value <= INT32_MAX
    return z3.And(term >= INT32_MIN, term <= INT32_MAX)


def either(*values):
    """Or over Python booleans and z3 conditions, simplified where it can be."""
    if any(v is True for v in values):
        return True
    rest = [v for v in values if v is not False]
    return False if not rest else rest[0] if len(rest) == 1 else z3.Or(rest)


def conjunction(terms: list) -> z3.BoolRef:
    """z3.And(terms), the same term, made without z3's per-argument checks and
    conversions in Python (they cost more than the term): the proofs make
    thousands of conjunctions of facts that are z3 conditions already."""
    return _connective(terms, z3.z3core.Z3_mk_and, z3.And)


def disjunction(terms: list) -> z3.BoolRef:
    """z3.Or(terms), made as conjunction() makes z3.And."""
    return _connective(terms, z3.z3core.Z3_mk_or, z3.Or)


def _connective(terms: list, make, fallback) -> z3.BoolRef:
    if not terms or not all(type(t) is z3.BoolRef for t in terms) \
            or any(t.ctx is not terms[0].ctx for t in terms):
        return fallback(terms)  # Python booleans, mixed contexts, nothing: z3 converts or says why
    ctx = terms[0].ctx
    args = (z3.z3.Ast * len(terms))(*(t.as_ast() for t in terms))
    return z3.BoolRef(make(ctx.ref(), len(terms), args), ctx)


def negate(value):
    return (not value) if isinstance(value, bool) else z3.Not(value)
