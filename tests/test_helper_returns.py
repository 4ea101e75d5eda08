"""What a jit helper's call gives the dtype flow (analyzer/triton/helper_returns.py): a pair
unpacked element by element, and nothing known where the shapes do not match."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
from kanalyze.analyzer.triton.model import TritonModule

SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def pair(a_ptr, b_ptr):
    a = tl.load(a_ptr).to(tl.float16)
    b = tl.load(b_ptr).to(tl.int8)
    return a, b


@triton.jit
def either(a_ptr, flag: tl.constexpr):
    x = tl.load(a_ptr).to(tl.bfloat16)
    if flag:
        return x, x
    return x, x, x


@triton.jit
def kernel(a_ptr, b_ptr):
    first, second = pair(a_ptr, b_ptr)
    whole = pair(a_ptr, b_ptr)
    one, two = either(a_ptr, True)
    out = first
'''


@pytest.fixture(scope="module")
def flow():
    model = TritonModule.from_source("pairs.py", textwrap.dedent(SOURCE))
    return model, DtypeFlow(model)


def test_each_name_of_an_unpacked_pair_takes_its_element(flow) -> None:
    model, dtypes = flow
    kernel = model.jit["kernel"].function
    out = next(n for n in walk(kernel.node.body) if isinstance(n, cst.Assign)
               and n.targets[0].target.value == "out")
    assert dtypes.value(kernel, out.value) == {"float16"}                 # `first`: the pair's first element
    assert dtypes.value(kernel, _named_in(kernel, "second")) == {"int8"}  # `second`: its second


def _named_in(kernel, name: str) -> cst.Name:
    return next(n for n in walk(kernel.node.body) if isinstance(n, cst.Name) and n.value == name)


def test_a_pair_taken_whole_or_returns_of_other_lengths_give_nothing_known(flow) -> None:
    model, dtypes = flow
    kernel = model.jit["kernel"].function
    assert dtypes.value(kernel, _named_in(kernel, "whole")) == {"?"}      # a tuple in one name
    assert "?" in dtypes.value(kernel, _named_in(kernel, "one"))          # one return has three elements
