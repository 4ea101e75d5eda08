"""Which arms of a kernel a dense reading sets aside (analyzer/triton/dense_path.py): the
side of a constexpr switch that reads (sequence, chunk) coordinates from an offsets table,
where the other side computes them from the program ids.  ORD001 reads such a kernel's
atomics on the dense side."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from kanalyze.analyzer.triton.dense_path import table_arms
from kanalyze.analyzer.triton.model import TritonModule

VARLEN = """
    if IS_VARLEN:
        i_n, i_t = tl.load(indices + i_t * 2), tl.load(indices + i_t * 2 + 1)
        bos, eos = tl.load(cu_seqlens + i_n), tl.load(cu_seqlens + i_n + 1)
    else:
        bos, eos = i_n * T, i_n * T + T
"""


def set_aside(switch: str) -> list[str]:
    """The first assigned name of each arm set aside, in a kernel with `switch` in its body."""
    source = textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(x, indices, cu_seqlens, g, T, IS_VARLEN: tl.constexpr, USE_GATE: tl.constexpr):
            i_t, i_n = tl.program_id(0), tl.program_id(1)
    """) + textwrap.indent(textwrap.dedent(switch), "    ")
    model = TritonModule.from_source("k.py", source)
    arms = table_arms(model, model.jit["k"])
    blocks = [n for n in model.nodes(cst.IndentedBlock, cst.Else) if id(n) in arms]
    return [model.module.code_for_node(b.body[0] if isinstance(b, cst.IndentedBlock) else b.body.body[0]).strip()
            for b in blocks]


def test_the_table_side_of_a_varlen_switch_is_set_aside() -> None:
    assert set_aside(VARLEN) == ["i_n, i_t = tl.load(indices + i_t * 2), tl.load(indices + i_t * 2 + 1)"]


def test_a_negated_switch_sets_aside_its_else() -> None:
    switched = """
        if not IS_VARLEN:
            bos = i_n * T
        else:
            i_n = tl.load(indices + i_t * 2)
            bos = tl.load(cu_seqlens + i_n)
            eos = tl.load(cu_seqlens + i_n + 1)
    """
    assert set_aside(switched) == ["i_n = tl.load(indices + i_t * 2)"]


def test_every_block_under_the_same_switch_is_set_aside() -> None:
    later = VARLEN + """
    if IS_VARLEN:
        p = x + bos
    else:
        p = x + i_n * T
    """
    assert len(set_aside(later)) == 2


@pytest.mark.parametrize("switch", [
    # an optional input: its data loaded or None, no coordinates switched
    "if USE_GATE:\n    b_g = tl.load(g + i_t)\n    b_h = tl.load(g + i_t + 1)\nelse:\n    b_g = None\n    b_h = None\n",
    # a lone index read: a gather, whose repeats are data
    "if IS_VARLEN:\n    row = tl.load(indices + i_t)\nelse:\n    row = i_t\n",
    # the table's data read with a mask: data, not a coordinate
    "if IS_VARLEN:\n    bos = tl.load(cu_seqlens + i_n, mask=i_n < T)\n    eos = tl.load(cu_seqlens + i_n + 1, mask=i_n < T)\n"
    "else:\n    bos = i_n * T\n    eos = bos + T\n",
])
def test_nothing_is_set_aside_without_an_offsets_table(switch: str) -> None:
    assert set_aside(switch) == []
