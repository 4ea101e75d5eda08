"""Each side builds a problem's model once per run, as KernelBench does (issue 11, item 2).

A run's cases share one model seed (`Case.model_seed`): the reference worker
builds the model once per sizes and dtype, saves its state once and hard-links
it into every case's inputs; the candidate's worker builds `ModelNew` once,
gives it that state, and restores it before every later case.  A model's
weights can be gigabytes (KernelBench's MLP: 2.5 GB): building and moving them
once per case was most of a run's time.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates.base import REFUTED
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox.execute import CandidateSide, model_key, reference_model_key
from kanalyze.dynamic.sandbox.reference_side import ReferenceSide
from tests.observed import observed_for

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
PROBLEM = KB / "level1" / "8_linear_relu.py"
SIZES = {"batch_size": 32, "in_features": 64, "out_features": 64}


def _case(seed: int, model_seed: int | None = 0, **sizes) -> dict:
    return Case(f"c{seed}", "CMP001", {**SIZES, **sizes}, seed=seed, model_seed=model_seed).to_dict()


def test_the_reference_builds_its_model_once_and_saves_its_state_once(tmp_path: Path) -> None:
    side = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None)
    built = []
    results = []
    for seed in (1, 2, 3):
        results.append(side.run(_case(seed), str(tmp_path / f"case-{seed}"), str(tmp_path / f"inputs-{seed}")))
        built.append(len(side._models))
    assert [r["status"] for r in results] == ["ok"] * 3
    assert built == [1, 1, 1]
    inodes = {os.stat(tmp_path / f"inputs-{seed}" / "state0.npy").st_ino for seed in (1, 2, 3)}
    assert len(inodes) == 1, "the state is saved once and linked into each case's inputs"
    first = np.load(tmp_path / "inputs-1" / "state0.npy")
    # The inputs still differ per case: only the weights are shared.
    assert not np.array_equal(np.load(tmp_path / "inputs-1" / "in0.npy"), np.load(tmp_path / "inputs-2" / "in0.npy"))

    other = side.run(_case(4, model_seed=7), str(tmp_path / "case-4"), str(tmp_path / "inputs-4"))
    assert other["status"] == "ok"
    assert not np.array_equal(first, np.load(tmp_path / "inputs-4" / "state0.npy")), "another model seed, other weights"
    old = side.run(_case(5, model_seed=None), str(tmp_path / "case-5"), str(tmp_path / "inputs-5"))
    assert old["status"] == "ok", "a witness written before model seeds existed still replays (its seed builds it)"


class _Counted(torch.nn.Module):
    builds = 0

    def __init__(self, features: int) -> None:
        super().__init__()
        type(self).builds += 1
        self.linear = torch.nn.Linear(features, features)

    def forward(self, x):
        return self.linear(x)


class _Module:
    ModelNew = _Counted


def test_the_candidate_builds_once_and_gets_its_state_back_before_each_case() -> None:
    _Counted.builds = 0
    side = CandidateSide({"kind": "kernelbench"}, "cpu", _Module(), env=None)
    state = {"linear.weight": torch.ones(4, 4), "linear.bias": torch.zeros(4)}
    case = _case(1, in_features=4)
    key = model_key(case)
    assert side._model(key, case, [4], state) is True
    model = side.built[1]
    with torch.no_grad():
        model.linear.weight.mul_(5.0)   # what a candidate may do to its own parameters
    model.linear.weight.grad = torch.ones(4, 4)
    assert side._model(key, _case(2, in_features=4), [4], {}) is True
    assert _Counted.builds == 1 and side.built[1] is model
    assert torch.equal(model.linear.weight, torch.ones(4, 4)), "the state it was given is restored"
    assert model.linear.weight.grad is None

    other = _case(3, in_features=8)
    assert model_key(other) != key
    side.built = None   # what run() does when a case's model key differs from the kept one
    side._model(model_key(other), other, [8], {})
    assert _Counted.builds == 2, "other sizes: another model"


def test_a_run_builds_the_candidate_model_once(tmp_path: Path) -> None:
    """End to end on the interpreter: the baseline and every CMP001 case (six input
    distributions, each its own seed) share one `ModelNew`, and the verdict still stands."""
    candidate = tmp_path / "counted_linear_relu.py"
    candidate.write_text((KB / "candidates" / "level1_problem8_linear_relu_torch_matmul.py").read_text().replace(
        "        super().__init__()\n",
        "        super().__init__()\n"
        "        import os, uuid\n"
        "        folder = os.path.join(os.path.dirname(__file__), 'observed')\n"
        "        if os.path.isdir(folder):\n"
        "            open(os.path.join(folder, 'built-' + uuid.uuid4().hex), 'w').close()\n", 1))
    observed = observed_for(candidate)
    run = run_gates(find_harness(str(candidate), reference=str(PROBLEM)), ["CMP001"], {}, Options(mode="cpu"))
    verdict = next(v for v in run.verdicts if v.code == "CMP001")
    assert verdict.status == REFUTED, verdict.summary
    assert len(verdict.cases) >= 6
    assert len(list(observed.glob("built-*"))) == 1


def test_a_changed_batch_size_keeps_the_model_of_a_problem_built_from_its_init_inputs(tmp_path: Path) -> None:
    """CMP003 changes each size in turn: where the problem's model reads its sizes only through
    `get_init_inputs` (knobs.built_from_init_inputs), a new batch size keeps the weights."""
    side = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None)
    runs = {name: side.run(_case(seed, **sizes), str(tmp_path / f"case-{name}"), str(tmp_path / f"inputs-{name}"))
            for seed, (name, sizes) in enumerate({"base": {}, "batch": {"batch_size": 33},
                                                  "features": {"in_features": 65}}.items())}
    assert all(r["status"] == "ok" for r in runs.values()), runs
    assert runs["base"]["model_key"] == runs["batch"]["model_key"] != runs["features"]["model_key"]
    inodes = {os.stat(tmp_path / f"inputs-{name}" / "state0.npy").st_ino for name in ("base", "batch")}
    assert len(inodes) == 1, "one state, saved once, for both batch sizes"

    sized = tmp_path / "sized.py"   # its model reads the module's batch size: kept per sizes
    sized.write_text(PROBLEM.read_text().replace("super().__init__()", "super().__init__()\n        self.rows = batch_size"))
    assert "self.rows = batch_size" in sized.read_text()
    side = ReferenceSide({"kind": "kernelbench", "problem": str(sized)}, "cpu", lambda: None)
    keys = [side.run(_case(seed, batch_size=size), str(tmp_path / f"s{seed}"), str(tmp_path / f"si{seed}"))["model_key"]
            for seed, size in enumerate((32, 33))]
    assert keys[0] != keys[1]


def test_the_candidate_keeps_its_model_while_the_references_key_stays() -> None:
    """The candidate's worker keys its model as the reference worker keyed the case's: two batch
    sizes of a problem built from its init inputs share one build."""
    _Counted.builds = 0
    side = CandidateSide({"kind": "kernelbench"}, "cpu", _Module(), env=None)
    state = {"linear.weight": torch.ones(4, 4), "linear.bias": torch.zeros(4)}
    reference = {"model_key": model_key(_case(0), [4])}
    for seed in (1, 2):
        case = _case(seed, batch_size=30 + seed)
        key = reference_model_key(case, reference)
        if side.built is not None and side.built[0] != key:
            side.built = None
        side._model(key, case, [4], state if side.built is None else {})
    assert _Counted.builds == 1
    assert reference_model_key(_case(3), {}) == model_key(_case(3)), "an older reference: keyed by sizes"


def test_the_second_reference_worker_finds_the_models_state_saved(tmp_path: Path, monkeypatch) -> None:
    """Both reference workers of a session (ahead.py) build the baseline's model; the state goes
    to the candidate's folder once: the second finds it there, whole, and saves none."""
    from kanalyze.dynamic.sandbox import reference_side

    saved_states: list[str] = []
    save = reference_side.save_arrays

    def counted(folder, arrays):
        if any(key.startswith("state") for key in arrays):
            saved_states.append(folder)
        return save(folder, arrays)

    monkeypatch.setattr(reference_side, "save_arrays", counted)
    first = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None)
    second = ReferenceSide({"kind": "kernelbench", "problem": str(PROBLEM)}, "cpu", lambda: None)
    inputs = tmp_path / "inputs"
    a = first.run(_case(0), str(tmp_path / "a"), str(inputs / "case-0.inputs"))
    b = second.run(_case(1), str(tmp_path / "b"), str(inputs / "case-1.inputs"))
    assert len(saved_states) == 1, saved_states
    assert a["status"] == b["status"] == "ok" and a["model_key"] == b["model_key"]
    saved = [p for p in inputs.iterdir() if p.name.startswith("model-")]
    assert len(saved) == 1 and not [p for p in inputs.iterdir() if p.name.startswith(".saving-")]
    inodes = {os.stat(inputs / f"case-{i}.inputs" / "state0.npy").st_ino for i in (0, 1)}
    assert inodes == {os.stat(saved[0] / "state0.npy").st_ino}
