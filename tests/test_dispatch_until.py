"""The time by which every case ends (`Limits.until`, the audit's pair limit): a candidate's case
still running then is cut, kanalyze's time limit, never the candidate's timeout (sandbox/dispatch.py).
Stand-in workers, where what is tested is how the dispatcher words and spends the time, and one
real candidate worker still importing."""

from __future__ import annotations

import time

import pytest

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox import dispatch
from kanalyze.dynamic.sandbox.dispatch import TIME_LIMIT
from kanalyze.dynamic.sandbox.process import Limits, OutOfTime, Outcome


class _Worker:
    """Answers case 0 at once and never answers case 1 (it runs on: a slow or hanging case)."""
    started: list = []
    waits: list = []

    def __init__(self, *args) -> None:
        self.role, self.phase, self.scratch, self.killed = "candidate", "candidate", "/nonexistent", False
        type(self).started.append(self)

    def wait_ready(self) -> dict:
        return {"event": "ready"}

    def send(self, job: dict) -> None:
        if job["kind"] == "cases":   # (a candidate's worker is also sent an `ack` after each case)
            self.job, self.answered = job["id"], False

    def next_event(self, seconds: float) -> dict | None:
        type(self).waits.append(seconds)
        if not self.answered:
            self.answered = True
            return {"event": "case", "index": 0, "job": self.job}
        time.sleep(min(seconds, 0.5))
        return None

    def kill(self) -> None:
        self.killed = True

    def close(self) -> None: ...
    def output(self) -> str: return ""


def _run(monkeypatch, limits: Limits, worker=_Worker, role: str = "candidate") -> dict[int, Outcome]:
    worker.started, worker.waits = [], []
    monkeypatch.setattr(dispatch, "Worker", worker)
    monkeypatch.setattr(dispatch, "_read_case", lambda scratch, index, now: Outcome("done", meta={"status": "ok"}))
    outcomes, _, _ = dispatch.run_cases(role, "cpu", {}, [(0, {}), (1, {}), (2, {})], limits, "/tmp")
    return outcomes


def _cut(outcome: Outcome) -> bool:
    return outcome.status == "done" and outcome.meta.get("status") == "internal" and \
        outcome.meta["error"].startswith(TIME_LIMIT)


def test_a_case_running_when_the_time_comes_is_cut_and_kanalyze_s(monkeypatch) -> None:
    limits = Limits(case_seconds=120.0, until=time.perf_counter() + 0.3)
    outcomes = _run(monkeypatch, limits)
    assert outcomes[0].meta == {"status": "ok"}                # the case before it stands
    assert _cut(outcomes[1]) and _cut(outcomes[2]), outcomes   # the running one and the one after it
    assert _Worker.started[0].killed and len(_Worker.started) == 1   # no fresh worker for case 2
    assert max(_Worker.waits) <= 0.3                           # it waited for the time left, not 120 s
    # Its gate says why, never that the candidate timed out (results.Result: kanalyze's side).
    result = Result(Case("c", "CMP001", {}), Outcome("done", meta={"status": "ok"}), outcomes[1])
    assert result.kanalyze_failure().startswith(TIME_LIMIT) and not result.candidate_failed()


def test_a_reference_case_is_never_cut_its_worker_may_hold_the_judge_s_arrays(monkeypatch) -> None:
    outcomes = _run(monkeypatch, Limits(case_seconds=0.2, until=time.perf_counter() + 0.05), role="reference")
    assert min(_Worker.waits) == 0.2                              # its own case limit, not the time left
    assert outcomes[1].status == "timeout" and not _cut(outcomes[1]), outcomes[1]


def test_a_worker_the_caller_keeps_is_handed_back_unclosed(monkeypatch) -> None:
    class Kept(_Worker):
        closed = False

        def close(self) -> None:
            Kept.closed = True

    kept = Kept()
    monkeypatch.setattr(dispatch, "Worker", Kept)
    outcomes, _, worker = dispatch.run_cases("reference", "cpu", {}, [(0, {})], Limits(until=time.perf_counter() - 1),
                                             "/tmp", first_worker=kept, keep=True)
    assert worker is kept and not Kept.closed and _cut(outcomes[0])


def test_a_case_past_its_own_limit_before_that_time_is_the_candidate_s_timeout(monkeypatch) -> None:
    outcomes = _run(monkeypatch, Limits(case_seconds=0.2, until=time.perf_counter() + 600))
    assert outcomes[1].status == "timeout" and outcomes[1].blame == "candidate", outcomes[1]
    assert "did not finish within 0 s" in outcomes[1].detail


def test_after_that_time_no_worker_starts(monkeypatch) -> None:
    outcomes = _run(monkeypatch, Limits(until=time.perf_counter() - 1.0))
    assert not _Worker.started and all(_cut(outcomes[i]) for i in range(3)), outcomes


def test_a_worker_still_starting_when_the_time_comes_is_stopped(monkeypatch) -> None:
    class Starting(_Worker):
        def wait_ready(self) -> dict:
            raise OutOfTime("the time by which every case ends came while the worker started")

    outcomes = _run(monkeypatch, Limits(until=time.perf_counter() + 60), worker=Starting)
    assert len(Starting.started) == 1 and all(_cut(outcomes[i]) for i in range(3)), outcomes


def test_a_real_candidate_worker_still_importing_when_the_time_comes_is_stopped() -> None:
    """A candidate whose import sleeps far past that time (60 s allowed to its import): its real
    worker is stopped when the time comes, as `OutOfTime`, kanalyze's limit."""
    from pathlib import Path

    from kanalyze.dynamic.sandbox.process import Worker, new_scratch_root, remove_scratch_root

    kb = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
    spec = {"harness": {"kind": "kernelbench", "candidate": str(kb / "hostile" / "level1_problem6_import_sleep.py"),
                        "problem": str(kb / "level1" / "6_leaky_relu.py")}}
    scratch = new_scratch_root()
    try:
        started = time.perf_counter()
        worker = Worker("candidate", "cpu", spec, Limits(import_seconds=60, until=started + 8), scratch)
        try:
            with pytest.raises(OutOfTime):
                worker.wait_ready()
        finally:
            worker.close()
        assert time.perf_counter() - started < 20
    finally:
        remove_scratch_root(scratch)


def test_each_case_s_wall_is_its_own_the_reading_of_the_case_before_left_out(monkeypatch) -> None:
    """`walls`: from the end of the case before (its reading by `on_case` done) to the case's own end,
    also for a case cut at its time limit; the session's account of where a pair's time went."""
    _Worker.started, _Worker.waits = [], []
    monkeypatch.setattr(dispatch, "Worker", _Worker)
    monkeypatch.setattr(dispatch, "_read_case", lambda scratch, index, now: Outcome("done", meta={"status": "ok"}))
    walls: dict = {}

    def slow_reading(index, outcome):
        time.sleep(0.4)
        return outcome

    outcomes, _, _ = dispatch.run_cases("candidate", "cpu", {}, [(0, {}), (1, {})], Limits(case_seconds=0.2), "/tmp",
                                        on_case=slow_reading, walls=walls)
    assert outcomes[1].status == "timeout" and set(walls) == {0, 1}
    assert walls[0] < 0.1                       # answered at once; its reading (0.4 s) is no one's wall
    assert 0.2 <= walls[1] < 0.35, walls        # its own wait for an answer, cut at its 0.2 s
