"""Deciding from values (parent side; numpy only): calibrated tolerance, bits, special values.

The tolerance is calibrated, never a fixed 1e-2: the reference computed in
the working dtype is compared with the same reference computed in float64 on
upcast inputs; the candidate may err by `FACTOR` times the reference's own
largest error, and at least by the ulp floor: units in the last place of the
output's largest magnitude (`floor_ulps`).  Where the reference sums many terms
into one value (its longest reduction, recorded by reductions.py), torch sums
in trees and is nearly exact, while an honest kernel errs more, in two ways the
floor allows for, the larger one winning:

* a lane that accumulates term after term (`acc += x * w` over a convolution's
  window or a matmul's K, a GPU kernel's usual loop) errs by about 0.33·√terms
  ulps at the largest output, measured on 10^5 outputs for 16 to 16384 terms:
  `SEQUENTIAL_ULPS`·√terms, up to `LANE_TERMS` terms (no kernel's lane runs
  longer alone: past that, blocks share the work);
* per-block partial sums combined one after another (a norm over millions of
  values) err by about √(terms / BLOCK_TERMS) times the flat floor (a norm over
  58.7M fp32 values: 5.8 ulps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kanalyze.dynamic.held_arrays import held_by
from kanalyze.dynamic.sandbox.transport import EPS, NO_CLASS, Leaf, as_float64, bits

FACTOR = 4.0
FLOOR_ULPS = 4.0
BLOCK_TERMS = 4096
SEQUENTIAL_ULPS = 1.0     # three times the 0.33·√terms a sequential fp32 accumulation errs by
LANE_TERMS = 16384


def growth(terms: int) -> float:
    """How much the flat floor grows for per-block partial sums of `terms` terms (1 up to BLOCK_TERMS)."""
    return max(1.0, math.sqrt(max(int(terms), 1) / BLOCK_TERMS))


def floor_ulps(terms: int) -> float:
    """The ulps an honest kernel may err by at the largest output for a reduction of `terms` terms."""
    terms = max(int(terms), 1)
    return max(FLOOR_ULPS * growth(terms), SEQUENTIAL_ULPS * math.sqrt(min(terms, LANE_TERMS)))


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
    terms: int = 1          # the reference's longest reduction
    scale: float = 0.0      # the largest finite |expected| (what the ulp floor is counted from)


    def metric(self) -> dict:
        floor = f"{FLOOR_ULPS:g} ulps of the largest expected magnitude"
        if floor_ulps(self.terms) > FLOOR_ULPS:
            floor = (f"{floor_ulps(self.terms):.4g} ulps of the largest expected magnitude for the reference's "
                     f"longest reduction of {self.terms} terms (the larger of {FLOOR_ULPS:g} × √(terms / "
                     f"{BLOCK_TERMS}) and {SEQUENTIAL_ULPS:g} × √min(terms, {LANE_TERMS}))")
        return {"max_abs_error": self.max_error, "bound": self.bound, "reference_error": self.reference_error,
                "mismatches": self.mismatches, "numel": self.numel, "reduction_terms": self.terms,
                "bound_rule": f"max({FACTOR:g} × the reference's own error in its dtype, {floor})"}

    def summary(self) -> str:
        where = f" at index {list(self.index)} (observed {fmt(self.observed)}, expected {fmt(self.expected)})" \
            if self.index is not None else ""
        return (f"max abs error {fmt(self.max_error)} > bound {fmt(self.bound)} in {self.mismatches} of "
                f"{self.numel} elements{where}")


# Elements compared at a time: a problem's outputs reach 2^31 elements, and their float64
# copies and temporaries must not all be in memory at once.
CHUNK = 1 << 22


def _parts(*leaves: Leaf):
    """The leaves' flat float64 values, CHUNK elements at a time: (offset, arrays...)."""
    flats = [leaf.array.reshape(-1) for leaf in leaves]
    for start in range(0, flats[0].size, CHUNK):
        yield (start, *[as_float64(Leaf(flat[start:start + CHUNK], leaf.dtype)) for flat, leaf in zip(flats, leaves)])


def _chunks(*leaves: Leaf):
    """The leaves' flat values as Leafs, CHUNK elements at a time: (offset, parts...)."""
    flats = [leaf.array.reshape(-1) for leaf in leaves]
    for start in range(0, flats[0].size, CHUNK):
        yield (start, *[Leaf(flat[start:start + CHUNK], leaf.dtype) for flat, leaf in zip(flats, leaves)])


def _float64_copy(part: Leaf) -> np.ndarray:
    """The part's values in float64, in an array of their own (to be written in place)."""
    values = as_float64(part)
    return values.copy() if np.shares_memory(values, part.array) else values


def _finite(part: Leaf) -> np.ndarray:
    """Where the part's values are finite, read in their own dtype where numpy has it."""
    if part.dtype == "bfloat16" or part.dtype.startswith("float8"):   # stored as raw bits
        return np.isfinite(as_float64(part))
    if part.array.dtype.kind in "fc":
        return np.isfinite(part.array)
    return np.ones(part.array.shape, dtype=bool)   # integers and booleans


def _abs_difference(values: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|values − exact|, in `values`' own array where it is real (no temporaries)."""
    if values.dtype.kind == "c" or exact.dtype.kind == "c":
        return np.abs(values - exact)
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(values, exact, out=values)
        return np.abs(values, out=values)


def calibrated_bound(working: Leaf, expected64, terms: int = 1) -> tuple[float, float]:
    """(bound, reference error) for outputs of `working`'s dtype; `expected64` is the float64
    reference (a Leaf, or its float64 array); `terms`, the reference's longest reduction."""
    return _calibration(working, expected64, terms)[:2]


def _calibration(working: Leaf, expected64, terms: int = 1) -> tuple[float, float, float]:
    """(bound, reference error, scale): calibrated_bound, and the largest finite |expected64|."""
    if not isinstance(expected64, Leaf):
        expected64 = Leaf(np.asarray(expected64, dtype=np.float64), "float64")
    judge = held_by(working.array, expected64.array)
    if judge is not None:   # on the device, where the judge holds them (sandbox/held.py)
        found = judge.ask({"op": "calibrate", "working": working.array.name, "exact": expected64.array.name,
                           "factor": FACTOR, "floor": floor_ulps(terms) * EPS.get(working.dtype, 0.0)})
        return float(found["bound"]), float(found["reference_error"]), float(found["scale"])
    reference_error, scale = 0.0, 0.0
    for _, ref_part, exact_part in _chunks(working, expected64):
        exact = as_float64(exact_part)
        finite = np.isfinite(exact) & _finite(ref_part)
        error = _abs_difference(_float64_copy(ref_part), exact)
        magnitude = np.abs(exact)
        if not finite.all():
            error[~finite] = 0.0
            magnitude[~finite] = 0.0
        reference_error = max(reference_error, float(np.max(error, initial=0.0)))
        scale = max(scale, float(np.max(magnitude, initial=0.0)))
    eps = EPS.get(working.dtype, 0.0)
    return max(FACTOR * reference_error, floor_ulps(terms) * eps * (scale or 1.0)), reference_error, scale


def check_values(observed: Leaf, working: Leaf, expected64_leaf: Leaf, bound: float | None = None,
                 terms: int = 1) -> ValueCheck:
    """Observed against float64 within the calibrated bound (or the one given).

    Elements where the float64 reference is not finite are left to EXC001, and so
    are those where the reference in its own dtype is not (a value beyond the
    dtype's range: fp16 overflows past 65504 in torch as in the candidate);
    elsewhere a non-finite observed value is an infinite error.  Each chunk is
    read a few times, in place: a problem's outputs reach 2^31 elements.  Where the judge holds
    all three, it checks them on the device and says what it found.
    """
    judge = held_by(observed.array, working.array, expected64_leaf.array)
    if judge is not None:
        return _held_check(judge, observed, working, expected64_leaf, bound, terms)
    calibrated, reference_error, scale = _calibration(working, expected64_leaf, terms)
    bound = calibrated if bound is None else bound
    if not working.is_float or not observed.is_float:  # integers and booleans: exact
        bound = 0.0
    numel = int(observed.array.size)
    if numel == 0:
        return ValueCheck(True, 0.0, bound, reference_error, None, None, None, 0, 0, terms=terms, scale=scale)
    worst, at, observed_at, expected_at, mismatches = -1.0, 0, None, None, 0
    for start, out_part, ref_part, exact_part in _chunks(observed, working, expected64_leaf):
        exact = as_float64(exact_part)
        considered = np.isfinite(exact) & _finite(ref_part)
        error = _abs_difference(_float64_copy(out_part), exact)
        if not considered.all():
            error[~considered] = 0.0
        nan = np.isnan(error)
        if nan.any():
            error[nan] = np.inf   # a NaN observed where the reference is finite
        i = int(np.argmax(error))
        if error[i] > worst:   # the first largest error, as one argmax over the whole would find
            worst, at = float(error[i]), start + i
            observed_at, expected_at = float(as_float64(Leaf(out_part.array[i:i + 1], out_part.dtype))[0].real), \
                float(exact[i].real)
        mismatches += int(np.count_nonzero(error > bound))
    shape = observed.array.shape
    index = tuple(int(i) for i in np.unravel_index(at, shape)) if shape else ()
    return ValueCheck(worst <= bound, worst, bound, reference_error, index, observed_at, expected_at,
                      mismatches, numel, terms=terms, scale=scale)


def _held_check(judge, observed: Leaf, working: Leaf, expected64: Leaf, bound, terms: int) -> ValueCheck:
    """check_values, asked of the judge that holds the three arrays."""
    exactly = not working.is_float or not observed.is_float
    numel = int(observed.array.size)
    found = judge.ask({"op": "values", "observed": observed.array.name, "working": working.array.name,
                       "exact": expected64.array.name, "bound": bound, "exactly": exactly, "factor": FACTOR,
                       "floor": floor_ulps(terms) * EPS.get(working.dtype, 0.0)})
    if numel == 0:
        return ValueCheck(True, 0.0, float(found["bound"]), float(found["reference_error"]), None, None, None, 0, 0,
                          terms=terms, scale=float(found["scale"]))
    shape = observed.array.shape
    index = tuple(int(i) for i in np.unravel_index(int(found["at"]), shape)) if shape else ()
    return ValueCheck(bool(found["ok"]), float(found["max_error"]), float(found["bound"]),
                      float(found["reference_error"]), index, found["observed"], found["expected"],
                      int(found["mismatches"]), numel, terms=terms, scale=float(found["scale"]))


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
    judge = held_by(a.array, b.array)
    if judge is not None:
        found = judge.ask({"op": "bits", "a": a.array.name, "b": b.array.name})
        if not found["count"]:
            return 0, 0.0, None
        return int(found["count"]), float(found["largest"]), _unravel(found["first"], a.array.shape)
    count, largest, first = 0, 0.0, None
    flat_a, flat_b = a.array.reshape(-1), b.array.reshape(-1)
    for start in range(0, flat_a.size, CHUNK):
        part_a = Leaf(flat_a[start:start + CHUNK], a.dtype)
        part_b = Leaf(flat_b[start:start + CHUNK], b.dtype)
        differ = bits(part_a) != bits(part_b)
        if differ.size != part_a.array.size:   # complex values: bytes, one row per element
            differ = differ.reshape(part_a.array.size, -1).any(axis=1)
        n = int(np.count_nonzero(differ))
        if not n:
            continue
        if first is None:
            first = start + int(np.flatnonzero(differ)[0])
        count += n
        va, vb = as_float64(part_a), as_float64(part_b)
        with np.errstate(invalid="ignore", over="ignore"):
            delta = np.abs(np.where(differ, va - vb, 0.0))
        largest = max(largest, float(np.nan_to_num(delta, nan=np.inf).max()))
    if not count:
        return 0, 0.0, None
    shape = a.array.shape
    return count, largest, tuple(int(i) for i in np.unravel_index(first, shape)) if shape else ()


def classes(values: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 −Inf, read in the array's own float dtype (no float64 copy: at a
    problem's real size, hundreds of millions of elements, the copy was most of the cost)."""
    if values.dtype.kind not in "fc":
        return np.zeros(values.shape, dtype=np.int8)
    out = np.isnan(values).view(np.int8)
    infinite = np.isinf(values)
    if infinite.any():
        out[infinite] = np.where(values[infinite].real > 0, 2, 3)
    return out


def leaf_classes(leaf) -> np.ndarray:
    """`classes` of a leaf's values: float16, float32 and float64 as stored, bfloat16 from its
    bits (exponent all ones: a zero mantissa is ±Inf, any other NaN), other dtypes through
    float64."""
    array = leaf.array
    if array.dtype.kind == "f":
        return classes(array)
    if leaf.dtype == "bfloat16":
        special = (array & 0x7F80) == 0x7F80
        nan = special & ((array & 0x007F) != 0)
        out = nan.view(np.int8)
        infinite = special & ~nan
        if infinite.any():
            out[infinite] = np.where(array[infinite] & 0x8000, 3, 2)
        return out
    return classes(as_float64(leaf))


CLASS_NAMES = ("finite", "NaN", "+Inf", "-Inf")


def _unravel(flat: int, shape: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


@dataclass
class ClassComparison:
    """Non-finite classes of an output against the reference's, where the reference's working
    dtype and float64 agree (EXC001)."""
    left_out: int            # elements where they disagree
    reached: bool            # a non-finite value reaches the reference's output there
    wrong: int               # elements in another class than the reference's
    pairs: dict[str, int]    # "reference class -> candidate class": how many
    first: tuple | None      # the first wrong element
    through_zero: int = 0    # elements in the class of the product the problem defines instead


def class_comparison(observed: Leaf, expected: Leaf, expected64: Leaf,
                     through_zero: Leaf | None = None) -> ClassComparison:
    """`through_zero`: per element, the class an injected value has where the reference's comes
    through a product with zero (sandbox/dependence.py; NO_CLASS where none): a candidate in
    that class is not wrong there, and is counted."""
    kinds = len(CLASS_NAMES)
    judge = held_by(observed.array, expected.array, expected64.array,
                    *([through_zero.array] if through_zero is not None else []))
    if judge is not None:
        found = judge.ask({"op": "classes", "observed": observed.array.name, "expected": expected.array.name,
                           "exact": expected64.array.name,
                           "through_zero": through_zero.array.name if through_zero is not None else None})
        counts = [int(n) for n in found["pairs"]]
        first = None if found["first"] is None else _unravel(found["first"], observed.array.shape)
    else:
        got, want = leaf_classes(observed), leaf_classes(expected)
        agree = want == leaf_classes(expected64)
        other = (np.asarray(through_zero.array).reshape(want.shape) if through_zero is not None
                 else np.full(want.shape, NO_CLASS, dtype=np.uint8))
        wrong = (got != want) & agree
        product = wrong & (got == other)
        wrong &= ~product
        counts = np.bincount(want[wrong].astype(np.intp) * kinds + got[wrong].astype(np.intp),
                             minlength=kinds * kinds).tolist()
        first = _unravel(np.flatnonzero(wrong.reshape(-1))[0], wrong.shape) if wrong.any() else None
        found = {"left_out": int((~agree).sum()), "reached": bool(((want != 0) & agree & (other != 0)).any()),
                 "wrong": int(wrong.sum()), "through_zero": int(product.sum())}
    pairs = {f"{CLASS_NAMES[code // kinds]} -> {CLASS_NAMES[code % kinds]}": count
             for code, count in enumerate(counts) if count}
    return ClassComparison(int(found["left_out"]), bool(found["reached"]), int(found["wrong"]), pairs, first,
                           int(found.get("through_zero", 0)))


def finite_summary(leaf: Leaf) -> tuple[bool, float]:
    """(every value is finite, the largest finite magnitude)."""
    judge = held_by(leaf.array)
    if judge is not None:
        found = judge.ask({"op": "finite", "name": leaf.array.name})
        return bool(found["all_finite"]), float(found["largest"])
    values = as_float64(leaf)
    finite = np.isfinite(values)
    return bool(finite.all()), float(np.max(np.abs(values[finite]), initial=0.0))


def _pattern(array: np.ndarray, byte: int) -> np.ndarray:
    """Where every byte of an element is `byte`."""
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8).reshape(-1, array.dtype.itemsize)
    return (raw == byte).all(axis=-1)


def sentinel_elements(a: Leaf, b: Leaf, first_byte: int, second_byte: int) -> tuple[int, tuple | None]:
    """(how many, the first) elements hold `first_byte` in every byte in `a` and `second_byte` in
    `b`: never written by either of two runs over poisoned memory (MEM001)."""
    judge = held_by(a.array, b.array)
    if judge is not None:
        found = judge.ask({"op": "unwritten", "a": a.array.name, "b": b.array.name,
                           "bytes": [first_byte, second_byte]})
        first = None if found["first"] is None else _unravel(found["first"], a.array.shape)
        return int(found["count"]), first
    both = _pattern(np.asarray(a.array), first_byte) & _pattern(np.asarray(b.array), second_byte)
    count = int(both.sum())
    return count, (_unravel(np.flatnonzero(both)[0], a.array.shape) if count else None)


def flushed_to_zero(observed: Leaf, expected: Leaf) -> tuple[int, int, tuple | None]:
    """(nonzero finite reference elements, those the candidate returned as 0, the first of them):
    subnormal results flushed to zero (EXC002)."""
    judge = held_by(observed.array, expected.array)
    if judge is not None:
        found = judge.ask({"op": "flushed", "observed": observed.array.name, "expected": expected.array.name})
        first = None if found["first"] is None else _unravel(found["first"], observed.array.shape)
        return int(found["nonzero"]), int(found["flushed"]), first
    got, want = as_float64(observed), as_float64(expected)
    kept = np.isfinite(want) & (want != 0)
    flushed = kept & (got == 0)
    count = int(flushed.sum())
    return int(kept.sum()), count, (_unravel(np.flatnonzero(flushed.reshape(-1))[0], flushed.shape) if count else None)
