"""How a problem's inputs grow with its knobs (dynamic/planning.py), and the budget a gate that
lengthens a size keeps by it.

On an H100, PRC002 lengthened the one knob of a square matmul (deepseek's level1_13, N = 4096)
as a reduction's length, to N = 2^20: inputs of 2^41 elements, which the reference worker drew
on the host until the machine's 125 GiB ran out, and the pair's references never came.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.dynamic.gates.prc002_long_reduction import INPUTS, long_sizes
from kanalyze.dynamic.planning import Plan

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"


def _square(n: int) -> Plan:
    """A square matmul's plan: A and B, both [N, N]."""
    return Plan({"N": n}, [{"numel": n * n, "growth": {"N": 2.0}}, {"numel": n * n, "growth": {"N": 2.0}}])


def test_the_plan_estimates_the_inputs_at_other_sizes() -> None:
    assert _square(4096).numel == 2 * 4096 ** 2
    assert _square(4096).numel_at({"N": 8192}) == 2 * 8192 ** 2
    assert Plan({"N": 4096}).numel_at({"N": 8192}) is None                 # nothing measured
    partial = Plan({"N": 8, "K": 3}, [{"numel": 24, "growth": {"N": 1.0}}])
    assert partial.numel_at({"K": 5}) is None                               # K's growth unknown
    # [M, K] and [K, N]: each tensor a power law, their sum not one
    matmul = Plan({"M": 64, "K": 128, "N": 64}, [{"numel": 64 * 128, "growth": {"M": 1.0, "K": 1.0, "N": 0.0}},
                                                 {"numel": 128 * 64, "growth": {"M": 0.0, "K": 1.0, "N": 1.0}}])
    assert matmul.numel_at({"M": 1024, "K": 128, "N": 64}) == 1024 * 128 + 128 * 64
    assert _square(4096).numel_at({"N": 10 ** 200}) >= 1 << 61                 # past any budget, no overflow


def test_a_square_matmuls_only_knob_is_lengthened_within_the_budget() -> None:
    square = _square(4096)
    assert long_sizes({"N": 4096}, "cuda", [[4096, 4096]]) == [("N=1048576", {"N": 1048576})]   # unbounded
    [(label, sizes)] = long_sizes({"N": 4096}, "cuda", [[4096, 4096]], numel_at=square.numel_at)
    assert sizes == {"N": 8192} and label == "N=8192"
    assert square.numel_at(sizes) <= INPUTS["cuda"]


def test_a_lengthening_that_cannot_fit_is_left_out() -> None:
    """On the CPU, the problem's own N (4096) already holds 2^25 elements: no lengthened case."""
    assert long_sizes({"N": 64}, "cpu", [[64, 64]], {"N": 4096}, _square(64).numel_at) == []


def test_a_reduction_with_room_is_lengthened_as_before() -> None:
    """A row sum of [batch, dim]: dim lengthened, batch shrunk to make room (cases.keeping_whole)."""
    rows = Plan({"batch": 16, "dim": 1024}, [{"numel": 16 * 1024, "growth": {"batch": 1.0, "dim": 1.0}}])
    [(_, sizes)] = long_sizes({"batch": 16, "dim": 1024}, "cpu", [[16]], numel_at=rows.numel_at)
    assert sizes == {"batch": 16, "dim": 65536}


def test_the_reference_worker_measures_each_knobs_growth() -> None:
    """A real worker, on meta tensors: A is [M, K] and B [K, N], so the count grows linearly in
    M and N and twice as fast in K."""
    pytest.importorskip("torch")
    from kanalyze.dynamic import planning
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.sandbox.process import Limits
    from kanalyze.dynamic.session import Session

    harness = find_harness(str(KB / "candidates" / "level1_problem3_matmul_ieee.py"), kernelbench=str(KB))
    session = Session(harness, "cpu", Limits())
    try:
        plan = planning.plan(session, None)
    finally:
        session.close()
    assert plan.sizes == {"M": 64, "K": 128, "N": 64}
    assert plan.inputs == [{"numel": 64 * 128, "growth": {"M": 1.0, "K": 1.0, "N": 0.0}},
                           {"numel": 128 * 64, "growth": {"M": 0.0, "K": 1.0, "N": 1.0}}]


def test_counts_the_worker_did_not_give_as_numbers_estimate_nothing() -> None:
    from kanalyze.dynamic.planning import _well_formed

    good = [{"numel": 8, "growth": {"N": 1.0}}]
    assert _well_formed(good) == good
    for bad in (None, "8", [{"numel": "8", "growth": {}}], [{"numel": 8, "growth": {"N": "two"}}], [8]):
        assert _well_formed(bad) == []
