"""The two questions of the bounds proofs, and the counterexamples they hand on.

MEM003: is there a size in range, a program of the grid, a lane and a loop
iteration where the mask lets an offset outside [0, extent) through?
MEM004: is there a tensor of at most `max-numel` elements for which an int32
operation of the offset (or mask, or loop bound) arithmetic leaves [-2^31, 2^31)?
A "yes" gives a counterexample, made small by a search on the sizes
(bounds_solver.minimize).  A model that uses an approximation (a free symbol: an
unread grid, an unmodeled condition) is not a counterexample: the answer is
"unknown" then.  `counterexample` is the hand-off to the dynamic gates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import z3

from kanalyze.analyzer.bounds.kernel import AccessTerms
from kanalyze.analyzer.bounds.launch import BoundLaunch
from kanalyze.analyzer.bounds.screen import fits_int32, in_bounds
from kanalyze.analyzer.bounds.solver import Budget, Verdict, discover, facts, minimize, solve
from kanalyze.analyzer.bounds.symbols import MAX_TILE, Env, conjunction, disjunction, int_term, variables
from kanalyze.analyzer.bounds.terms import broadcast, is_one, lane_vars, project


# The Python screen in front of z3 (screen.py); tests turn it off to compare.
SCREEN = True


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


def evaluate(access: AccessTerms, bound: BoundLaunch) -> Evaluated:
    pointer, mask = access.pointer, access.mask
    shape = broadcast(pointer.offset.shape, *( [mask.shape] if mask is not None else []))
    rank = len(shape)
    lanes = lane_vars(bound.env, shape)
    offset, offset_checks = pointer.offset.at(project(pointer.offset.shape, rank, lanes))
    mask_term, mask_checks = (z3.BoolVal(True), ()) if mask is None else mask.at(project(mask.shape, rank, lanes))
    sizes = [int_term(d) for d in shape if not is_one(d)]
    tile_facts = [math.prod(sizes, start=z3.IntVal(1)) <= MAX_TILE] if any(
        not isinstance(d, int) for d in shape) else []
    # Each check gets where it sits: the mask and the loop bounds decide what runs, the offset where.
    mask_checks = tuple(c + ("mask",) for c in mask_checks) + tuple(c + ("loop",) for c in access.control_checks)
    mask_ops = {id(c[1]) for c in mask_checks}
    offset_checks = tuple(c + ("offset",) for c in offset_checks if id(c[1]) not in mask_ops)
    return Evaluated(offset, mask_term, offset_checks, mask_checks, lanes, shape, tile_facts)


def _free_reasons(env: Env, assertions: list) -> list[str]:
    names = variables(*assertions)
    return sorted({env.free_reasons[n] for n in names if n in env.free_reasons})


def _size_objective(env: Env, assertions: list) -> tuple:
    """The sum of the sizes a query mentions (each at least 1), and how many there are."""
    names = variables(*assertions)
    sizes = [env.symbols[n].term for n in sorted(names) if n in env.symbols and env.symbols[n].kind == "size"]
    return (z3.Sum(sizes) if sizes else None), len(sizes)


def check_bounds(access: AccessTerms, bound: BoundLaunch, ev: Evaluated, budget: Budget, known=None) -> Verdict:
    """`known`: a model of this very question (from screen_bounds), if there is one."""
    settings = budget.settings
    tensor = bound.ctx.tensors.get(access.pointer.base)
    if tensor is None:
        return Verdict("unknown", f"the tensor passed to `{access.pointer.base}` is not read")
    extent = tensor.numel
    base = list(access.path) + [ev.mask] + ev.tile_facts
    goal = z3.Or(ev.offset < 0, ev.offset >= extent)
    assertions = facts(bound.env, base + [goal], "bounds", settings) + base + [goal]
    status, model = ("sat", known) if known is not None else solve(assertions, budget)
    if status == "unsat":
        return Verdict("proved")
    if status == "unknown":
        return Verdict("unknown", budget.gave_up())
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
            return Verdict("unknown", budget.gave_up())
    approximations = _free_reasons(bound.env, assertions) + bound.inexact
    if approximations:
        return Verdict("unknown", "possibly out of bounds, but " + "; ".join(approximations))
    objective, count = _size_objective(bound.env, assertions)
    minimal = True
    if objective is not None:
        model, minimal = minimize(assertions, objective, model, budget, floor=count)
    model = _first_position(bound.env, assertions, model, budget)
    full = complete(model, bound, assertions, "bounds", budget)
    example = counterexample(model, access, bound, ev, minimal, assertions, full)
    example["offset"], example["extent"] = _value(model, ev.offset), _value(model, extent)
    return Verdict("violated", counterexample=example,
                   objective=_value(model, objective) if objective is not None else 0)


def _first_position(env: Env, assertions: list, model, budget: Budget):
    """With the sizes found, the first failing program, then loop iteration, then lane
    (each the least, with those before it fixed): the witness names the first failing
    element, whichever model z3 happened to give."""
    names = sorted(variables(*assertions))
    fixed = [env.symbols[n].term == model.eval(env.symbols[n].term, model_completion=True)
             for n in names if n in env.symbols and env.symbols[n].kind in ("size", "pow2")]
    for kind in ("pid", "iter", "lane"):
        terms = [env.symbols[n].term for n in names if n in env.symbols and env.symbols[n].kind == kind]
        if not terms:
            continue
        model = minimize(assertions + fixed, z3.Sum(terms), model, budget)[0]
        fixed += [t == model.eval(t, model_completion=True) for t in terms]
    return model


def screen_bounds(items: list, bound: BoundLaunch, budget: Budget) -> dict[int, object]:
    """The accesses (`items`: (AccessTerms, Evaluated)) that may leave their tensor,
    by index, each with a model of its question where z3 found one; the others are
    proved.  Each question carries its own facts: a loop's "runs at least once" must
    not constrain an access outside that loop."""
    disjuncts, suspects = {}, {}
    for index, (access, ev) in enumerate(items):
        tensor = bound.ctx.tensors.get(access.pointer.base)
        if tensor is None:
            suspects[index] = None  # check_bounds says why it is unknown
            continue
        base = list(access.path) + [ev.mask] + ev.tile_facts
        goal = z3.Or(ev.offset < 0, ev.offset >= tensor.numel)
        hypotheses = facts(bound.env, base + [goal], "bounds", budget.settings) + base
        if SCREEN and in_bounds(ev.offset, tensor.numel, hypotheses, _eliminated(bound.env)):
            budget.screened += 1
            continue  # proved without z3
        disjuncts[index] = conjunction(hypotheses + [goal])
    found, unknown = discover(disjuncts, budget)
    return {**suspects, **{i: None for i in unknown}, **found}


def check_overflows(items: list, bound: BoundLaunch, budget: Budget,
                    known: list | None = None) -> list[tuple[Verdict, list[Verdict]]]:
    """Per access (`items`: (AccessTerms, Evaluated)), its verdict and one violated
    Verdict per operation that can wrap.

    A wrap counts where it can change what is accessed: in the offset of a lane
    the mask lets through, or anywhere in the mask or the bounds of the loops
    around the access (a wrapped `offs < n` lets a negative offset through).
    Offsets of masked-off lanes may wrap.  Every such operation is found; its
    smallest size is searched once per file.  `known`: per access, the operations
    already found to wrap there (under another configuration): not asked again."""
    disjuncts, checks, again = {}, {}, set()
    screening = SCREEN
    for index, (access, ev) in enumerate(items):
        goals: dict[int, list] = {}
        for check in ev.mask_checks:
            goals.setdefault(id(check[1]), []).append((check, check[0]))
        for check in ev.offset_checks:
            goals.setdefault(id(check[1]), []).append((check, conjunction([ev.mask, check[0]])))
        base = list(access.path) + ev.tile_facts
        for op, pairs in goals.items():
            condition = disjunction([c for _, c in pairs])
            checks[(index, op)] = (pairs[0][0], condition, base, pairs)
            if known is not None and op in known[index] and budget.wraps.get(op) is not None:
                again.add((index, op))
                continue  # the access's report has this wrap, and its smallest size, already
            if screening and all(_fits(bound.env, base, ev, check, cond, budget) for check, cond in pairs):
                budget.screened += 1
                continue  # proved without z3
            # z3 is asked about this launch anyway: proving the other operations here
            # would save it little, and most int32 arithmetic does wrap for 2^32 elements.
            screening = False
            disjuncts[(index, op)] = conjunction(facts(bound.env, base + [condition], "overflow", budget.settings)
                                                 + base + [condition])
    found, unknown = discover(disjuncts, budget)
    results = []
    for index, (access, ev) in enumerate(items):
        ops = [key for key in checks if key[0] == index]
        if not ops:
            results.append((Verdict("proved", "no int32 arithmetic"), []))
            continue
        wraps, reasons = [budget.wraps[k[1]] for k in again if k[0] == index], []
        for key in (k for k in found if k[0] == index):
            check, condition, base, pairs = checks[key]
            approximations = _free_reasons(bound.env, [disjuncts[key]]) + bound.inexact
            if approximations:
                reasons.append("possibly wraps, but " + "; ".join(approximations))
                continue
            if key[1] not in budget.wraps:
                budget.wraps[key[1]] = _smallest_wrap(access, bound, ev, budget, base, check, condition, found[key])
            wraps.append(budget.wraps[key[1]])
        if any(k[0] == index for k in unknown):
            reasons.append(budget.gave_up())
        overall = next((w for w in wraps if w.status == "violated"), None)
        if overall is None:
            overall = Verdict("unknown", reasons[0]) if reasons else Verdict("proved")
        results.append((overall, wraps))
    return results


def _fits(env: Env, base: list, ev: Evaluated, check: tuple, condition, budget: Budget) -> bool:
    """The screen's proof that `check`'s operation stays in int32 (under the mask, for an offset)."""
    hypotheses = facts(env, base + [condition], "overflow", budget.settings) + base
    if check[3] == "offset":
        hypotheses.append(ev.mask)
    return fits_int32(check[2], hypotheses, _eliminated(env))


def _eliminated(env: Env) -> set[str]:
    """Symbols the screen replaces by their bounds; sizes stay symbols."""
    return {name for name, symbol in env.symbols.items() if symbol.kind in ("pid", "lane", "iter")}


def _smallest_wrap(access: AccessTerms, bound: BoundLaunch, ev: Evaluated, budget: Budget, base: list,
                   check: tuple, condition, model) -> Verdict:
    """`model`: the one discover found for this operation's question.  The search asks
    z3 only: the screen, tried on each step of it, ruled out 27 of 556 steps on the
    fixtures for more time than z3 took to answer all 556."""
    settings = budget.settings
    assertions = facts(bound.env, base + [condition], "overflow", settings) + base + [condition]
    names = variables(*assertions)
    closed = [t.numel for t in bound.env.tensors if variables(t.numel) and variables(t.numel) <= names]
    objective = z3.Sum(closed) if closed else _size_objective(bound.env, assertions)[0]
    minimal = True
    if objective is not None:
        model, minimal = minimize(assertions, objective, model, budget, precision=4)
    full = complete(model, bound, assertions, "overflow", budget)
    example = counterexample(model, access, bound, ev, minimal, assertions, full)
    example["value"] = _value(model, check[2])
    example["wraps_in"] = check[3]
    example["max_numel"] = settings.max_numel
    return Verdict("violated", counterexample=example, node=check[1],
                   objective=_value(model, objective) if objective is not None else 0)


def _value(model, term) -> int | None:
    value = model.eval(int_term(term), model_completion=True)
    return value.as_long() if z3.is_int_value(value) else None


def complete(model, bound: BoundLaunch, assertions: list, mode: str, budget: Budget):
    """A model that also fixes every size the launch reads but the failing access does
    not depend on (to 1: any value fails, 1 makes the cheapest witness), or None."""
    env = bound.env
    names = variables(*assertions)
    rest = [env.symbols[n].term == 1 for n in sorted(bound.read - names)
            if n in env.symbols and env.symbols[n].kind == "size"]
    if not rest:
        return None
    pinned = [env.symbols[n].term == model.eval(env.symbols[n].term, model_completion=True)
              for n in sorted(names) if n in env.symbols and env.symbols[n].kind in ("size", "pow2")]
    goal = pinned + rest
    status, found = solve(facts(env, goal, mode, budget.settings) + goal, budget)
    return found if status == "sat" else None


def counterexample(model, access: AccessTerms, bound: BoundLaunch, ev: Evaluated, minimal: bool,
                   assertions: list, full=None) -> dict:
    """The hand-off to the dynamic gates: everything needed to rerun the failing case.

    `full`: the model completed for the sizes the access does not depend on (set
    to 1).  Plain JSON data; MEM003's adds `offset` and `extent` (elements), MEM004's
    `value` (the exact result that leaves int32), `wraps_in` (offset | mask | loop)
    and `max_numel`, and bounds.py the launch: `kernel`, `wrapper`, `launch`,
    `config` (autotune index or None), `parameter`, `tensor`, `access`:
      depends_on  kernel parameters whose values the failure depends on
      sizes       runtime integer parameter of the kernel → value at the launch
      constexprs  constexpr parameter → value (the configuration that fails)
      shapes      tensor passed to a pointer parameter, by the wrapper's name for it
                  (`x`, `out`) → its dimensions; None where nothing constrains one
      pointers    pointer parameter of the kernel → that name (to launch the kernel alone)
      inputs      the wrapper's own tensor arguments → dimensions (what a gate makes)
      symbols     the wrapper expressions the sizes stand for (`x.shape[1]`) → value
      grid        programs per axis; program: the failing program id per axis
      lane        index of the failing lane in each dimension of the access's tile
      loop        loop variable → its value at the failing iteration
      minimal     true when the sizes are proved the smallest; MEM004 stops the search
                  once it is within 1/16 of the smallest (false then)"""
    env, ctx = bound.env, bound.ctx
    names = variables(*assertions)
    sizes_model = full if full is not None else model
    known = names | (bound.read if full is not None else set())

    def dims(tensor):
        return [_value(sizes_model, d) if variables(d) <= known else None for d in tensor.shape]
    shapes = {tensor.label: dims(tensor) for tensor in ctx.tensors.values()}
    inputs = {tensor.label: dims(tensor) for tensor in env.tensors if tensor.base == tensor.label}
    program = [_value(model, ctx.pids[a]) if a in ctx.pids else 0 for a in range(len(ctx.grid or [0]))]
    relevant = [name for name, term in list(bound.runtime.items()) + list(bound.constexprs.items())
                if variables(term) & names]
    return {
        "depends_on": relevant,
        "sizes": {name: _value(sizes_model, term) for name, term in bound.runtime.items()
                  if variables(term) <= known},
        "constexprs": {name: _value(sizes_model, term) for name, term in bound.constexprs.items()
                       if variables(term) <= known},
        "shapes": shapes,
        "pointers": {param: tensor.label for param, tensor in ctx.tensors.items()},
        "inputs": inputs,
        "symbols": {s.label: _value(sizes_model, s.term) for s in env.symbols.values()
                    if s.kind in ("size", "pow2") and s.name in known},
        "grid": [_value(sizes_model, g) for g in ctx.grid] if ctx.grid is not None else None,
        "program": program,
        "lane": [_value(model, lane) for lane in ev.lanes],
        "loop": {label: _value(model, term) for label, term in env.shown if variables(term) <= names},
        "minimal": minimal,
    }


__all__ = ["Evaluated", "check_bounds", "check_overflows", "counterexample", "evaluate", "screen_bounds"]
