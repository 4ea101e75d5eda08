"""ORD001's float atomic findings say along which grid axes every program adds to the same
addresses (`shared_axes`): the gate on a GPU multiplies the grid's sizes along them to say how
many programs add to each address (gates/ord001_permuted_order.py `contributions`)."""

from __future__ import annotations

import textwrap

import pytest

from kanalyze.check import analyze_text

KERNELS = textwrap.dedent("""\
    import triton
    import triton.language as tl

    @triton.jit
    def row_blocks(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
        tl.atomic_add(out_ptr + row, tl.sum(x))

    @triton.jit
    def first_column_block(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
        if tl.program_id(1) == 0:
            tl.atomic_add(out_ptr, tl.sum(x))

    @triton.jit
    def masked_by_row(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
        out_ptr.atomic_add(tl.sum(x), tl.program_id(0) < 4)

    @triton.jit
    def helper_index(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
        tl.atomic_add(out_ptr + slot(), tl.sum(x))

    @triton.jit
    def slot():
        return tl.program_id(2)
    """)


@pytest.mark.parametrize("kernel,axes", [
    ("row_blocks", [1, 2]),              # the row's column blocks all add to its one address
    ("first_column_block", [0, 2]),      # only axis 1's first program reaches the add
    ("masked_by_row", [1, 2]),           # the mask reads axis 0 as the address would
    ("helper_index", None),              # a helper may read any axis: nothing said
])
def test_a_float_atomic_says_which_axes_share_its_addresses(kernel, axes) -> None:
    findings, _ = analyze_text("kernels.py", KERNELS)
    found = [f for f in findings if f.code == "ORD001" and f.kernel == kernel]
    assert len(found) == 1, [(f.code, f.kernel) for f in findings]
    assert found[0].evidence.get("shared_axes") == axes, found[0].evidence


def test_the_audit_hands_the_shared_axes_to_the_gate() -> None:
    """The audit's static pass keeps what the gate reads of a finding's evidence (FLAG_EVIDENCE):
    the power plant's row sum over column blocks shares axis 1 (its grid is (rows, blocks))."""
    from pathlib import Path

    from kanalyze.audit.pair import static_pass

    plant = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench" / "candidates" / \
        "level1_problem11_row_sum_atomic_blocks.py"
    flags = [f for f in static_pass(str(plant)) if f["code"] == "ORD001"]
    assert [(f["kernel"], f.get("shared_axes")) for f in flags] == [("row_sum_kernel", [1, 2])]


def test_each_run_records_the_grids_of_its_own_launches() -> None:
    """The grids in a run's account are that run's (cleared before each, as the launch counts
    are): two cases at other sizes give each its own grid, (rows, column blocks)."""
    from pathlib import Path

    from kanalyze.dynamic.cases import Case
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.sandbox.process import Limits
    from kanalyze.dynamic.session import BASELINE, Session

    kb = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
    harness = find_harness(str(kb / "candidates" / "level1_problem11_row_sum_atomic_blocks.py"),
                           reference=str(kb / "level1" / "11_row_sum.py"))
    session = Session(harness, "cpu", Limits())
    try:
        results = session.execute([Case(BASELINE, "", {"batch_size": 2, "dim": 3000}, seed=0, model_seed=0),
                                   Case("ORD001/runs", "ORD001", {"batch_size": 3, "dim": 1024}, seed=1,
                                        model_seed=0)])
    finally:
        session.close()
    grids = [[run.meta.get("grids") for run in result.runs] for result in results]
    assert grids == [[{"row_sum_kernel": [[2, 3, 1]]}], [{"row_sum_kernel": [[3, 1, 1]]}]], grids
