"""ORD001's reversed program order on a GPU (reverse_order.py) and the autotune pin its variant
runs under (autotune_pin.py).

The rewrite is checked as text, then for what it is for, under Triton's own
interpreter (which runs a launch's programs in launch order, as a GPU nearly
does): the plant whose last writer decides its bits gives other bits reversed,
and its clean twin the same bits.  The pin is checked on a real autotuner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kanalyze.dynamic.reverse_order import reverse_program_order

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())


def test_every_program_index_of_every_kernel_is_mirrored() -> None:
    source = textwrap.dedent("""\
        import triton
        import triton.language as tl
        from triton.language import program_id

        @triton.jit
        def helper(x):
            return x + tl.program_id(axis=1)

        @triton.autotune(configs=[], key=["n"])
        @triton.jit
        def kernel(x_ptr, n):
            pid = tl.program_id(0)
            other = program_id(2)
            tl.store(x_ptr + pid, helper(other))

        def host(x):
            return tl.program_id(0)   # not a kernel: left alone
        """)
    rewritten, changes = reverse_program_order(source)
    assert [c["row"] for c in changes] == [7, 12, 13]
    assert "return x + (tl.num_programs(axis=1) - 1 - tl.program_id(axis=1))" in rewritten
    assert "pid = (tl.num_programs(0) - 1 - tl.program_id(0))" in rewritten
    assert "other = (num_programs(2) - 1 - program_id(2))" in rewritten
    assert "    return tl.program_id(0)   # not a kernel: left alone" in rewritten


def test_cuda_block_indices_are_mirrored_and_nothing_else() -> None:
    source = textwrap.dedent('''\
        from torch.utils.cpp_extension import load_inline
        src = """
        __global__ void k(float* out, const float* x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            int row = blockIdx.y;
            if (i < n) atomicAdd(out + row, x[i]);
        }
        """
        ''')
    rewritten, changes = reverse_program_order(source)
    assert [(c["row"], c["from"]) for c in changes] == [(4, "blockIdx.x"), (5, "blockIdx.y")]
    assert "int i = (gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;" in rewritten
    assert "int row = (gridDim.y - 1 - blockIdx.y);" in rewritten
    assert reverse_program_order("import torch\nx = torch.ones(3)\n") == ("import torch\nx = torch.ones(3)\n", [])
    assert reverse_program_order("def broken(:\n") == ("def broken(:\n", [])


def _interpreted(script: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("role,expected", [("plant", "differ"), ("twin", "same")])
def test_reversed_order_changes_the_last_writer_and_nothing_in_a_clean_kernel(role, expected, tmp_path) -> None:
    pytest.importorskip("triton")
    candidate = KB / "candidates" / CONTROLS["ORD001"]["order"][role]
    reversed_file = tmp_path / candidate.name
    reversed_file.write_text(reverse_program_order(candidate.read_text())[0])
    script = textwrap.dedent(f"""\
        import importlib.util, torch
        def load(path, name):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.ModelNew()
        torch.manual_seed(0)
        x = torch.randn(8, 8192)
        a, b = load({str(candidate)!r}, "original")(x), load({str(reversed_file)!r}, "reversed")(x)
        assert torch.allclose(a, x.sum(1), rtol=1e-4, atol=1e-3)   # both are row sums
        print("same" if torch.equal(a, b) else "differ")
        """)
    assert _interpreted(script) == expected


def test_a_pinned_autotuner_keeps_the_config_the_candidate_chose(tmp_path) -> None:
    """Unpinned, an autotuner's first call runs every config (autotune_cpu.py: once each under
    the interpreter, as a GPU times them); pinned to the second's launch settings, it runs that
    one alone, and the launch records say so."""
    pytest.importorskip("triton")
    kernel = tmp_path / "tuned.py"
    kernel.write_text(textwrap.dedent("""\
        import triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def double(x_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)
        """))
    script = textwrap.dedent(f"""\
        import importlib.util, json, torch, triton
        from kanalyze.dynamic import autotune_cpu, autotune_pin
        from kanalyze.dynamic.recording import LaunchCounter
        autotune_cpu.install(); autotune_pin.install()
        counter = LaunchCounter()
        launched, recorded = {{}}, {{}}
        for pinned in (None, "the second config's"):
            spec = importlib.util.spec_from_file_location(f"tuned{{len(launched)}}", {str(kernel)!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            autotune_pin.pin(pinned and {{"double": [s for s in recorded["double"] if s["BLOCK"] == 64]}})
            counter.launches.clear(); counter.settings.clear()
            module.double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](torch.ones(100), 100)
            recorded = {{name: [dict(s) for s in settings] for name, settings in counter.settings.items()}}
            launched[str(pinned is not None)] = sorted(s["BLOCK"] for s in recorded["double"])
        print(json.dumps(launched))
        """)
    assert json.loads(_interpreted(script)) == {"False": [32, 64], "True": [64]}
