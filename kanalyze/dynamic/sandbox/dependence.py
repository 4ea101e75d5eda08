"""Where an injected special value reaches an output only through a product with zero, in the
reference worker (imports torch).

EXC001 injects NaN or ±Inf at seeded positions and holds the candidate to the reference's
non-finite classes.  A dense formulation can carry such a value to an output where the value
itself never counts: `torch.triu(A @ B)` over upper-triangular `A` and `B` sums
`A[i, k] * B[k, j]` over every `k`, and where `B[k, j]` is a structural zero, NaN · 0 and
Inf · 0 are NaN.  A kernel that skips the zero triangle computes the product the problem
defines, and is not in the wrong there.

`ThroughZero.mark` finds the class that product has.  It runs the reference four times with
the injected positions (the non-finite elements of the inputs) holding finite stand-ins
instead, s · L times a factor per position (so that two stand-ins never cancel) for
s = −1, 0, 1, 2, and reads where each output element goes as s grows without bound
(`response`):

* the same finite value in every run: the injected values do not count there; had they been
  multiplied by zero as numbers, the element would be finite;
* finite and a polynomial of degree at most two in s (a sum of products, of two injected
  values at most, as a matmul of two injected inputs; fitted through three runs, checked at
  the fourth): with +Inf injected the element goes to +Inf or −Inf by its leading term's sign
  (mirrored for −Inf), and with NaN it is NaN;
* anything else (a softmax, an overflow, a run that draws random numbers or sums in another
  order each time): no other class than the reference's own.

Where the reference is non-finite and that class differs from its own, it is kept per output
(`zero_` arrays, a class code per element, NO_CLASS where there is none): the candidate may take
either there (compare.class_comparison).
"""

from __future__ import annotations

import json

import torch

from kanalyze.dynamic.cases import model_key
from kanalyze.dynamic.sandbox.encoding import encode_leaves
from kanalyze.dynamic.sandbox.execute import describe_error, seed_all, synchronize
from kanalyze.dynamic.sandbox.store import with_room
from kanalyze.dynamic.sandbox.transport import NO_CLASS, flatten_value

STAND_IN = {torch.float16: 16.0, torch.bfloat16: 16.0}   # L per dtype; 1024 for the others
SIGNS = (-1.0, 0.0, 1.0, 2.0)   # the stand-in runs: s · L at each injected position
STILL, OTHER = 0, 2             # a limit's code besides +1 (rises to +Inf) and −1 (falls to −Inf)
FIT = 1e-3                      # the fourth run within this share of what the fit predicts
CHUNK = 1 << 24                 # elements compared at a time


def stand_ins(values: list, sign: float) -> list:
    """The inputs with each non-finite element i replaced by `sign` · L · (1 + (i mod 7) / 8);
    every tensor a fresh one (a model may write into its inputs)."""
    out = []
    for value in values:
        if not isinstance(value, torch.Tensor):
            out.append(value)
            continue
        value = value.clone()   # (its strides kept: the reference's algorithms stay the same)
        if value.is_floating_point():
            special = ~torch.isfinite(value)
            where = special.reshape(-1).nonzero().flatten()   # about one element in 64, in row-major order
            factor = 1.0 + (where % 7).to(torch.float64) / 8
            value.masked_scatter_(special, (sign * STAND_IN.get(value.dtype, 1024.0) * factor).to(value.dtype))
        out.append(value)
    return out


def response(model, values: list, seed: int, device: str) -> list | None:
    """Per output leaf, where each element goes as the injected values grow without bound, toward
    +∞ and toward −∞ (two int8 tensors of +1, −1, STILL or OTHER; None for a leaf that is not a
    real floating tensor); None where the runs' outputs differ in structure.

    The element is fitted as c + d1·s + d2·s² through the runs at s = −1, 0, 1 (a sum of products
    of at most two injected values, as a matmul of two injected inputs) and the fit checked at
    s = 2; its limit's sign is d2's where d2 counts, else d1's (mirrored toward −∞)."""
    runs = []
    for sign in SIGNS:
        seed_all(seed)
        with torch.no_grad():
            out = model(*stand_ins(values, sign))
        synchronize(device)
        _, leaves = flatten_value(out)
        leaves = [leaf.detach() if _real(leaf) else None for leaf in leaves]
        if runs and (len(leaves) != len(runs[0]) or any(
                (a is None) != (b is None) or (a is not None and a.shape != b.shape) for a, b in zip(leaves, runs[0]))):
            return None
        runs.append(leaves)
    return [None if runs_of[0] is None else _limits(*runs_of) for runs_of in zip(*runs)]


def _limits(low: torch.Tensor, middle: torch.Tensor, high: torch.Tensor, check: torch.Tensor) -> tuple:
    """`response`'s two codes per element of one leaf, from its four runs (float64, in chunks)."""
    noise = 16 * torch.finfo(low.dtype).eps
    toward = [torch.full((low.numel(),), OTHER, dtype=torch.int8, device=low.device) for _ in range(2)]
    flat = [t.reshape(-1) for t in (low, middle, high, check)]
    for start in range(0, low.numel(), CHUNK):
        f_1, f0, f1, f2 = (t[start:start + CHUNK].to(torch.float64) for t in flat)
        finite = torch.isfinite(f_1) & torch.isfinite(f0) & torch.isfinite(f1) & torch.isfinite(f2)
        d1, d2 = (f1 - f_1) / 2, (f1 + f_1) / 2 - f0
        floor = noise * torch.stack([f_1.abs(), f0.abs(), f1.abs(), f2.abs()]).amax(0)
        fits = finite & ((f2 - (f0 + 2 * d1 + 4 * d2)).abs() <= FIT * (2 * d1.abs() + 4 * d2.abs()) + floor)
        square = fits & (d2.abs() > torch.maximum(floor, FIT * d1.abs()))
        line = fits & ~square & (d1.abs() > floor)
        still = finite & (f_1 == f0) & (f1 == f0) & (f2 == f0)
        for part, direction in zip((t[start:start + CHUNK] for t in toward), (1, -1)):
            part[square] = torch.sign(d2[square]).to(torch.int8)
            part[line] = (direction * torch.sign(d1[line])).to(torch.int8)
            part[still] = STILL
    return tuple(t.reshape(low.shape) for t in toward)


class ThroughZero:
    """The last inputs' responses, kept: EXC001's NaN, +Inf and −Inf cases inject at the same
    positions of the same inputs, so their stand-in runs are the same runs."""

    def __init__(self) -> None:
        self._last: tuple[str, list | None] | None = None

    def mark(self, model, values: list, reference, case: dict, device: str, store, result: dict,
             arrays: dict) -> None:
        """`result["output_through_zero"]` (class codes in `arrays`, prefix `zero_`) where some
        non-finite element of the reference's output `reference` has another class in the product
        the problem defines than its own, else nothing; `result["through_zero_error"]` where the stand-in runs
        failed (nothing else is accepted then)."""
        structure, expected = flatten_value(reference)
        if not any(_real(leaf) and not bool(torch.isfinite(leaf).all()) for leaf in expected):
            return
        key = json.dumps([model_key(case), case["seed"], case["distribution"], case.get("call")])
        try:
            if self._last is None or self._last[0] != key:
                self._last = None   # (the last runs' responses let go before new ones are made)
                self._last = key, with_room(lambda: response(model, values, case["seed"], device), store)
            codes = self._last[1]
        except BaseException as exc:   # a stand-in the problem rejects (an input check)
            result["through_zero_error"] = describe_error(exc)
            return
        if codes is None:
            return
        other = [_other_class(leaf, limits, case["special"]) for leaf, limits in zip(expected, codes)]
        if any(o is not None for o in other):
            leaves = [o if o is not None else torch.full(leaf.shape, NO_CLASS, dtype=torch.uint8, device=leaf.device)
                      for o, leaf in zip(other, expected)]
            result["output_through_zero"] = encode_leaves(structure, leaves, "zero_", arrays)


def _other_class(leaf, limits, special: str):
    """The class (compare.CLASS_NAMES' order, NO_CLASS where none) the product defines where the
    reference's own class `leaf` is non-finite and another; None where no element has one."""
    if limits is None:
        return None
    toward = limits[0] if special == "+inf" else limits[1]   # (NaN: either; they agree on STILL)
    nonfinite = ~torch.isfinite(leaf)
    other = torch.full(leaf.shape, NO_CLASS, dtype=torch.uint8, device=leaf.device)
    other[nonfinite & (toward == STILL)] = 0
    if special == "nan":
        other[nonfinite & ((toward == 1) | (toward == -1))] = 1
    else:
        other[nonfinite & (toward == 1)] = 2
        other[nonfinite & (toward == -1)] = 3
    own = torch.where(torch.isnan(leaf), 1, torch.where(leaf > 0, 2, 3)).to(torch.uint8)
    other[~nonfinite | (other == own)] = NO_CLASS
    return other if bool((other != NO_CLASS).any()) else None


def _real(leaf) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
