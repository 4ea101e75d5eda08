"""Which host branches a run with CUDA inputs never reaches, as RES001 reads a Triton
candidate's forward path (analyzer/cuda/forward_paths.py's `OnGpu`, shared with the CUDA
rule): PyTorch there is not reported, since a benchmark's inputs never go there."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from kanalyze.analyzer.cuda.forward_paths import OnGpu
from kanalyze.analyzer.triton.model import TritonModule


def fallback_is_off_gpu(body: str) -> bool:
    """Is the call `fallback(x)` in `def f(x, y):` + body in a branch off the GPU?"""
    source = "import torch\n\n\ndef f(x, y):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    model = TritonModule.from_source("m.py", source)
    function = next(f for f in model.functions if f.qualname == "f")
    call = next(n for n in model.nodes(cst.Call) if isinstance(n.func, cst.Name) and n.func.value == "fallback")
    dead = OnGpu(model, []).dead(function)
    return id(call) in dead or any(id(a) in dead for a in model.ancestors(call))


@pytest.mark.parametrize("body", [
    "if not x.is_cuda:\n    return fallback(x)\nreturn kernel(x)\n",
    "if x.is_cpu:\n    return fallback(x)\n",
    'if x.device.type == "cpu":\n    return fallback(x)\n',
    'if x.device.type != "cuda":\n    return fallback(x)\n',
    "if not torch.cuda.is_available():\n    return fallback(x)\n",
    "if x.is_cuda:\n    return kernel(x)\nelse:\n    return fallback(x)\n",
    "if x.is_cuda and y.is_cuda:\n    return kernel(x)\nelse:\n    return fallback(x)\n",
    "if not x.is_cuda or not y.is_cuda:\n    return fallback(x)\n",
    "if x.is_cuda:\n    return kernel(x)\nreturn fallback(x)\n",
    "return kernel(x) if x.is_cuda else fallback(x)\n",
    # `or` with a GPU test is True on every GPU run, whatever the other side is
    "if x.is_cuda or x.dim() == 3:\n    return kernel(x)\nelse:\n    return fallback(x)\n",
])
def test_a_branch_only_tensors_off_the_gpu_take(body: str) -> None:
    assert fallback_is_off_gpu(body)


@pytest.mark.parametrize("body", [
    "if x.is_cuda and x.dim() == 3:\n    return kernel(x)\nelse:\n    return fallback(x)\n",  # a 2-D input on the GPU too
    "if x.is_cuda:\n    y = kernel(x)\nreturn fallback(x)\n",          # no return in the GPU branch
    "if not x.is_contiguous():\n    return fallback(x)\n",
    "if x.is_cuda:\n    return fallback(x)\n",
    "try:\n    return kernel(x)\nexcept RuntimeError:\n    return fallback(x)\n",
])
def test_a_branch_the_gpu_can_take(body: str) -> None:
    assert not fallback_is_off_gpu(body)
