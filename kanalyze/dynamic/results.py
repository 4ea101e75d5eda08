"""Reading what the workers returned (parent side; numpy only).

A `Result` pairs one case with its reference outcome and its candidate
outcome, and gives the gates typed views: the reference's outputs in the
working dtype and in float64, the inputs it generated, and each candidate run
with its outputs, error, launches and out-of-bounds report.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.causes import the_runs_shortage
from kanalyze.dynamic.sandbox.process import Outcome
from kanalyze.dynamic.sandbox.transport import ArrayFolder, Leaf


# Errors after which the device is gone: the worker stops, the next case gets a fresh one.
FATAL_MARKERS = ("CUDA error", "illegal memory access", "device-side assert", "CUBLAS_STATUS", "cudaError")


def _load(arrays) -> Mapping:
    """A case's arrays: the folder a worker saved (read on demand), or what was read already."""
    if isinstance(arrays, Mapping):
        return arrays
    return ArrayFolder(arrays)


class CannotJudge(Exception):
    """What a gate needs to judge a case is missing (not the candidate's doing): the verdict is
    `unconfirmed` with this reason."""


def leaves(output: dict | None, arrays: dict) -> list[Leaf] | None:
    if not output:
        return None
    return [Leaf(arrays[f"{output['prefix']}{i}"], dtype) for i, dtype in enumerate(output["dtypes"])]


def _last_line(output: str) -> str:
    lines = output.strip().splitlines() if output else []
    return f" (the worker's last output: {lines[-1][:200]})" if lines else ""


def seal_problem(run: dict, nonce: int) -> str | None:
    """Why a run's record cannot be trusted, or None: its seal must hold the canary of `nonce`
    (the repeat of a run reuses that run's nonce) and no tampered hook."""
    if run.get("status") == "internal" or run.get("gradients_run"):
        return None     # kanalyze's own failure (said elsewhere); a backward pass, not a recorded call
    seal = run.get("seal")
    if not isinstance(seal, dict):
        return "the run's record has no recorder seal"
    tampered = seal.get("tampered")
    if tampered:
        return "; ".join(str(t) for t in tampered)[:400]
    if seal.get("canaries") != [nonce]:
        return (f"the canary call with this run's nonce was not recorded as it was made "
                f"(recorded {str(seal.get('canaries'))[:80]})")
    return None


@dataclass
class RunView:
    index: int
    meta: dict
    arrays: dict

    @property
    def ok(self) -> bool:
        return self.meta.get("status") == "ok" and self.outputs is not None

    @property
    def status(self) -> str:
        return self.meta.get("status", "error")

    @property
    def structure(self) -> str | None:
        return (self.meta.get("output") or {}).get("structure")

    @cached_property
    def outputs(self) -> list[Leaf] | None:
        return leaves(self.meta.get("output"), self.arrays)

    @cached_property
    def inputs_after(self) -> list[Leaf]:
        return [Leaf(self.arrays[i["key"]], i["dtype"]) for i in self.meta.get("inputs_after", [])
                if i["kind"] == "tensor"]

    def failure(self) -> str:
        """Why this run produced no output, in words."""
        if self.meta.get("out_of_bounds"):
            return self.meta["out_of_bounds"]["message"]
        error = self.meta.get("error", "an error")
        return error if error.startswith("called ") else f"raised {error}"


@dataclass
class Result:
    case: Case
    reference: Outcome
    candidate: Outcome | None = None
    _arrays: dict = field(default_factory=dict, repr=False)
    nonces: list[int] = field(default_factory=list)   # one per run, drawn when the case was sent

    # ------------------------------------------------------------ reference

    @property
    def reference_ok(self) -> bool:
        return self.reference.status == "done" and self.reference.meta.get("status") == "ok"

    def reference_failure(self) -> str:
        if self.reference.status != "done":
            return f"the reference {self.reference.status}: {self.reference.detail}"
        if self.reference.meta.get("status") == "internal":   # kanalyze's own step, not the problem
            return str(self.reference.meta.get("error"))
        error = str(self.reference.meta.get("error"))
        if error.startswith("OutOfMemoryError"):   # the machine's limit at these sizes, not the problem's
            return f"the reference ran out of the device's memory at these sizes: {error}"
        return f"the reference rejects these sizes: {error}"

    @cached_property
    def reference_arrays(self) -> dict:
        return {**_load(self.reference.inputs), **_load(self.reference.arrays)}   # mapped, not read

    @cached_property
    def expected(self) -> list[Leaf] | None:
        self._arrays_kept()
        return leaves(self.reference.meta.get("output"), self.reference_arrays)

    @cached_property
    def expected64(self) -> list[Leaf] | None:
        self._arrays_kept()
        return leaves(self.reference.meta.get("output64"), self.reference_arrays)

    @cached_property
    def through_zero(self) -> list[Leaf] | None:
        """Per output, the class an injected special has where the reference's comes through a
        product with zero (EXC001: sandbox/dependence.py; NO_CLASS elsewhere); None where nowhere."""
        self._arrays_kept()
        return leaves(self.reference.meta.get("output_through_zero"), self.reference_arrays)

    def _arrays_kept(self) -> None:
        """CannotJudge where the reference's outputs were lost after it ran."""
        lost = self.reference.meta.get("arrays_lost")
        if lost:
            raise CannotJudge(str(lost))

    @property
    def reduction_terms(self) -> int:
        """The reference's longest reduction (reductions.py): the calibrated bound's allowance."""
        return int(self.reference.meta.get("reduction_length") or 1)

    @property
    def expected_structure(self) -> str | None:
        return (self.reference.meta.get("output") or {}).get("structure")

    @cached_property
    def inputs(self) -> list[Leaf]:
        """The reference's inputs where kanalyze kept them (MEM002 compares them; the others were
        handed to the candidate's worker as its case started, sandbox/delivery.py, and a witness
        regenerates them from the case's seed)."""
        prefix = self.reference.meta.get("inputs_kept") or ""   # the judge's own copy (sandbox/held.py)
        return [Leaf(self.reference_arrays[prefix + i["key"]], i["dtype"]) for i in self.reference.meta.get("inputs", [])
                if i["kind"] == "tensor" and prefix + i["key"] in self.reference_arrays]

    # ------------------------------------------------------------ candidate

    @property
    def candidate_ok(self) -> bool:
        return (self.candidate is not None and self.candidate.status == "done"
                and self.candidate.meta.get("status") == "ok")

    def candidate_failure(self) -> str:
        """Why the candidate produced nothing for this case, in words."""
        if self.candidate is None:   # its case ended at the reference (session.py runs no candidate then)
            return "the candidate did not run" if self.reference_ok else f"the reference failed first ({self.reference_failure()})"
        if self.candidate.status != "done":
            tail = self.candidate.output.strip().splitlines()[-1:] if self.candidate.output else []
            last = f" (last output: {tail[0][:200]})" if tail else ""
            return f"the candidate {self.candidate.status}: {self.candidate.detail}{last}"
        return f"the candidate failed: {self.candidate.meta.get('error')}"

    def candidate_failed(self) -> bool:
        """The candidate itself produced no first run to compare (an error, a crash or a timeout
        of its own), as opposed to kanalyze failing to run it."""
        return (not self.candidate_ok or not self.runs or not self.runs[0].ok) and self.kanalyze_failure() is None

    def kanalyze_failure(self) -> str | None:
        """Why kanalyze itself could not run this case, or None.  A worker that ended or
        ran out of time outside the candidate's code, or kanalyze's own code failing
        inside the worker, is kanalyze's failure: it never confirms a clause.  So is a reference
        worker that ended or ran out of time (a problem that rejects a case's sizes says so in a
        result: that is the reference's answer, not a failure)."""
        reference = self.reference
        if reference is not None and reference.status != "done" and reference.blame != "candidate":
            return f"kanalyze's reference worker {reference.status}: {reference.detail}{_last_line(reference.output)}"
        if reference is not None and reference.status == "done" and reference.meta.get("status") == "internal":
            return str(reference.meta.get("error"))
        outcome = self.candidate
        if outcome is None or outcome.status == "violation":
            return None
        short = self.ran_short()
        if short:   # memory or disk kanalyze's workers share with it, or kanalyze's own limit (causes.py)
            return f"the run ran short of memory or disk, which the candidate shares with kanalyze's workers: {short}"
        tail = _last_line(outcome.output)
        if outcome.status != "done":
            if outcome.blame == "interpreter" and outcome.status == "timeout":
                return (f"the candidate's kernel {outcome.detail} under Triton's interpreter, which runs its "
                        f"programs one after another on the CPU (thousands of times slower than a GPU): too "
                        f"slow to judge here, where a hang and a slow interpretation look the same; run it on a GPU")
            if outcome.blame in ("candidate", "interpreter"):
                return None
            return f"kanalyze's worker {outcome.status}: {outcome.detail}{tail}"
        internal = [outcome.meta] if outcome.meta.get("status") == "internal" else \
            [run for run in outcome.meta.get("runs", []) if run.get("status") == "internal"]
        if internal:
            return f"{internal[0].get('error')}{tail}"
        return None

    def ran_short(self) -> str | None:
        """Where the candidate's failure names a shortage of memory or disk that is the run's
        (causes.py: the problem needs a fair share of what the run gives), or None."""
        outcome = self.candidate
        if outcome is None or outcome.status == "violation":
            return None
        if outcome.status != "done":
            texts = [outcome.detail]
        else:
            runs = [run for run in outcome.meta.get("runs") or [] if isinstance(run, dict)]
            texts = [str(outcome.meta.get("error") or "")] + [str(run.get("error") or "") for run in runs]
        need = self.reference.meta.get("problem_bytes") if self.reference is not None else None
        budget = self.reference.meta.get("budget_bytes") if self.reference is not None else None
        return next((found for found in (the_runs_shortage(t, need, budget) for t in texts) if found), None)

    def violation(self) -> str | None:
        """How the candidate broke kanalyze's worker (INT001), or None: it wrote on the status
        channel, or a run's recorder seal does not show that run's nonce (recording.py)."""
        if self.candidate is None:
            return None
        if self.candidate.status == "violation":
            return f"the candidate wrote to kanalyze's worker channel: {self.candidate.detail}"
        if self.candidate.status != "done" or not self.nonces:
            return None
        for k, run in enumerate(self.candidate.meta.get("runs") or []):
            broken = seal_problem(run, self.nonces[min(k, len(self.nonces) - 1)])
            if broken:
                return f"the candidate modified kanalyze's recorder (run {k + 1}): {broken}"
        return None

    @cached_property
    def candidate_arrays(self) -> Mapping:
        return _load(self.candidate.arrays if self.candidate else None)

    @cached_property
    def runs(self) -> list[RunView]:
        if not self.candidate_ok:
            return []
        return [RunView(i, meta, self.candidate_arrays) for i, meta in enumerate(self.candidate.meta["runs"])]


def failed_baseline(results: list[Result], base: list[int]) -> tuple[str, str] | None:
    """(why, whose) when the candidate could not be run on the problem's own inputs: its own
    failure ("candidate"), or it ran short of memory or disk, or out of time under Triton's
    interpreter ("kanalyze": every gate is then undecided, judging.judge, and the other
    cases would run as short or as slow), else None."""
    for i in base:
        result = results[i]
        if not result.reference_ok or result.candidate is None:
            continue
        if result.candidate_failed():
            why = result.runs[0].failure() if result.runs else result.candidate_failure()
            return f"the candidate fails on the problem's own inputs ({why[:300]})", "candidate"
        if result.ran_short() or (result.candidate.blame == "interpreter" and result.kanalyze_failure()):
            # (short of memory or disk, or too slow for the interpreter: the other cases would be too)
            return (f"kanalyze could not run the candidate on the problem's own inputs "
                    f"({result.kanalyze_failure()[:300]})", "kanalyze")
    return None


def sealed(result: Result, results: list[Result]) -> dict:
    """The case as sent to a candidate worker: each run with a fresh nonce of the trusted side's,
    kept in `result.nonces`, that the run's recorder seal must show (recording.py).  A case of
    the reversed-order variant (and ORD001's control) keeps the autotune configs the candidate chose
    in its own case of the same gate (autotune_pin.py)."""
    case = result.case.to_dict()
    if result.case.variant in ("reversed", "control"):
        case["pin_launches"] = next((r.runs[-1].meta.get("launch_settings") for r in results
                                     if r.case.variant == "original" and r.case.gate == result.case.gate
                                     and r.runs and r.runs[-1].status == "ok"), None)
    result.nonces = [secrets.randbelow(2**31 - 1) + 1 for _ in case["runs"]]
    for run, nonce in zip(case["runs"], result.nonces):
        run["nonce"] = nonce
    return case
