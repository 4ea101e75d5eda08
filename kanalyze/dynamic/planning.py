"""The sizes a run's cases start from, and how the problem's inputs grow with each knob.

On the CPU the problem's size knobs are scaled down until the inputs hold at most
`max_numel` elements; on a GPU they stay as the problem gives them.  Either way the
reference worker also measures, on meta tensors (nothing allocated, nothing drawn), how
many elements each input holds at those sizes and how that count grows with each knob
(the exponent: 2 for the side of a square matrix).  `Plan.numel_at(sizes)` then
estimates a case's inputs at other sizes before any is drawn: a gate that lengthens or
doubles a size keeps its cases within a budget by it.  (Without it, PRC002 lengthened the
one knob of a square matmul, N, as a reduction's length: N = 2^20, inputs of 2^41
elements, which the reference worker drew on the host until the machine's memory ran out.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kanalyze.dynamic.reference_cache import REFERENCES
from kanalyze.dynamic.sandbox.process import ProtocolViolation, WorkerGone

if TYPE_CHECKING:
    from kanalyze.dynamic.session import Session

LOG_CAP = 62 * math.log(2)   # an estimate past 2^62 elements is past every budget: said as 2^62


@dataclass
class Plan:
    sizes: dict[str, int]
    # Per input tensor at `sizes`: {"numel": its elements, "growth": {knob: the exponent of its
    # count in that knob}}.  Each tensor apart: a tensor's count is a product of its dimensions
    # (a power law in each knob), a sum of tensors' counts is not ([M, K] and [K, N] grow as
    # M·K + K·N: by 1.5 when M doubles, by 8.5 when it is 16 times larger).
    inputs: list[dict] = field(default_factory=list)

    @property
    def numel(self) -> int | None:
        """The inputs' elements at `sizes` (None: not measured)."""
        return sum(tensor["numel"] for tensor in self.inputs) if self.inputs else None

    def numel_at(self, sizes: dict[str, int]) -> int | None:
        """The inputs' elements at `sizes`, estimated from each tensor's count at the plan's
        sizes and its growth in each changed knob; None where one is not known."""
        if not self.inputs:
            return None
        total = 0.0
        for tensor in self.inputs:
            if tensor["numel"] <= 0:
                continue
            log_estimate = math.log(tensor["numel"])   # (in logarithms: no float overflows)
            for name, value in sizes.items():
                base = self.sizes.get(name)
                if base is None or value == base:
                    continue
                exponent = tensor["growth"].get(name)
                if exponent is None or base <= 0 or value <= 0:
                    return None
                log_estimate += exponent * math.log(value / base)
            total += math.exp(min(log_estimate, LOG_CAP))
        return round(min(total, math.exp(LOG_CAP)))


def plan(session: "Session", max_numel: int | None) -> Plan:
    """The knobs scaled down until the inputs hold at most `max_numel` elements (None: as they
    are), with the inputs' growth; asked of the session's reference worker once per problem."""
    started = time.perf_counter()
    try:
        found = _asked(session, max_numel)
        return Plan(dict(found["sizes"]), list(found.get("inputs") or []))
    finally:
        session.took("plan", started)


def _asked(session: "Session", max_numel: int | None) -> dict:
    harness, mode = session.harness, session.mode
    known = REFERENCES.plan(harness, mode, max_numel)
    if known is not None:
        return known
    knobs = {"sizes": dict(harness.knobs)}
    try:
        session.reference.wait_ready()
        session.reference.send({"kind": "plan", "knobs": dict(harness.knobs), "max_numel": max_numel,
                                "dtype": harness.dtypes[0] if harness.dtypes else None})
        event = session.reference.next_event(session.limits.case_seconds)
    except (WorkerGone, ProtocolViolation):
        return knobs
    if not event or event.get("event") != "plan" or not isinstance(event.get("sizes"), dict):
        return knobs
    found = {"sizes": event["sizes"], "inputs": _well_formed(event.get("inputs"))}
    REFERENCES.put_plan(harness, mode, max_numel, found)
    return found


def _well_formed(inputs) -> list[dict]:
    """The worker's per-input counts, where each is a count and numeric exponents; else none
    (nothing is then estimated)."""
    if not isinstance(inputs, list):
        return []
    for tensor in inputs:
        if not (isinstance(tensor, dict) and type(tensor.get("numel")) is int and isinstance(tensor.get("growth"), dict)
                and all(isinstance(k, str) and type(v) in (int, float) for k, v in tensor["growth"].items())):
            return []
    return inputs
