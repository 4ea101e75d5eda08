"""MEM003 counterexamples are real: run under Triton's interpreter, they touch memory outside their tensors.

Each flagged access's counterexample (sizes, constexprs, grid, and the shape of
the tensor behind every pointer parameter) launches its kernel directly on CPU
tensors that sit inside guard regions filled with a sentinel.  A store out of
bounds changes a guard; a load out of bounds brings the sentinel into the
results.  The clean twin launched with the same counterexample touches neither.
This checks the static pass's hand-off, not a gate: the gates live in the
dynamic pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.analyzer.bounds import proofs as bounds
from kanalyze.analyzer.positions import Positions
from kanalyze.analyzer.triton.model import TritonModule

ROOT = Path(__file__).resolve().parent.parent

RUNNER = r"""
import importlib.util, json, math, sys
import torch

SENTINEL, PAD = 1.0e6, 256
spec = importlib.util.spec_from_file_location("fixture", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
outcomes = []
for kernel_name, example in json.loads(sys.argv[2]):
    buffers, args = {}, {}
    for param, label in example["pointers"].items():
        numel = math.prod(d or 1 for d in example["shapes"][label])
        if label not in buffers:  # each tensor's guard its own value: a copied guard still shows
            guard = SENTINEL * (len(buffers) + 1)
            buffer = torch.full((PAD + numel + PAD,), guard, dtype=torch.float32)
            buffer[PAD:PAD + numel] = 1.0
            buffers[label] = (buffer, numel, guard)
        buffer, numel, _ = buffers[label]
        args[param] = buffer[PAD:PAD + numel]
    args.update(example["sizes"])
    args.update(example["constexprs"])
    getattr(module, kernel_name)[tuple(example["grid"])](**args)
    touched = any(bool((b[:PAD] != g).any() or (b[PAD + n:] != g).any()) for b, n, g in buffers.values())
    leaked = any(bool((b[PAD:PAD + n].abs() > SENTINEL / 2).any()) for b, n, _ in buffers.values())
    outcomes.append(touched or leaked)
print(json.dumps(outcomes))
"""


def counterexamples(fixture: Path) -> dict[int, dict]:
    """Source row of each MEM003 violation → its counterexample."""
    text = fixture.read_text()
    model = TritonModule.from_source(str(fixture), text)
    positions = Positions(model.module, text)
    return {positions.span(a.call)[0]: a.bounds.counterexample
            for a in bounds.analyze(model).accesses if a.bounds.status == "violated"}


def row_of(fixture: Path, fragment: str) -> int:
    return next(i for i, line in enumerate(fixture.read_text().splitlines(), 1) if fragment in line)


def run_interpreted(fixture: Path, cases: list[tuple[str, dict]]) -> list[bool]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", RUNNER, str(fixture), json.dumps(cases)], capture_output=True,
                            text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_counterexamples_touch_memory_outside_the_tensor_and_clean_twins_do_not() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    masks = ROOT / "fixtures/triton/mem003_masks_1d.py"
    found = counterexamples(masks)
    copy = found[row_of(masks, "x = tl.load(x_ptr + offs, mask=mask)")]
    diff = found[row_of(masks, "b = tl.load(x_ptr + offs + 1, mask=mask)")]
    backward = found[row_of(masks, "prev = tl.load(x_ptr + offs - 1, mask=mask, other=0.0)")]
    assert copy["sizes"] == {"n": 1} and copy["pointers"] == {"x_ptr": "x", "out_ptr": "out"}
    outcomes = run_interpreted(masks, [
        ("copy_le_kernel", copy), ("copy_lt_kernel", copy),
        ("diff_kernel", diff),
        ("backward_diff_kernel", backward), ("backward_diff_clean_kernel", backward),
    ])
    assert outcomes == [True, False, True, True, False]


def test_k_loop_counterexample_reads_past_the_end() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    tiles = ROOT / "fixtures/triton/mem003_tiles_2d.py"
    found = counterexamples(tiles)
    k_tail = found[row_of(tiles, "a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)")]
    assert k_tail["loop"] == {"k": 0}
    outcomes = run_interpreted(tiles, [("matmul_k_tail_kernel", k_tail), ("matmul_kernel", k_tail)])
    assert outcomes == [True, False]
