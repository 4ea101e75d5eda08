"""Which host branches run only for tensors off the GPU (analyzer/triton/device_branches.py):
RES001 does not report PyTorch there, since a benchmark's inputs never go there."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from kanalyze.analyzer.triton.device_branches import off_device, off_device_arms
from kanalyze.analyzer.triton.model import TritonModule


def fallback_is_off_gpu(body: str) -> bool:
    """Is the call `fallback(x)` in `def f(x, y):` + body in a branch off the GPU?"""
    source = "import torch\n\n\ndef f(x, y):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    model = TritonModule.from_source("m.py", source)
    function = next(f for f in model.functions if f.qualname == "f")
    call = next(n for n in model.nodes(cst.Call) if isinstance(n.func, cst.Name) and n.func.value == "fallback")
    return off_device(model, call, off_device_arms(model, function.node))


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
])
def test_a_branch_only_tensors_off_the_gpu_take(body: str) -> None:
    assert fallback_is_off_gpu(body)


@pytest.mark.parametrize("body", [
    "if x.is_cuda and x.dim() == 3:\n    return kernel(x)\nelse:\n    return fallback(x)\n",  # a 2-D input on the GPU too
    "if x.is_cuda or x.dim() == 3:\n    return kernel(x)\nelse:\n    return fallback(x)\n",
    "if x.is_cuda:\n    y = kernel(x)\nreturn fallback(x)\n",          # no return in the GPU branch
    "if not x.is_contiguous():\n    return fallback(x)\n",
    "if x.is_cuda:\n    return fallback(x)\n",
    "try:\n    return kernel(x)\nexcept RuntimeError:\n    return fallback(x)\n",
])
def test_a_branch_the_gpu_can_take(body: str) -> None:
    assert not fallback_is_off_gpu(body)
