"""Branches of host code taken only for tensors that are not on the GPU.

    if not x.is_cuda:                      # the CPU fallback: PyTorch does the work
        return F.layer_norm(x, shape, w, b, eps)
    ...                                    # the kernel's launch

    if x.is_cuda:
        return triton_gelu(x)
    else:
        return F.gelu(x)                   # the same fallback, written the other way

    if x.is_cuda:
        return triton_gelu(x)
    return F.gelu(x)                       # after a return under a GPU test: the same

A benchmark's inputs are on the GPU, where such a branch never runs: what PyTorch
computes there is no part of what the benchmark measures.  `off_device_arms` gives the
blocks (an `if`'s body or its `else`, an `IfExp`'s arm, the statements after an `if`
that returns) whose every path needs a tensor off the GPU, read from the test alone:

  - off the GPU: `not X.is_cuda`, `X.is_cpu`, `X.device.type == "cpu"`,
    `X.device.type != "cuda"`, `not torch.cuda.is_available()`;
  - on the GPU: `X.is_cuda`, `X.device.type == "cuda"`, `X.device.type != "cpu"`,
    `torch.cuda.is_available()` (its `else` is off the GPU);
  - `and` and `or` of tests of one side: that side.

A test that mixes in anything else (`x.is_cuda and x.dim() == 3`) is not one: its
`else` runs on the GPU too, whenever the other condition fails.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.model import TritonModule

CUDA_AVAILABLE = "torch.cuda.is_available"


def off_device_arms(model: TritonModule, function_node: cst.CSTNode) -> set[int]:
    """ids of the blocks in `function_node` that run only for tensors off the GPU."""
    arms: set[int] = set()
    for node in walk(function_node):
        if isinstance(node, cst.If):
            on = _on_gpu(model, node.test)
            if on is False:
                arms.add(id(node.body))
            elif on is True and isinstance(node.orelse, cst.Else):
                arms.add(id(node.orelse))
            elif on is True and node.orelse is None and _returns(node.body):
                arms.update(id(after) for after in _after(model, node))   # `if x.is_cuda: return ...`
        elif isinstance(node, cst.IfExp):
            on = _on_gpu(model, node.test)
            if on is not None:
                arms.add(id(node.orelse if on else node.body))
    return arms


def off_device(model: TritonModule, node: cst.CSTNode, arms: set[int]) -> bool:
    """Is `node` in (or one of) the blocks `off_device_arms` gave?"""
    return bool(arms) and (id(node) in arms or any(id(a) in arms for a in model.ancestors(node)))


def _returns(block: cst.BaseSuite) -> bool:
    """Does the block end in a `return` (or a `raise`)?"""
    body = getattr(block, "body", ())
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise))


def _after(model: TritonModule, statement: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements after `statement` in its block."""
    body = list(getattr(model.parent(statement), "body", ()))
    at = next((i for i, node in enumerate(body) if node is statement), None)
    return body[at + 1:] if at is not None else []


def _on_gpu(model: TritonModule, test: cst.BaseExpression) -> bool | None:
    """True: the test holds only on the GPU; False: only off it; None: neither, or unknown."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _on_gpu(model, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = _on_gpu(model, test.left), _on_gpu(model, test.right)
        return left if left == right else None   # `and`/`or` of tests that agree: the same side
    if isinstance(test, cst.Attribute) and test.attr.value in ("is_cuda", "is_cpu"):
        return test.attr.value == "is_cuda"
    if isinstance(test, cst.Call) and model.call_name(test) == CUDA_AVAILABLE and not test.args:
        return True
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        left = test.left
        if isinstance(left, cst.Attribute) and left.attr.value == "type" and \
                isinstance(left.value, cst.Attribute) and left.value.attr.value == "device":
            device = string_literal(target.comparator)
            if device in ("cuda", "cpu") and isinstance(target.operator, (cst.Equal, cst.NotEqual)):
                return (device == "cuda") == isinstance(target.operator, cst.Equal)
    return None
