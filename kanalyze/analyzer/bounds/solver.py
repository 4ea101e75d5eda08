"""Asking z3, within a budget: one question, many questions at once, the smallest model.

"unsat" is a proof (under the stated ranges), "sat" a model, and a question
the solver gives up on is "unknown".  Every budget is a z3 resource count
(`rlimit`), not a clock: the same file gives the same answers, and so the
same findings, on an idle machine and on a loaded one.  A file's questions
share one budget (`proof-rlimit`); once it is spent the rest are not asked
(`Budget.exhausted`), and the proofs report it (proofs.py, KAN003).

The one clock is a watchdog for what the count misses: inside nlsat (offsets that
multiply runtime sizes) z3 can work for a minute on a few 1e5 units.  When the
pipeline gives the file a CPU deadline (`Settings.deadline`, below its CPU budget:
check/analyze.py), a thread (watchdog.py) interrupts the question z3 is working on
once the process's CPU time passes it; that question, and every one after it, is
"unknown" (`Budget.out_of_time`), and KAN003 says the proofs were cut by time.  A
file whose proofs end before the deadline never meets the watchdog: its findings
are the same on any machine.

`facts` gathers what is known about the symbols a question mentions (symbols.py);
the two questions themselves are in checks.py.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import z3

from kanalyze.analyzer.bounds.symbols import Env, disjunction, variables
from kanalyze.analyzer.bounds.watchdog import Watchdog


# z3 resource units all the questions of one file may use (`proof-rlimit`).
DEFAULT_FILE_RLIMIT = 30_000_000
# A question that used more units than this leaves the file's solver slower for the
# next ones (solver_of): the next question outside a search gets a new solver.
RENEW_AFTER = 500_000
# Why an access is "unknown" when z3 was asked and gave up, and when it was not asked.
GAVE_UP = "the solver gave up (resource limit)"
BUDGET_SPENT = "not asked: the file's proof budget (`proof-rlimit`) was spent"
TIME_SPENT = "not asked: the file's proofs ran out of time (short of the per-file CPU budget, `file-timeout`)"


@dataclass
class Settings:
    """Limits are z3 resource counts (`rlimit`), not seconds, so that a verdict does
    not depend on how loaded the machine is; the one clock, `deadline`, is the
    watchdog the module's docstring describes (None: none).  z3 (5.4) counts 1e6
    to 5e6 units a second of one core on these questions, far fewer inside nlsat
    (nonlinear questions: 1e4 a second at worst seen); on the fixture corpus the
    costliest file used 3.4e6 in all, on Liger 1.5e7 but for one file
    (docs/bounds.md)."""

    max_size: int = 2**20           # MEM003: every runtime size in [1, max_size]
    max_numel: int = 2**32          # MEM004: every tensor of at most max_numel elements
    rlimit: int = 10_000_000        # one question
    search_rlimit: int = 2_000_000  # one step of the counterexample minimisation
    file_rlimit: int = DEFAULT_FILE_RLIMIT  # all questions of one file
    deadline: float | None = None   # the watchdog: time.process_time() at which the proofs stop


@dataclass
class Budget:
    settings: Settings
    started: float = field(default_factory=time.perf_counter)
    queries: int = 0
    screened: int = 0               # questions the Python screen proved (no query)
    timeouts: int = 0               # questions z3 gave up on (their rlimit, or the watchdog)
    refused: int = 0                # questions not asked: the file's budget was spent
    out_of_time: bool = False       # the watchdog stopped the proofs (Settings.deadline)
    solver_seconds: float = 0.0
    spent: int = 0                  # rlimit used so far
    # Answers by question (the ids of its assertions; z3 shares identical terms): a
    # kernel launched from two wrappers asks the same questions twice.
    answers: dict = field(default_factory=dict)
    # The smallest wrap found for an operation (by id), whichever launch found it first.
    wraps: dict = field(default_factory=dict)
    solver: object = None           # the file's incremental solver (solver_of)
    renew: bool = False             # the last question was costly: a new solver for the next
    rlimit_seen: int = 0            # the context's "rlimit count" after the last question
    watchdog: Watchdog | None = None  # started at the first question when there is a deadline (close())

    def remaining(self) -> int:
        return self.settings.file_rlimit - self.spent

    def seconds_left(self) -> float | None:
        """CPU seconds left before the watchdog's deadline (None: no deadline)."""
        deadline = self.settings.deadline
        return None if deadline is None else deadline - time.process_time()

    @property
    def exhausted(self) -> bool:
        """Is the file's budget spent, or its time?  Then no question of the file is asked any more.
        Once the count is spent the cut stays a cut by count, whenever the deadline passes."""
        if self.out_of_time or self.remaining() <= 0:
            return True
        left = self.seconds_left()
        self.out_of_time = left is not None and left <= 0
        return self.out_of_time

    def watching(self, s: z3.Solver):
        """Around one check: the watchdog, started at the first, interrupts it past the deadline."""
        if self.settings.deadline is None:
            return nullcontext()
        if self.watchdog is None:
            self.watchdog = Watchdog(self.settings.deadline)
        return self.watchdog.watching(s)

    def close(self) -> None:
        """Stop the watchdog (the file's proofs are over)."""
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None

    def gave_up(self) -> str:
        """Why a question came back "unknown": its own limit, the file's spent budget, or its time."""
        if self.out_of_time:
            return TIME_SPENT
        return BUDGET_SPENT if self.remaining() <= 0 else GAVE_UP


@dataclass
class Verdict:
    status: str                         # proved | violated | unknown
    reason: str = ""
    counterexample: dict | None = None
    objective: int | None = None        # the size the counterexample was minimised on
    node: object = None                 # MEM004: the operation that wraps


def solver_of(budget: "Budget") -> z3.Solver:
    """The file's incremental solver: each question is pushed, checked and popped;
    after a costly question (RENEW_AFTER units), a new one.

    z3's per-question set-up (a new solver, a tactic applied to every assertion)
    cost about 1.3 ms, more than most questions take to answer, and what the
    solver learns on one question helps the next: a new solver per question made
    an Ascend file of Liger 4x slower (grpo_loss.py, 0.6 s → 2.3 s).  But after a
    costly nonlinear question the solver keeps arithmetic atoms and lemmas that
    make later questions slower without z3 counting the work in `rlimit`
    (TritonBench's triton_conv2d_fwd.py did not finish in 150 s); a new solver
    after each such question took that file to 14 s and attention_llama.py from
    11 s to 5.5 s.  It belongs to the file's z3 context
    (bounds_symbols.fresh_context), as the budget does."""
    if budget.solver is None or (budget.renew and budget.solver.num_scopes() == 0):
        budget.solver = z3.SimpleSolver()
        budget.renew = False
    return budget.solver


def solve(assertions: list, budget: Budget, rlimit: int | None = None, given: int = 0):
    """("sat" | "unsat" | "unknown", model).  `given`: how many of the first
    assertions the solver holds already, in the scope `asserted` opened for them."""
    key = tuple(sorted(a.get_id() for a in assertions))
    if key in budget.answers:
        return budget.answers[key][1:]
    wanted = rlimit or budget.settings.rlimit
    limit = min(wanted, budget.remaining())
    if limit <= 0 or budget.exhausted:
        budget.refused += 1
        return "unknown", None
    s = solver_of(budget)
    s.push()
    try:
        s.set("rlimit", limit)   # per check, counted from where the solver stands; no timeout
        for assertion in assertions[given:]:
            _assert(s, assertion)
        started = time.perf_counter()
        with budget.watching(s):
            result = s.check()
        model = s.model() if result == z3.sat else None
        budget.solver_seconds += time.perf_counter() - started
    finally:
        s.pop()
    count = _rlimit_count(s)
    used = limit if count is None else count - budget.rlimit_seen  # the count is the context's total
    budget.spent += used
    budget.renew = budget.renew or used > RENEW_AFTER
    budget.rlimit_seen = count if count is not None else budget.rlimit_seen
    budget.queries += 1
    status = "sat" if result == z3.sat else "unsat" if result == z3.unsat else "unknown"
    if status == "unknown":
        budget.timeouts += 1
        over = budget.exhausted  # past the deadline, this notes it: the watchdog stopped this question
        if limit < wanted and not over:  # cut short by what was left of the file's budget: that budget is spent
            budget.spent = max(budget.spent, budget.settings.file_rlimit)
    else:  # giving up is not an answer: a later question with a larger limit may get one
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


__all__ = ["BUDGET_SPENT", "DEFAULT_FILE_RLIMIT", "GAVE_UP", "TIME_SPENT", "Budget", "Settings", "Verdict", "discover",
           "facts", "minimize", "solve"]
