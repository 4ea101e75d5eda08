"""Autotuned kernels on the CPU: tuned without a device (dynamic/autotune_cpu.py).

Before, every `@triton.autotune` kernel of the development corpus ended under Triton's
interpreter with "0 active drivers" or "libcuda.so cannot found" (11 of 28 real pairs checked
on the CPU were undecided for it).  Now each config runs once and the first is used, as a
device's benchmark would run each before the chosen one: an autotuned kernel that adds into
its output without `reset_to_zero` is wrong on its first call, on the CPU as on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from kanalyze.dynamic.harness import find_harness  # noqa: E402
from kanalyze.dynamic.runner import Options, run_gates  # noqa: E402

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
ROOT = KB.parent.parent

SCRIPT = """
import torch, triton, triton.language as tl
from kanalyze.dynamic import autotune_cpu
autotune_cpu.install()

@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

x = torch.randn(1000)
y = torch.empty_like(x)
double[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, y, 1000)
print(bool((y == 2 * x).all()), double.best_config.kwargs["BLOCK"])
"""


def test_an_autotuned_kernel_runs_under_the_interpreter_with_its_first_config() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3):
        assert "active drivers" in done.stderr or "libcuda" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "64"]


ASSERTING = """
import torch, triton, triton.language as tl
from kanalyze.dynamic import autotune_cpu
autotune_cpu.install()

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"])
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 64, "tiles of 64 at least")
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

x = torch.randn(1000)
for choice in ({CHOICES}):
    autotune_cpu.choose(choice)
    y = torch.empty_like(x)
    double[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, y, 1000)
    seen = autotune_cpu.seen()["double"]
    print(bool((y == 2 * x).all()), double.best_config.kwargs["BLOCK"], seen["config"], seen["configs"])
"""


@pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3),
                    reason="Triton 3.2's interpreter runs no autotuned kernel")
@pytest.mark.parametrize("choices, expected", [
    # The first tuning times every config: BLOCK=32's assertion fails, it is timed as inf.
    ("None, 1, 2", ["True 64 0 2", "True 128 1 2", "True 64 0 2"]),
    # A chosen config is never timed: BLOCK=32 fails as it runs, and the call tunes again without it.
    ("0, 1", ["True 64 0 2", "True 128 1 2"]),
])
def test_a_config_that_fails_a_static_assertion_is_never_taken(choices, expected) -> None:
    """A GPU's compiler rejects such a config (CompileTimeAssertionFailure) and its autotuner
    times it as inf; the interpreter raised AssertionError from the candidate's call instead, so
    a CMP001 case that chose it confirmed a crash no GPU has."""
    done = subprocess.run([sys.executable, "-c", ASSERTING.replace("{CHOICES}", choices)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == expected


def _baseline(name: str) -> dict:
    gate_run = run_gates(find_harness(str(KB / "candidates" / name), kernelbench=str(KB)), ["EXC002"],
                         options=Options(mode="cpu"))
    return gate_run.baseline


def test_an_autotuned_sum_that_adds_without_reset_to_zero_is_wrong_on_its_first_call() -> None:
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3):
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run autotuned kernels")
    plant, twin = _baseline("level1_problem1_mse_atomic_autotuned.py"), \
        _baseline("level1_problem1_mse_atomic_autotuned_reset.py")
    assert plant["status"] == "failed", plant     # two configs tried, then the chosen one: three times the sum
    assert twin["status"] == "passed", twin       # `reset_to_zero` zeroes the output before each run


AUTOTUNE = json.loads((KB / "controls.json").read_text())["CMP001"]["autotune"]


def test_each_value_case_takes_another_autotune_config() -> None:
    """CMP001's autotune plant is right for its first config (square tiles) only.  When every
    case took the first, it was refuted on the CPU, as deepseek's level1_15 (non-square tiles
    laid over a triangle) was, and confirmed on a GPU that timed another config fastest.  Now
    each case takes the next config: the plant is confirmed, the witness names the config and
    replays it, and the twin's refutation says how many configs ran."""
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3):
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run autotuned kernels")
    from kanalyze.dynamic.cases import Case

    def cmp001(name: str, cases=None):
        run = run_gates(find_harness(str(KB / "candidates" / name), kernelbench=str(KB)), ["CMP001"],
                        {"CMP001": [{"row": None}]}, Options(mode="cpu"), cases=cases)
        return {v.code: v for v in run.verdicts}["CMP001"]

    plant, twin = cmp001(AUTOTUNE["plant"]), cmp001(AUTOTUNE["twin"])
    assert plant.status == "confirmed", plant.summary
    assert "scale_tiles_kernel's autotune config 2 of 3 (BLOCK_M=16, BLOCK_N=64" in plant.summary, plant.summary
    assert twin.status == "refuted", twin.summary
    assert "scale_tiles_kernel under 3 of its 3 autotune configs" in twin.summary, twin.summary

    witness = [Case.from_dict(json.loads(json.dumps(case.to_dict()))) for case in plant.cases]
    assert [case.autotune_choice for case in witness] == [1]
    again = cmp001(AUTOTUNE["plant"], cases=witness)
    assert again.status == "confirmed" and "config 2 of 3" in again.summary, again.summary
