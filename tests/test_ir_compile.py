"""The IR stage with the real compilers: Triton ahead of time (no GPU needed),
nvcc for CUDA.  The fixtures in fixtures/ir are compiled once per module and
checked against their inline expectations:

    # ir: PRC002          the next code line must carry a PRC002 finding backed by IR
    # ir-ok: PRC002       ... must not
    // fast-math: EXC002  (CUDA) ... must, when the unit is built with --use_fast_math

Skipped, saying so, where triton (or nvcc) is not installed.
"""

from __future__ import annotations

import os
import re
import textwrap
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from kanalyze.check import run_ir, run_static
from kanalyze.config import Config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ir"
DIRECTIVE = re.compile(r"^\s*(?:#|//)\s*(?P<kind>ir|ir-ok|fast-math):\s*(?P<codes>[A-Z]{3}\d{3}(?:\s*,\s*[A-Z]{3}\d{3})*)\s*$")

needs_triton = pytest.mark.skipif(find_spec("triton") is None, reason="triton is not installed: no IR to compile")


def _nvcc():
    from kanalyze.analyzer.ir.nvcc import find_nvcc

    return find_nvcc()


needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed: CUDA units cannot be compiled")


def expectations(path: Path) -> dict[str, set[tuple[int, str]]]:
    found: dict[str, set[tuple[int, str]]] = {"ir": set(), "ir-ok": set(), "fast-math": set()}
    pending: list[tuple[str, list[str]]] = []
    for row, line in enumerate(path.read_text().splitlines(), start=1):
        match = DIRECTIVE.match(line)
        if match:
            pending.append((match.group("kind"), [c.strip() for c in match.group("codes").split(",")]))
            continue
        if pending and line.strip() and not line.strip().startswith(("#", "//")):
            for kind, codes in pending:
                found[kind] |= {(row, code) for code in codes}
            pending = []
    return found


def ir_backed(findings) -> set[tuple[str, int, str]]:
    """(file name, row, code) of every finding the IR stage made or added evidence to."""
    return {(Path(f.location.file).name, f.location.row, f.code) for f in findings
            if "ir" in f.evidence or f.evidence.get("source") == "ir"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every fixture compiled for sm_90, once; then again from the cache."""
    if find_spec("triton") is None:
        pytest.skip("triton is not installed: no IR to compile")
    root = tmp_path_factory.mktemp("project")
    config = Config(root=str(root))
    paths = [str(FIXTURES)]
    started = time.perf_counter()
    cold = run_ir(paths, config, run_static(paths, config, use_cache=False), show_resources=True)
    cold_seconds = time.perf_counter() - started
    warm = run_ir(paths, config, run_static(paths, config, use_cache=False), show_resources=True)
    return {"cold": cold, "warm": warm, "cold_seconds": cold_seconds, "root": root}


def _note(result, prefix: str) -> str:
    return next(n for n in result.notes if n.startswith(prefix))


PYTHON_FIXTURES = sorted(FIXTURES.glob("*.py"))


@needs_triton
@pytest.mark.parametrize("path", PYTHON_FIXTURES, ids=lambda p: p.name)
def test_ir_fixture_expectations(compiled, path: Path) -> None:
    expected = expectations(path)
    found = {(row, code) for name, row, code in ir_backed(compiled["cold"].findings)
             if name == path.name and not _informational(compiled["cold"], name, row, code)}
    assert expected["ir"] <= found, f"missing IR findings: {sorted(expected['ir'] - found)}"
    assert not (expected["ir-ok"] & found), f"IR fired on a look-alike: {sorted(expected['ir-ok'] & found)}"
    assert not (found - expected["ir"]), f"unexpected IR findings: {sorted(found - expected['ir'])}"


def _informational(result, name: str, row: int, code: str) -> bool:
    same = [f for f in result.findings if Path(f.location.file).name == name and f.location.row == row
            and f.code == code]
    return bool(same) and all(f.evidence.get("informational") for f in same)


def _finding(result, name: str, code: str, *, informational: bool = False):
    return [f for f in result.findings if Path(f.location.file).name == name and f.code == code
            and bool(f.evidence.get("informational")) == informational]


@needs_triton
def test_fp16_accumulator_through_a_helper_is_wgmma_f16(compiled) -> None:
    (finding,) = _finding(compiled["cold"], "prc002_fp16_accumulator_helper.py", "PRC002")
    assert finding.evidence.get("static"), "a source detector caught it: the fixture no longer tests a blind spot"
    entry = finding.evidence["ir"][0]
    assert entry["instruction"] == "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16"
    assert entry["ptx"][0].startswith("ptx:") and entry["sass"][0].startswith("HGMMA.64x64x16.F16")
    assert "BM=64" in entry["config"] and "launch at line" in entry["config"]
    assert finding.evidence["rows"][1] == 24 and "inlined at line 24" in finding.message


@needs_triton
def test_float_atomic_add_merges_into_the_source_finding(compiled) -> None:
    (finding,) = _finding(compiled["cold"], "ord001_atomics_and_exp.py", "ORD001")
    assert "static" not in finding.evidence       # the source detector found it too: one finding, two views
    assert re.fullmatch(r"atom\.global\.\w+\.\w+\.add\.f32", finding.evidence["ir"][0]["instruction"])
    assert "(IR: compiles to `atom.global" in finding.message


@needs_triton
def test_res002_numbers_for_every_compiled_kernel(compiled) -> None:
    result = compiled["cold"]
    numbers = [f for f in result.findings if f.code == "RES002"]
    kernels = {(Path(f.location.file).name, f.kernel) for f in numbers}
    assert ("prc001_tf32_dot.py", "ieee_kernel") in kernels and ("kan002_compile_error.py", "copy_kernel") in kernels
    for finding in numbers:
        resources = finding.evidence["resources"]
        # A CUDA kernel's threads per block are set at its launch (unless __launch_bounds__ says).
        wanted = {"registers", "spill_stores"} | ({"threads"} if finding.location.file.endswith(".py") else set())
        assert wanted <= set(resources), finding.message
        assert "registers/thread" in finding.message or "needs" in finding.message
    (over,) = _finding(result, "res002_shared_memory.py", "RES002")
    assert over.evidence["resources"]["dynamic_shared"] > 227 * 1024 > 0
    assert "227 KB" in over.message and "autotune config 2 of 2" in over.message


@needs_triton
def test_compile_failure_is_one_finding_and_the_file_goes_on(compiled) -> None:
    failures = _finding(compiled["cold"], "kan002_compile_error.py", "KAN002")
    assert len(failures) == 1 and "power of 2" in failures[0].message
    assert _finding(compiled["cold"], "kan002_compile_error.py", "RES002", informational=True)  # copy_kernel compiled


@needs_triton
def test_second_run_compiles_nothing(compiled) -> None:
    assert re.search(r"IR: [1-9]\d* kernel configurations compiled, 0 from the cache", _note(compiled["cold"], "IR:"))
    assert re.search(r"IR: 0 kernel configurations compiled, [1-9]\d* from the cache", _note(compiled["warm"], "IR:"))
    def ir_dicts(result):
        return [f.to_dict() for f in result.findings if "ir" in f.evidence or f.evidence.get("source") == "ir"]

    assert ir_dicts(compiled["warm"]) == ir_dicts(compiled["cold"]) and ir_dicts(compiled["cold"])


@needs_triton
def test_blackwell_target_reports_tensor_memory(tmp_path) -> None:
    config = Config(root=str(tmp_path))
    path = [str(FIXTURES / "prc001_tf32_dot.py")]
    result = run_ir(path, config, run_static(path, config, use_cache=False), targets=["sm_100"], show_resources=True)
    tf32 = [f for f in result.findings if f.code == "PRC001" and "ir" in f.evidence]
    assert tf32 and tf32[0].evidence["ir"][0]["instruction"].startswith("tcgen05.mma") and "sm_100" in tf32[0].message
    numbers = [f for f in result.findings if f.code == "RES002" and f.kernel == "tf32_kernel"]
    assert numbers and numbers[0].evidence["resources"]["tmem_columns"] > 0 and "TMEM columns" in numbers[0].message


HANGING = textwrap.dedent("""\
    import triton
    import triton.language as tl


    def _forever():
        while True:
            pass


    LIMIT = _forever()


    @triton.jit
    def stuck_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK) + LIMIT
        tl.store(x_ptr + offs, 0.0)


    def run(x):
        stuck_kernel[(1,)](x, BLOCK=128)
    """)


@needs_triton
def test_a_hanging_module_times_out_as_one_finding(tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\nir = { timeout = 5 }\n")
    (tmp_path / "hang.py").write_text(HANGING)
    from kanalyze.config import load_config

    config = load_config([str(tmp_path)])
    started = time.perf_counter()
    result = run_ir([str(tmp_path)], config, run_static([str(tmp_path)], config, use_cache=False))
    assert time.perf_counter() - started < 60
    (finding,) = [f for f in result.findings if f.code == "KAN002"]
    assert "did not finish within 5 s" in finding.message and finding.evidence["timed_out"]


CUDA = FIXTURES / "cuda_kernels.cu"


@needs_nvcc
@pytest.mark.parametrize("fast_math", [False, True], ids=["plain", "fast-math"])
def test_cuda_fixture_through_nvcc(fast_math: bool) -> None:
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.nvcc import CudaSource
    from kanalyze.analyzer.ir.settings import IRSettings
    from kanalyze.analyzer.ir.stage import analyze_ir

    unit = CudaSource(CUDA.read_text(), str(CUDA), 1, ("--use_fast_math",) if fast_math else (), CUDA.name)
    run = analyze_ir([], IRSettings(), ArtifactCache.disabled(), cuda=[unit])
    kernels = run.files[0].kernels
    assert {k.kernel for k in kernels} == {"softplus_sum", "count_positive", "wmma_half_accumulate",
                                          "wmma_float_accumulate"} and all(k.ok for k in kernels)
    assert all(k.resources.registers and k.resources.spill_stores == 0 for k in kernels)
    found = {(h.row, h.code) for k in kernels for h in k.hits}
    expected = expectations(CUDA)
    wanted = expected["ir"] | (expected["fast-math"] if fast_math else set())
    assert found == wanted, (sorted(found - wanted), sorted(wanted - found))
    assert not (expected["ir-ok"] & found)


@needs_nvcc
def test_nvcc_error_is_a_failed_unit_with_its_row() -> None:
    from kanalyze.analyzer.ir.nvcc import CudaSource, compile_cuda
    from kanalyze.analyzer.ir.targets import Target

    text = "__global__ void k(float* x) {\n    x[0] = undefined_name;\n}\n"
    record = compile_cuda(CudaSource(text, "/project/bad.cu", origin_row=10), Target(90))
    assert not record["ok"] and "undefined_name" in record["error"] and record["row"] == 11


def test_missing_nvcc_is_said_once(monkeypatch) -> None:
    from kanalyze.analyzer.ir import stage
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.nvcc import CudaSource
    from kanalyze.analyzer.ir.settings import IRSettings

    monkeypatch.setattr(stage, "find_nvcc", lambda: None)
    units = [CudaSource("__global__ void k() {}\n", f"/p/{i}.cu") for i in range(3)]
    run = stage.analyze_ir([], IRSettings(), ArtifactCache.disabled(), cuda=units)
    assert run.files == [] and len(run.notes) == 1 and "nvcc was not found" in run.notes[0]


def test_triton_compiles_without_torch(tmp_path) -> None:
    """The `ir` extra needs triton, not torch: Triton's compiler imports no torch."""
    if find_spec("triton") is None:
        pytest.skip("triton is not installed")
    import subprocess
    import sys

    (tmp_path / "k.py").write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                   "def k(x, B: tl.constexpr):\n    tl.store(x + tl.arange(0, B), 1.0)\n")
    code = ("import sys, triton\nsys.path.insert(0, sys.argv[1])\nimport k\n"
            "from triton.backends.compiler import GPUTarget\nfrom triton.compiler import ASTSource\n"
            "triton.compile(ASTSource(k.k, {'x': '*fp32', 'B': 'constexpr'}, {'B': 32}), target=GPUTarget('cuda', 90, 32))\n"
            "sys.exit(3 if 'torch' in sys.modules else 0)\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]


COPY = textwrap.dedent("""\
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


    def copy(x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
    """)


@needs_triton
def test_cli_show_resources_reports_numbers_without_failing(tmp_path, capsys, monkeypatch) -> None:
    from kanalyze.cli import main

    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "copy.py").write_text(COPY)
    args = ["check", "--isolated", "--select", "RES002", str(tmp_path / "copy.py")]
    assert main([*args, "--ir", "--show-resources", "--output-format", "json"]) == 0   # numbers are not failures
    out, err = capsys.readouterr()
    import json

    (item,) = json.loads(out)
    assert item["code"] == "RES002" and item["evidence"]["informational"] and item["location"]["row"] == 7
    assert item["evidence"]["resources"]["threads"] == 128 and item["evidence"]["target"] == "sm_90"
    assert "IR: 1 kernel configurations compiled" in err
    assert main([*args, "--ir"]) == 0 and "All checks passed!" in capsys.readouterr().out
