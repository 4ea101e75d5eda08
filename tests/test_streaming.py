"""Each case judged as it ends (kanalyze/dynamic/streaming.py): where the gates' arrays would not
fit one session, one session all the same, the judge letting go of each case's arrays once its
gate has judged it.  Here the judge holds arrays in host memory (KANALYZE_JUDGE_HELD=1, a GPU's
default), and a budget below any gate's arrays asks for streaming."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.reference_cache import REFERENCES
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox.process import Limits
from kanalyze.dynamic.streaming import OUT_OF_TIME

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
CODES = ["CMP001", "CMP002", "CMP003", "EXC001", "EXC002", "INT001", "MEM001", "MEM002", "ORD001", "ORD002", "PRC001",
         "PRC002", "RES001"]   # every gate that runs a harness


def _run(name: str, **options):
    REFERENCES.clear()
    harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
    return run_gates(harness, CODES, options=Options(mode="cpu", limits=Limits(case_seconds=120), **options))


# A plant with an unwritten tail, its clean twin, one that caches its answers across calls (its verdicts
# depend on the order the cases run in: the same order), and PRC002's, whose case needs its promoted twin.
@pytest.mark.parametrize("name", ["level1_problem6_leaky_relu_floor_grid.py", "level1_problem6_leaky_relu.py",
                                  "level1_problem6_leaky_relu_cached_result.py", "level1_problem4_mean_fp16_acc.py"])
def test_a_streamed_session_says_what_one_session_says_and_lets_go_of_what_it_judged(name, monkeypatch) -> None:
    """Every verdict the same, word for word, as one session's holding everything; the plant's
    confirmations stand (a witness's windows fetched before its arrays were let go of) and the twin's
    refutations too; the judge let go of the cases it judged, and held less at once."""
    monkeypatch.setenv("KANALYZE_JUDGE_HELD", "1")
    whole = _run(name)
    streamed = _run(name, held_budget=1, stream=True)
    said = {run: [(v.code, v.status, v.summary) for v in r.verdicts] for run, r in (("whole", whole),
                                                                                  ("streamed", streamed))}
    assert said["streamed"] == said["whole"], [p for p in zip(said["whole"], said["streamed"]) if p[0] != p[1]]
    assert "sessions" not in streamed.environment and "streamed" not in whole.environment
    account = streamed.environment["streamed"]
    assert account["not_run"] == 0 and account["let_go"] > 0 and account["settled"] == account["cases"], account
    judge = streamed.environment["judge"]
    assert judge["dropped"] > 0 and judge["held_host_peak"] < whole.environment["judge"]["held_host_peak"], judge
    for run in (whole, streamed):   # a confirmation's witness has its windows
        for verdict in run.verdicts:
            if verdict.status == "confirmed" and verdict.code == "CMP001":
                assert verdict.arrays and all(a is not None for a in verdict.arrays.values())
    statuses = {code: status for code, status, _ in said["streamed"]}
    planted = {"floor_grid.py": "MEM001", "cached_result.py": "INT001", "fp16_acc.py": "PRC002"}
    code = next((code for end, code in planted.items() if name.endswith(end)), None)
    if code is not None:
        assert statuses[code] == "confirmed", said["streamed"]
    else:
        assert all(status in ("refuted", "unconfirmed") for status in statuses.values()), said["streamed"]
        assert statuses["CMP001"] == statuses["MEM001"] == statuses["ORD001"] == "refuted", said["streamed"]


def test_a_streamed_case_past_the_deadline_is_not_run_and_says_so(monkeypatch) -> None:
    """With the deadline past once the baseline has run, no case after it starts: each gate says
    why, none is refuted."""
    monkeypatch.setenv("KANALYZE_JUDGE_HELD", "1")
    run = _run("level1_problem6_leaky_relu.py", held_budget=1, stream=True, deadline=time.perf_counter())
    from kanalyze.audit.summary import OUT_OF_TIME as AUDIT_OUT_OF_TIME, _own_failure

    assert run.environment["streamed"]["not_run"] > 0
    for verdict in run.verdicts:
        assert verdict.status == "unconfirmed" and OUT_OF_TIME in verdict.summary, (verdict.code, verdict.summary)
        # an audit counts it as the time limit's, not as kanalyze's failure
        assert verdict.summary.startswith(AUDIT_OUT_OF_TIME) and not _own_failure(verdict.summary), verdict.summary


def _cuda_present() -> bool:
    from kanalyze.dynamic.runner import cuda_present

    return cuda_present()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_present(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["level1_problem6_leaky_relu_floor_grid.py", "level1_problem6_leaky_relu.py"])
def test_on_a_gpu_a_streamed_session_says_what_one_session_says(name) -> None:
    """On the device: the judge holds the arrays there, computes each streamed case's reference
    itself, and lets go of it once judged; the verdicts word for word one session's."""
    runs = {}
    for label, options in (("whole", {}), ("streamed", {"held_budget": 1})):   # (streams by default on a GPU)
        REFERENCES.clear()
        harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
        runs[label] = run_gates(harness, CODES, options=Options(mode="cuda", limits=Limits(case_seconds=300),
                                                                **options))
    said = {label: [(v.code, v.status, v.summary) for v in run.verdicts] for label, run in runs.items()}
    assert said["streamed"] == said["whole"], [p for p in zip(said["whole"], said["streamed"]) if p[0] != p[1]]
    account = runs["streamed"].environment["streamed"]
    assert account["let_go"] > 0 and account["settled"] == account["cases"], account
    assert runs["streamed"].environment["judge"]["dropped"] > 0


def test_a_refutation_that_lost_cases_to_the_time_limit_says_so_first() -> None:
    """Some of a gate's cases run, the rest left unrun by the time limit: not a refutation, and
    worded as the time limit's (an audit counts it apart from kanalyze's failures)."""
    from kanalyze.dynamic.cases import Case
    from kanalyze.dynamic.gates.base import REFUTED, Verdict
    from kanalyze.dynamic.judging import _without_lost_power
    from kanalyze.dynamic.results import Result
    from kanalyze.dynamic.sandbox.process import Outcome

    unrun = Outcome("done", meta={"status": "internal", "error": OUT_OF_TIME})
    lost = [Result(Case("CMP001/normal", "CMP001", {}), unrun, unrun)]
    verdict = _without_lost_power(Verdict("CMP001", REFUTED, "within the bound for given inputs"), lost)
    assert verdict.status == "unconfirmed"
    assert verdict.summary == f"{OUT_OF_TIME} (1 of the gate's cases); the rest: within the bound for given inputs"


def test_a_gate_that_compares_a_variant_with_the_original_is_judged_once_all_its_cases_ended() -> None:
    """ORD001 on a GPU compares its launch-order case with a reversed run and a control that end
    later, in workers of their own: judged on the launch-order case alone, it would settle that
    case and let go of arrays that the reversed run's comparison then asks about (a GPU run said
    "kanalyze's judge holds no array"). The gate waits for all its cases; a gate with no
    variant judges as each case ends."""
    from kanalyze.dynamic.cases import Case
    from kanalyze.dynamic.results import Result
    from kanalyze.dynamic.sandbox.process import Outcome
    from kanalyze.dynamic.streaming import Streaming

    judged = []

    class Gate:
        def judge(self, ctx, results):
            judged.append([r.case.id for r in results])
            raise AssertionError("no judging before every case of the gate has ended")

    def result(case_id: str, variant: str) -> Result:
        case = Case(id=case_id, gate=case_id.split("/")[0], sizes={}, variant=variant)
        return Result(case, reference=Outcome("done", meta={"status": "ok"}))

    results = [result("ORD001/runs", "original"), result("ORD001/reversed", "reversed"),
               result("ORD001/control", "control")]
    streaming = Streaming(None, {"ORD001": Gate()}, {"ORD001": None}, ["ORD001"], set())
    streaming.ended(results, 0)
    streaming.ended(results, 1)
    assert judged == [] and not streaming.settled and not streaming.views
    assert streaming._may_judge(results + [result("CMP001/given", "original")], "CMP001")
    assert not streaming._may_judge(results, "ORD001")
    streaming.ended_cases["ORD001"].append(2)
    assert streaming._may_judge(results, "ORD001")
