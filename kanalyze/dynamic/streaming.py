"""Each case judged as it ends, so that the judge can let go of its arrays (parent side).

At a problem's real size (a 4096 × 393216 activation: 6.4 GB an output, 13 GB its
float64 copy) the arrays of every gate's cases are many times the device: held
until the session's end, they spill to host memory and files, which took longer
than the kernels (docs/performance.md).  Where the gates' arrays would not fit one
session (held_budget.py), a GPU run streams them instead (runner.py):

* the judge computes each case's reference just before the candidate runs it
  (`Session._streamed`): no second reference worker, nothing handed over;
* once a case has ended, its gate judges the cases it has so far, asking the
  judge what it asks (held_arrays.Judge keeps every answer) and fetching its
  witness's windows; those cases are then settled (a gate that compares a variant
  of the candidate with the original, once all of its cases have ended);
* the judge lets go of a settled case's outputs, and of its inputs' reference once
  every case of those inputs is settled (the baseline's are kept: later gates read
  them).

The verdicts are still judging.judge's at the session's end, asked of the same
answers.  A gate that cannot judge the cases it has yet (it compares one with a
case still to come) keeps them held until it can.  A question about an array let
go of that no earlier judgment asked would be kanalyze's failure (the gate says
`unconfirmed`), never a verdict.  With a deadline (the audit's pair limit), a case
that would end past it, taking as long as the longest so far, is not run, and says
so; the flagged clauses' gates run first.
"""

from __future__ import annotations

import collections
import time

from kanalyze.dynamic.gates.base import CONFIRMED
from kanalyze.dynamic.held_arrays import held_names
from kanalyze.dynamic.judging import TIME_LIMIT, expected_scale, held_windows
from kanalyze.dynamic.reference_jobs import judged_now
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox.process import Outcome

OUT_OF_TIME = (f"{TIME_LIMIT} would have ended it first (its session judged each case as it ended, "
               f"one after another); a longer time limit runs it")


class Streaming:
    def __init__(self, session, gates: dict, contexts: dict, order: list[str], keep: set[str],
                 deadline: float | None = None) -> None:
        self.session, self.gates, self.contexts = session, gates, contexts
        self.rank = {code: n for n, code in enumerate(order)}   # the gates' order: the flagged ones first
        self.keep = set(keep)          # input sets whose arrays stay held (the baseline's)
        self.deadline = deadline
        self.ended_cases: dict[str, list[int]] = collections.defaultdict(list)   # gate -> its ended cases
        self.views: dict[int, Result] = {}
        self.settled: set[int] = set()
        self.let_go: set[str] = set()
        self.not_run = 0
        self._began, self._longest = 0.0, 0.0

    def order(self, cases: list, rest: list[int]) -> list[int]:
        """`rest` as one session runs it (grouped by model); with a deadline, the gates in their
        order (the flagged ones first: they are the ones run where time runs short), each gate's
        cases as they were."""
        if self.deadline is None:
            return list(rest)
        return sorted(rest, key=lambda i: self.rank.get(cases[i].gate, len(self.rank)))

    def in_time(self, result: Result) -> bool:
        """Whether the case may start: it would end before the deadline, taking as long as the
        longest so far; where not, its result says why (kanalyze's: no verdict rests on it)."""
        now = time.perf_counter()
        if self.deadline is not None and now + self._longest > self.deadline:
            result.candidate = Outcome("done", meta={"status": "internal", "error": OUT_OF_TIME})
            if result.reference is None or result.reference.status != "done":   # (its reference not computed either)
                result.reference = result.candidate
            self.not_run += 1
            return False
        self._began = now
        return True

    def ended(self, results: list[Result], index: int) -> None:
        """Case `index` has ended: its gate judges the cases it has, and what is settled is let go of."""
        code = results[index].case.gate
        self.ended_cases[code].append(index)
        if self._may_judge(results, code):
            self._judge_ended(results, code)
        self._longest = max(self._longest, time.perf_counter() - self._began)   # (the judging counts)

    def _judge_ended(self, results: list[Result], code: str) -> None:
        for i in self.ended_cases[code]:
            if i not in self.views:
                self.views[i] = judged_now(self.session, results[i]) if results[i].reference_ok else results[i]
        # (in the order of the session's cases, as judging.judge will give them to the gate)
        if self._judged(code, [self.views[i] for i in sorted(self.ended_cases[code])]):
            self.settled.update(self.ended_cases[code])
            self._let_go(results)

    def _may_judge(self, results: list[Result], code: str) -> bool:
        """Whether the gate may judge the cases it has: a gate that runs a variant of the candidate
        (ORD001's reversed order and control, PRC002's promoted accumulators) compares the
        variant's runs with the original's, a question a judgment of the original's cases alone
        never asked; so such a gate judges once all of its cases have ended, not before."""
        mine = [result for result in results if result.case.gate == code]
        if all(result.case.variant == "original" for result in mine):
            return True
        return len(self.ended_cases[code]) >= len(mine)

    def _judged(self, code: str, views: list[Result | None]) -> bool:
        """Whether the gate judged these cases, every question it had answered (and kept)."""
        if code not in self.gates or any(view is None for view in views):   # (some arrays not held: no judging yet)
            return False
        own = [view for view in views if not view.kanalyze_failure()]
        if not own:
            return True
        try:
            judged = self.gates[code].judge(self.contexts[code], own)
            for verdict in judged if isinstance(judged, list) else [judged]:
                held_windows(verdict)   # the witness's windows, fetched now (the judge keeps them)
                if verdict.code in ("CMP001", "CMP003") and verdict.status == CONFIRMED:
                    expected_scale(verdict)   # (judging.name_the_cause asks it at the end)
        except Exception:   # it needs a case still to come, or the judge could not answer: keep them
            return False
        return True

    def _let_go(self, results: list[Result]) -> None:
        judge = self.session.judges.of(self.session._judge)
        if judge is None:
            return
        names, by_inputs = [], collections.defaultdict(list)
        for i, result in enumerate(results):
            by_inputs[result.case.input_key].append(i)
        for i in self.settled:
            view = self.views.get(i)
            if view is not None and view.candidate is not None:
                names += held_names(view.candidate.arrays)
        for key, indices in by_inputs.items():
            if key not in self.keep and all(i in self.settled for i in indices):
                view = self.views.get(indices[0])
                if view is not None and view.reference is not None:
                    names += held_names(view.reference.arrays)
        names = [name for name in names if name not in self.let_go]
        try:
            judge.drop(names)
        except Exception:   # (kanalyze's judge could not: its arrays stay, the run goes on)
            return
        self.let_go.update(names)

    def account(self) -> dict:
        return {"cases": len(self.views), "settled": len(self.settled), "let_go": len(self.let_go),
                "not_run": self.not_run}


__all__ = ["OUT_OF_TIME", "Streaming"]
