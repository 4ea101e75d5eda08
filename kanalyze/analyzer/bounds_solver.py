"""Asking z3 the two questions, within a time budget, and reading counterexamples.

MEM003: is there a size in range, a program of the grid, a lane and a loop
iteration where the mask lets an offset outside [0, extent) through?
MEM004: is there a tensor of at most `max-numel` elements for which an int32
operation of the offset (or mask) arithmetic leaves [-2^31, 2^31)?
"unsat" is a proof (under the stated ranges); "sat" gives a counterexample,
made small by binary search on the sizes; a timeout is "unknown".  A model
that uses an approximation (a free symbol: an unread grid, an unmodeled
condition) is not a counterexample: the answer is "unknown" then too.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import z3

from kanalyze.analyzer.bounds_kernel import AccessTerms
from kanalyze.analyzer.bounds_launch import BoundLaunch
from kanalyze.analyzer.bounds_terms import (MAX_TILE, Env, broadcast, int_term, is_one, lane_vars,
                                            project, variables)


@dataclass
class Settings:
    max_size: int = 2**20        # MEM003: every runtime size in [1, max_size]
    max_numel: int = 2**32       # MEM004: every tensor of at most max_numel elements
    timeout_ms: int = 2000       # one solver query
    search_timeout_ms: int = 200  # one step of the counterexample minimisation
    file_budget_s: float = 20.0  # all queries of one file


@dataclass
class Budget:
    settings: Settings
    started: float = field(default_factory=time.perf_counter)
    queries: int = 0
    timeouts: int = 0
    solver_seconds: float = 0.0

    def remaining_ms(self) -> int:
        return int((self.settings.file_budget_s - (time.perf_counter() - self.started)) * 1000)


@dataclass
class Verdict:
    status: str                         # proved | violated | unknown
    reason: str = ""
    counterexample: dict | None = None
    objective: int | None = None        # the size the counterexample was minimised on
    node: object = None                 # MEM004: the operation that wraps


def new_solver() -> z3.Solver:
    # The nonlinear-integer logic: measured about twice as fast as the default
    # solver on the fixture corpus (products of sizes are the common case).
    return z3.SolverFor("QF_NIA")


def solve(assertions: list, budget: Budget, timeout_ms: int | None = None, solver: z3.Solver | None = None):
    """("sat" | "unsat" | "unknown", model)."""
    limit = min(timeout_ms or budget.settings.timeout_ms, budget.remaining_ms())
    if limit <= 0:
        return "unknown", None
    s = solver or new_solver()
    s.set("timeout", limit)
    if solver is not None:
        s.push()
    s.add(assertions)
    started = time.perf_counter()
    try:
        result = s.check()
        model = s.model() if result == z3.sat else None
    finally:
        if solver is not None:
            s.pop()
    budget.solver_seconds += time.perf_counter() - started
    budget.queries += 1
    if result == z3.sat:
        return "sat", model
    if result == z3.unsat:
        return "unsat", None
    budget.timeouts += 1
    return "unknown", None


def minimize(assertions: list, objective, model, budget: Budget, precision: int | None = None) -> tuple[object, bool]:
    """A model with a small `objective`, by binary search; True when it is the least.
    With `precision` bits the search stops once the bracket is within 2^-precision
    of the value (a 16 GiB witness need not be minimal to the element)."""
    best, high, low = model, model.eval(objective, model_completion=True).as_long(), 0
    solver = new_solver()
    solver.add(assertions)
    while low < high:
        if precision is not None and high - low <= high >> precision:
            return best, False
        middle = (low + high) // 2
        status, found = solve([objective <= middle], budget, budget.settings.search_timeout_ms, solver)
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
    preconditions (asserts, views), and for MEM004 the size of each tensor."""
    limit = settings.max_size if mode == "bounds" else settings.max_numel
    candidates = [(f, variables(f)) for f in env.facts]
    if mode == "overflow":
        candidates += [(t.numel <= settings.max_numel, variables(t.numel)) for t in env.tensors
                       if variables(t.numel)]
    used = [False] * len(candidates)
    seen: set[str] = set()
    pending = variables(*terms)
    found: list = []
    while pending:
        seen |= pending
        fresh: set[str] = set()
        for name in pending:
            symbol = env.symbols.get(name)
            if symbol is None:
                continue
            if symbol.kind in ("size", "free") and isinstance(symbol.term, z3.ArithRef):
                found += [symbol.term >= 1, symbol.term <= limit]
            found += symbol.facts
            fresh |= variables(*symbol.facts) if symbol.facts else set()
        for i, (fact, names) in enumerate(candidates):
            if not used[i] and names & seen:
                used[i] = True
                found.append(fact)
                fresh |= names
        pending = fresh - seen
    return found


@dataclass
class Evaluated:
    """An access at symbolic lanes: offset, mask, and the int32 operations behind them."""

    offset: object
    mask: object
    offset_checks: tuple
    mask_checks: tuple
    lanes: tuple
    shape: tuple
    tile_facts: list

    @property
    def shape_key(self) -> tuple:
        return tuple(str(d) for d in self.shape)


def evaluate(access: AccessTerms, bound: BoundLaunch, tag: str) -> Evaluated:
    pointer, mask = access.pointer, access.mask
    shape = broadcast(pointer.offset.shape, *( [mask.shape] if mask is not None else []))
    rank = len(shape)
    lanes = lane_vars(bound.env, shape, tag)
    offset, offset_checks = pointer.offset.at(project(pointer.offset.shape, rank, lanes))
    mask_term, mask_checks = (z3.BoolVal(True), ()) if mask is None else mask.at(project(mask.shape, rank, lanes))
    sizes = [int_term(d) for d in shape if not is_one(d)]
    tile_facts = [math.prod(sizes, start=z3.IntVal(1)) <= MAX_TILE] if any(
        not isinstance(d, int) for d in shape) else []
    mask_ops = {id(c[1]) for c in mask_checks}
    offset_checks = tuple(c for c in offset_checks if id(c[1]) not in mask_ops)  # shared: counted in the mask
    return Evaluated(offset, mask_term, offset_checks, mask_checks, lanes, shape, tile_facts)


def _free_reasons(env: Env, assertions: list) -> list[str]:
    names = variables(*assertions)
    return sorted({env.free_reasons[n] for n in names if n in env.free_reasons})


def _size_objective(env: Env, assertions: list):
    names = variables(*assertions)
    sizes = [env.symbols[n].term for n in sorted(names) if n in env.symbols and env.symbols[n].kind == "size"]
    return z3.Sum(sizes) if sizes else None


def check_bounds(access: AccessTerms, bound: BoundLaunch, ev: Evaluated, budget: Budget) -> Verdict:
    settings = budget.settings
    tensor = bound.ctx.tensors.get(access.pointer.base)
    if tensor is None:
        return Verdict("unknown", f"the tensor passed to `{access.pointer.base}` is not read")
    extent = tensor.numel
    base = list(access.path) + [ev.mask] + ev.tile_facts
    goal = z3.Or(ev.offset < 0, ev.offset >= extent)
    assertions = facts(bound.env, base + [goal], "bounds", settings) + base + [goal]
    status, model = solve(assertions, budget)
    if status == "unsat":
        return Verdict("proved")
    if status == "unknown":
        return Verdict("unknown", "the solver ran out of time")
    unread = variables(extent) - bound.read
    if unread:
        # The wrapper never reads this tensor's shape: only an access before its
        # start is a violation whatever the caller passes.
        goal = ev.offset < 0
        assertions = facts(bound.env, base + [goal], "bounds", settings) + base + [goal]
        status, model = solve(assertions, budget)
        if status == "unsat":
            return Verdict("unknown", f"in bounds only if `{tensor.label}` is as large as the kernel reads: the "
                                      f"wrapper never reads its shape")
        if status == "unknown":
            return Verdict("unknown", "the solver ran out of time")
    approximations = _free_reasons(bound.env, assertions) + bound.inexact
    if approximations:
        return Verdict("unknown", "possibly out of bounds, but " + "; ".join(approximations))
    objective = _size_objective(bound.env, assertions)
    minimal = True
    if objective is not None:
        model, minimal = minimize(assertions, objective, model, budget)
    example = counterexample(model, access, bound, ev, minimal, assertions)
    example["offset"], example["extent"] = _value(model, ev.offset), _value(model, extent)
    return Verdict("violated", counterexample=example,
                   objective=_value(model, objective) if objective is not None else 0)


def check_overflow(access: AccessTerms, bound: BoundLaunch, ev: Evaluated, budget: Budget,
                   cache: dict) -> Verdict:
    """`cache`: verdicts of this launch by the operations checked and the path (accesses
    that share their offsets, `x_ptr + offs` and `out_ptr + offs`, share the answer)."""
    settings = budget.settings
    if not ev.offset_checks and not ev.mask_checks:
        return Verdict("proved", "no int32 arithmetic")
    key = (tuple(id(c[1]) for c in ev.offset_checks + ev.mask_checks), ev.mask.get_id(),
           tuple(p.get_id() for p in access.path), ev.shape_key)
    if key not in cache:
        cache[key] = _overflow(access, bound, ev, budget)
    return cache[key]


def _overflow(access: AccessTerms, bound: BoundLaunch, ev: Evaluated, budget: Budget) -> Verdict:
    """A wrap counts where it can change what is accessed: in the offset of a lane
    the mask lets through, or anywhere in the mask itself (a wrapped `offs < n`
    can let a negative offset through).  Offsets of masked-off lanes may wrap."""
    settings = budget.settings
    checks = list(ev.mask_checks) + list(ev.offset_checks)
    base = list(access.path) + ev.tile_facts
    in_mask = [c[0] for c in ev.mask_checks]
    in_offset = [c[0] for c in ev.offset_checks]
    goal = z3.Or(in_mask + ([z3.And(ev.mask, z3.Or(in_offset))] if in_offset else []))
    assertions = facts(bound.env, base + [goal], "overflow", settings) + base + [goal]
    status, model = solve(assertions, budget)
    if status == "unsat":
        return Verdict("proved")
    if status == "unknown":
        return Verdict("unknown", "the solver ran out of time")
    approximations = _free_reasons(bound.env, assertions) + bound.inexact
    if approximations:
        return Verdict("unknown", "possibly wraps, but " + "; ".join(approximations))
    names = variables(*assertions)
    closed = [t.numel for t in bound.env.tensors if variables(t.numel) and variables(t.numel) <= names]
    objective = z3.Sum(closed) if closed else _size_objective(bound.env, assertions)
    minimal = True
    if objective is not None:
        model, minimal = minimize(assertions, objective, model, budget, precision=8)
    wrapping = next(c for c in checks if z3.is_true(model.eval(c[0], model_completion=True)))
    example = counterexample(model, access, bound, ev, minimal, assertions)
    example["value"] = _value(model, wrapping[2])
    example["max_numel"] = settings.max_numel
    return Verdict("violated", counterexample=example, node=wrapping[1],
                   objective=_value(model, objective) if objective is not None else 0)


def _value(model, term) -> int | None:
    value = model.eval(int_term(term), model_completion=True)
    return value.as_long() if z3.is_int_value(value) else None


def counterexample(model, access: AccessTerms, bound: BoundLaunch, ev: Evaluated, minimal: bool,
                   assertions: list) -> dict:
    """The hand-off to the dynamic gates: everything needed to rerun the failing case."""
    env, ctx = bound.env, bound.ctx
    names = variables(*assertions)
    shapes = {}
    for tensor in ctx.tensors.values():
        shapes[tensor.label] = [_value(model, d) if variables(d) <= bound.read | names else None
                                for d in tensor.shape]
    program = [_value(model, ctx.pids[a]) if a in ctx.pids else 0 for a in range(len(ctx.grid or [0]))]
    return {
        "sizes": {name: _value(model, term) for name, term in bound.runtime.items()},
        "constexprs": {name: _value(model, term) for name, term in bound.constexprs.items()},
        "shapes": shapes,
        "symbols": {s.label: _value(model, s.term) for s in env.symbols.values()
                    if s.kind in ("size", "pow2") and s.name in names},
        "grid": [_value(model, g) for g in ctx.grid] if ctx.grid is not None else None,
        "program": program,
        "lane": [_value(model, lane) for lane in ev.lanes],
        "loop": {label: _value(model, term) for label, term in env.shown if variables(term) <= names},
        "minimal": minimal,
    }


__all__ = ["Budget", "Settings", "Verdict", "check_bounds", "check_overflow", "evaluate"]
