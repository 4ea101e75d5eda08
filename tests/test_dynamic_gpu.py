"""The gates on a real GPU (`pytest -m gpu`): skipped where no CUDA device is present.

The same positive controls as on the CPU, compiled and run on the device:
program order comes from the hardware (repeated launches), TF32 from the
tensor cores, stale memory from PyTorch's caching allocator.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kanalyze.dynamic.harness import Harness, find_harness
from kanalyze.dynamic.runner import Options, cuda_present, run_gates

pytestmark = pytest.mark.gpu
if not cuda_present():
    pytest.skip("needs a CUDA device", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = {k: v for k, v in json.loads((KB / "controls.json").read_text()).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def gpu_verdicts():
    jobs = [(code, role, CONTROLS[code][role]) for code in sorted(CONTROLS) for role in ("plant", "twin")]

    def run(job):
        code, role, name = job
        harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
        assert isinstance(harness, Harness)
        gate_run = run_gates(harness, [code], {code: [{"row": None}]}, Options(mode="cuda"))
        return job, (gate_run, {v.code: v for v in gate_run.verdicts})

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(run, jobs))


@pytest.mark.parametrize("code", sorted(CONTROLS))
def test_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    _, plant = gpu_verdicts[(code, "plant", CONTROLS[code]["plant"])]
    _, twin = gpu_verdicts[(code, "twin", CONTROLS[code]["twin"])]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


def test_gpu_runs_are_real(gpu_verdicts) -> None:
    run, verdicts = gpu_verdicts[("PRC001", "plant", CONTROLS["PRC001"]["plant"])]
    assert run.environment["mode"] == "cuda"
    assert "interpreter" not in run.environment["versions"]["device"].lower()
    assert "real tensor cores" in verdicts["PRC001"].summary and not verdicts["PRC001"].details["tf32_emulated"]
