"""MEM004 on a real GPU (`pytest -m gpu`): the z3 counterexample's tensors of 2^31+ elements, launched.

An int32 offset that wraps turns into an address gigabytes before its tensor:
the device faults, and the fault confirms the flag.  Skipped where no CUDA
device is present (there the flags stay `flagged`: test_dynamic_counterexamples.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.dynamic.runner import cuda_present

pytestmark = pytest.mark.gpu
if not cuda_present():
    pytest.skip("needs a CUDA device", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "triton" / "mem004_int32_offsets.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("overflow")
    shutil.copy(FIXTURE, folder)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", str(folder), "--select", "MEM004", "--dynamic", "--device", "cuda", "--jobs", "1",
              "--no-cache", "--output-format", "json", "--witness-dir", str(folder / "witnesses")])
    return json.loads(out.getvalue())


def test_every_mem004_flag_ran_on_the_device(checked) -> None:
    flags = [f for f in checked if f["code"] == "MEM004"]
    assert flags
    for finding in flags:
        assert finding["status"] in ("confirmed", "unconfirmed"), finding["evidence"].get("gate_result")
        assert "needs a GPU" not in finding["evidence"]["gate_result"]


def test_a_wrapped_program_offset_faults(checked) -> None:
    scale = next(f for f in checked if f["code"] == "MEM004" and f["kernel"] == "scale_kernel")
    assert scale["status"] == "confirmed", scale["evidence"]["gate_result"]
    assert "illegal memory access" in scale["evidence"]["gate_result"] or "CUDA error" in scale["evidence"]["gate_result"]
