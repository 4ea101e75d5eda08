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

    calls = [0]   # the class's: each try runs on a float64 copy of the model

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
