"""Inputs drawn again and handed over as the candidate's case starts (sandbox/delivery.py).

On a GPU (and on the CPU with KANALYZE_DELIVER_INPUTS=1) the reference worker saves none
of the inputs it drew (except those a gate compares in kanalyze): it offers how to draw
them and a digest of each.  When the candidate's case
starts, the session's reference worker draws them again and hands them over; the digests
must match bit for bit.  A problem whose `get_inputs` draws other values under the same
seed leaves its gates undecided with that reason: a candidate is never judged on inputs
the reference did not see.  (On a GPU the handing over goes through CUDA IPC into
buffers of the candidate's worker: tests/test_device_share.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic.cases import Case  # noqa: E402
from kanalyze.dynamic.runner import cuda_present  # noqa: E402
from kanalyze.dynamic.sandbox.delivery import digest  # noqa: E402
from kanalyze.dynamic.sandbox.reference_side import ReferenceSide  # noqa: E402
from kanalyze.dynamic.sandbox.transport import ArrayFolder, numpy_to_tensor  # noqa: E402

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
PROBLEM = KB / "level1" / "8_linear_relu.py"
SIZES = {"batch_size": 32, "in_features": 64, "out_features": 64}


def test_a_digest_tells_every_bit_and_every_position() -> None:
    x = torch.randn(3, 1000)
    assert digest(x) == digest(x.clone())
    flipped = x.clone()
    flipped.view(torch.int32)[1, 7] ^= 1   # the last bit of one element
    swapped = x.clone()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    shaped = x.reshape(1000, 3)
    assert len({digest(x), digest(flipped), digest(swapped), digest(shaped), digest(x.double())}) == 5
    for odd in (torch.tensor([True, False, True]), torch.zeros(0, 4), torch.ones(5, dtype=torch.bfloat16),
                torch.arange(7, dtype=torch.int8), torch.tensor(2.5)):
        assert digest(odd) == digest(odd.clone())
    assert digest(torch.tensor([True, False, True])) != digest(torch.tensor([True, True, False]))


def _case(seed: int, **more) -> dict:
    return Case(f"c{seed}", "CMP001", dict(SIZES), seed=seed, model_seed=0, **more).to_dict()


def test_buffers_the_reference_side_cannot_open_are_filled_through_a_folder(tmp_path: Path, monkeypatch) -> None:
    """On a GPU the candidate's worker sends device buffers for its inputs; where the reference
    worker cannot write into them (an H100 once said "mapping of buffer object failed"), it asks
    once more without them and reads the same arrays from a folder.  A second refusal stays
    kanalyze's failure."""
    import numpy as np

    from kanalyze.dynamic.sandbox import delivery, device_share
    from kanalyze.dynamic.sandbox.transport import save_arrays

    save_arrays(str(tmp_path / "drawn"), {"input0": np.arange(6, dtype=np.float32).reshape(2, 3)})
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda shape, dtype, device: empty(shape, dtype=dtype))   # no device here
    monkeypatch.setattr(device_share, "export", lambda tensor: {"handle": "a CUDA IPC handle"})
    offered = {"arrays": {"input0": {"dtype": "float32", "shape": [2, 3]}}}
    asked = []

    def ask(handles):
        asked.append(handles)
        if handles is not None:
            return {"error": "CUDA error: mapping of buffer object failed"}
        return {"folder": str(tmp_path / "drawn")}

    got = delivery.receive(offered, "cuda", True, ask)
    assert asked == [{"input0": {"handle": "a CUDA IPC handle"}}, None]
    assert np.array_equal(np.asarray(got["input0"]), np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(delivery.Undelivered, match="digest"):
        delivery.receive(offered, "cuda", True, lambda handles: {"error": "the digest does not match"})


def test_another_reference_worker_draws_the_same_inputs_again(tmp_path: Path) -> None:
    first = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    result = first.run(_case(3, repeat_new_values=True), str(tmp_path / "case-3"), str(tmp_path / "inputs-3"))
    assert result["status"] == "ok"
    offered = result["deliver"]
    assert sorted(offered["arrays"]) == ["in0", "second_in0"]
    assert not (tmp_path / "inputs-3" / "in0.npy").exists(), "drawn again, not saved"

    second = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    assert second.fill(offered, None, str(tmp_path / "delivered")) is None
    folder = ArrayFolder(str(tmp_path / "delivered"))
    for key, spec in offered["arrays"].items():
        assert digest(numpy_to_tensor(folder[key], spec["dtype"])) == spec["digest"]

    forged = {**offered, "arrays": {**offered["arrays"], "in0": {**offered["arrays"]["in0"], "digest": "float32:0:0"}}}
    assert "drew other values for input in0" in second.fill(forged, None, str(tmp_path / "again"))
    assert "other inputs than the case's" in second.fill(offered, {"in0": {}}, None)


def test_upstream_gradients_are_offered_and_drawn_again_not_saved(tmp_path: Path) -> None:
    """CMP002's upstream gradients are as large as the outputs (1 GiB at a real size): offered
    like the inputs, drawn again from the case's seed, never written beside the reference."""
    side = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    result = side.run(_case(5, gradients=True), str(tmp_path / "case-5"), str(tmp_path / "inputs-5"))
    assert result["status"] == "ok" and "gradients_error" not in result, result.get("gradients_error")
    offered = result["deliver"]
    assert sorted(offered["arrays"]) == ["in0", "upstream0"]
    assert not (tmp_path / "inputs-5" / "upstream0.npy").exists(), "drawn again, not saved"
    other = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    assert other.fill(offered, None, str(tmp_path / "delivered")) is None
    upstream = numpy_to_tensor(ArrayFolder(str(tmp_path / "delivered"))["upstream0"], "float32")
    assert list(upstream.shape) == [SIZES["batch_size"], SIZES["out_features"]]
    assert digest(upstream) == offered["arrays"]["upstream0"]["digest"]
    assert other.fill({**offered, "case": {**offered["case"], "seed": 6}}, None, str(tmp_path / "other")) is not None


def test_inputs_a_gate_compares_are_saved_with_the_reference(tmp_path: Path) -> None:
    side = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    result = side.run(_case(4, return_inputs=True), str(tmp_path / "case-4"), str(tmp_path / "inputs-4"))
    assert "deliver" not in result and (tmp_path / "inputs-4" / "in0.npy").exists()


def test_a_problem_that_draws_other_inputs_each_time_is_undecided_not_judged(tmp_path: Path) -> None:
    """`get_inputs` that reads the clock: the candidate's worker cannot be given the reference's
    inputs, so its gates say why they could not decide; nothing is confirmed against it."""
    problem = tmp_path / "clocked_problem.py"
    problem.write_text((KB / "level1" / "10_scale.py").read_text().replace(
        "    return [torch.randn(batch_size, dim)]",
        "    import time\n    return [torch.randn(batch_size, dim) + time.perf_counter_ns() % 997]", 1))
    candidate = tmp_path / "scale.py"
    candidate.write_text((KB / "candidates" / "level1_problem10_scale_plain.py").read_text())
    done = subprocess.run([sys.executable, "-m", "kanalyze", "check", candidate.name, "--gates", "EXC001",
                           "--reference", problem.name, "--device", "cpu", "--no-cache", "--output-format", "json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**os.environ, "KANALYZE_DELIVER_INPUTS": "1"})   # (the CPU's default: saved)
    assert "drew other values for input in0 a second time" in done.stderr + done.stdout, done.stderr[-2000:]
    assert '"confirmed"' not in done.stdout, done.stdout[-2000:]


def test_a_session_hands_the_inputs_over_as_each_case_starts(monkeypatch) -> None:
    """Every gate of a plant and its twin, their inputs drawn again for each case (the protocol
    a GPU run uses, through folders here): the same verdicts as with the inputs saved."""
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    verdicts = {}
    for deliver in ("0", "1"):
        monkeypatch.setenv("KANALYZE_DELIVER_INPUTS", deliver)
        for name, codes in (("level1_problem2_tanh_exp_ratio.py", ["EXC001", "CMP003"]),
                            ("level1_problem6_leaky_relu_cached_result.py", ["INT001", "MEM002"])):
            REFERENCES.clear()
            harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
            run = run_gates(harness, codes, options=Options(mode="cpu", limits=Limits(case_seconds=60)))
            verdicts.setdefault(deliver, []).extend(sorted((name, v.code, v.status) for v in run.verdicts))
    assert verdicts["1"] == verdicts["0"], verdicts
    assert {("level1_problem2_tanh_exp_ratio.py", "EXC001", "confirmed"),
            ("level1_problem6_leaky_relu_cached_result.py", "INT001", "confirmed"),
            ("level1_problem6_leaky_relu_cached_result.py", "MEM002", "refuted")} <= set(verdicts["1"]), verdicts


def test_the_state_is_offered_not_saved_and_drawn_again_from_the_same_seed(tmp_path: Path) -> None:
    side = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    result = side.run(_case(5), str(tmp_path / "case-5"), str(tmp_path / "inputs-5"))
    offered = result["deliver_state"]
    assert result["state"] == ["linear.weight", "linear.bias"] and sorted(offered["arrays"]) == ["state0", "state1"]
    assert not (tmp_path / "inputs-5" / "state0.npy").exists()
    other = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None, deliver=True)
    assert other.fill(offered, None, str(tmp_path / "state")) is None
    folder = ArrayFolder(str(tmp_path / "state"))
    assert all(digest(numpy_to_tensor(folder[k], s["dtype"])) == s["digest"] for k, s in offered["arrays"].items())


GPU = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not cuda_present(), reason="needs a CUDA device")])


@pytest.mark.parametrize("mode", ["cpu", GPU])
@pytest.mark.parametrize("init, crosses", [("", False), ("        torch.nn.init.zeros_(self.linear.weight)\n", True)])
def test_a_candidate_gets_the_reference_s_weights_only_where_its_own_differ(tmp_path, monkeypatch, init, crosses,
                                                                            mode) -> None:
    """A ModelNew with the problem's parameters, seeded alike, already holds the reference's
    weights: nothing crosses.  One whose own values differ (zeroed here) is given them, and then
    computes what the reference does: a failed hand-over would show as a wrong value (CMP001).
    On a GPU (where handing over is the default) through CUDA IPC into the candidate's buffers."""
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    source = (KB / "candidates" / "level1_problem8_linear_relu_fused.py").read_text()
    marker = "        self.linear = nn.Linear(in_features, out_features)\n"
    candidate = tmp_path / "level1_problem8_linear_relu_own_init.py"
    candidate.write_text(source.replace(marker, marker + init, 1))
    if mode == "cpu":
        monkeypatch.setenv("KANALYZE_DELIVER_INPUTS", "1")
    REFERENCES.clear()
    run = run_gates(find_harness(str(candidate), kernelbench=str(KB)), ["CMP001"],
                    options=Options(mode=mode, limits=Limits(case_seconds=60)))
    assert [(v.code, v.status) for v in run.verdicts] == [("CMP001", "refuted")], run.verdicts
    steps = run.environment["seconds"]
    assert steps.get("candidate.inputs", 0.0) > 0   # the inputs were handed over as each case started
    assert ("candidate.state" in steps) == crosses, steps
    # each candidate case's own account, named by gate and case, adds up to the candidate's steps
    cases = run.environment["case_seconds"]
    assert {c["case"] for c in cases} >= {"baseline"} and all(c["seconds"] > 0 for c in cases), cases
    assert sum(c["seconds"] for c in cases) == pytest.approx(
        sum(v for k, v in steps.items() if k.startswith("candidate.")), abs=0.01 * len(cases))
