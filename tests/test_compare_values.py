"""The parent's value judge (compare.check_values) gives the plain rule's answers.

check_values reads each chunk of a problem's outputs in place, a few times; bench/bench_judge.py
keeps the same rule written plainly (`plain_check`: new arrays for every step) and times the two.
Here both judge the same arrays, seeded, with NaN and ±inf in the candidate's output, in the
reference and in the float64 reference, in every dtype the gates compare, across chunk borders.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from kanalyze.dynamic import compare
from kanalyze.dynamic.sandbox.transport import Leaf, as_float64

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_judge.py"
spec = importlib.util.spec_from_file_location("bench_judge", BENCH)
bench_judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_judge)


def _leaf(values: np.ndarray, dtype: str) -> Leaf:
    if dtype == "bfloat16":   # stored as the top 16 bits of float32, as the workers save it
        return Leaf((values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16), dtype)
    return Leaf(values.astype(dtype), dtype)


def _poison(values: np.ndarray, rng, share: float) -> np.ndarray:
    values = values.copy()
    flat = values.reshape(-1)
    for special in (np.nan, np.inf, -np.inf):
        flat[rng.random(flat.size) < share] = special
    return values


def _same(a: tuple, b: tuple) -> bool:
    """Equal, a NaN equal to a NaN (the value observed where the largest error is)."""
    return len(a) == len(b) and all(x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)
                                    for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32"])
@pytest.mark.parametrize("shape", [(37, 11), (5,), (), (0, 3), (64,)])
def test_check_values_gives_the_plain_rules_answers(monkeypatch, dtype, shape) -> None:
    monkeypatch.setattr(compare, "CHUNK", 16)   # many chunk borders in small arrays
    rng = np.random.default_rng(hash((dtype, shape)) % 2 ** 32)
    for trial in range(6):
        exact = rng.standard_normal(shape) * (100 if dtype == "int32" else 1)
        if dtype == "int32":
            exact = np.round(exact)
        working = exact * (1 + rng.standard_normal(shape) * 1e-3)
        observed = working + (rng.standard_normal(shape) * 10.0 ** -trial if trial % 2 else 0.0)
        if dtype != "int32" and trial >= 2:
            observed = _poison(np.asarray(observed), rng, 0.05)
            if trial >= 4:
                working, exact = _poison(np.asarray(working), rng, 0.05), _poison(np.asarray(exact), rng, 0.02)
        leaves = (_leaf(np.asarray(observed), dtype), _leaf(np.asarray(working), dtype),
                  Leaf(np.asarray(exact, dtype=np.float64), "float64"))
        plain = bench_judge.plain_check(*leaves, terms=1 + trial * 5000)
        product = bench_judge.product_check(*leaves, terms=1 + trial * 5000)
        assert _same(product, plain), (trial, product, plain)


def test_check_values_leaves_the_arrays_it_reads_alone() -> None:
    exact = np.linspace(-3, 3, 100)
    observed, working = exact.copy(), exact.copy()
    observed[7] = np.nan
    kept = [observed.copy(), working.copy(), exact.copy()]
    check = compare.check_values(Leaf(observed, "float64"), Leaf(working, "float64"), Leaf(exact, "float64"))
    assert not check.ok and check.max_error == np.inf and check.index == (7,)
    for array, before in zip((observed, working, exact), kept):
        assert np.array_equal(array, before, equal_nan=True)   # float64 arrays are not upcast: never written


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32"])
def test_classes_read_in_the_stored_dtype_match_the_float64_route(dtype: str) -> None:
    """EXC001 and CMP002 sort every element into finite / NaN / +Inf / −Inf; read in the stored
    dtype (bfloat16 from its bits) they must agree with converting to float64 first."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal(50_000) * 1e3
    for special, every in ((np.nan, 7), (np.inf, 11), (-np.inf, 13)):
        values[::every] = special
    if dtype == "int32":
        values = np.nan_to_num(values, nan=0.0, posinf=1.0, neginf=-1.0)
    leaf = _leaf(values, dtype)
    through_float64 = np.zeros(values.shape, dtype=np.int8)
    wide = as_float64(leaf)
    through_float64[np.isnan(wide)] = 1
    through_float64[np.isposinf(wide)] = 2
    through_float64[np.isneginf(wide)] = 3
    got = compare.leaf_classes(leaf)
    assert got.dtype == np.int8 and np.array_equal(got, through_float64)
    assert (got == 1).any() == (dtype != "int32") and (got == 3).any() == (dtype != "int32")
