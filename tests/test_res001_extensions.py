"""RES001 on a CUDA C++ candidate: its kernels are its extension's functions.

The worker counts the calls into the extension the candidate built and the ATen ops its
C++ dispatched inside them (extensions.py, recording.extension_recorder; the recording
itself is tested in test_dynamic_extensions.py).  Here the gate's judgment of what a
worker would report, written out."""

from __future__ import annotations

import numpy as np
import pytest

from kanalyze.dynamic.cases import Case, Run
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, GateContext
from kanalyze.dynamic.gates.res001_dispatch_trace import DispatchTrace, aten_family
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox.process import Outcome


def _judged(reference_ops: dict, run: dict):
    reference = Outcome("done", meta={"status": "ok", "inputs": [], "init_inputs": [], "ops": reference_ops,
                                      "output": {"prefix": "ref", "dtypes": ["float32"], "structure": "tensor"}},
                        arrays={"ref0": np.zeros(4, dtype=np.float32)})
    meta = {"status": "ok", "launches": {}, "ops": {}, "extension_calls": {}, **run,
            "output": {"prefix": "run0_", "dtypes": ["float32"], "structure": "tensor"}}
    candidate = Outcome("done", meta={"status": "ok", "runs": [meta]}, arrays={"run0_0": np.zeros(4, np.float32)})
    result = Result(Case("RES001/trace", "RES001", {"N": 4}, runs=[Run()], record_ops=True), reference, candidate)
    return DispatchTrace().judge(GateContext(None, {"N": 4}, "cuda", cuda_cpp=True), [result])


MATMUL = {"linear": 1}


@pytest.mark.parametrize("run,status,said", [
    ({"extension_calls": {"fused.forward": 1}, "extension_ops": {"empty_like": 1}}, REFUTED,
     "the work ran in the candidate's kernels (fused.forward ×1)"),
    ({"extension_calls": {"fused.forward": 1}, "extension_ops": {"mm": 1, "empty": 1}}, CONFIRMED,
     "the candidate's CUDA C++ extension (fused.forward) had ATen do the reference's main computation: aten mm "
     "(matmul)"),
    ({"ops": {"linear": 1}, "extension_calls": {"fused.forward": 0}}, CONFIRMED,   # built, never called
     "no custom kernel ran; the reference's main computation ran in PyTorch: torch linear (matmul)"),
    ({"ops": {"relu": 1}, "extension_calls": {"fused.forward": 0}}, CONFIRMED, "no custom kernel ran"),
    # an extension with no Python function to count (operators registered with torch.ops): no claim
    ({"ops": {"relu": 1}}, UNCONFIRMED, "the candidate's CUDA C++ kernels could not be counted"),
    ({"ops": {"linear": 1}}, CONFIRMED, "the reference's main computation ran in PyTorch: torch linear (matmul)"),
])
def test_a_cuda_cpp_candidate_is_judged_by_its_extension_calls(run, status, said) -> None:
    verdict = _judged(MATMUL, run)
    assert verdict.status == status and said in verdict.summary, verdict.summary


def test_an_elementwise_reference_op_called_from_c_plus_plus_is_the_work() -> None:
    verdict = _judged({"relu": 1}, {"extension_calls": {"act.relu_cuda": 1}, "extension_ops": {"relu": 1}})
    assert verdict.status == CONFIRMED and "aten relu (the reference op itself)" in verdict.summary


@pytest.mark.parametrize("op,family", [("mm", "matmul"), ("_softmax", "softmax"), ("native_layer_norm", "normalization"),
                                       ("_native_batch_norm_legit_no_training", "normalization"),
                                       ("cudnn_convolution", "convolution"), ("convolution", "convolution"),
                                       ("_cudnn_rnn", "recurrence"), ("_thnn_fused_lstm_cell", "recurrence"),
                                       ("lstm", "recurrence"), ("empty_like", None), ("add", None)])
def test_aten_ops_are_read_in_their_families(op, family) -> None:
    assert aten_family(op) == family


def test_a_cuda_cpp_candidate_that_leaves_its_extension_for_some_inputs_is_int001() -> None:
    """Its extension's calls are its kernels in the trace too (traces.py): the extension on the
    benchmark's inputs, PyTorch on a probe with a NaN, is a path that depends on input values."""
    from kanalyze.dynamic.traces import trace, value_dependent_paths

    assert trace({"extension_calls": {"fused.forward": 2}, "launches": {}}) == (frozenset({"fused.forward"}),
                                                                                frozenset())

    def result(case_id: str, special, run: dict) -> Result:
        meta = {"status": "ok", "launches": {}, "ops": {}, "extension_calls": {}, **run,
                "output": {"prefix": "run0_", "dtypes": ["float32"], "structure": "tensor"}}
        candidate = Outcome("done", meta={"status": "ok", "runs": [meta, meta]},
                            arrays={"run0_0": np.zeros(4, np.float32)})
        reference = Outcome("done", meta={"status": "ok", "inputs": [], "init_inputs": []})
        return Result(Case(case_id, case_id.split("/")[0], {"N": 4}, runs=[Run(), Run()], special=special),
                      reference, candidate)

    honest = result("CMP001/given", None, {"extension_calls": {"fused.forward": 1}})
    probed = result("EXC001/nan", "nan", {"ops": {"linear": 1}})
    found = value_dependent_paths([honest, probed])
    assert found is not None and found.code == "INT001" and found.status == CONFIRMED
    assert "launched fused.forward" in found.summary and "called linear" in found.summary, found.summary
    assert value_dependent_paths([honest, result("EXC001/nan", "nan", {"extension_calls": {"fused.forward": 1}})]) \
        is None
