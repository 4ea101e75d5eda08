"""The reference's float64 run (kanalyze/dynamic/sandbox/float64.py), in this process on the CPU:
its outputs, why there are none, and one more try once the judge's held arrays made room."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic.sandbox.float64 import float64_reference  # noqa: E402


class Doubling(torch.nn.Module):
    def forward(self, x):
        return x * 2


class OutOfMemoryOnce(torch.nn.Module):
    """Runs out of the device's memory on its first float64 call, as a real-size problem beside
    the judge's held arrays does."""

    calls = [0]   # the class's: counted across tries

    def forward(self, x):
        self.calls[0] += 1
        if self.calls[0] == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB.")
        return x + 1


class Store:
    def __init__(self, moved: int) -> None:
        self.moved, self.spilled = moved, 0

    def spill(self) -> int:
        self.spilled += 1
        return self.moved


def test_the_float64_outputs_are_computed_on_upcast_inputs() -> None:
    result, arrays = {}, {}
    float64_reference(Doubling(), [torch.ones(4, dtype=torch.float32)], "cpu", None, result, arrays, "output64", "o_")
    assert result["output64"]["dtypes"] == ["float64"] and "output64_error" not in result
    assert str(arrays["o_0"].dtype) == "float64" and arrays["o_0"].tolist() == [2.0] * 4


def test_out_of_device_memory_moves_the_held_arrays_and_tries_once_more() -> None:
    result, arrays = {}, {}
    store = Store(moved=3 * 2 ** 30)
    model = OutOfMemoryOnce()
    float64_reference(model, [torch.zeros(2)], "cpu", store, result, arrays, "output64", "o_")
    assert store.spilled == 1 and model.calls[0] == 2 and arrays["o_0"].tolist() == [1.0, 1.0], result


@pytest.mark.parametrize("moved", [0, 2 ** 30])
def test_where_it_still_does_not_fit_it_says_so(moved) -> None:
    class Always(torch.nn.Module):
        def forward(self, x):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB.")

    result = {}
    store = Store(moved)
    float64_reference(Always(), [torch.zeros(2)], "cpu", store, result, {}, "output64", "o_")
    error = result["output64_error"]
    assert error.startswith("the float64 reference does not fit in the device's memory at these sizes")
    assert ("1.0 GiB of held arrays moved to host memory" in error) == bool(moved) and "12.00 GiB" in error
    assert "output64" not in result


def test_another_failure_is_said_as_it_is() -> None:
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise ValueError("no float64 kernel for this op")

    result = {}
    float64_reference(Broken(), [torch.zeros(2)], "cpu", None, result, {}, "output64", "o_")
    assert result == {"output64_error": "ValueError: no float64 kernel for this op"}


OUT_OF_MEMORY_ONCE = '''
import torch

calls = [0]


class Model(torch.nn.Module):
    def forward(self, x):
        calls[0] += 1
        if calls[0] == 1 or ALWAYS:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB.")
        return x * 2


ALWAYS = {always}
batch_size = 8


def get_inputs():
    return [torch.rand(batch_size)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("always", [False, True])
def test_a_reference_forward_out_of_device_memory_runs_once_more_after_the_held_arrays_move(tmp_path, always) -> None:
    """The reference worker is also the session's judge: out of the device's memory beside what it
    holds, its held arrays move to host memory and the problem's forward runs once more; where it
    still does not fit, the case says so (results.py words it as the device's memory)."""
    from kanalyze.dynamic.cases import Case
    from kanalyze.dynamic.results import Result
    from kanalyze.dynamic.sandbox import held
    from kanalyze.dynamic.sandbox.process import Outcome
    from kanalyze.dynamic.sandbox.reference_side import ReferenceSide

    class Spilling(held.Store):
        spills = 0

        def spill(self) -> int:
            self.spills += 1
            return 2 ** 30

    problem = tmp_path / "1_out_of_memory_once.py"
    problem.write_text(OUT_OF_MEMORY_ONCE.format(always=always))
    side = ReferenceSide({"kind": "kernelbench", "problem": str(problem)}, "cpu", lambda: None, hold=True)
    side.store = Spilling("cpu")
    case = Case("CMP001/given", "CMP001", {"batch_size": 8}, seed=1, model_seed=0).to_dict()
    result = side.run(case, str(tmp_path / "case-1"), str(tmp_path / "inputs-1"))
    assert side.store.spills == 1
    if always:
        assert result["status"] == "rejected" and result["error"].startswith("OutOfMemoryError")
        failure = Result(Case.from_dict(case), Outcome("done", meta=result)).reference_failure()
        assert failure.startswith("the reference ran out of the device's memory at these sizes: OutOfMemoryError")
    else:
        assert result["status"] == "ok" and result["output"]["dtypes"] == ["float32"], result
        assert result["output64"]["dtypes"] == ["float64"]


class Mixed(torch.nn.Module):
    """Parameters and buffers of several dtypes, as real models have (a half-precision layer, a
    batch norm's float32 statistics and its integer count)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(64, 64)
        self.offset = torch.nn.Parameter(torch.randn(64).half())
        self.norm = torch.nn.BatchNorm1d(64)

    def forward(self, x):
        return self.norm(self.linear(x)) + self.offset.to(x.dtype)


def _state(model) -> dict:
    return {name: (tensor.dtype, tensor.detach().clone()) for name, tensor in model.state_dict().items()}


def test_the_model_itself_runs_in_float64_and_gets_its_own_dtypes_and_values_back() -> None:
    """No copy of the model: its floating parameters and buffers are float64 for the run and their
    own dtypes after it, bit for bit (a running mean the float64 run moved excepted: the reference
    worker restores state before each case), the same Parameter objects, no gradient left."""
    model = Mixed().eval()
    before, parameters = _state(model), [id(p) for p in model.parameters()]
    x = torch.randn(8, 64)
    result, arrays = {}, {}
    float64_reference(model, [x], "cpu", None, result, arrays, "output64", "o_")
    assert result["output64"]["dtypes"] == ["float64"], result
    with torch.no_grad():   # the float64 computation, written out
        expected = torch.nn.functional.batch_norm(
            x.double() @ before["linear.weight"][1].double().T + before["linear.bias"][1].double(),
            before["norm.running_mean"][1].double(), before["norm.running_var"][1].double(),
            before["norm.weight"][1].double(), before["norm.bias"][1].double(), False, 0.1, 1e-5) \
            + before["offset"][1].double()
    got = torch.as_tensor(arrays["o_0"])
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)   # float64's agreement, not float32's
    with torch.no_grad():
        assert not torch.allclose(model(x).double(), expected, rtol=1e-12, atol=1e-12)   # (float32 is further off)
    after = _state(model)
    assert {k: d for k, (d, _) in after.items()} == {k: d for k, (d, _) in before.items()}
    assert all(torch.equal(after[k][1], before[k][1]) for k in before)
    assert [id(p) for p in model.parameters()] == parameters and all(p.grad is None for p in model.parameters())


def test_a_float64_run_that_fails_still_gives_the_model_its_dtypes_back() -> None:
    class Failing(Mixed):
        def forward(self, x):
            assert self.linear.weight.dtype == torch.float64   # (it did run upcast)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB.")

    model = Failing()
    before = _state(model)
    result = {}
    float64_reference(model, [torch.randn(2, 64)], "cpu", None, result, {}, "output64", "o_")
    assert "does not fit" in result["output64_error"]
    assert {k: d for k, (d, _) in _state(model).items()} == {k: d for k, (d, _) in before.items()}


def test_the_float64_gradients_leave_the_model_as_it_was() -> None:
    from kanalyze.dynamic.gradients import reference_gradients

    model = Mixed().train()
    dtypes = {k: d for k, (d, _) in _state(model).items()}
    result, arrays = {}, {}
    reference_gradients(model, [torch.randn(8, 64)], 3, result, arrays)
    assert "gradients64" in result and "parameter_gradients64" in result, result
    assert set(result["parameter_gradients64"]["dtypes"]) == {"float64"}
    assert {k: d for k, (d, _) in _state(model).items()} == dtypes
    assert all(p.grad is None for p in model.parameters())
