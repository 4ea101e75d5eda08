"""`kanalyze.Verifier` on the CPU (Triton's interpreter): one problem, a loop of candidates.

fixtures/kernelbench's leaky ReLU problem against its MEM001 plant (as a path, then
as a source string: the second call reuses the reference), its clean twin (passes),
a source with a syntax error and one with no `ModelNew` (invalid, nothing started),
and hostile candidates that hang and segfault (rejected, with the reason).  Targeted
gates, the problem's small sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())
PROBLEM = KB / "level1" / "6_leaky_relu.py"
PLANT = KB / "candidates" / CONTROLS["MEM001"]["plant"]
TWIN = KB / "candidates" / CONTROLS["MEM001"]["twin"]
SYNTAX_ERROR = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"


def test_import_kanalyze_stays_light() -> None:
    """`import kanalyze` (and reaching `kanalyze.Verifier`) imports neither torch, triton nor libcst."""
    probe = ("import sys, kanalyze\nlight = [m for m in ('torch', 'triton', 'libcst') if m in sys.modules]\n"
             "from kanalyze import Verifier\n"
             "print(light, [m for m in ('torch', 'triton', 'libcst') if m in sys.modules], Verifier.__name__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "[] [] Verifier", done.stdout + done.stderr


def test_misuse_raises_before_anything_starts(tmp_path) -> None:
    from kanalyze import Verifier

    with pytest.raises(FileNotFoundError):
        Verifier(tmp_path / "missing.py", device="cpu")
    with pytest.raises(ValueError, match="get_init_inputs"):
        Verifier("import torch\nclass Model: pass\ndef get_inputs(): return []\n", device="cpu")
    with pytest.raises(ValueError, match="not valid Python"):
        Verifier("import torch\nclass Model(:\n", device="cpu")
    with pytest.raises(ValueError, match="MEM001"):
        Verifier(PROBLEM, device="cpu", gates=["MEM01"])


def test_the_outcome_contract() -> None:
    """rejected > violation > unconfirmed > passed; only `passed` passes, flagged-only clauses aside."""
    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.verifier import TOLERANCE_FREE, Allclose, Clause, _outcome

    assert TOLERANCE_FREE <= set(gates_by_code())
    accept, refuse = Allclose("PASS", "5 trials"), Allclose("FAIL", "trial 0: max abs error 3")
    confirmed = Clause("MEM002", "confirmed", "input 0 changed", True, (9,), "/w.json", True)
    unconfirmed = Clause("ORD001", "unconfirmed", "no address got three programs", True)
    refuted = Clause("MEM001", "refuted", "all written", False)
    flagged = Clause("CMP003", "flagged-only", "a literal size", True, (4,))
    assert _outcome({"MEM002": confirmed}, refuse) == ("rejected", "allclose FAIL: trial 0: max abs error 3; "
                                                                  "MEM002 confirmed: input 0 changed")
    assert _outcome({"MEM002": confirmed, "ORD001": unconfirmed}, accept)[0] == "violation"
    assert _outcome({"ORD001": unconfirmed, "MEM001": refuted}, accept) == (
        "unconfirmed", "ORD001 unconfirmed: no address got three programs")
    assert _outcome({"MEM001": refuted, "CMP003": flagged}, accept) == (
        "passed", "allclose PASS (5 trials); refuted: MEM001")
    # Nothing flagged: the baseline is the only gate that ran, and it must have been decided.
    died = {"status": "undecided", "summary": "the reference crashed: the worker exited with code 70"}
    assert _outcome({}, accept, died) == (
        "unconfirmed", "baseline undecided: the reference crashed: the worker exited with code 70")
    assert _outcome({}, accept, {"status": "passed", "summary": "within the calibrated bound"})[0] == "passed"
    # KernelBench's check could not run the problem: no word on the candidate, never a rejection.
    broken = Allclose("UNAVAILABLE", "the check could not run the problem: RuntimeError: CUDA error 304")
    assert _outcome({"MEM001": refuted}, broken) == (
        "unconfirmed", "allclose UNAVAILABLE: the check could not run the problem: RuntimeError: CUDA error 304")
    assert _outcome({"MEM002": confirmed}, broken)[0] == "violation"


pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    from kanalyze import Verifier
    from kanalyze.dynamic.sandbox import zygote_client

    witnesses = tmp_path_factory.mktemp("witnesses")
    started = time.monotonic()
    verifier = Verifier(str(PROBLEM), device="cpu", gates="targeted", case_timeout=20, timeout=40,
                        witness_dir=str(witnesses))
    timings = {"construct": time.monotonic() - started}
    candidates = {"plant": PLANT, "plant again, as source": PLANT.read_text(), "twin": TWIN.read_text(),
                  "syntax error": SYNTAX_ERROR, "no ModelNew": KB / "hostile" / "level1_problem6_no_model_new.py",
                  "hang": KB / "hostile" / "level1_problem6_hang.py",
                  "segfault": KB / "hostile" / "level1_problem6_segfault.py"}
    results = {}
    with verifier:
        assert verifier.workers == "zygote"
        for name, candidate in candidates.items():
            started = time.monotonic()
            results[name] = verifier.verify(candidate)
            timings[name] = time.monotonic() - started
        folder = verifier._folder
    print("\n" + "\n".join(f"{name}: {seconds:.2f} s" for name, seconds in timings.items()))
    return {"results": results, "timings": timings, "folder": folder, "verifier": verifier,
            "zygotes": zygote_client.status(), "witnesses": witnesses}


def test_a_plant_is_confirmed_with_a_witness(loop) -> None:
    result = loop["results"]["plant"]
    assert not result.passed and result.outcome == "rejected"       # allclose sees the unwritten tail too
    assert result.allclose.verdict == "FAIL"
    mem001 = result.clauses["MEM001"]
    assert mem001.status == "confirmed" and mem001.flagged and mem001.tolerance_free
    assert "still hold the sentinel" in mem001.message
    assert mem001.witness and Path(mem001.witness).is_file()
    assert Path(mem001.witness).parent == loop["witnesses"]
    assert "MEM001 confirmed" in result.reason and "allclose FAIL" in result.reason
    assert set(result.seconds) >= {"static", "gates", "allclose", "total"}


def test_the_second_call_reuses_the_reference(loop) -> None:
    first, second = loop["results"]["plant"], loop["results"]["plant again, as source"]
    assert first.references["computed"] > 0
    # every reference outcome the first call needed (computed, or reused within that call) is reused
    assert second.references == {"reused": sum(first.references.values()), "computed": 0}
    assert {c: v.status for c, v in second.clauses.items()} == {c: v.status for c, v in first.clauses.items()}
    # a source string's file is kept while a witness refers to it
    assert Path(second.clauses["MEM001"].witness).is_file()


def test_the_clean_twin_passes(loop) -> None:
    result = loop["results"]["twin"]
    assert result.passed and result.outcome == "passed", result.reason
    assert result.allclose.verdict == "PASS"
    assert result.baseline["status"] == "passed", result.baseline
    assert not any(c.status in ("confirmed", "unconfirmed") for c in result.clauses.values())
    assert isinstance(result.contained, tuple) and all(isinstance(gap, str) for gap in result.contained)


def test_invalid_sources_are_refused_at_once(loop) -> None:
    syntax = loop["results"]["syntax error"]
    assert not syntax.passed and syntax.outcome == "invalid"
    assert syntax.reason.startswith("KAN000 cannot parse: ") and "line 3" in syntax.reason
    assert syntax.clauses["KAN000"].rows == (3,)
    assert syntax.allclose.verdict == "SKIPPED" and syntax.seconds["total"] < 2
    missing = loop["results"]["no ModelNew"]
    assert missing.outcome == "invalid" and "defines no `ModelNew`" in missing.reason


def test_hostile_candidates_give_a_clear_non_passing_result(loop) -> None:
    hang, crash = loop["results"]["hang"], loop["results"]["segfault"]
    assert not hang.passed and hang.outcome == "rejected"
    assert hang.allclose.verdict == "TIMEOUT" and hang.reason.startswith("allclose TIMEOUT: no verdict within")
    assert not crash.passed and crash.outcome == "rejected"
    assert crash.allclose.verdict == "CRASHED" and crash.reason.startswith("allclose CRASHED")


def test_close_releases_everything(loop) -> None:
    assert not os.path.exists(loop["folder"])
    assert "cpu" not in loop["zygotes"]                     # the last open Verifier shut the zygote down
    with pytest.raises(RuntimeError, match="closed"):
        loop["verifier"].verify(TWIN)
    assert Path(loop["results"]["plant"].clauses["MEM001"].witness).is_file()   # a witness_dir of the caller's
