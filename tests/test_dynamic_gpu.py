"""The gates on a real GPU (`pytest -m gpu`): skipped where no CUDA device is present.

The same positive controls as on the CPU, compiled and run on the device:
program order comes from the hardware (repeated launches), TF32 from the
tensor cores, stale memory from PyTorch's caching allocator.  The CUDA C++
controls (`cuda` in controls.json: KernelBench-style `load_inline` solutions)
run only here: each worker builds its candidate's extension through the shared
build cache (extensions.py), which starts empty for this module, so the
builds are real and each distinct source is compiled once.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kanalyze.dynamic.harness import Harness, find_harness
from kanalyze.dynamic.runner import Options, cuda_present, run_gates
from kanalyze.dynamic.sandbox import extensions

pytestmark = pytest.mark.gpu
if not cuda_present():
    pytest.skip("needs a CUDA device", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = {k: v for k, v in json.loads((KB / "controls.json").read_text()).items() if not k.startswith("_")}
CUDA_CONTROLS = {code: entry["cuda"] for code, entry in CONTROLS.items() if "cuda" in entry}
POWER = {code: entry["power"] for code, entry in CONTROLS.items() if "power" in entry}
ORDER = {code: entry["order"] for code, entry in CONTROLS.items() if "order" in entry}
STRUCTURE = {code: entry["structure"] for code, entry in CONTROLS.items() if "structure" in entry}
RECURRENCE = {code: entry["recurrence"] for code, entry in CONTROLS.items() if "recurrence" in entry}
# Candidates that fail on a GPU: the failure is a recorded result (CMP001 on the problem's own
# inputs).  The last faults the device and raises before anything synchronizes: the fault is
# its own too, never kanalyze's crash (execute.pending_fault).
HOSTILE_CUDA = {"level1_problem6_build_error_cuda.py": "Error building extension 'leaky_relu_broken'",
                "level1_problem6_illegal_address_cuda.py": "illegal memory access",
                "level1_problem6_illegal_address_then_raises.py": "did not compile; its kernels faulted the device too"}


@pytest.fixture(scope="module")
def extension_cache(tmp_path_factory):
    """An empty build cache (or the one the caller named, e.g. to share it with the benchmark)."""
    root = os.environ.get(extensions.ROOT_VARIABLE) or str(tmp_path_factory.mktemp("extensions"))
    saved = os.environ.get(extensions.ROOT_VARIABLE)
    os.environ[extensions.ROOT_VARIABLE] = root
    yield Path(root)
    if saved is None:
        os.environ.pop(extensions.ROOT_VARIABLE, None)


@pytest.fixture(scope="module")
def gpu_verdicts(extension_cache):
    # CUDA C++ first: their builds (CPU-bound) overlap the Triton candidates' GPU work.
    jobs = [("cuda", code, role, CUDA_CONTROLS[code][role]) for code in sorted(CUDA_CONTROLS)
            for role in ("plant", "twin")]
    jobs += [("hostile", "MEM002", "hostile", name) for name in HOSTILE_CUDA]
    jobs += [("triton", code, role, CONTROLS[code][role]) for code in sorted(CONTROLS) for role in ("plant", "twin")]
    jobs += [("power", code, role, POWER[code][role]) for code in sorted(POWER) for role in ("plant", "twin")]
    jobs += [("order", code, role, ORDER[code][role]) for code in sorted(ORDER) for role in ("plant", "twin")]
    jobs += [("structure", code, role, STRUCTURE[code][role]) for code in sorted(STRUCTURE)
             for role in ("plant", "twin")]
    jobs += [("recurrence", code, role, RECURRENCE[code][role]) for code in sorted(RECURRENCE)
             for role in ("plant", "twin")]

    def run(job):
        kind, code, role, name = job
        harness = find_harness(str(KB / ("hostile" if kind == "hostile" else "candidates") / name),
                               kernelbench=str(KB))
        assert isinstance(harness, Harness)
        flags = None if kind == "hostile" else {code: [{"row": None}]}
        gate_run = run_gates(harness, [code], flags, Options(mode="cuda"))
        return job, (gate_run, {v.code: v for v in gate_run.verdicts})

    with ThreadPoolExecutor(8) as pool:
        verdicts = dict(pool.map(run, jobs))
    if os.environ.get("KANALYZE_GPU_REPORT"):   # every verdict and time, for the README's GPU section
        Path(os.environ["KANALYZE_GPU_REPORT"]).write_text(json.dumps(
            [{"kind": kind, "code": code, "role": role, "kernel": name, "seconds": run.seconds,
              "start": run.environment.get("candidate_confinement", {}).get("start"),
              "verdicts": [[v.code, v.status, v.summary] for v in found.values()]}
             for (kind, code, role, name), (run, found) in verdicts.items()], indent=1))
    return verdicts


@pytest.mark.parametrize("code", sorted(CONTROLS))
def test_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    _, plant = gpu_verdicts[("triton", code, "plant", CONTROLS[code]["plant"])]
    _, twin = gpu_verdicts[("triton", code, "twin", CONTROLS[code]["twin"])]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


@pytest.mark.parametrize("code", sorted(POWER))
def test_power_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    """The plants whose violation needs the gate's power (three blocks adding to a row, the full
    K, a width no block of four divides), at the problems' own sizes on the device."""
    _, plant = gpu_verdicts[("power", code, "plant", POWER[code]["plant"])]
    _, twin = gpu_verdicts[("power", code, "twin", POWER[code]["twin"])]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


@pytest.mark.parametrize("code", sorted(ORDER))
def test_order_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    """A race on which program stores last, where a GPU's launches agree with each other: the
    candidate with its programs in reverse order shows it, and the clean twin refutes only after
    its reversed run agreed too."""
    _, plant = gpu_verdicts[("order", code, "plant", ORDER[code]["plant"])]
    _, twin = gpu_verdicts[("order", code, "twin", ORDER[code]["twin"])]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted" and "reverse order" in twin[code].summary, twin[code].summary


@pytest.mark.parametrize("code", sorted(STRUCTURE))
def test_structure_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    """A triangular product whose dense reference makes NaN through NaN · 0: the twin that skips
    the zero triangle is refuted, the plant that zeroes every NaN confirmed (the judge's held
    path: sandbox/held.py)."""
    _, plant = gpu_verdicts[("structure", code, "plant", STRUCTURE[code]["plant"])]
    _, twin = gpu_verdicts[("structure", code, "twin", STRUCTURE[code]["twin"])]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


@pytest.mark.parametrize("code", sorted(RECURRENCE))
def test_recurrence_plant_confirmed_and_twin_refuted_on_the_gpu(gpu_verdicts, code) -> None:
    """An LSTM left to PyTorch (cuDNN's, on a GPU) beside a Triton linear layer is confirmed; the
    twin with every time step in Triton refuted."""
    _, plant = gpu_verdicts[("recurrence", code, "plant", RECURRENCE[code]["plant"])]
    _, twin = gpu_verdicts[("recurrence", code, "twin", RECURRENCE[code]["twin"])]
    assert plant[code].status == "confirmed" and "torch lstm (recurrence)" in plant[code].summary, plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


@pytest.mark.parametrize("code", sorted(CUDA_CONTROLS))
def test_cuda_cpp_plant_confirmed_and_twin_refuted(gpu_verdicts, code) -> None:
    plant_run, plant = gpu_verdicts[("cuda", code, "plant", CUDA_CONTROLS[code]["plant"])]
    _, twin = gpu_verdicts[("cuda", code, "twin", CUDA_CONTROLS[code]["twin"])]
    assert "candidate_import_error" not in plant_run.environment, plant_run.environment["candidate_import_error"]
    assert plant[code].status == "confirmed", plant[code].summary
    assert twin[code].status == "refuted", twin[code].summary


def test_gpu_runs_are_real(gpu_verdicts) -> None:
    run, verdicts = gpu_verdicts[("triton", "PRC001", "plant", CONTROLS["PRC001"]["plant"])]
    assert run.environment["mode"] == "cuda"
    assert "interpreter" not in run.environment["versions"]["device"].lower()
    assert "real tensor cores" in verdicts["PRC001"].summary and not verdicts["PRC001"].details["tf32_emulated"]


def test_cuda_cpp_witnesses_say_what_failed(gpu_verdicts) -> None:
    def verdict(code):
        return gpu_verdicts[("cuda", code, "plant", CUDA_CONTROLS[code]["plant"])][1][code]

    assert verdict("MEM001").details["unwritten"] == 16 * 1000 % 256          # the grid's dropped tail
    assert verdict("EXC001").details["special"] == "nan"                       # fmaxf drops NaN, keeps Inf
    assert verdict("CMP003").details["sizes"]["features"] != 512
    assert "promoted to fp32" in verdict("PRC002").summary
    assert {c["to"] for c in verdict("PRC002").details["promotion"]} == {"float"}
    assert "flushed to zero" in verdict("EXC002").summary
    # exp overflows without the max: the first distribution with values past ~88 shows it, as a
    # non-finite output where the reference is finite
    cmp001 = verdict("CMP001").summary
    assert cmp001.startswith(("heavy_tailed inputs", "large inputs")), cmp001
    assert "max abs error inf" in cmp001 and ("observed nan" in cmp001 or "observed inf" in cmp001), cmp001


def test_failing_candidates_are_recorded_results(gpu_verdicts) -> None:
    for name, words in HOSTILE_CUDA.items():
        _, verdicts = gpu_verdicts[("hostile", "MEM002", "hostile", name)]
        assert verdicts["CMP001"].status == "confirmed" and words in verdicts["CMP001"].summary, \
            verdicts["CMP001"].summary
        assert verdicts["MEM002"].status == "unconfirmed", verdicts["MEM002"].summary


def test_each_cuda_source_is_built_once_in_its_own_directory(gpu_verdicts, extension_cache) -> None:
    """Candidates that share an extension name (`leaky_relu`: three sources) never share a build,
    and the twin used by two gates was built once, by whichever worker came first.  Each
    candidate builds in a folder of its own under the cache (process.candidate_caches)."""
    built = [marker.parent for marker in extension_cache.rglob("kanalyze-complete")]
    assert all(directory.parent != extension_cache for directory in built)   # never in the shared root
    names: dict[str, int] = {}
    for directory in built:
        names[directory.name.rsplit("-", 1)[0]] = names.get(directory.name.rsplit("-", 1)[0], 0) + 1
    # leaky_relu: fmax plant, floor-grid plant, twin; bias_relu: two plants, twin;
    # row_mean: plant, twin and the plant with its accumulators promoted to float; mse_loss (ORD001):
    # plant and twin, each also with its block order reversed (reverse_order.py).
    # The hostile candidate that faults was built too; the one that does not compile left no complete build.
    assert names == {"leaky_relu": 3, "bias_relu": 3, "row_mean": 3, "mse_loss": 4, "scale": 2, "matmul": 2,
                     "softmax": 2, "leaky_relu_fault": 1}, names


def test_check_dynamic_confirms_a_cuda_cpp_flag_and_replays(gpu_verdicts, extension_cache, tmp_path, capsys) -> None:
    """`check --dynamic` end to end on a load_inline candidate: the static pass flags the half
    accumulators inside the CUDA string (rows of the Python file), the promotion rewrites those
    rows, the gate confirms on the device, and the witness replays (1 while failing, 0 once fixed).
    The extensions were built by the controls above: nothing is compiled again."""
    from kanalyze.cli import main

    (tmp_path / "level1").mkdir()
    shutil.copy(KB / "level1/4_mean_fp16.py", tmp_path / "level1")
    plant, twin = CUDA_CONTROLS["PRC002"]["plant"], CUDA_CONTROLS["PRC002"]["twin"]
    shutil.copy(KB / "candidates" / plant, tmp_path / plant)
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    before = {d.name for d in extension_cache.iterdir()}
    code = main(["check", str(tmp_path), "--dynamic", "--kernelbench", str(tmp_path), "--device", "cuda",
                 "--no-cache", "--output-format", "json", "--select", "PRC002"])
    findings = json.loads(capsys.readouterr().out)
    assert code == 1
    assert sorted(f["location"]["row"] for f in findings) == [19, 24]
    assert all(f["status"] == "confirmed" for f in findings), [f["evidence"].get("gate_result") for f in findings]
    assert "promoted to fp32 (line 15, 17)" in findings[0]["evidence"]["gate_result"]
    assert {d.name for d in extension_cache.iterdir()} == before
    witness = Path(findings[0]["witness"]["path"])
    witness = witness if witness.is_absolute() else Path.cwd() / witness
    assert main(["replay", str(witness), "--device", "cuda"]) == 1
    assert "PRC002 confirmed" in capsys.readouterr().out
    shutil.copy(KB / "candidates" / twin, tmp_path / plant)       # the fix: float accumulators
    assert main(["replay", str(witness), "--device", "cuda"]) == 0
    assert "PRC002 refuted" in capsys.readouterr().out
