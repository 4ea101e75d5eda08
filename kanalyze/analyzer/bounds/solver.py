"""Asking z3, within a budget: one question, many questions at once, the smallest model.

"unsat" is a proof (under the stated ranges), "sat" a model, and a question
the solver gives up on is "unknown".  Limits are z3 resource counts, so that
an answer does not depend on how loaded the machine is.  `facts` gathers what
is known about the symbols a question mentions (symbols.py); the two
questions themselves are in checks.py.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import z3

from kanalyze.analyzer.bounds.symbols import Env, disjunction, variables


@dataclass
class Settings:
    """Limits are z3 resource counts (`rlimit`), not seconds, so that a verdict does
    not depend on how loaded the machine is.  On the fixture corpus the costliest
    query used 5e6 (about 30 ms); 1e8 is roughly 0.3 to 1 s of one core."""

    max_size: int = 2**20           # MEM003: every runtime size in [1, max_size]
    max_numel: int = 2**32          # MEM004: every tensor of at most max_numel elements
    rlimit: int = 50_000_000        # one question
    search_rlimit: int = 10_000_000  # one step of the counterexample minimisation
    file_rlimit: int = 2_000_000_000  # all questions of one file
    timeout_ms: int = 10_000        # wall-clock safety net for one question


@dataclass
class Budget:
    settings: Settings
    started: float = field(default_factory=time.perf_counter)
    queries: int = 0
    screened: int = 0               # questions the Python screen proved (no query)
    timeouts: int = 0
    solver_seconds: float = 0.0
    spent: int = 0                  # rlimit used so far
    # Answers by question (the ids of its assertions; z3 shares identical terms): a
    # kernel launched from two wrappers asks the same questions twice.
    answers: dict = field(default_factory=dict)
    # The smallest wrap found for an operation (by id), whichever launch found it first.
    wraps: dict = field(default_factory=dict)
    solver: object = None           # the file's incremental solver (solver_of)
    rlimit_seen: int = 0            # its "rlimit count" after the last question

    def remaining(self) -> int:
        return self.settings.file_rlimit - self.spent


@dataclass
class Verdict:
    status: str                         # proved | violated | unknown
    reason: str = ""
    counterexample: dict | None = None
    objective: int | None = None        # the size the counterexample was minimised on
    node: object = None                 # MEM004: the operation that wraps


def solver_of(budget: "Budget") -> z3.Solver:
    """The file's one incremental solver: each question is pushed, checked and popped.

    z3's per-question set-up (a new solver, a tactic applied to every assertion)
    cost about 1.3 ms, more than most questions take to answer: on the fixture
    corpus one solver for all questions of a file measured 1.6x faster in total
    than a fresh tactic solver per question, with the same verdicts.  It belongs
    to the file's z3 context (bounds_symbols.fresh_context), as the budget does."""
    if budget.solver is None:
        budget.solver = z3.SimpleSolver()
    return budget.solver


def solve(assertions: list, budget: Budget, rlimit: int | None = None, given: int = 0):
    """("sat" | "unsat" | "unknown", model).  `given`: how many of the first
    assertions the solver holds already, in the scope `asserted` opened for them."""
    key = tuple(sorted(a.get_id() for a in assertions))
    if key in budget.answers:
        return budget.answers[key][1:]
    limit = min(rlimit or budget.settings.rlimit, budget.remaining())
    if limit <= 0:
        return "unknown", None
    s = solver_of(budget)
    s.push()
    try:
        s.set("rlimit", limit)   # per check, counted from where the solver stands
        s.set("timeout", budget.settings.timeout_ms)
        for assertion in assertions[given:]:
            _assert(s, assertion)
        started = time.perf_counter()
        result = s.check()
        model = s.model() if result == z3.sat else None
        budget.solver_seconds += time.perf_counter() - started
    finally:
        s.pop()
    count = _rlimit_count(s)
    budget.spent += limit if count is None else count - budget.rlimit_seen  # the count is the solver's total
    budget.rlimit_seen = count if count is not None else budget.rlimit_seen
    budget.queries += 1
    status = "sat" if result == z3.sat else "unsat" if result == z3.unsat else "unknown"
    if status == "unknown":
        budget.timeouts += 1
    else:  # a timeout is not an answer: a later question with more time may get one
        budget.answers[key] = (assertions, status, model)
    return status, model


def _assert(s: z3.Solver, assertion) -> None:
    if isinstance(assertion, z3.BoolRef):  # z3's `add` checks and converts each one in Python first
        z3.z3core.Z3_solver_assert(s.ctx.ref(), s.solver, assertion.as_ast())
    else:
        s.add(assertion)


@contextmanager
def asserted(assertions: list, budget: Budget):
    """The file's solver holding `assertions` in a scope of their own, for a series
    of questions that each add a condition to them (`solve(assertions + [c], budget,
    given=len(assertions))`): z3 takes them in once, not once a question.  Nothing
    else may ask the solver inside it."""
    s = solver_of(budget)
    s.push()
    try:
        for assertion in assertions:
            _assert(s, assertion)
        yield
    finally:
        s.pop()


def _rlimit_count(s: z3.Solver) -> int | None:
    """The solver's "rlimit count" statistic.  `Statistics.keys()` and `get_key_value`
    walk every entry in Python (0.5 ms a question); this reads from the end, where
    z3 lists it."""
    ctx, stats = s.ctx.ref(), s.statistics().stats
    for i in range(z3.z3core.Z3_stats_size(ctx, stats) - 1, -1, -1):
        if z3.z3core.Z3_stats_get_key(ctx, stats, i) == "rlimit count":
            return z3.z3core.Z3_stats_get_uint_value(ctx, stats, i) if z3.z3core.Z3_stats_is_uint(ctx, stats, i) \
                else int(z3.z3core.Z3_stats_get_double_value(ctx, stats, i))
    return None


def minimize(assertions: list, objective, model, budget: Budget, *, floor: int = 0,
             precision: int | None = None) -> tuple[object, bool]:
    """A model with a small `objective`; True when it is the least.

    MEM003's smallest counterexamples are a few elements: the search gallops up
    from `floor` (the least the objective can be), 2x at a time, then bisects.
    MEM004's are around 2^31 elements: it bisects down from the first model and
    stops once the bracket is within 2^-precision of the value (a 16 GiB witness
    need not be minimal to the element)."""

    def probe(given: int):
        return lambda bound: solve(assertions + [objective <= bound], budget, budget.settings.search_rlimit, given)

    if precision is None:
        return _search(objective, model, floor, precision, probe(0))
    # MEM004's search: 1 to 6 questions of the same assertions (and a bound), held once.
    # On the fixture corpus this took the search's z3 time from 0.7 s to 0.55 s.
    with asserted(assertions, budget):
        return _search(objective, model, floor, precision, probe(len(assertions)))


def _search(objective, model, floor: int, precision: int | None, probe_status) -> tuple[object, bool]:
    """minimize's bracket: `probe_status(bound)` asks for a model with `objective <= bound`."""
    best = model
    high = model.eval(objective, model_completion=True).as_long()
    low = floor
    if precision is None:  # gallop: floor, 2*floor, 4*floor, ... until one is feasible
        step = max(floor, 1)
        while low < high:
            probe = min(low + step, high - 1) if step < high - low else high - 1
            status, found = probe_status(probe)
            if status == "sat":
                best, high = found, found.eval(objective, model_completion=True).as_long()
                break
            if status != "unsat":
                return best, False
            low, step = probe + 1, step * 2
    elif high > low:  # the first model is often within the precision already: one probe says so
        probe = high - max(1, high >> precision)
        status, found = probe_status(probe)
        if status != "sat":
            return best, False
        best, high = found, found.eval(objective, model_completion=True).as_long()
    while low < high:
        if precision is not None and high - low <= high >> precision:
            return best, False
        middle = (low + high) // 2
        status, found = probe_status(middle)
        if status == "sat":
            best, high = found, found.eval(objective, model_completion=True).as_long()
        elif status == "unsat":
            low = middle + 1
        else:
            return best, False
    return best, True


def facts(env: Env, terms: list, mode: str, settings: Settings) -> list:
    """The facts about every symbol `terms` mention, transitively: ranges of
    sizes, program ids within the grid, lanes within their tile, loop bounds,
    preconditions (asserts, views), and for MEM004 the size of each tensor.

    The answer depends only on which symbols `terms` mention (and on the launch's
    symbols, facts and tensors so far): it is kept on the Env by that set, so that
    the many questions about one access build these z3 terms once."""
    limit = settings.max_size if mode == "bounds" else settings.max_numel
    names = frozenset(variables(*terms))
    key = (mode, limit, settings.max_numel, names, len(env.symbols), len(env.facts), len(env.tensors))
    memo = env.__dict__.setdefault("_facts_memo", {})
    if key not in memo:
        memo[key] = _facts(env, names, mode, settings, limit)
    return list(memo[key])


def _facts(env: Env, names: frozenset, mode: str, settings: Settings, limit: int) -> list:
    candidates = _candidates(env, mode, settings)
    used = [False] * len(candidates)
    seen: set[str] = set()
    pending = set(names)
    found: list = []
    while pending:
        seen |= pending
        fresh: set[str] = set()
        for name in sorted(pending):  # a fixed order: the same question each run
            symbol = env.symbols.get(name)
            if symbol is None:
                continue
            if symbol.kind in ("size", "free") and isinstance(symbol.term, z3.ArithRef):
                found += _size_range(env, symbol, limit)
            found += symbol.facts
            fresh |= variables(*symbol.facts) if symbol.facts else set()
        for i, (fact, fact_names) in enumerate(candidates):
            if not used[i] and fact_names & seen:
                used[i] = True
                found.append(fact)
                fresh |= fact_names
        pending = fresh - seen
    return found


def _candidates(env: Env, mode: str, settings: Settings) -> list:
    """(fact, its symbols) for the launch's preconditions and, for MEM004, its tensors' sizes."""
    key = ("candidates", mode, settings.max_numel, len(env.facts), len(env.tensors))
    memo = env.__dict__.setdefault("_facts_memo", {})
    if key not in memo:
        candidates = [(f, variables(f)) for f in env.facts]
        if mode == "overflow":
            candidates += [(t.numel <= settings.max_numel, variables(t.numel)) for t in env.tensors
                           if variables(t.numel)]
        memo[key] = candidates
    return memo[key]


def _size_range(env: Env, symbol, limit: int) -> list:
    """[1 <= size, size <= limit], made once per symbol and limit."""
    memo = env.__dict__.setdefault("_facts_memo", {})
    key = ("range", symbol.name, limit)
    if key not in memo:
        memo[key] = [symbol.term >= 1, symbol.term <= limit]
    return memo[key]


def discover(disjuncts: dict, budget: Budget) -> tuple[dict, list]:
    """Which of many questions have a "yes": one question while none has (the common
    case), then one more per round of answers.  ({key found: a model of its own
    question}, keys left unknown): the model spares asking that question again."""
    found: dict = {}
    remaining = list(disjuncts)
    while remaining:
        status, model = solve([disjunction([disjuncts[k] for k in remaining])], budget)
        if status == "unsat":
            return found, []
        if status == "unknown":
            return found, remaining
        hits = [k for k in remaining if z3.is_true(model.eval(disjuncts[k], model_completion=True))]
        if not hits:  # cannot happen for a model of the disjunction; never loop on it
            return found, remaining
        found.update((k, model) for k in hits)
        remaining = [k for k in remaining if k not in hits]
    return found, []


__all__ = ["Budget", "Settings", "Verdict", "discover", "facts", "minimize", "solve"]
