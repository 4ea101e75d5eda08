"""The calibrated bound's allowance for long reductions: what the reference sums, and what an honest kernel errs by."""

from __future__ import annotations

import numpy as np
import pytest

from kanalyze.dynamic.compare import BLOCK_TERMS, check_values, growth
from kanalyze.dynamic.sandbox.transport import Leaf

torch = pytest.importorskip("torch")
F = torch.nn.functional


def longest(call) -> int:
    from kanalyze.dynamic.reductions import ReductionRecorder

    recorder = ReductionRecorder()
    with recorder:
        call()
    return recorder.longest


def test_the_recorder_reads_each_known_reduction_from_the_call() -> None:
    x, weight = torch.randn(4, 8, 16, 16), torch.randn(32, 8, 3, 3)
    assert longest(lambda: x / torch.norm(x)) == x.numel()              # norm over everything
    assert longest(lambda: torch.norm(x, 2, dim=1)) == 8                # the order first, then the dim
    assert longest(lambda: torch.nn.Conv2d(8, 32, 3)(x)) == 8 * 3 * 3   # channels × window
    assert longest(lambda: F.conv2d(x, weight)) == 8 * 3 * 3
    assert longest(lambda: torch.nn.Linear(16, 4)(x)) == 16
    assert longest(lambda: torch.randn(5, 7) @ torch.randn(7, 3)) == 7
    assert longest(lambda: x.mean(dim=(2, 3))) == 256
    assert longest(lambda: torch.softmax(x, 1)) == 8
    assert longest(lambda: torch.nn.GroupNorm(2, 8)(x)) == 4 * 256
    assert longest(lambda: torch.nn.BatchNorm2d(8)(x)) == 4 * 256
    assert longest(lambda: torch.einsum("bij,bjk->bik", torch.randn(2, 3, 5), torch.randn(2, 5, 4))) == 5
    assert longest(lambda: F.adaptive_avg_pool2d(x, 1)) == 256


def test_elementwise_work_is_no_reduction() -> None:
    x = torch.randn(64, 64)
    assert longest(lambda: torch.relu(x) * 2 + torch.tanh(x)) == 1
    assert growth(1) == growth(BLOCK_TERMS) == 1.0


def frobenius(x: np.ndarray, squares_sum: np.float32) -> np.ndarray:
    return (x / np.sqrt(squares_sum)).astype(np.float32)


def test_a_blockwise_norm_of_four_million_values_passes_and_a_wrong_one_does_not() -> None:
    """x / ‖x‖ as a kernel computes it: per-block sums of squares, then the blocks' partial sums
    added one after another (a loop or float atomics).  torch's tree sum errs less; the flat ulp
    floor blames the honest kernel for the difference, the reduction's allowance does not.
    (Partial sums kept in fp16 err about 4× more here and also pass: that is PRC002's gate,
    which promotes the accumulator and compares, not a value bound.)"""
    n = 1 << 22
    flat_failures = 0
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        exact = Leaf(x.astype(np.float64) / np.sqrt(np.sum(x.astype(np.float64) ** 2)), "float64")
        reference = Leaf(frobenius(x, np.sum(x * x, dtype=np.float32)), "float32")     # numpy sums pairwise
        partials = (x * x).reshape(-1, 256).sum(axis=1, dtype=np.float32)
        honest = Leaf(frobenius(x, np.cumsum(partials, dtype=np.float32)[-1]), "float32")
        flat_failures += not check_values(honest, reference, exact).ok
        assert check_values(honest, reference, exact, terms=n).ok
        # A real defect stays outside the allowance: the grid rounds down and the last block
        # of 256 squares is never added (a fraction 6e-5 of the sum).
        dropped = Leaf(frobenius(x, np.cumsum(partials[:-1], dtype=np.float32)[-1]), "float32")
        assert not check_values(dropped, reference, exact, terms=n).ok
    assert flat_failures >= 1      # what the allowance is for: without it, an honest kernel is "wrong"


def test_a_lane_that_accumulates_term_after_term_passes_and_a_dropped_term_does_not() -> None:
    """A convolution's window or a matmul's K summed by one lane, `acc += x * w` in fp32 (2400
    terms: 32 channels × a 3×5×5 window, as KernelBench's level-1 transposed 3D convolution):
    an honest kernel, whose error at the largest output is about 0.33·√terms ulps, well past
    the flat floor of 4.  A lane that skips one term of its window is still wrong."""
    rng = np.random.default_rng(0)
    outputs, terms = 20000, 2400
    x = rng.random((terms, outputs), dtype=np.float32)
    w = (rng.standard_normal((terms, outputs)) * 0.014).astype(np.float32)
    exact = np.einsum("ko,ko->o", x.astype(np.float64), w.astype(np.float64))
    products = np.ascontiguousarray((x * w).T)                     # each output's terms contiguous:
    reference = Leaf(products.sum(axis=1, dtype=np.float32), "float32")   # summed pairwise, as torch's trees
    sequential = np.zeros(outputs, np.float32)
    for k in range(terms):
        sequential += x[k] * w[k]
    honest = Leaf(sequential, "float32")
    assert not check_values(honest, reference, Leaf(exact, "float64")).ok        # the flat floor blames it
    assert check_values(honest, reference, Leaf(exact, "float64"), terms=terms).ok
    skipped = Leaf(sequential - x[terms // 2] * w[terms // 2], "float32")
    assert not check_values(skipped, reference, Leaf(exact, "float64"), terms=terms).ok


def test_tf32_products_stay_outside_the_allowance_at_any_length() -> None:
    """The lane's allowance grows with √terms, and so does TF32's error: products of operands
    rounded to 10 mantissa bits (what `tl.dot` does by default) stay many times over the bound,
    from 1024 to 32768 terms (16 to 70 times on this machine's draws)."""
    def tf32(a: np.ndarray) -> np.ndarray:
        bits = a.astype(np.float32).view(np.uint32)
        return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)

    rng = np.random.default_rng(1)
    for terms in (1024, 32768):
        x = rng.standard_normal((200, terms)).astype(np.float32)
        w = rng.standard_normal(terms).astype(np.float32)
        exact = Leaf(x.astype(np.float64) @ w.astype(np.float64), "float64")
        reference = Leaf((x @ w).astype(np.float32), "float32")
        rounded = Leaf((tf32(x) @ tf32(w)).astype(np.float32), "float32")
        check = check_values(rounded, reference, exact, terms=terms)
        assert not check.ok and check.max_error > 5 * check.bound, (terms, check.max_error, check.bound)


def test_the_witness_states_the_allowance() -> None:
    exact = np.linspace(0.1, 1.0, 100)
    working = Leaf(exact.astype(np.float32), "float32")
    check = check_values(working, working, Leaf(exact, "float64"), terms=1 << 24)
    metric = check.metric()
    assert metric["reduction_terms"] == 1 << 24 and "longest reduction" in metric["bound_rule"]
    assert check.bound == pytest.approx(check_values(working, working, Leaf(exact, "float64")).bound * 64)
