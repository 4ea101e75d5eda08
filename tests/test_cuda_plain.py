"""Plain `load_inline` files read with Python's `ast` (analyzer/cuda_inline_plain.py)
give exactly what the LibCST path gives: the same findings at the same rows and
columns, the same suppressions; anything outside the plain shape takes LibCST."""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path

import pytest

import kanalyze.analyzer.cuda.inline_plain as plain
from kanalyze.check import analyze_source

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from cuda_corpus import solution  # noqa: E402


def both_paths(path: str, text: str, monkeypatch) -> tuple[tuple, tuple]:
    """(findings and suppressed count by the plain path, the same by LibCST)."""
    fast = analyze_source(path, text)
    with monkeypatch.context() as patch:
        patch.setattr(plain, "read_plain", lambda path, text: None)
        slow = analyze_source(path, text)
    dump = lambda result: ([f.to_dict() for f in result[0]], result[1])  # noqa: E731
    return dump(fast), dump(slow)


def inline_python_files() -> list[Path]:
    return sorted(p for p in (ROOT / "fixtures").rglob("*.py") if "load_inline" in p.read_text())


def test_fixtures_give_the_same_findings_on_both_paths(monkeypatch) -> None:
    read = 0
    for path in inline_python_files():
        text = path.read_text()
        read += plain.read_plain(str(path), text) is not None
        fast, slow = both_paths(str(path), text, monkeypatch)
        assert fast == slow, path
    assert read >= 1  # some fixtures are plain (KernelBench candidates), so the comparison means something


def test_generated_solutions_are_plain_and_agree(monkeypatch) -> None:
    rng = random.Random(7)
    read = findings = 0
    # Activations that drop NaN (hardtanh's fminf/fmaxf, ReLU's ternary): solutions with findings to agree on.
    dropping = [solution(rng, 100 + i, "elementwise", expr, ".py")
                for i, expr in enumerate(["fminf(fmaxf(v, -1.0f), 1.0f)", "v > 0.0f ? v : 0.0f"] * 3)]
    for suffix, text in [solution(rng, index) for index in range(60)] + dropping:
        if suffix != ".py":
            continue
        assert plain.read_plain("s.py", text) is not None
        read += 1
        fast, slow = both_paths("s.py", text, monkeypatch)
        assert fast == slow
        findings += len(fast[0])
    assert read >= 20 and findings >= 5


PLAIN = '''\
"""A solution."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

N = 4096

head = (
    "__global__ void k(const float* x, float* out, int n) {\\n"  # a comment between the pieces
    '    if (threadIdx.x < 4096) atomicAdd(out, x[threadIdx.x]);\\n'
    r"    /* raw: \\d */ }"
)
tail = """
// é non-ASCII before the finding
__global__ void m(const float* x, float* y) { y[0] = fmaxf(x[0], y[0]); }
torch::Tensor run(torch::Tensor x) { auto y = torch::empty_like(x); k<<<1, 4>>>(x.data_ptr<float>(), y.data_ptr<float>(), 4); m<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr<float>()); return y; }
"""
one_line = "__device__ void bump(float* s, float v) { atomicAdd(s, v); }"  # noqa: ORD001

ext = load_inline(
    name="ext",
    cpp_sources="torch::Tensor run(torch::Tensor x);",
    cuda_sources=[head, tail, one_line],
    functions=["run"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 0.5):
        super().__init__()
        self.alpha = alpha
        self.ext = ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.run(x.contiguous())
'''


def test_positions_through_concatenation_escapes_and_non_ascii(monkeypatch) -> None:
    assert plain.read_plain("p.py", PLAIN) is not None
    fast, slow = both_paths("p.py", PLAIN, monkeypatch)
    assert fast == slow
    found = {(f["code"], f["location"]["row"], f["location"]["column"]) for f in fast[0]}
    lines = PLAIN.splitlines()
    atomic_row = next(i for i, line in enumerate(lines, 1) if "atomicAdd(out" in line)
    assert ("ORD001", atomic_row, lines[atomic_row - 1].index("atomicAdd") + 1) in found
    fmax_row = next(i for i, line in enumerate(lines, 1) if "fmaxf" in line)
    assert ("EXC001", fmax_row, lines[fmax_row - 1].index("fmaxf") + 1) in found
    flag_row = next(i for i, line in enumerate(lines, 1) if "--use_fast_math" in line)
    assert ("EXC002", flag_row, lines[flag_row - 1].index('"--use_fast_math"') + 1) in found
    assert fast[1] >= 1  # the `# noqa: ORD001` on the one-line string


@pytest.mark.parametrize("variant", [
    PLAIN.replace("\n", "\r\n"), PLAIN.replace("    ", "\t"), "\ufeff" + PLAIN,
    PLAIN.replace("head = (", "head = (  # \u00e9\u4e2d"), PLAIN.replace('\\n"  # a comment', '\\t\\\\n"  # a comment'),
])
def test_line_ends_tabs_marks_and_escapes_agree(variant, monkeypatch) -> None:
    assert variant != PLAIN
    fast, slow = both_paths("p.py", variant, monkeypatch)
    assert fast == slow and fast[0]


@pytest.mark.parametrize("change", [
    ("        return self.ext.run(x.contiguous())", "        return self.ext.run(x) + torch.relu(x)"),
    ("        return self.ext.run(x.contiguous())", "        return x.cpu()"),
    ('    functions=["run"],', '    functions=["run", "other"],\n    verbose=True,'),
    ("N = 4096", "N = 4096\ntorch.backends.cuda.matmul.allow_tf32 = True"),
    ("import torch\n", "import torch\nimport threading\n"),
    ('    cpp_sources="torch::Tensor run(torch::Tensor x);",', '    cpp_sources=f"torch::Tensor run({N});",'),
    ("        self.alpha = alpha", "        self.alpha = nn.Linear(4, 4)"),
    ("\n\nclass ModelNew", "\nimport math as ext\n\nclass ModelNew"),  # the same name bound twice
])
def test_anything_outside_the_plain_shape_takes_libcst(change, monkeypatch) -> None:
    text = PLAIN.replace(*change)
    assert text != PLAIN
    fast, slow = both_paths("p.py", text, monkeypatch)
    assert fast == slow
    if change[1] != '    functions=["run", "other"],\n    verbose=True,':
        assert plain.read_plain("p.py", text) is None


def test_an_extension_forward_never_calls_is_left_to_libcst() -> None:
    text = PLAIN.replace("        return self.ext.run(x.contiguous())", "        return x")
    assert plain.read_plain("p.py", text) is None
    codes = {f.code for f in analyze_source("p.py", text)[0]}
    assert "RES001" in codes


def test_python_that_does_not_parse_still_reports_once() -> None:
    text = textwrap.dedent("""
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="e", cpp_sources="", cuda_sources="__global__ void k() {}"
    """)
    assert plain.read_plain("p.py", text) is None
    findings, _ = analyze_source("p.py", text)
    assert [f.code for f in findings] == ["KAN000"]
