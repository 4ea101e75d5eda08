"""What a gate is: the cases it asks for, and how it judges what came back.

A gate decides one clause (DESIGN.md, "Flag → gate → witness").  `plan`
returns the cases to run (plain data, see cases.py); the runner runs them
through the reference and the candidate workers; `judge` turns the results
into a `Verdict`: `confirmed` with what the witness needs, `refuted` with what
ran, or `unconfirmed` with what was missing.  Gates never start processes and
never import torch: they see numpy arrays only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kanalyze.dynamic.cases import Case, Run
from kanalyze.dynamic.compare import ValueCheck, check_values, same_shape
from kanalyze.dynamic.harness import Harness
from kanalyze.dynamic.results import CannotJudge, Result, RunView
from kanalyze.dynamic.sandbox.transport import Leaf, as_float64

if TYPE_CHECKING:
    from kanalyze.dynamic.planning import Plan

CONFIRMED, REFUTED, UNCONFIRMED = "confirmed", "refuted", "unconfirmed"

# A reference whose forward draws random numbers (dropout in training mode, torch.rand: its worker
# sees torch's random generator move) answers every call differently (judging.py, INT001).
RANDOM_REFERENCE = ("the reference draws random numbers (its forward moved torch's random generator: dropout in "
                    "training mode, torch.rand, ...), so it answers the same inputs differently on every call and "
                    "neither the candidate's values nor its bits can be held to it")


# What of a static finding's evidence a gate reads, besides its row, kernel and message: MEM004's
# counterexample (the sizes to run), ORD001's shared axes (the grid axes whose programs all add to
# the same addresses: how many contributions each address gets at the sizes run).
FLAG_EVIDENCE = ("counterexample", "shared_axes")


def flag_evidence(evidence: dict | None) -> dict:
    """The keys of FLAG_EVIDENCE that `evidence` holds."""
    return {key: evidence[key] for key in FLAG_EVIDENCE if key in (evidence or {})}


@dataclass
class GateContext:
    harness: Harness
    sizes: dict[str, int]          # the base sizes (scaled down on the CPU)
    mode: str                      # "cpu" (interpreter) | "cuda"
    flags: list[dict] = field(default_factory=list)   # this clause's static findings in the file
    seed: int = 0
    promotion: list[dict] | None = None   # PRC002: the fp32 rewrites of the promoted variant
    output_shapes: list | None = None     # the reference's output shapes at `sizes`, when known
    cuda_cpp: bool = False                # the candidate builds CUDA C++ (load_inline)
    reversal: list[dict] | None = None    # ORD001 on a GPU: the rewrites of the reversed-order variant
    plan: Plan | None = None              # the inputs' count at `sizes` and its growth (planning.py)

    def input_numel(self, sizes: dict[str, int]) -> int | None:
        """The inputs' elements at `sizes`, estimated before any is drawn (None: not known)."""
        return self.plan.numel_at(sizes) if self.plan is not None else None

    @property
    def dtype(self) -> str | None:
        return self.harness.dtypes[0] if self.harness.dtypes else None

    @property
    def scaled(self) -> str:
        """" at scaled sizes (batch_size=64 of 1024, ...)" where the base sizes are not the
        problem's own (the CPU's interpreter runs them scaled down), else "": a verdict says at
        which sizes it was found."""
        return scaled_sizes(self.sizes, self.harness.knobs)

    def case(self, gate: "Gate", suffix: str, **fields: Any) -> Case:
        fields.setdefault("sizes", dict(self.sizes))
        fields.setdefault("seed", self.seed)
        fields.setdefault("dtype", self.dtype)
        fields.setdefault("model_seed", self.seed)   # one model for every case of the run
        fields.setdefault("float64", gate.needs_float64)
        fields.setdefault("deterministic_torch", gate.deterministic_torch)
        return Case(id=f"{gate.code}/{suffix}", gate=gate.code, **fields)


def scaled_sizes(sizes: dict[str, int], knobs: dict[str, int]) -> str:
    changed = [f"{name}={value} of {knobs[name]}" for name, value in sizes.items()
               if name in knobs and knobs[name] != value]
    return f" at scaled sizes ({', '.join(changed)})" if changed else ""


@dataclass
class Verdict:
    code: str
    status: str
    summary: str                   # one line: what failed, or what ran
    cases: list[Case] = field(default_factory=list)   # what the witness replays
    details: dict = field(default_factory=dict)       # observed / expected / metric ...
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    gate: str = ""
    rows: list[int] | None = None  # the flags (by row) this verdict decides; None: every flag of its clause


class Gate:
    code: ClassVar[str] = ""
    name: ClassVar[str] = ""          # the gate id the rules name (Rule.gate)
    summary: ClassVar[str] = ""
    # A gate that needs no problem (it runs the static pass's counterexample through
    # a kernel harness) says so, and on which device it must run ("cpu": Triton's
    # interpreter and its bounds checks; "cuda": a GPU).
    kernel_harness: ClassVar[bool] = False
    # A gate that compares the candidate's runs bit for bit holds torch's own kernels in them
    # to deterministic algorithms (numerics.py): their bits are then the candidate's to answer for.
    deterministic_torch: ClassVar[bool] = False
    device: ClassVar[str | None] = None
    # A gate whose plan reads the reference's output shapes (`GateContext.output_shapes`) is
    # planned once the baseline has run, from the shapes of the reference's own outputs.
    needs_output_shapes: ClassVar[bool] = False
    # A gate that never compares with the float64 reference (bits, value classes, traces) plans
    # its cases without one (Case.float64).
    needs_float64: ClassVar[bool] = True

    def plan(self, ctx: GateContext) -> list[Case]:
        raise NotImplementedError

    def judge(self, ctx: GateContext, results: list[Result]) -> Verdict:
        raise NotImplementedError

    def unneeded(self, ctx: GateContext, case: Case, results: list[Result]) -> str | None:
        """Why `case` need not run, the session's results so far in hand (a case whose only use
        is one that the cases already run have decided without it), or None: it runs.  A case
        left unrun this way is no case lost: the gate's judge never asks for it."""
        return None

    # ------------------------------------------------------------ helpers for judges

    def verdict(self, status: str, summary: str, cases=(), **details) -> Verdict:
        arrays = details.pop("arrays", {})
        return Verdict(self.code, status, summary, list(cases), details, arrays, self.name)

    def confirmed(self, summary: str, result: Result, **details) -> Verdict:
        arrays = details.pop("arrays", {})
        for i, leaf in enumerate(result.inputs):
            arrays.setdefault(f"input{i}", leaf.array)
        return Verdict(self.code, CONFIRMED, summary, [result.case], details, arrays, self.name)


MAX_WITNESS_ELEMENTS = 1 << 16   # a witness keeps at most this many values of an array: 256 KiB of float32


def first_index(details: dict) -> list[int] | None:
    """Where a verdict's evidence says the first failing element is, if it says."""
    index = details.get("index") or details.get("first_index")
    return list(index) if isinstance(index, (list, tuple)) and index else None


def witness_arrays(observed: list[Leaf] | None, expected: list[Leaf] | None, prefix: str = "") -> dict:
    arrays = {}
    for i, leaf in enumerate(observed or []):
        arrays[f"{prefix}observed{i}"] = leaf.array
    for i, leaf in enumerate(expected or []):
        arrays[f"{prefix}expected{i}"] = leaf.array
    return arrays


def run_problem(result: Result, run: RunView | None = None) -> str | None:
    """Why a candidate run cannot be compared with the reference, or None."""
    if not result.candidate_ok:
        return result.candidate_failure()
    run = run or result.runs[0]
    if not run.ok:
        return run.failure()
    return same_shape(run.outputs, result.expected, run.structure, result.expected_structure)


def compare_with_float64(result: Result, run: RunView | None = None) -> tuple[str | None, ValueCheck | None, int]:
    """(structural problem, worst value check, output index) of a run against the float64 reference."""
    problem = run_problem(result, run)
    if problem:
        return problem, None, -1
    run = run or result.runs[0]
    expected64 = result.expected64
    if expected64 is None:
        if any(leaf.is_float for leaf in result.expected):
            raise CannotJudge(f"the reference has no float64 result to calibrate against "
                              f"({result.reference.meta.get('output64_error', 'none was computed')})")
        expected64 = result.expected   # integers and booleans: compared exactly
    worst, worst_index = None, -1
    for i, (observed, working, exact) in enumerate(zip(run.outputs, result.expected, expected64)):
        check = check_values(observed, working, exact, terms=result.reduction_terms)
        if worst is None or (not check.ok and (worst.ok or check.max_error > worst.max_error)):
            worst, worst_index = check, i
    return None, worst, worst_index


def value_failure(result: Result, run: RunView | None = None) -> tuple[str | None, dict]:
    """None if the run matches float64 within the calibrated bound; else what failed and the details."""
    problem, check, index = compare_with_float64(result, run)
    if problem:
        return problem, {}
    if check is None or check.ok:
        return None, {"metric": check.metric() if check else {}}
    which = f"output {index}: " if len(result.expected) > 1 else ""
    return which + check.summary(), {"metric": check.metric(), "index": list(check.index or ()),
                                     "observed": check.observed, "expected": check.expected}


def first_value(leaf: Leaf, index) -> float:
    """The leaf's value at `index`, exactly (only that element is converted: a leaf can hold
    hundreds of millions)."""
    if index is None:
        return float("nan")
    return float(as_float64(Leaf(np.asarray(leaf.array[tuple(index)]), leaf.dtype)).real)


__all__ = ["MAX_WITNESS_ELEMENTS", "first_index", "CONFIRMED", "REFUTED", "UNCONFIRMED", "CannotJudge", "Case", "Gate", "GateContext", "Run", "Verdict",
           "compare_with_float64", "run_problem", "value_failure", "witness_arrays", "first_value"]
