"""Torch's own nondeterminism is not the candidate's (`pytest -m gpu`; numerics.py).

Under torch's defaults cuDNN's algorithm for a KernelBench-sized transposed 3-D convolution
gives other bits on every run (10 results in 10 runs on an H100, bench/torch_determinism.py).
A candidate that keeps that convolution and writes only an elementwise ReLU of its own is
run by ORD001 and ORD002 with torch's kernels on deterministic algorithms: neither confirms,
and ORD001, whose launches and reversed run then agree, refutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.runner import Options, cuda_present, run_gates

pytestmark = pytest.mark.gpu
if not cuda_present():
    pytest.skip("needs a CUDA device", allow_module_level=True)

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"


def test_a_candidate_keeping_torch_nondeterministic_convolution_is_not_blamed() -> None:
    candidate = KB / "candidates" / "level1_problem15_conv_transpose3d_torch_conv.py"
    run = run_gates(find_harness(str(candidate), kernelbench=str(KB)), ["ORD001", "ORD002"],
                    {"ORD001": [{"row": None}], "ORD002": [{"row": None}]}, Options(mode="cuda"))
    verdicts = {v.code: v for v in run.verdicts}
    assert verdicts["ORD001"].status == "refuted", verdicts["ORD001"].summary
    assert verdicts["ORD002"].status != "confirmed", verdicts["ORD002"].summary
    for case in verdicts["ORD001"].cases:
        assert case.deterministic_torch
    # Its launches and its reversed run agreed: the control (the candidate as written, in a worker
    # of its own) could not change the verdict, and did not run (Gate.unneeded).
    assert [c["case"] for c in run.environment.get("not_needed", [])] == ["ORD001/control"], run.environment
