"""Deciding from values (parent side; numpy only): calibrated tolerance, bits, special values.

The tolerance is calibrated, never a fixed 1e-2: the reference computed in
the working dtype is compared with the same reference computed in float64 on
upcast inputs; the candidate may err by `FACTOR` times the reference's own
largest error, and at least by `FLOOR_ULPS` units in the last place of the
output's largest magnitude.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kanalyze.dynamic.sandbox.transport import EPS, Leaf, as_float64, bits

FACTOR = 4.0
FLOOR_ULPS = 4.0


def fmt(value: float) -> str:
    return f"{value:.4g}"


@dataclass
class ValueCheck:
    ok: bool
    max_error: float        # largest |observed − expected|
    bound: float
    reference_error: float  # the working-dtype reference's own largest error
    index: tuple | None     # where the largest error is
    observed: float | None
    expected: float | None
    mismatches: int         # elements over the bound
    numel: int
    note: str = ""

    def metric(self) -> dict:
        return {"max_abs_error": self.max_error, "bound": self.bound, "reference_error": self.reference_error,
                "mismatches": self.mismatches, "numel": self.numel,
                "bound_rule": f"max({FACTOR:g} × the reference's own error in its dtype, "
                              f"{FLOOR_ULPS:g} ulps of the largest expected magnitude)"}

    def summary(self) -> str:
        where = f" at index {list(self.index)} (observed {fmt(self.observed)}, expected {fmt(self.expected)})" \
            if self.index is not None else ""
        return (f"max abs error {fmt(self.max_error)} > bound {fmt(self.bound)} in {self.mismatches} of "
                f"{self.numel} elements{where}")


def calibrated_bound(working: Leaf, expected64: np.ndarray) -> tuple[float, float]:
    """(bound, reference error) for outputs of `working`'s dtype."""
    ref = as_float64(working)
    finite = np.isfinite(ref) & np.isfinite(expected64)
    reference_error = float(np.max(np.abs(ref[finite] - expected64[finite]), initial=0.0))
    scale = float(np.max(np.abs(expected64[finite]), initial=0.0)) or 1.0
    eps = EPS.get(working.dtype, 0.0)
    return max(FACTOR * reference_error, FLOOR_ULPS * eps * scale), reference_error


def check_values(observed: Leaf, working: Leaf, expected64_leaf: Leaf, bound: float | None = None) -> ValueCheck:
    """Observed against float64 within the calibrated bound (or the one given).

    Elements where the float64 reference is not finite are left to EXC001;
    elsewhere a non-finite observed value is an infinite error.
    """
    expected64 = as_float64(expected64_leaf)
    if bound is None:
        bound, reference_error = calibrated_bound(working, expected64)
    else:
        reference_error = calibrated_bound(working, expected64)[1]
    out = as_float64(observed)
    if not working.is_float or not observed.is_float:  # integers and booleans: exact
        bound = 0.0
    considered = np.isfinite(expected64)
    error = np.where(considered, np.abs(out - expected64), 0.0)
    error = np.where(considered & ~np.isfinite(out), np.inf, error)
    if error.size == 0:
        return ValueCheck(True, 0.0, bound, reference_error, None, None, None, 0, 0)
    flat = int(np.argmax(error))
    index = np.unravel_index(flat, error.shape) if error.ndim else ()
    max_error = float(error.reshape(-1)[flat])
    mismatches = int(np.count_nonzero(error > bound))
    return ValueCheck(max_error <= bound, max_error, bound, reference_error, tuple(int(i) for i in index),
                      float(out.reshape(-1)[flat]), float(expected64.reshape(-1)[flat]), mismatches, int(error.size))


def same_shape(observed: list[Leaf], expected: list[Leaf], observed_structure, expected_structure) -> str | None:
    """None if the outputs line up, else what differs, in words."""
    if observed_structure != expected_structure or len(observed) != len(expected):
        return f"returned {observed_structure} where the reference returns {expected_structure}"
    for i, (o, e) in enumerate(zip(observed, expected)):
        if o.shape != e.shape:
            which = f"output {i}" if len(expected) > 1 else "the output"
            return f"{which} is {o.describe()} where the reference's is {e.describe()}"
    return None


def bitwise_differences(a: Leaf, b: Leaf) -> tuple[int, float, tuple | None]:
    """(differing elements, largest difference, first differing index) of two same-shape leaves."""
    differ = bits(a) != bits(b)
    count = int(np.count_nonzero(differ))
    if not count:
        return 0, 0.0, None
    va, vb = as_float64(a), as_float64(b)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.abs(np.where(differ, va - vb, 0.0))
    delta = np.nan_to_num(delta, nan=np.inf)
    first = np.unravel_index(int(np.flatnonzero(differ.reshape(-1))[0]), differ.shape) if differ.ndim else ()
    return count, float(delta.max()), tuple(int(i) for i in first)


def classes(values: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 −Inf."""
    out = np.zeros(values.shape, dtype=np.int8)
    out[np.isnan(values)] = 1
    out[np.isposinf(values)] = 2
    out[np.isneginf(values)] = 3
    return out


CLASS_NAMES = ("finite", "NaN", "+Inf", "-Inf")
