"""Gates in several sessions when one session's judge could not hold every case's arrays
(kanalyze/dynamic/held_budget.py): the same verdicts as in one session."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kanalyze.dynamic import held_budget  # noqa: E402
from kanalyze.dynamic.cases import Case, Run  # noqa: E402

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
GIB = 2 ** 30


def case(gate: str, runs: int = 1, **sizes) -> Case:
    return Case(f"{gate}/{sizes}", gate, {"N": 1000, **sizes}, runs=[Run() for _ in range(runs)])


def test_a_case_holds_its_outputs_their_float64_copy_and_each_run() -> None:
    base = {"N": 1000}
    # 1 GiB of float32 outputs: itself, 2 GiB of float64, 1 GiB a candidate run
    assert held_budget.case_bytes(case("X"), base, [GIB], ["float32"]) == 4 * GIB
    assert held_budget.case_bytes(case("X", runs=3), base, [GIB], ["float32"]) == 6 * GIB
    second = case("X")
    second.repeat_new_values = True   # a second input set: its outputs, float64 copies and run again
    assert held_budget.case_bytes(second, base, [GIB], ["float32"]) == 8 * GIB
    compared = case("X")
    compared.return_inputs = True     # the inputs kept, and returned by the candidate
    assert held_budget.case_bytes(compared, base, [GIB], ["float32"], inputs=GIB) == 6 * GIB
    backward = case("X")
    backward.gradients = True         # gradients of 1 GiB of inputs and state: 1 + 2 (float64) + 1 a run,
    assert held_budget.case_bytes(backward, base, [GIB], ["float32"], inputs=GIB) == 9 * GIB   # and 1 upstream
    assert held_budget.case_bytes(case("X"), base, [GIB], ["float16"]) == 6 * GIB   # float64 is 4x float16
    assert held_budget.case_bytes(case("X"), base, [GIB], ["int64"]) == 2 * GIB     # no float64 copy
    bits = case("X", runs=2)
    bits.float64 = False              # a gate that compares bits: no float64 reference
    assert held_budget.case_bytes(bits, base, [GIB], ["float32"]) == 3 * GIB
    assert held_budget.case_bytes(case("X"), base, [GIB], ["float8_e4m3fn"]) == 10 * GIB
    # a size past the base one scales it; a smaller one never lowers the estimate
    assert held_budget.case_bytes(case("X", N=2000), base, [GIB], ["float32"]) == 8 * GIB
    assert held_budget.case_bytes(case("X", N=10), base, [GIB], ["float32"]) == 4 * GIB


def test_gates_go_into_sessions_that_fit_and_the_first_gates_stay_first() -> None:
    baseline = case("", runs=2)                        # 5 GiB: in every session
    plan = {"CMP003": [case("CMP003") for _ in range(3)],   # 12 GiB
            "EXC001": [case("EXC001") for _ in range(3)],   # 12 GiB
            "INT001": [case("INT001")],                     # 4 GiB
            "ORD001": [case("ORD001", runs=5) for _ in range(5)]}   # 40 GiB: alone over budget
    sessions = held_budget.sessions(plan, baseline, [GIB], ["float32"], 30 * GIB)
    assert sessions == [["INT001", "CMP003"], ["EXC001"], ["ORD001"]]
    assert held_budget.sessions(plan, baseline, [GIB], ["float32"], 1000 * GIB) == [["INT001", "CMP003", "EXC001",
                                                                                      "ORD001"]]
    # a later session's baseline holds no float64 copy (3 GiB, not 5): two 7 GiB gates share one
    plan = {"INT001": [case("INT001", runs=7)], "MEM002": [case("MEM002", runs=4)], "ORD002": [case("ORD002", runs=4)]}
    assert held_budget.sessions(plan, baseline, [GIB], ["float32"], 17 * GIB) == [["INT001"], ["MEM002", "ORD002"]]
    assert held_budget.later_baseline(baseline).float64 is False and baseline.float64 is True
    assert held_budget.baseline_output({"output": {"nbytes": [4, "x"], "dtypes": ["float32", "int"]}}) is None
    assert held_budget.baseline_output({"output": {"nbytes": [4], "dtypes": ["float32"]}, "problem_bytes": 12}) \
        == ([4], ["float32"], 8)


@pytest.mark.parametrize("held", ["0", "1"])
@pytest.mark.parametrize("name", ["level1_problem6_leaky_relu_floor_grid.py", "level1_problem6_leaky_relu.py"])
def test_gates_run_in_sessions_of_their_own_say_what_one_session_says(name, held, monkeypatch) -> None:
    """A budget below any gate's arrays puts each gate in a session of its own, after the baseline
    again: every verdict the same, word for word, as one session's; the plant's confirmations
    stand and the twin's refutations too.  With the arrays saved, and held by each session's
    judge (a GPU's default; in host memory here)."""
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    monkeypatch.setenv("KANALYZE_JUDGE_HELD", held)
    codes = ["CMP001", "CMP003", "EXC001", "MEM002", "RES001"]
    said, runs = {}, {}
    for budget in (None, 1):
        REFERENCES.clear()
        harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
        run = run_gates(harness, codes, options=Options(mode="cpu", limits=Limits(case_seconds=120),
                                                        held_budget=budget))
        said[budget] = [(v.code, v.status, v.summary) for v in run.verdicts]
        runs[budget] = run
    assert said[1] == said[None], [pair for pair in zip(said[None], said[1]) if pair[0] != pair[1]]
    assert "sessions" not in runs[None].environment
    # every session ran the baseline, then its gate's cases, once each, as the one session did; a
    # gate the first session's baseline decided (values already wrong there) runs no session
    ran = {budget: [c["case"] for c in run.environment["case_seconds"]] for budget, run in runs.items()}
    assert ran[1].count("baseline") == runs[1].environment["sessions"] and ran[None].count("baseline") == 1
    own = [c for c in ran[1] if c != "baseline"]
    assert len(own) == len(set(own)) and set(own) <= set(ran[None])
    statuses = {code: status for code, status, _ in said[1]}
    if name.endswith("floor_grid.py"):   # wrong where its grid's floor leaves the tail unwritten
        assert statuses["CMP001"] == "confirmed" and runs[1].environment["sessions"] == 3, said[1]
    else:
        assert all(status == "refuted" for code, status in statuses.items()), said[1]
        assert runs[1].environment["sessions"] == 5 and sorted(own) == sorted(c for c in ran[None] if c != "baseline")


def test_a_protocol_broken_in_a_later_session_leaves_no_verdict_of_the_run_trusted(tmp_path) -> None:
    """A candidate that behaves on the problem's own inputs and forges a status line only once
    NaN reaches it (EXC001's session): INT001 confirmed, and the first session's refutations
    no longer stand, as in one session."""
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    source = (KB / "hostile" / "level1_problem6_status_forgery.py").read_text()
    marker = "        forged = b'"
    candidate = tmp_path / "level1_problem6_forges_on_nan.py"
    candidate.write_text(source.replace(marker, "        if not torch.isnan(x).any():\n"
                                                "            return leaky_relu(x, self.negative_slope)\n" + marker, 1))
    harness = find_harness(str(candidate), kernelbench=str(KB))
    run = run_gates(harness, ["CMP001", "EXC001", "MEM002"],
                    options=Options(mode="cpu", limits=Limits(case_seconds=60), held_budget=1))
    verdicts = {v.code: v for v in run.verdicts}
    assert run.environment["sessions"] == 3
    assert verdicts["INT001"].status == "confirmed" and "12345" in verdicts["INT001"].summary
    assert all(verdicts[code].status == "unconfirmed" and "worker protocol" in verdicts[code].summary
               for code in ("CMP001", "EXC001", "MEM002")), run.verdicts


@pytest.mark.parametrize("held", ["0", "1"])
def test_a_confirmation_of_a_later_session_has_a_witness_that_replays(tmp_path, monkeypatch, held) -> None:
    """MEM002 confirmed in a session of its own (an in-place bias and ReLU): its witness holds the
    windows cut before that session's judge ended, and replays to the same failure."""
    from kanalyze.dynamic import witness
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    monkeypatch.setenv("KANALYZE_JUDGE_HELD", held)
    harness = find_harness(str(KB / "candidates" / "level1_problem7_bias_relu_inplace.py"), kernelbench=str(KB))
    run = run_gates(harness, ["CMP001", "MEM002"],
                    options=Options(mode="cpu", limits=Limits(case_seconds=60), held_budget=1))
    assert run.environment["sessions"] == 2
    [confirmed] = [v for v in run.verdicts if v.code == "MEM002"]
    assert confirmed.status == "confirmed", confirmed.summary
    assert confirmed.arrays and all(isinstance(a, np.ndarray) for a in confirmed.arrays.values()), confirmed.arrays
    path = witness.write(confirmed, harness, run.environment, str(tmp_path / "witnesses"))
    again = witness.replay(path, Options(mode="cpu", limits=Limits(case_seconds=60)))
    assert (again.code, again.status) == ("MEM002", "confirmed"), again.summary


def test_a_flagged_gate_runs_first_and_a_session_past_the_deadline_says_so() -> None:
    """With gates in sessions of their own, the flagged clause's session comes first after the
    first one; with a deadline already past once the first session ends, no later session
    starts, and each of their gates says why (unconfirmed), while the first session's verdicts
    stand."""
    import time

    from kanalyze.audit.summary import OUT_OF_TIME
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    harness = find_harness(str(KB / "candidates" / "level1_problem6_leaky_relu.py"), kernelbench=str(KB))
    codes, flags = ["CMP001", "EXC001", "MEM002", "RES001"], {"MEM002": [{"row": 1, "kernel": None, "message": "m"}]}
    limits = Limits(case_seconds=120)
    run = run_gates(harness, codes, flags, Options(mode="cpu", limits=limits, held_budget=1))
    order = [c["gate"] for c in run.environment["case_seconds"] if c["case"] != "baseline"]
    assert order and order[0] == "CMP001" and order[order.index("CMP001", 0) + order.count("CMP001")] == "MEM002", order
    assert "out_of_time" not in run.environment

    run = run_gates(harness, codes, flags, Options(mode="cpu", limits=limits, held_budget=1,
                                                   deadline=time.perf_counter()))
    verdicts = {v.code: v for v in run.verdicts}
    assert run.environment["sessions"] == 1 and sorted(run.environment["out_of_time"]) == ["EXC001", "MEM002", "RES001"]
    assert verdicts["CMP001"].status == "refuted", verdicts["CMP001"].summary
    for code in ("EXC001", "MEM002", "RES001"):
        assert verdicts[code].status == "unconfirmed" and verdicts[code].summary.startswith(OUT_OF_TIME), verdicts[code]
        assert "4 sessions" in verdicts[code].summary
