"""The CUDA C++ positive controls (`cuda` in fixtures/kernelbench/controls.json), on the CPU.

They run only on a GPU (tests/test_dynamic_gpu.py); here, what needs none:
  - the static pass flags each plant with its clause where a CUDA detector covers
    it (see NOT_FLAGGED for those only a gate decides) and not its clean twin;
  - the PRC002 promotion rewrites the plant's half accumulators to float and
    leaves the twin alone;
  - every control, and the promoted plant, compiles with the real nvcc against
    the installed torch's headers, with the flags load_inline adds (`-ptx`: the
    CUDA front end over host and device code, PTX for the device code).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from kanalyze.check import analyze_source
from kanalyze.dynamic.promote import promote_accumulators

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = ROOT / "fixtures" / "kernelbench" / "candidates"
CONTROLS = {k: v for k, v in json.loads((ROOT / "fixtures/kernelbench/controls.json").read_text()).items()
            if not k.startswith("_")}
CUDA_CONTROLS = {code: entry["cuda"] for code, entry in CONTROLS.items() if "cuda" in entry}
# Decided by their gates alone: CUDA has no MEM002 or CMP001 detector, and the PRC001
# detector takes `tile[i][j] = __float2half(x)` for a store of the output's dtype (the
# plant narrows its operands into __shared__ half tiles): a static miss the gate catches.
NOT_FLAGGED = {"MEM002", "CMP001", "PRC001"}
# What torch's cpp_extension passes to nvcc for every extension.
LOAD_INLINE_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                     "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                     "--expt-relaxed-constexpr", "-std=c++17"]


def _codes(name: str) -> set[str]:
    path = CANDIDATES / name
    findings, _ = analyze_source(str(path), path.read_text(encoding="utf-8"))
    return {f.code for f in findings}


@pytest.mark.parametrize("code", sorted(set(CUDA_CONTROLS) - NOT_FLAGGED))
def test_the_static_pass_flags_the_plant_not_the_twin(code) -> None:
    assert code in _codes(CUDA_CONTROLS[code]["plant"])
    assert code not in _codes(CUDA_CONTROLS[code]["twin"])


def test_promotion_widens_the_plants_half_accumulators_only() -> None:
    plant = (CANDIDATES / CUDA_CONTROLS["PRC002"]["plant"]).read_text()
    promoted, changes = promote_accumulators(plant)
    assert [(c["from"], c["to"]) for c in changes] == [("at::Half", "float")] * 2
    assert "__shared__ float partial[THREADS];" in promoted and "    float sum = 0;" in promoted
    assert "const at::Half* row" in promoted                      # pointers to the data stay half
    # Only the flagged line's accumulator, when lines are given (the `sum +=` line).
    row = next(i for i, line in enumerate(plant.splitlines(), 1) if "sum += row[j]" in line)
    assert [c["why"] for c in promote_accumulators(plant, [row])[1]] == ["`sum` accumulates with `+=`"]
    twin = (CANDIDATES / CUDA_CONTROLS["PRC002"]["twin"]).read_text()
    assert promote_accumulators(twin) == (twin, [])


def test_promotion_rewrites_only_pytorch_half_types_that_accumulate() -> None:
    from kanalyze.dynamic.promote_cuda import promote_cuda_accumulators

    source = """load_inline
__global__ void k(const at::Half* x, c10::BFloat16* out, int n) {
    c10::BFloat16 total{0};
    at::Half first = x[0];
    __half raw = __float2half(0.0f);
    for (int i = 0; i < n; ++i) { total += x[i]; raw = __hadd(raw, x[i]); }
    out[0] = total + first;
}
"""
    promoted, changes = promote_cuda_accumulators(source)
    assert [(c["row"], c["from"]) for c in changes] == [(3, "c10::BFloat16")]
    assert "    float total{0};" in promoted
    assert "at::Half first = x[0];" in promoted and "const at::Half* x" in promoted   # not accumulated; pointers
    assert "__half raw" in promoted      # CUDA's own half: its conversions are off in torch builds


def _strings(text: str) -> dict[str, str]:
    """The module-level string constants of a control (read, never run)."""
    return {node.targets[0].id: node.value.value for node in ast.parse(text).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_the_controls_compile_with_nvcc(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    include = Path(torch.__file__).parent / "include"
    sources = {name: (CANDIDATES / name).read_text() for pair in CUDA_CONTROLS.values() for name in pair.values()}
    sources["promoted PRC002 plant"] = promote_accumulators(sources[CUDA_CONTROLS["PRC002"]["plant"]])[0]
    blocks = ["#include <torch/extension.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
    for index, (name, text) in enumerate(sorted(sources.items())):
        strings = _strings(text)
        assert {"cuda_source", "cpp_source"} <= set(strings), name
        blocks.append(f"namespace control_{index} {{  // {name}")
        for key in ("cpp_source", "cuda_source"):   # declarations first, as load_inline's main.cpp has them
            blocks.append(re.sub(r"(?m)^\s*#\s*include\b.*$", "", strings[key]))
        blocks.append("}")
    unit = tmp_path / "controls.cu"
    unit.write_text("\n".join(blocks) + "\n")
    done = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-w", *LOAD_INLINE_FLAGS, f"-I{include}",
                           f"-I{include / 'torch/csrc/api/include'}", f"-I{sysconfig.get_paths()['include']}",
                           str(unit), "-o", str(tmp_path / "controls.ptx")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    ptx = (tmp_path / "controls.ptx").read_text()
    assert ptx.count(".entry") == sum(s.count("__global__") for s in sources.values())
