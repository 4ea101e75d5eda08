"""A built model given to every case as it was built (kanalyze/dynamic/sandbox/model_state.py):
its buffers kept and restored, its weights not copied, a model whose weights were written to
built again."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic.cases import Case  # noqa: E402
from kanalyze.dynamic.sandbox import model_state  # noqa: E402
from kanalyze.dynamic.sandbox.reference_side import ReferenceSide  # noqa: E402


class Normed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.norm = torch.nn.BatchNorm1d(8)   # training mode: a forward moves its running statistics

    def forward(self, x):
        return self.norm(self.linear(x))


def test_the_buffers_come_back_and_the_weights_are_not_copied() -> None:
    model = Normed()
    kept = model_state.initial(model)
    assert set(kept[0]) == {"norm.running_mean", "norm.running_var", "norm.num_batches_tracked"}
    built = {name: t.clone() for name, t in model.state_dict().items()}
    with torch.no_grad():
        model(torch.randn(16, 8) * 5 + 3)
    assert not torch.equal(model.norm.running_mean, built["norm.running_mean"])
    assert model_state.restore(model, kept)
    assert all(torch.equal(tensor, built[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("write", [
    lambda m: m.linear.weight.mul_(2),                          # under no_grad, as a forward would
    lambda m: torch.nn.init.zeros_(m.linear.bias),
    lambda m: m.linear.weight.copy_(torch.ones(8, 8)),
])
def test_a_model_whose_weights_were_written_to_is_not_given_back(write) -> None:
    model = Normed()
    kept = model_state.initial(model)
    with torch.no_grad():
        write(model)
    assert not model_state.restore(model, kept)


def test_a_function_has_nothing_to_restore() -> None:
    assert model_state.initial(torch.relu) is None and model_state.restore(torch.relu, None)


PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Writes into its own weights on every call, as an ill-behaved problem might."""
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        y = self.linear(x)
        with torch.no_grad():
            self.linear.weight.mul_(2)
        return y

features = 16

def get_inputs():
    return [torch.randn(4, features)]

def get_init_inputs():
    return [features]
'''


def test_the_reference_builds_again_a_model_that_wrote_into_its_weights(tmp_path: Path) -> None:
    """Every case of the same inputs gets the same output: the model as it was built each time."""
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    side = ReferenceSide({"kind": "kernelbench", "problem": str(problem)}, "cpu", lambda: None)
    outputs = []
    for n in range(3):
        case = Case(f"c{n}", "CMP001", {"features": 16}, seed=1, model_seed=0).to_dict()
        result = side.run(case, str(tmp_path / f"case-{n}"), str(tmp_path / f"inputs-{n}"))
        assert result["status"] == "ok", result
        outputs.append(torch.as_tensor(side._withheld[str(tmp_path / f"case-{n}") + ".arrays"]["out0"]))
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[1], outputs[2])
