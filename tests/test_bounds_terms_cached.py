"""The shortcuts of the bounds proofs build the very terms z3's own API builds.

`conjunction` / `disjunction` make z3.And / z3.Or through z3's C API (no
per-argument checks in Python); `facts` keeps its answer per set of symbols on
the launch's Env.  Both must give z3 the same question as before, and a fact
added later must never be missed.
"""

from __future__ import annotations

import z3

from kanalyze.analyzer.bounds.solver import Settings, facts
from kanalyze.analyzer.bounds.symbols import Env, conjunction, disjunction, fresh_context


def test_conjunction_and_disjunction_are_z3s_own_terms() -> None:
    fresh_context()
    x, y = z3.Ints("x y")
    terms = [x > 0, y < x, z3.Or(x == 3, y == 4)]
    assert conjunction(terms).eq(z3.And(terms)) and conjunction(terms).get_id() == z3.And(terms).get_id()
    assert disjunction(terms).eq(z3.Or(terms)) and disjunction(terms).get_id() == z3.Or(terms).get_id()
    assert conjunction([x > 0]).eq(z3.And([x > 0]))
    # What is not a list of z3 conditions goes through z3's own conversions.
    assert conjunction([x > 0, True]).eq(z3.And([x > 0, True]))
    assert disjunction([]).eq(z3.Or([]))
    solver = z3.Solver()
    solver.add(conjunction([x > 2, x < 4]))
    assert solver.check() == z3.sat and solver.model().eval(x).as_long() == 3
    fresh_context()


def _uncached(env: Env, terms: list, mode: str, settings: Settings) -> list:
    env.__dict__.pop("_facts_memo", None)
    return facts(env, terms, mode, settings)


def test_facts_are_kept_per_symbol_set_and_follow_new_facts() -> None:
    fresh_context()
    env, settings = Env(), Settings(max_size=64, max_numel=4096)
    n = env.symbol("n", "size")
    m = env.symbol("m", "size")
    k = env.symbol("k", "size")                                # no fact ties it to the others yet
    pid = env.symbol("pid", "pid", facts=lambda p: [p >= 0, p < n])
    env.add_fact(n <= 2 * m)
    for mode in ("bounds", "overflow"):
        first = facts(env, [pid + 1 > 0], mode, settings)
        again = facts(env, [pid * 2 >= 0], mode, settings)     # other terms, the same symbols: kept
        assert [f.get_id() for f in first] == [f.get_id() for f in again]
        assert [f.get_id() for f in first] == [f.get_id() for f in _uncached(env, [pid + 1 > 0], mode, settings)]
        limit = 64 if mode == "bounds" else 4096
        assert any(f.eq(n <= limit) for f in first) and any(f.eq(n <= 2 * m) for f in first)
        assert any(f.eq(m >= 1) for f in first)                # followed through `n <= 2 * m`
    first.append(z3.BoolVal(False))                            # a caller's list is its own
    assert not any(z3.is_false(f) for f in facts(env, [pid > 0], "overflow", settings))
    assert not any(f.eq(k <= 64) for f in facts(env, [pid > 0], "bounds", settings))
    env.add_fact(m < k)                                        # a later fact is not missed
    found = facts(env, [pid > 0], "bounds", settings)
    assert any(f.eq(m < k) for f in found) and any(f.eq(k <= 64) for f in found)
    assert [f.get_id() for f in found] == [f.get_id() for f in _uncached(env, [pid > 0], "bounds", settings)]
    assert not any(f.eq(k <= 64) for f in facts(env, [z3.Int("other") > 0], "bounds", settings))
    fresh_context()


def test_a_search_scope_answers_as_separate_questions_and_is_gone_after() -> None:
    from kanalyze.analyzer.bounds.solver import Budget, asserted, minimize, solve

    fresh_context()
    x, y = z3.Ints("x y")
    held = [x >= 1, y >= 1, x * y >= 1000, x <= 2000, y <= 2000]
    budget = Budget(Settings())
    with asserted(held, budget):
        inside = [solve(held + [x + y <= bound], budget, None, len(held))[0] for bound in (62, 63, 64, 100)]
    assert inside == ["unsat", "unsat", "sat", "sat"]          # x + y >= 2*sqrt(1000) > 63.2
    assert solve([x + y <= 10], budget)[0] == "sat"           # the scope's assertions are gone
    fresh = Budget(Settings())
    assert [solve(held + [x + y <= bound], fresh)[0] for bound in (62, 63, 64, 100)] == inside
    # The search that uses it still brackets: within 1/16 of the least x + y (64).
    status, model = solve(held, fresh)
    found, minimal = minimize(held, x + y, model, fresh, precision=4)
    value = found.eval(x + y).as_long()
    assert 64 <= value and (minimal or value - 64 <= value >> 4)
    fresh_context()
