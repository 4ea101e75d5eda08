"""What one gate asks a worker to run: a `Case`, and the sizes it runs at.

A case names everything that makes a run reproducible: the problem's size
knobs, the seed, the input distribution, the injected special values, and how
the candidate is run (how many times, in which program order, with which
sentinel in fresh memory, with TF32 emulated or not).  Cases are plain data:
they travel to the workers as JSON and are stored in witnesses as they are.

Several cases share one set of inputs (the same sizes, seed, distribution and
specials): the reference worker computes each such set once (`input_key`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_POISON = 0xA5  # the byte that fills fresh memory unless a gate asks for another


@dataclass
class Run:
    """One call of the candidate on a fresh copy of the case's inputs."""

    order_seed: int | None = None   # interpreter: permute program order with this seed
    poison: int = DEFAULT_POISON    # byte written into every fresh allocation first


@dataclass
class Case:
    id: str
    gate: str
    sizes: dict[str, int]
    seed: int = 0
    distribution: str = "given"     # see dynamic/inputs.py
    special: str | None = None      # "nan" | "+inf" | "-inf" injected into float inputs
    dtype: str | None = None        # a contract's working dtype, where it has several
    runs: list[Run] = field(default_factory=lambda: [Run()])
    emulate_tf32: bool = False      # interpreter: round tl.dot's fp32 operands as TF32 does
    autotune_choice: int | None = None   # interpreter: the config every autotuner takes, by position
    #                                      among those its pruning keeps (None: the first; autotune_cpu.py)
    record_ops: bool = False        # record aten ops and kernel launches (RES001)
    return_inputs: bool = False     # send the inputs back after the run (MEM002)
    variant: str = "original"       # "promoted": fp32 accumulators (PRC002); "reversed": program order (ORD001);
    #                                 "control": as written, in a worker of its own (ORD001)
    call: dict | None = None        # a kernel harness: the call to make (kernel_call.py), no problem
    collect_bounds: bool = False    # interpreter: record every out-of-bounds access, mask it off, go on
    repeat_new_values: bool = False  # INT001: call once more, new values written into the same buffers
    gradients: bool = False         # CMP002: input gradients for seeded upstream gradients, both sides
    deterministic_torch: bool = False   # the candidate's runs: torch's own kernels on deterministic
    #                                     algorithms (ORD001, ORD002: numerics.py)
    # The reference's float64 outputs, which the value gates calibrate against; False where the
    # case's gate reads none (Gate.needs_float64): at a real size, twice the outputs not computed
    # or held.  A reference computed for several cases of one input set has them if any needs them.
    float64: bool = True
    # The seed the model's weights are drawn with (None: `seed`).  A run's cases share one, as
    # KernelBench builds its model once from one seed: each side builds it once and keeps it.
    model_seed: int | None = None

    @property
    def input_key(self) -> str:
        key = [sorted(self.sizes.items()), self.seed, self.distribution, self.special, self.dtype, self.call]
        if self.model_seed is not None:
            key.append(["model", self.model_seed])
        if self.repeat_new_values:  # the reference computes a second input set for these
            key.append("repeat")
        if self.gradients:          # ... and gradients for these
            key.append("gradients")
        if self.return_inputs:      # ... and keeps the inputs, which kanalyze compares (MEM002)
            key.append("inputs kept")
        return json.dumps(key, sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Case":
        data = dict(data)
        data["runs"] = [Run(**r) for r in data.get("runs", [{}])]
        return cls(**data)

    def describe(self) -> str:
        return describe_inputs(self.to_dict())


def describe_inputs(case: dict) -> str:
    """A case's inputs in words, from the case or its dict (what a worker is sent)."""
    sizes = ", ".join(f"{k}={v}" for k, v in (case.get("sizes") or {}).items())
    extra = f", {case['special']} injected" if case.get("special") else ""
    return f"sizes ({sizes}), seed {case.get('seed')}, {case.get('distribution')} inputs{extra}"


# ---------------------------------------------------------------- sizes

SCALABLE_MIN = 16  # knobs below this are structural (kernel sizes, axes, groups): never scaled


# A scaled size keeps the problem's own divisibility by powers of two up to this (the widest
# block a kernel tiles one size by): the baseline at scaled sizes stays a size the benchmark's
# kernel was written for (level1_23's softmax, whose masked lanes enter its sum, was right at
# 393216 columns and wrong at 768); sizes that break it are CMP003's to try.
TILE = 1024


def scale_down(knobs: dict[str, int], numel_of, max_numel: int, accepts=None) -> dict[str, int]:
    """Halve the largest size knob until the inputs hold at most `max_numel` elements.

    `numel_of(sizes)` counts the input elements at those sizes (the reference
    worker measures it on meta tensors); it returns None where it cannot tell,
    and then the product of the scalable knobs stands in for it.  `accepts(sizes)`,
    where given, says whether the reference runs at those sizes (its forward on meta
    tensors): a halving it rejects (a convolution's input below its kernel, a
    LayerNorm's width apart from the channels it was built for) is not made; the next
    largest knob is halved instead, or every knob of one value together (sizes the
    problem ties to each other).  Where the problem's own sizes are not accepted either
    (an op without meta kernels), every halving is.  Knobs the problem gives one value
    are halved together (`_halvings`): equal sizes stay equal.  And each knob stays a
    multiple of the power of two (up to `TILE`) its own size is; where no halving can
    keep that, the smallest knob lets go of it first (a batch, rather than the row a
    kernel tiles), a power of two at a time.
    """
    sizes = dict(knobs)
    if accepts is not None and not accepts(sizes):
        accepts = None   # the problem's own sizes are not accepted either: no meta kernels
    same: dict[int, set] = {}
    for name, value in knobs.items():
        if value >= SCALABLE_MIN:
            same.setdefault(value, set()).add(name)
    ties = {name: frozenset(group) for group in same.values() for name in group}
    tiles = {name: min(TILE, value & -value) for name, value in knobs.items()}
    for _ in range(256):
        scalable = {k: v for k, v in sizes.items() if v >= SCALABLE_MIN}
        if not scalable or _numel(sizes, numel_of) <= max_numel:
            return sizes
        for move in _halvings(scalable, ties):
            trial = {**sizes, **move}
            if all(value % tiles[name] == 0 for name, value in move.items()) and (accepts is None or accepts(trial)):
                sizes = trial
                break
        else:
            tiled = [name for name in scalable if tiles[name] > 1]
            if not tiled:
                return sizes   # no halving the reference accepts: as small as it goes
            loosest = min(tiled, key=lambda name: (knobs[name], name))
            for name in ties.get(loosest, {loosest}):   # (tied knobs let go together: they stay equal)
                tiles[name] = max(1, tiles[name] // 2)
    return sizes


def _numel(sizes: dict[str, int], numel_of) -> int:
    numel = numel_of(sizes)
    if numel is None:
        numel = 1
        for v in sizes.values():
            numel *= v if v >= SCALABLE_MIN else 1
    return numel


def _halvings(scalable: dict[str, int], ties: dict[str, frozenset]) -> list[dict[str, int]]:
    """Halvings to try, largest knob first: each with the knobs the problem's own sizes give
    the same value (`ties`; still equal now), so that equal sizes stay equal (a candidate may
    rely on `in_features == out_features` at the benchmark's sizes, and the baseline, which is
    KernelBench's check, must not break what those sizes hold; CMP003 perturbs each knob
    alone); then each tied knob alone, where the reference rejects them together."""
    def half(v: int) -> int:
        return max(SCALABLE_MIN // 2, v // 2)

    order = sorted(scalable.items(), key=lambda kv: (-kv[1], kv[0]))
    moves: list[dict[str, int]] = []
    for name, value in order:
        group = {member: half(value) for member in sorted(ties.get(name, {name}))
                 if scalable.get(member) == value}
        if group not in moves:
            moves.append(group)
    for name, value in order:
        if {name: half(value)} not in moves:
            moves.append({name: half(value)})
    return moves


def keeping_whole(base: dict[str, int], original: dict[str, int], name: str, budget: int) -> dict[str, int]:
    """The base sizes with knob `name` back at its original (unscaled) value, and the other
    scalable knobs halved, largest first, until the knobs' product fits `budget` again (or
    none can shrink further).  For a gate whose power depends on one size (a reduction's
    length, the number of programs adding to one address): scaling must not remove it."""
    sizes = {**base, name: original[name]}

    def product(values: dict[str, int]) -> int:
        total = 1
        for v in values.values():
            total *= v if v >= SCALABLE_MIN else 1
        return total

    for _ in range(64):
        others = {k: v for k, v in sizes.items() if k != name and v >= SCALABLE_MIN}
        if product(sizes) <= budget or not others:
            break
        largest = max(others, key=lambda k: (others[k], k))
        sizes[largest] = max(SCALABLE_MIN // 2, others[largest] // 2)
    return sizes


def scaled_knobs(base: dict[str, int], original: dict[str, int]) -> list[str]:
    """The knobs that scaling made smaller than the problem's own."""
    return [k for k, v in base.items() if k in original and v < original[k]]


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def _next_prime(n: int) -> int:
    while not _is_prime(n):
        n += 1
    return n


def _twice_odd(v: int) -> int:
    """A size above `v`, not a power of two, that is twice an odd number (2 mod 4): even, for a
    problem that takes only even sizes (a GLU halves its last dimension), yet no block of four
    or more divides it, nor its half."""
    n = v + v // 2 + 1 if v & (v - 1) == 0 else v + 2
    return n + (2 - n % 4) % 4


def perturbed_sizes(base: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """The sizes CMP003 tries, as (label, sizes).

    Each size knob alone one past its value (its own remainder, every other size as the
    benchmark has it, so that a path taken only when the others divide evenly still runs) and
    twice as large; then every size knob at once one below its value, at a prime, at 1 and at a
    non-power-of-two that is twice an odd number: the same question for every knob in one run
    each.  At a problem's real size each new size costs both sides a model build and the
    candidate an autotuning, so the questions that one run can ask of every knob are asked once.  Knobs of value 0 or 1 are flags
    and axes, not sizes: they stay as they are.
    """
    sizes = {name: value for name, value in base.items() if value >= 2}
    out: list[tuple[str, dict[str, int]]] = []
    seen = {json.dumps(sorted(base.items()))}

    def add(label: str, changed: dict[str, int]) -> None:
        tried = {**base, **changed}
        key = json.dumps(sorted(tried.items()))
        if all(v >= 1 for v in changed.values()) and key not in seen:
            seen.add(key)
            out.append((label, tried))

    for name, value in sizes.items():
        add(f"{name}={value + 1} (+1)", {name: value + 1})
        add(f"{name}={value * 2} (x2)", {name: value * 2})
    together = (("-1", lambda v: v - 1), ("prime", lambda v: _next_prime(v + 2)), ("1", lambda v: 1),
                ("non-power-of-two", _twice_odd))
    for label, change in together if len(sizes) > 1 else ():
        changed = {name: change(value) for name, value in sizes.items()}
        add(f"every size {label} ({', '.join(f'{k}={v}' for k, v in changed.items())})", changed)
    for label, change in together if len(sizes) == 1 else ():   # one knob: the same, named by it
        [(name, value)] = sizes.items()
        add(f"{name}={change(value)} ({label})", {name: change(value)})
    return out


def model_seed(case: dict) -> int:
    """The seed a case's model is built with (Case.model_seed)."""
    seed = case.get("model_seed")
    return case["seed"] if seed is None else seed


def model_key(case: dict, init_inputs: list | None = None) -> str:
    """What tells one built model from another: what it is built from (its init inputs, where
    they are given: a problem whose model reads its sizes only through them; else every size),
    the dtype and the model's seed.  Both sides build a model once per key and restore its
    initial state before each case; the reference worker says which key each case has."""
    if init_inputs is not None and _plain(init_inputs):
        built_from: list = ["init inputs", init_inputs]
    else:
        built_from = sorted(case["sizes"].items())
    return json.dumps([built_from, case.get("dtype"), model_seed(case)])


def _plain(value) -> bool:
    """Numbers, strings and lists of them: what a key can hold exactly (no tensors)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    return value is None or type(value) in (int, float, bool, str)


def by_model(cases: list[dict], indices: list[int]) -> list[int]:
    """`indices` in the order that builds each model once: grouped by model key, the groups in
    the order they first appear (the baseline's first), each in case order.  A worker keeps
    only its latest models (a problem's weights reach gigabytes), so cases of one model that
    are run apart build it again."""
    keys = {i: model_key(cases[i]) for i in indices}
    first: dict[str, int] = {}
    for i in indices:
        first.setdefault(keys[i], len(first))
    return sorted(indices, key=lambda i: first[keys[i]])
