"""The baseline runs first through both sides (Session.execute).

A candidate that fails on the problem's own inputs blocks every gate, so the
other cases' references are not computed: at KernelBench's real sizes (a
Conv2d over 64×64×256×256 inputs) a non-importing candidate took kanalyze past
200 s on an H200 while the check it replaces said ERROR in 10 s.
"""

from __future__ import annotations

from pathlib import Path

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates.base import CONFIRMED, UNCONFIRMED
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox.process import Limits
from kanalyze.dynamic.session import BASELINE, Session

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
PROBLEM = KB / "level1" / "8_linear_relu.py"
GOOD = KB / "candidates" / "level1_problem8_linear_relu_torch_matmul.py"


def _cases() -> list[Case]:
    sizes = {"batch_size": 32, "in_features": 64, "out_features": 64}
    return [Case(BASELINE, "", sizes, seed=0, model_seed=0),
            Case("CMP001/normal", "CMP001", sizes, seed=11, distribution="normal", model_seed=0)]


def _execute(candidate: Path) -> list:
    session = Session(find_harness(str(candidate), reference=str(PROBLEM)), "cpu", Limits())
    try:
        return session.execute(_cases())
    finally:
        session.close()


def test_a_candidate_that_does_not_import_costs_one_reference(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("from torch._inductor.runtime.triton_heuristics import no_such_name\n" + GOOD.read_text())
    baseline, other = _execute(broken)
    assert baseline.reference_ok and not baseline.candidate_ok
    assert other.reference.status == "not-started" and "skipped" in other.reference.detail
    assert other.kanalyze_failure() is None, "the candidate's own failure, not kanalyze's"


def test_a_working_candidate_gets_every_case(tmp_path: Path) -> None:
    baseline, other = _execute(GOOD)
    assert baseline.candidate_ok and other.reference_ok and other.candidate_ok
    # The baseline's float64 reference came once the candidate had run there, as the others'.
    for result in (baseline, other):
        assert result.expected64 and "output64_later" not in result.reference.meta, result.reference.meta


def test_the_float64_reference_waits_for_the_candidates_baseline(tmp_path: Path) -> None:
    """On the first run of a problem, the baseline's float64 reference (at a real size, seconds
    of a GPU's float64 convolution) is computed only once the candidate has run there: one that
    fails there never waits for it, and a reference without it is not kept.  A later run of the
    problem in the same process (the Verifier's next candidate) computes it at once, to keep."""
    from kanalyze.dynamic.reference_cache import REFERENCES

    REFERENCES.clear()
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_anywhere\n" + GOOD.read_text())
    harness = find_harness(str(broken), reference=str(PROBLEM))
    baseline, _ = _execute(broken)
    assert baseline.reference.meta.get("output64_later") and "output64" not in baseline.reference.meta
    assert REFERENCES.get(harness, "cpu", baseline.case.input_key, False) is None
    baseline, _ = _execute(broken)   # the problem's second run: computed at once, and kept
    assert "output64" in baseline.reference.meta and "output64_later" not in baseline.reference.meta
    assert REFERENCES.get(harness, "cpu", baseline.case.input_key, False) is not None
    baseline, _ = _execute(GOOD)
    assert baseline.expected64 and "output64_later" not in baseline.reference.meta


def test_the_verdicts_of_a_candidate_that_does_not_import(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_anywhere\n" + GOOD.read_text())
    run = run_gates(find_harness(str(broken), reference=str(PROBLEM)), ["CMP001", "EXC001", "CMP003"], {},
                    Options(mode="cpu"))
    verdicts = {v.code: v for v in run.verdicts}
    assert verdicts["CMP001"].status == CONFIRMED and "does not import" in verdicts["CMP001"].summary
    for code in ("EXC001", "CMP003"):
        assert verdicts[code].status == UNCONFIRMED
        assert "fails on the problem's own inputs" in verdicts[code].summary, verdicts[code].summary


def test_value_gates_the_baseline_decides_run_no_case(monkeypatch) -> None:
    """A candidate already wrong on the problem's own inputs (a grid whose floor leaves the tail
    unwritten): the value gates no static flag asked for are decided by that alone, so where the
    judge can compare the baseline while the session runs (arrays held: a GPU's default) their
    cases are never run, and the verdicts are word for word those of a run that ran them all
    (arrays saved: compared only once the session ends).  A flagged one still runs its cases."""
    from kanalyze.dynamic.reference_cache import REFERENCES

    candidate = KB / "candidates" / "level1_problem6_leaky_relu_floor_grid.py"
    codes = ["CMP001", "CMP003", "EXC001", "EXC002", "MEM002"]
    said, ran = {}, {}
    for held in ("0", "1"):
        REFERENCES.clear()   # (references kept from an earlier run are files, read once the session ends)
        monkeypatch.setenv("KANALYZE_JUDGE_HELD", held)
        run = run_gates(find_harness(str(candidate), kernelbench=str(KB)), codes, {},
                        Options(mode="cpu", limits=Limits(case_seconds=120)))
        said[held] = [(v.code, v.status, v.summary) for v in run.verdicts]
        ran[held] = {c["case"].split("/")[0] for c in run.environment["case_seconds"]}
    assert said["1"] == said["0"], said
    statuses = {code: status for code, status, _ in said["1"]}
    assert statuses["CMP001"] == CONFIRMED and all(statuses[c] == UNCONFIRMED for c in ("CMP003", "EXC001", "EXC002"))
    assert {"CMP003", "EXC001", "EXC002"} <= ran["0"], ran["0"]
    assert ran["1"] == {"baseline", "CMP001", "MEM002"}, ran["1"]
    flagged = run_gates(find_harness(str(candidate), kernelbench=str(KB)), codes, {"CMP003": [{"row": 1}]},
                        Options(mode="cpu", limits=Limits(case_seconds=120)))
    assert any(c["gate"] == "CMP003" for c in flagged.environment["case_seconds"])
    assert {v.code: v.status for v in flagged.verdicts}["CMP003"] == CONFIRMED, flagged.verdicts


def test_prc002_plans_from_the_shapes_of_the_baselines_outputs(tmp_path: Path) -> None:
    """PRC002 lengthens the knobs a reduction runs over: those that are no dimension of the
    reference's output.  It plans once the baseline has run, from the shapes of the reference's
    outputs there (no pass of the problem on the meta device beforehand)."""
    problem = tmp_path / "level1" / "4_row_mean.py"
    problem.parent.mkdir()
    problem.write_text((KB / "level1" / "4_mean_fp16.py").read_text().replace("batch_size = 16", "batch_size = 64"))
    candidate = tmp_path / "level1_problem4_mean_fp32_acc.py"
    candidate.write_text((KB / "candidates" / "level1_problem4_mean_fp32_acc.py").read_text())
    run = run_gates(find_harness(str(candidate), reference=str(problem)), ["PRC002"], {}, Options(mode="cpu"))
    cases = {case.id for verdict in run.verdicts for case in verdict.cases}
    assert any(case.startswith("PRC002/dim=") for case in cases), cases        # the row's length: reduced
    assert not any(case.startswith("PRC002/batch_size=") for case in cases), cases   # a dimension of the output
    assert {v.code: v.status for v in run.verdicts}["PRC002"] == "refuted", run.verdicts


def _slow_problem(tmp_path: Path) -> Path:
    """The problem with a reference that takes a while per case (0.4 s a call)."""
    slow = tmp_path / "slow_problem.py"
    slow.write_text(PROBLEM.read_text().replace("import torch\n", "import time\nimport torch\n", 1)
                    .replace("    def forward(self, x):\n", "    def forward(self, x):\n        time.sleep(0.4)\n", 1))
    assert "time.sleep" in slow.read_text()
    return slow


def test_the_candidate_runs_while_later_references_are_computed(tmp_path: Path) -> None:
    """After the baseline, a second reference worker computes the other cases' references while
    the candidate's worker runs each case whose reference has come (ahead.py): with a reference
    that takes a while per case, the candidate's side gets them in more than one stretch, and
    every case still gets both sides."""
    slow = _slow_problem(tmp_path)
    sizes = {"batch_size": 32, "in_features": 64, "out_features": 64}
    cases = [Case(BASELINE, "", sizes, seed=0, model_seed=0)] + [
        Case(f"CMP001/{d}", "CMP001", sizes, seed=11 + i, distribution=d, model_seed=0)
        for i, d in enumerate(("normal", "uniform", "large"))]
    session = Session(find_harness(str(GOOD), reference=str(slow)), "cpu", Limits())
    try:
        results = session.execute(cases)
        stretches = session.environment["stretches"]
    finally:
        session.close()
    assert all(r.reference_ok and r.candidate_ok for r in results), [r.case.id for r in results]
    assert sum(stretches) == 3 and len(stretches) >= 2, stretches
    assert "reference.ahead" in session.seconds


def test_a_session_that_ends_early_stops_the_references_computed_ahead(tmp_path: Path) -> None:
    """Closing the second reference worker while its thread still computes (a session ended by
    an error of kanalyze's or an interrupt) kills it and starts no other: the cases it had not
    reached are `not-started`, and the thread is gone."""
    from kanalyze.dynamic.ahead import SecondReference

    harness = find_harness(str(GOOD), reference=str(_slow_problem(tmp_path)))
    session = Session(harness, "cpu", Limits())
    sizes = {"batch_size": 32, "in_features": 64, "out_features": 64}
    cases = [(100 + i, {**Case(f"CMP001/{i}", "CMP001", sizes, seed=20 + i, model_seed=0).to_dict(),
                        "record_ops": False}) for i in range(8)]
    second = SecondReference("cpu", session.spec, Limits(), session.root, session.inputs)
    try:
        second.compute(cases)
        second.outcomes([100])          # the first has come: the others are on their way
        outcomes = second.close()
    finally:
        session.close()
    assert second.worker is None and second._job is None
    assert outcomes[100].status == "done"
    assert any(o.status == "not-started" for o in outcomes.values()), {i: o.status for i, o in outcomes.items()}


def test_a_reference_worker_that_dies_at_one_size_costs_that_case_only(tmp_path: Path) -> None:
    """The second reference worker ends at one of CMP003's sizes (here the problem's own code
    exits there): that case is kanalyze's loss, so CMP003 cannot refute, and the sizes after it
    run in a fresh worker; nothing is blamed on the candidate."""
    dying = tmp_path / "dying_problem.py"
    dying.write_text(PROBLEM.read_text().replace("import torch\n", "import os\nimport torch\n", 1).replace(
        "    def forward(self, x):\n", "    def forward(self, x):\n        if x.shape[0] == 33:\n"
                                      "            os._exit(3)\n", 1))
    assert "os._exit(3)" in dying.read_text()
    run = run_gates(find_harness(str(GOOD), reference=str(dying)), ["CMP003"], {},
                    Options(mode="cpu", limits=Limits(case_seconds=60)))
    [verdict] = [v for v in run.verdicts if v.code == "CMP003"]
    assert verdict.status == UNCONFIRMED, verdict.summary
    assert "1 of the gate's cases did not run" in verdict.summary and "reference worker" in verdict.summary
    assert "correct at 9 perturbed sizes" in verdict.summary, verdict.summary   # the others, after it
    assert "could not start" not in verdict.summary   # it had started: the problem's code exited


def test_a_case_whose_gate_reads_no_float64_gets_no_float64_reference() -> None:
    """A gate that compares bits or traces (Gate.needs_float64 False) plans cases without the
    float64 reference: none is computed for an input set only such cases use, and one shared
    with a value gate's case has it.  The cache gives a reference without it only to such cases."""
    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.dynamic.reference_cache import REFERENCES

    gates = gates_by_code()
    assert [code for code, gate in sorted(gates.items()) if not gate.needs_float64 and not gate.kernel_harness] \
        == ["EXC002", "MEM001", "MEM002", "ORD001", "ORD002", "RES001"]
    REFERENCES.clear()
    sizes = {"batch_size": 32, "in_features": 64, "out_features": 64}
    cases = _cases() + [Case("MEM002/own", "MEM002", sizes, seed=12, model_seed=0, float64=False),
                        Case("ORD002/shared", "ORD002", sizes, seed=11, distribution="normal", model_seed=0,
                             float64=False)]
    harness = find_harness(str(GOOD), reference=str(PROBLEM))
    session = Session(harness, "cpu", Limits())
    try:
        baseline, value, own, shared = session.execute(cases)
    finally:
        session.close()
    assert all(r.reference_ok and r.candidate_ok for r in (baseline, value, own, shared))
    assert "output64" not in own.reference.meta and "output64_error" not in own.reference.meta
    assert own.expected64 is None and own.expected                       # its working-dtype outputs only
    assert shared.case.input_key == value.case.input_key and shared.expected64 and value.expected64
    assert REFERENCES.get(harness, "cpu", own.case.input_key, False) is None
    assert REFERENCES.get(harness, "cpu", own.case.input_key, False, float64=False) is not None


def _with_a_variant(unneeded) -> tuple[list, dict]:
    """The baseline, a case of the candidate as written and one of a variant of it (its source
    unchanged: ORD001's control), through real workers; `unneeded` is the session's question."""
    from kanalyze.dynamic.cases import Run

    session = Session(find_harness(str(GOOD), reference=str(PROBLEM)), "cpu", Limits(),
                      variants={"control": GOOD.read_text()})
    session.unneeded = unneeded
    sizes = {"batch_size": 32, "in_features": 64, "out_features": 64}
    cases = _cases()[:1] + [Case("ORD001/runs", "ORD001", sizes, seed=5, runs=[Run(), Run()], model_seed=0),
                            Case("ORD001/control", "ORD001", sizes, seed=5, variant="control", model_seed=0)]
    try:
        return session.execute(cases), session.environment
    finally:
        session.close()


def test_a_variant_case_its_gate_calls_unneeded_is_not_run() -> None:
    """Gate.unneeded, asked before a variant's case runs (ORD001's control once the reversed order
    agreed): the case is left unrun, which is no case lost to kanalyze, and the run says why."""
    asked = []

    def unneeded(results, i):
        asked.append(results[i].case.id)
        ran = results[i - 1]   # the case of the candidate as written ran first, and is in hand
        return "decided without it" if ran.candidate_ok else None

    (_, original, control), environment = _with_a_variant(unneeded)
    assert asked == ["ORD001/control"]                    # asked of variants' cases only
    assert original.candidate_ok and control.candidate is None and control.kanalyze_failure() is None
    assert environment["not_needed"] == [{"gate": "ORD001", "case": "ORD001/control", "why": "decided without it"}]
    assert all(c["variant"] == "original" for c in environment["case_seconds"])

    (_, original, control), environment = _with_a_variant(lambda results, i: None)
    assert original.candidate_ok and control.candidate_ok and "not_needed" not in environment
    assert [c["variant"] for c in environment["case_seconds"]].count("control") == 1
