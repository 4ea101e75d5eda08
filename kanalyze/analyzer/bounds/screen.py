"""A sound screen in front of z3: the common bounds idioms proved in plain Python.

Most accesses are one of a few idioms: `offs = pid * BLOCK + tl.arange(0, BLOCK)`
masked by `offs < n` into a tensor of `n` elements; 2-D tiles
`rm[:, None] * stride + rn[None, :]` masked per dimension into an `M x N`
tensor; int32 arithmetic that stays small.  Asking z3 costs a millisecond or
more per question; these need none.  The screen reads the very question z3
would get (the same z3 terms: offset, extent, mask, path and facts) and tries
to prove it with symbolic bounds:
  - every hypothesis `a < b`, `a <= b`, `a == b` (a conjunct of the mask, the
    path or a symbol's facts) bounds the term `a` above by `b` and `b` below by
    `a`, whatever `a` is: z3 shares identical terms, so the `offs` inside the
    offset and the `offs` of `offs < n` are one term;
  - an upper (lower) bound of a term is a polynomial with rational coefficients
    over the problem's sizes, built bottom-up: sums add bounds, products of
    non-negative factors multiply them, `a / c` and `a % c` by a positive
    constant follow floor division; lanes, program ids and loop iterations are
    replaced by their bounds, sizes stay symbols;
  - a polynomial is non-negative when its monomials are, from each size's
    numeric range (`1 <= n <= max-size` is a fact of the question).
Every step only weakens (a bound of a bound is a bound), so "proved" here is a
proof of the question; anything else ("not proved") goes to z3 unchanged.
tests/test_bounds_screen.py checks it against z3 on every fixture question.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import z3

from kanalyze.analyzer.bounds.symbols import INT32_MAX, INT32_MIN, TERM_CACHES

# ast id → ("num", value) | ("var", name) | (op kind, child ids) | ("bool", op kind, child ids, int operands)
_NODES: dict[int, tuple] = {}
_ROOTS: list = []   # the terms read: alive, so that no id in _NODES is reused by another term
_VARIABLE_IDS: dict[str, int] = {}   # variable name → its id
TERM_CACHES.extend([_NODES, _ROOTS, _VARIABLE_IDS])

_MAX_CANDIDATES = 4    # bounds kept per term (a mask bound and the term's own, mostly)
_MAX_DEPTH = 12        # bounds of bounds followed at most this deep

_ARITH = {z3.Z3_OP_ADD, z3.Z3_OP_SUB, z3.Z3_OP_MUL, z3.Z3_OP_UMINUS, z3.Z3_OP_IDIV, z3.Z3_OP_DIV,
          z3.Z3_OP_MOD, z3.Z3_OP_ITE}
_COMPARE = {z3.Z3_OP_LT, z3.Z3_OP_LE, z3.Z3_OP_GT, z3.Z3_OP_GE, z3.Z3_OP_EQ}

_ast_id, _ast_kind = z3.z3core.Z3_get_ast_id, z3.z3core.Z3_get_ast_kind
_num_args, _app_arg, _app_decl = z3.z3core.Z3_get_app_num_args, z3.z3core.Z3_get_app_arg, z3.z3core.Z3_get_app_decl
_decl_kind, _decl_name, _symbol_string = (z3.z3core.Z3_get_decl_kind, z3.z3core.Z3_get_decl_name,
                                          z3.z3core.Z3_get_symbol_string)
_numeral, _get_sort, _sort_kind = z3.z3core.Z3_get_numeral_string, z3.z3core.Z3_get_sort, z3.z3core.Z3_get_sort_kind


def _read(term) -> int:
    """The id of `term`, with it and its subterms in _NODES (z3's raw handles: fast)."""
    key = term.get_id()
    if key in _NODES:
        return key
    _ROOTS.append(term)
    ctx = term.ctx_ref()
    stack = [term.as_ast()]
    while stack:
        ast = stack.pop()
        key = _ast_id(ctx, ast)
        if key in _NODES:
            continue
        if _ast_kind(ctx, ast) == z3.Z3_NUMERAL_AST:
            _NODES[key] = ("num", int(_numeral(ctx, ast)))
            continue
        if _ast_kind(ctx, ast) != z3.Z3_APP_AST:
            _NODES[key] = ("other",)
            continue
        decl = _app_decl(ctx, ast)
        kind = _decl_kind(ctx, decl)
        count = _num_args(ctx, ast)
        if count == 0:
            name = _symbol_string(ctx, _decl_name(ctx, decl))
            _NODES[key] = ("var", name) if kind == z3.Z3_OP_UNINTERPRETED else ("other",)
            if kind == z3.Z3_OP_UNINTERPRETED:
                _VARIABLE_IDS[name] = key
            continue
        children = [_app_arg(ctx, ast, i) for i in range(count)]
        ids = tuple(_ast_id(ctx, c) for c in children)
        if kind in _COMPARE:
            ints = _sort_kind(ctx, _get_sort(ctx, children[0])) == z3.Z3_INT_SORT
            _NODES[key] = ("bool", kind, ids, ints)
        elif kind in (z3.Z3_OP_AND, z3.Z3_OP_NOT):
            _NODES[key] = ("bool", kind, ids, False)
        elif kind in _ARITH:
            _NODES[key] = (kind, ids)
        else:
            _NODES[key] = ("other",)
            continue
        stack.extend(children)
    return term.get_id()


# --- polynomials: {monomial (sorted names): coefficient} ------------------------

def _const(value) -> dict:
    return {(): Fraction(value)} if value else {}


def _add(a: dict, b: dict, sign: int = 1) -> dict:
    out = dict(a)
    for mono, coef in b.items():
        value = out.get(mono, 0) + sign * coef
        if value:
            out[mono] = value
        else:
            out.pop(mono, None)
    return out


def _scale(a: dict, factor) -> dict:
    return {mono: coef * factor for mono, coef in a.items()} if factor else {}


def _mul(a: dict, b: dict) -> dict:
    out: dict = {}
    for (ma, ca), (mb, cb) in product(a.items(), b.items()):
        out = _add(out, {tuple(sorted(ma + mb)): ca * cb})
    return out


def _constant_of(p: dict):
    return None if any(p.keys() - {()}) else p.get((), Fraction(0))


class Question:
    """One question's hypotheses as bounds on terms, and the bounds they give."""

    def __init__(self, hypotheses: list, eliminated: set[str]) -> None:
        self.upper: dict[int, list] = {}   # term id → [(bound term id, added constant)]
        self.lower: dict[int, list] = {}
        self.eliminated = eliminated       # variables replaced by their bounds (lanes, pids, iterations)
        self.ranges: dict[str, tuple] = {}
        self.monomials: dict[tuple, tuple] = {}
        self.memo: dict[tuple, list] = {}   # (term id, upper) → its bounds; [] while being computed
        for hypothesis in hypotheses:
            self._assume(_read(hypothesis), True)

    def _assume(self, key: int, holds: bool) -> None:
        node = _NODES[key]
        if node[0] != "bool":
            return
        _, kind, args, ints = node
        if kind == z3.Z3_OP_AND and holds:
            for arg in args:
                self._assume(arg, True)
        elif kind == z3.Z3_OP_NOT:
            self._assume(args[0], not holds)
        elif ints and len(args) == 2:
            a, b = args
            if kind == z3.Z3_OP_EQ:
                if holds:
                    self._bound(a, b, 0)
                    self._bound(b, a, 0)
                return
            if kind in (z3.Z3_OP_GT, z3.Z3_OP_GE):
                a, b = b, a
                kind = z3.Z3_OP_LT if kind == z3.Z3_OP_GT else z3.Z3_OP_LE
            if holds:   # a < b: a <= b - 1;  a <= b
                self._bound(a, b, -1 if kind == z3.Z3_OP_LT else 0)
            else:       # not a < b: b <= a;  not a <= b: b <= a - 1
                self._bound(b, a, 0 if kind == z3.Z3_OP_LT else -1)

    def _bound(self, small: int, large: int, delta: int) -> None:
        """small <= large + delta."""
        self.upper.setdefault(small, []).append((large, delta))
        self.lower.setdefault(large, []).append((small, -delta))

    # --- symbolic bounds ---------------------------------------------------------

    def bounds(self, key: int, upper: bool, depth: int = 0) -> list[dict]:
        """Polynomials p with term <= p (upper) or term >= p, under the hypotheses.
        Fewer bounds only make the screen say "not proved": a cycle of hypotheses
        (`a == b`) or a deep chain is cut short."""
        if depth > _MAX_DEPTH:
            return []
        memo_key = (key, upper)
        if memo_key not in self.memo:
            self.memo[memo_key] = []   # a cycle back to this term finds no bound
            self.memo[memo_key] = self._bounds(key, upper, depth)
        return self.memo[memo_key]

    def _bounds(self, key: int, upper: bool, depth: int) -> list[dict]:
        node = _NODES[key]
        found: list[dict] = []
        if node[0] == "num":
            return [_const(node[1])]
        if node[0] == "var" and node[1] not in self.eliminated:
            return [{(node[1],): Fraction(1)}]
        for other, delta in (self.upper if upper else self.lower).get(key, ()):
            found += [_add(p, _const(delta)) for p in self.bounds(other, upper, depth + 1)]
            if len(found) >= _MAX_CANDIDATES:
                return found[:_MAX_CANDIDATES]
        if node[0] != "var":
            found += self._structural(node, upper, depth + 1)
        return found[:_MAX_CANDIDATES]

    def _structural(self, node: tuple, upper: bool, depth: int) -> list[dict]:
        kind, args = node[0], node[1] if len(node) > 1 else ()
        if kind == z3.Z3_OP_ADD:
            return self._combine([self.bounds(a, upper, depth) for a in args], _add)
        if kind == z3.Z3_OP_SUB and len(args) == 2:
            return [_add(p, q, -1) for p, q in self._pairs(self.bounds(args[0], upper, depth),
                                                            self.bounds(args[1], not upper, depth))]
        if kind == z3.Z3_OP_UMINUS:
            return [_scale(p, -1) for p in self.bounds(args[0], not upper, depth)]
        if kind == z3.Z3_OP_MUL:
            return self._product(args, upper, depth)
        if kind in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV) and len(args) == 2:
            c = _NODES[args[1]]
            if c[0] != "num" or c[1] <= 0:
                return []
            # floor(a / c) <= a / c, and >= (a - c + 1) / c
            return [_scale(p if upper else _add(p, _const(1 - c[1])), Fraction(1, c[1]))
                    for p in self.bounds(args[0], upper, depth)]
        if kind == z3.Z3_OP_MOD and len(args) == 2:
            c = _NODES[args[1]]
            if c[0] != "num" or c[1] <= 0:
                return []
            return [_const(c[1] - 1)] if upper else [_const(0)]
        if kind == z3.Z3_OP_ITE:
            # the larger (smaller) of the two branches' bounds, where one provably is
            found = []
            for p, q in self._pairs(self.bounds(args[1], upper, depth), self.bounds(args[2], upper, depth)):
                difference = _add(p, q, -1) if upper else _add(q, p, -1)
                if self.nonnegative(difference):
                    found.append(p)
                elif self.nonnegative(_scale(difference, -1)):
                    found.append(q)
            return found
        return []

    def _product(self, args: tuple, upper: bool, depth: int) -> list[dict]:
        """Constants scale; other factors multiply only when non-negative."""
        scale, factors = Fraction(1), []
        for a in args:
            if _NODES[a][0] == "num":
                scale *= _NODES[a][1]
            else:
                factors.append(a)
        if not factors:
            return [_const(scale)]
        if len(factors) == 1:
            flip = scale < 0
            return [_scale(p, scale) for p in self.bounds(factors[0], upper != flip, depth)]
        if scale < 0:
            return []
        for a in factors:  # every factor must be provably >= 0
            if not any(self.nonnegative(p) for p in self.bounds(a, False, depth)):
                return []
        parts = [self.bounds(a, upper, depth) for a in factors]
        if not upper:
            parts = [[p for p in part if self.nonnegative(p)] for part in parts]
        return [_scale(p, scale) for p in self._combine(parts, _mul)]

    @staticmethod
    def _pairs(a: list, b: list) -> list:
        return list(product(a, b))[:_MAX_CANDIDATES]

    @staticmethod
    def _combine(parts: list[list], op) -> list[dict]:
        combined = [{}] if op is _add else [_const(1)]
        for part in parts:
            combined = [op(p, q) for p, q in product(combined, part)][:_MAX_CANDIDATES]
        return combined

    # --- signs -------------------------------------------------------------------

    def nonnegative(self, p: dict) -> bool:
        """p >= 0 for every value of its variables in their numeric ranges."""
        low = self._numeric(p, False)
        return low is not None and low >= 0

    def _monomial(self, mono: tuple) -> tuple:
        """Numeric (least, greatest) of a product of kept variables, each >= 0; None
        where unknown.  Also `M*N + M*N <= c` bounds the monomial M*N itself."""
        if mono not in self.monomials:
            self.monomials[mono] = (None, None)  # while it is computed: unknown (no cycles)
            low = high = Fraction(1)
            for name in mono:
                lo, hi = self._range(name)
                if lo is None or lo < 0:
                    return self.monomials[mono]
                low *= lo
                high = high * hi if hi is not None and high is not None else None
            highs = ([high] if high is not None else []) + (self._sum_bounds(mono) if len(mono) > 1 else [])
            self.monomials[mono] = (low, min(highs) if highs else None)
        return self.monomials[mono]

    def _range(self, name: str) -> tuple:
        """Numeric (least, greatest) of a kept variable, from hypotheses `n >= 1`, `n <= 4096`."""
        if name not in self.ranges:
            self.ranges[name] = (None, None)  # while it is computed: unknown (no cycles)
            key = _VARIABLE_IDS.get(name)
            lows = [_constant_of(p) for p in self._var_bounds(key, False)]
            highs = [_constant_of(p) for p in self._var_bounds(key, True)]
            highs += self._sum_bounds((name,))
            lows, highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
            self.ranges[name] = (max(lows) if lows else None, min(highs) if highs else None)
        return self.ranges[name]

    def _sum_bounds(self, mono: tuple) -> list:
        """From `s <= c` where s >= a*mono + rest (a > 0, rest bounded below): mono <= (c - rest) / a.
        MEM004's facts say `M * N <= max-numel` (a tensor's size): that bounds M*N."""
        found = []
        for small, bounds in self.upper.items():
            node = _NODES[small]
            if node[0] in ("var", "num"):
                continue
            limits = [_NODES[large][1] + delta for large, delta in bounds if _NODES[large][0] == "num"]
            if not limits:
                continue
            for p in self.bounds(small, False, 1):
                coef = p.get(mono, 0)
                rest = {other: c for other, c in p.items() if other != mono}
                rest_low = self._numeric(rest, False) if rest else Fraction(0)
                if coef > 0 and rest_low is not None:
                    found.append((min(limits) - rest_low) / coef)
        return found

    def _var_bounds(self, key: int | None, upper: bool) -> list[dict]:
        if key is None:
            return []
        found = []
        for other, delta in (self.upper if upper else self.lower).get(key, ()):
            node = _NODES[other]
            if node[0] == "num":
                found.append(_const(node[1] + delta))
            else:  # `p >= n` with `n >= 1`: the bound's own numeric range
                for q in self.bounds(other, upper, 1):
                    value = self._numeric(q, upper)
                    if value is not None:
                        found.append(_const(value + delta))
        return found

    def _numeric(self, p: dict, upper: bool):
        """A number >= p (upper) or <= p, from the monomials' ranges; None if unknown."""
        total = Fraction(0)
        for mono, coef in p.items():
            low, high = self._monomial(mono) if mono else (Fraction(1), Fraction(1))
            pick = high if (coef > 0) == upper else low
            if pick is None:
                return None
            total += coef * pick
        return total


def in_bounds(offset, extent, hypotheses: list, eliminated: set[str]) -> bool:
    """True when 0 <= offset < extent follows from the hypotheses (a proof); False
    when the screen cannot tell (z3 decides)."""
    try:
        question = Question(hypotheses, eliminated)
        o, e = _read(offset), _read(extent)
        if not any(question.nonnegative(p) for p in question.bounds(o, False)):
            return False
        return any(question.nonnegative(_add(_add(x, p, -1), _const(-1)))
                   for x in question.bounds(e, False) for p in question.bounds(o, True))
    except (RecursionError, z3.Z3Exception, ZeroDivisionError, ValueError):
        return False


def fits_int32(value, hypotheses: list, eliminated: set[str]) -> bool:
    """True when INT32_MIN <= value <= INT32_MAX follows from the hypotheses."""
    try:
        question = Question(hypotheses, eliminated)
        v = _read(value)
        return any(question.nonnegative(_add(_const(INT32_MAX), p, -1)) for p in question.bounds(v, True)) and \
            any(question.nonnegative(_add(p, _const(INT32_MIN), -1)) for p in question.bounds(v, False))
    except (RecursionError, z3.Z3Exception, ZeroDivisionError, ValueError):
        return False


__all__ = ["fits_int32", "in_bounds"]
