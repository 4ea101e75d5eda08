"""CMP003 tells a shape defect from precision held to a smaller size's tighter bound.

On an H100, gpt-o1's KernelBench level2_51 (a GEMM, then a tanh GELU where the reference's
is erf's) was confirmed CMP003 "at every size 1": 8.1e-5 off where the bound of a one-term
reduction is 3.9e-7.  At the problem's own sizes the same kernel is as far off and within
the bound there, which allows for the reference's own error over 8192 terms.  Its error
does not depend on the size, so no size was shown wrong: the gate says it was not a shape
defect, and a size whose values are garbage still confirms.  Where the error grows at the
new size but the values stay close (the GELU's inputs there are where the approximation
is worst), the failure stands, said as the arithmetic's.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates import gates_by_code
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.sandbox.process import Outcome

_erf = np.vectorize(math.erf)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation: off from the erf GELU by up to 4.7e-4 (at x = 2.7)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def sized(label: str, n: int, x: np.ndarray, observed: np.ndarray, reference_noise: float = 0.0) -> Result:
    """A CMP003 case at N = n: the float64 reference, the reference in float32 (off by
    `reference_noise`, as a long reduction leaves it), and what the candidate returned."""
    exact = gelu(x)
    working = (exact + reference_noise * np.cos(np.arange(n))).astype(np.float32)
    return case_result(label, n, working, exact, observed.astype(np.float32))


def case_result(label: str, n: int, working: np.ndarray, exact: np.ndarray, observed: np.ndarray) -> Result:
    """The case's result: the reference's outputs in its dtype and in float64 (integers: the
    same), and the candidate's, in `observed`'s dtype."""
    dtype, exact_dtype = str(working.dtype), "float64" if working.dtype.kind == "f" else str(working.dtype)
    reference = Outcome("done", meta={
        "status": "ok", "inputs": [], "init_inputs": [],
        "output": {"prefix": "o_", "dtypes": [dtype], "structure": "tensor"},
        "output64": {"prefix": "e_", "dtypes": [exact_dtype], "structure": "tensor"}},
        arrays={"o_0": working, "e_0": exact})
    run = {"status": "ok", "output": {"prefix": "run0_", "dtypes": [str(observed.dtype)], "structure": "tensor"}}
    candidate = Outcome("done", meta={"status": "ok", "runs": [run]}, arrays={"run0_0": observed})
    return Result(Case(f"CMP003/{label}", "CMP003", {"N": n}), reference, candidate)


def judge(*results: Result):
    return gates_by_code()["CMP003"].judge(SimpleNamespace(sizes={"N": 4096}), list(results))


X = np.linspace(-4.0, 4.0, 4096)
# At the problem's own sizes the reference's float32 error is 1.5e-4 (bound 6e-4): the tanh GELU passes.
BASE = sized("base", 4096, X, gelu_tanh(X), reference_noise=1.5e-4)
ONE = np.array([2.7])


def test_the_same_precision_at_a_smaller_size_is_not_a_shape_defect() -> None:
    at_one = sized("every size 1 (N=1)", 1, ONE, gelu_tanh(ONE))
    assert not at_one.runs[0].outputs[0].array.tolist() == gelu(ONE).astype(np.float32).tolist()
    verdict = judge(BASE, at_one)
    assert verdict.status == REFUTED, verdict.summary
    assert "as precise at 1 perturbed sizes as at the problem's own" in verdict.summary, verdict.summary
    assert "at every size 1 (N=1) the error 0.0004733 exceeds that size's bound" in verdict.summary, verdict.summary
    assert "not a shape defect" in verdict.summary
    assert [case.id for case in verdict.cases][-1] == "CMP003/base"   # replayed with what it was held to


def test_without_the_problems_own_sizes_the_failure_stands() -> None:
    verdict = judge(sized("every size 1 (N=1)", 1, ONE, gelu_tanh(ONE)))
    assert verdict.status == CONFIRMED and "fails at every size 1 (N=1): max abs error" in verdict.summary
    assert verdict.details["failure"] == "imprecise" and "not a size it assumed" in verdict.summary


def test_further_off_than_at_the_problems_own_sizes_confirms_and_says_it_is_arithmetic() -> None:
    """gpt-o1's level2_51 on an H100: at the problem's sizes the GELU's inputs are means over
    8192 features, near 0, where the tanh GELU is nearly exact; at every size 1 the one input
    is 2.7, where it is 4.7e-4 off.  A failure at that size, but of the arithmetic: the
    verdict says so (failure "imprecise"), where a shape defect's says what failed."""
    near_zero = np.linspace(-0.05, 0.05, 4096)
    base = sized("base", 4096, near_zero, gelu_tanh(near_zero), reference_noise=1e-6)
    verdict = judge(base, sized("every size 1 (N=1)", 1, ONE, gelu_tanh(ONE)))
    assert verdict.status == CONFIRMED and verdict.details["failure"] == "imprecise", verdict.summary
    assert "further off than at the problem's own sizes" in verdict.summary, verdict.summary
    assert "not garbage from a size it assumed" in verdict.summary


def test_an_error_larger_than_at_the_problems_own_sizes_confirms() -> None:
    """A tail left unwritten is off by the values themselves, far more than the candidate's
    error at its own sizes: a shape defect, whatever the base."""
    x = np.linspace(-3.0, 3.0, 4099)
    tail = gelu_tanh(x)
    tail[-3:] = 0.0
    verdict = judge(BASE, sized("N=4099 (+3)", 4099, x, tail))
    assert verdict.status == CONFIRMED and "fails at N=4099 (+3)" in verdict.summary, verdict.summary
    assert verdict.details["failure"] == "wrong" and "arithmetic" not in verdict.summary
    assert [case.id for case in verdict.cases] == ["CMP003/N=4099 (+3)", "CMP003/base"]


def test_an_error_within_the_base_ratio_but_large_against_the_values_confirms() -> None:
    """Where the candidate errs much at its own sizes (large values), a small size whose values
    are wrong by more than 2^-10 of the largest one is still a defect, not precision."""
    big = sized("base", 4096, X * 1000.0, gelu(X * 1000.0) + 0.5, reference_noise=0.2)
    small = np.array([0.5, 1.0, 1.5])
    verdict = judge(big, sized("every size 3 (N=3)", 3, small, gelu(small) + 0.01))
    assert verdict.status == CONFIRMED, verdict.summary


def test_integer_outputs_are_exact_or_wrong_never_close() -> None:
    """An index off by one among values in the thousands is 1e-4 of the largest, yet no precision."""
    exact = np.arange(4000, 4003, dtype=np.int64)
    verdict = judge(case_result("N=3 (-1)", 3, exact, exact, exact + 1))
    assert verdict.status == CONFIRMED and verdict.details["failure"] == "wrong", verdict.summary
