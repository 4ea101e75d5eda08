"""A case out of time under Triton's interpreter is too slow to judge on the CPU, not a hang.

Measured on the development corpus on the CPU: level1_93's masked cumsum (a sequential scan
in each program) did not finish its first case within 120 s under the interpreter, and the
baseline said the candidate failed: CMP001 confirmed for a kernel a GPU runs in
milliseconds.  The worker now tells the parent when a launch of the candidate's runs under
the interpreter; a case that runs out of time there is `undecided`, with why.  A candidate
whose own Python never returns is still confirmed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kanalyze.dynamic.harness import find_harness  # noqa: E402
from kanalyze.dynamic.runner import Options, run_gates  # noqa: E402
from kanalyze.dynamic.sandbox.process import Limits  # noqa: E402

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
SHORT = Limits(case_seconds=4)

SLOW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_relu_kernel(x_ptr, y_ptr, n_elements, slope, ROUNDS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    acc = x
    for _ in range(ROUNDS):            # a long loop in every program: milliseconds on a GPU
        acc = acc * 1.0
    tl.store(y_ptr + offsets, tl.where(acc >= 0, acc, acc * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        leaky_relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, self.negative_slope, ROUNDS=1_000_000, BLOCK=1024)
        return y
'''


def _baseline(path: Path, gates=("EXC002",)) -> dict:
    return _run(path, gates).baseline


def _run(path: Path, gates):
    return run_gates(find_harness(str(path), kernelbench=str(KB)), list(gates), options=Options(mode="cpu", limits=SHORT))


def test_a_kernel_too_slow_for_the_interpreter_leaves_the_baseline_undecided(tmp_path) -> None:
    """And every gate with it: the other cases are not run (they would be as slow)."""
    candidate = tmp_path / "level1_problem6_slow_under_the_interpreter.py"
    candidate.write_text(SLOW)
    gate_run = _run(candidate, ["EXC001", "EXC002"])
    baseline = gate_run.baseline
    assert baseline["status"] == "undecided", baseline
    assert "under Triton's interpreter" in baseline["summary"] and "too slow to judge here" in baseline["summary"]
    verdicts = {v.code: v for v in gate_run.verdicts}
    assert {verdicts[code].status for code in ("EXC001", "EXC002")} == {"unconfirmed"}, verdicts
    assert all("too slow to judge here" in verdicts[code].summary for code in ("EXC001", "EXC002")), verdicts


def test_a_candidate_whose_own_code_never_returns_is_still_confirmed(tmp_path) -> None:
    candidate = tmp_path / "level1_problem6_hang.py"
    shutil.copy(KB / "hostile" / candidate.name, candidate)
    baseline = _baseline(candidate)
    assert baseline["status"] == "failed" and "did not finish" in baseline["summary"], baseline
