"""A session: the workers of one candidate's gate run, and the cases through them.

A `Session` owns one scratch directory and the workers: the reference worker
and one candidate worker per variant (the candidate as written; for PRC002
with fp32 accumulators, for ORD001 on a GPU with its program order reversed)
start together, so that their imports of torch, triton and the candidate
overlap.  The reference worker first plans the sizes (on the CPU the size knobs
are scaled down; on a GPU the problem's own sizes run) and then computes, once
per distinct input set, the
inputs, the reference output in the working dtype and in float64; the
candidate workers run every case on those inputs (compile once, every gate in
the same worker).  The baseline goes first through both sides; the other
cases' references are computed ahead by a second reference worker (ahead.py),
started with the first, while the candidate's workers run the cases whose
references have come: the two sides overlap.

What crosses between them (docs/worker-protocol.md): the candidate's worker is
given the reference's inputs and model state only; the reference's outputs stay
in the reference worker until every candidate worker has ended (`release`).  On
a GPU the candidate's outputs go to the reference worker through CUDA IPC
(device_share.py), which holds them beside the reference's own, on the device:
the gates' comparisons run there, and only summaries and the witnesses' windows
come back (sandbox/held.py, held_arrays.py).  On the CPU the candidate's worker
saves them itself.  Either way they are read before the candidate's worker is
let go on to its next case.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from kanalyze.dynamic.accounts import describe_ready, durations
from kanalyze.dynamic.ahead import SecondReference
from kanalyze.dynamic.cases import Case, by_model
from kanalyze.dynamic.harness import Harness
from kanalyze.dynamic.reference_cache import REFERENCES
from kanalyze.dynamic.held_arrays import Judges
from kanalyze.dynamic.reference_jobs import Reader, add_float64, float64_later, hand_back
from kanalyze.dynamic.results import Result, failed_baseline, sealed
from kanalyze.dynamic.sandbox import zygote_client
from kanalyze.dynamic.sandbox.dispatch import lose_what_it_held, run_cases
from kanalyze.dynamic.sandbox.process import Limits, Outcome, Worker, new_scratch_root, remove_scratch_root

# The most input elements a case may have: on the CPU (Triton's interpreter) the size knobs are
# scaled down to this; on a GPU (None) the problem's own sizes run, as the benchmark measured them.
MAX_NUMEL = {"cpu": 2 ** 16, "cuda": None}
BASELINE = "baseline"
# Where a run is, step by step (the audit's pair worker keeps the last one: a pair its time
# limit ends says where it was).
PROGRESS = logging.getLogger("kanalyze.progress")


# A kernel harness's cases have no reference run: the gate judges what the call did.
NO_REFERENCE = Outcome("done", meta={"status": "ok", "inputs": [], "init_inputs": []})
# A case whose reference is not computed yet (the baseline runs first: Session.execute).
_PENDING = Outcome("not-started", detail="the reference was not computed")


class Session:
    def __init__(self, harness: Harness, mode: str, limits: Limits, variants: dict[str, str] | None = None) -> None:
        self.harness, self.mode, self.limits = harness, mode, limits
        created, since = time.perf_counter(), time.monotonic()
        self.root = new_scratch_root()
        absolute = {**harness.to_dict(), "candidate": os.path.abspath(harness.candidate),
                    "problem": os.path.abspath(harness.problem)}
        # KANALYZE_DEVICE_SHARE=0: a candidate's outputs on a GPU go through files, not CUDA IPC.
        share = os.environ.get("KANALYZE_DEVICE_SHARE", "1") != "0"
        # Inputs and state handed over when needed (sandbox/delivery.py) on a GPU; on the CPU they are
        # small and saved, so cached references need no reference worker (KANALYZE_DELIVER_INPUTS=1|0).
        deliver = os.environ.get("KANALYZE_DELIVER_INPUTS", "1" if mode == "cuda" and share else "0") != "0"
        # Outputs held and compared by the judge, never saved (sandbox/held.py; KANALYZE_JUDGE_HELD=1|0).
        held = os.environ.get("KANALYZE_JUDGE_HELD", "1" if mode == "cuda" and share else "0") != "0"
        self.spec = {"harness": absolute, "device_share": share, "deliver_inputs": deliver, "judge_held": held}
        self.judges = Judges(held, limits.case_seconds, self.root)   # kanalyze's side of what they hold
        # What the reference worker saves for the candidates: the one folder of this session's
        # that a candidate's worker is shown (read-only), beside the cache's (mounts.py).
        self.inputs = os.path.join(self.root, "inputs")
        os.makedirs(self.inputs)
        shown = {**self.spec, "visible": [self.inputs, REFERENCES.inputs_folder()]}
        # The reference worker starts now (its imports overlap the candidate's) unless
        # earlier sessions of this process already know this problem's references.
        self._reference: Worker | None = None
        self._judge: Worker | None = None   # the reference worker that reads the candidate's side
        self.ahead = SecondReference(mode, self.spec, limits, self.root, self.inputs)   # (ahead.py)
        if harness.kind != "kernel" and REFERENCES.plan(harness, mode, MAX_NUMEL[mode]) is None:
            self._reference = Worker("reference", mode, self.spec, limits, self.root)
        self.candidates: dict[str, Worker | None] = {"original": Worker("candidate", mode, shown, limits, self.root)}
        self._specs: dict[str, dict] = {}   # each variant's worker spec (its worker may end and be replaced)
        self._reference_cases = 0           # cases sent to the reference worker so far
        self._reference_index: dict[str, int] = {}   # input key -> its case's index there
        for variant, source in (variants or {}).items():   # the candidate rewritten: promote.py, reverse_order.py
            folder = os.path.join(self.root, variant)
            os.makedirs(folder)
            path = os.path.join(folder, os.path.basename(harness.candidate))
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(source)
            self.candidates[variant] = Worker("candidate", mode, {**shown, "candidate_file": path,
                                                                  "visible": shown["visible"] + [folder]},
                                              limits, self.root)
        self.environment: dict = {"mode": mode}
        self.streaming = None   # set once the baseline has run, where each case is judged as it ends (streaming.py)
        self.judge_gone: str | None = None   # how the reference worker that judges ended, where it did
        # Where the run's time went (the environment's `seconds`): `start` is the workers' launch
        # (a zygote's own start included); each worker's start in detail is `<role>_start_seconds`.
        self.seconds: dict[str, float] = {"start": round(time.perf_counter() - created, 3)}
        # Each candidate case's account: gate, case, variant, `seconds` (its worker's own steps), `wall`
        # (this side's, from the case before it or the run's start: a worker's start included).
        self.case_seconds: list[dict] = []
        # Asked of a variant's case before it runs: why it need not (its gate's `unneeded`), or None.
        self.unneeded: Callable[[list[Result], int], str | None] | None = None
        self.not_needed: list[dict] = []     # the cases that did not run for that reason
        zygote = zygote_client.started_since(mode, since)   # started for this session: its share of `start`
        for step, value in (zygote or {}).items():
            self.seconds[f"zygote.{step}"] = value

    @property
    def reference(self) -> Worker:
        if self._reference is None:
            self._reference = Worker("reference", self.mode, self.spec, self.limits, self.root)
        return self._reference

    def execute(self, cases: list[Case], more=None) -> list[Result]:
        """Reference, then candidates, for every case; one Result per case, in order, then one
        per case that `more(baseline results)` adds once the baseline has passed through both
        sides (the gates that plan from the reference's output shapes: runner.py).

        The baseline (the problem's own inputs) goes first through both sides: a candidate that
        fails there (it does not import, crashes, or runs out of time) blocks every gate
        (judging.judge), so the other cases are not computed at all; at a problem's real sizes
        their references alone can take minutes.  On the first run of its problem in this
        process, the baseline's float64 reference too waits until the candidate has run there (a
        float64 convolution on a GPU takes seconds); a reference left without it is not kept.
        The other cases run grouped by model, so that each side builds each model once."""
        cases = list(cases)
        reference_cases: dict[str, dict] = {}
        by_key: dict[str, Outcome | None] = {}
        missing: list[str] = []
        self._add_references(cases, reference_cases, by_key, missing)
        base = [i for i, case in enumerate(cases) if case.id == BASELINE]
        first = [key for key in missing if any(cases[i].input_key == key for i in base)]
        # On the first run of its problem in this process, the baseline's float64 reference waits
        # for the candidate.  A later run computes it at once, to keep: the Verifier's and a
        # many-kernel check's later candidates of the problem then need no reference.
        for key in first if not REFERENCES.ready(self.harness, self.mode) else []:
            reference_cases[key]["float64_later"] = True
        self._judge = None
        if self.harness.kind != "kernel" and (more is not None or any(key not in first for key in missing)):
            self.ahead.start()   # its start overlaps the baseline's
        PROGRESS.info("the baseline's reference")
        self._references(first, reference_cases, by_key)
        results = [Result(case, NO_REFERENCE if case.call is not None else by_key.get(case.input_key) or _PENDING)
                   for case in cases]
        reader = Reader(self, self._judge)
        candidates_seconds = self._candidates(results, reader, base)
        failed = failed_baseline(results, base)
        if not failed:
            self._float64_later(first, by_key)
            added = list(more([results[i] for i in base])) if more is not None else []
            cases += added
            results += [Result(case, NO_REFERENCE if case.call is not None else _PENDING) for case in added]
            self._add_references(added, reference_cases, by_key, missing)
        as_dicts = [case.to_dict() for case in cases]
        rest = by_model(as_dicts, [i for i in range(len(cases)) if i not in base])   # run in this order
        ahead_keys: set[str] = set()
        if failed:
            for i in rest:
                skipped = Outcome("not-started", detail=f"skipped: {failed[0]}", blame=failed[1])
                results[i].candidate = skipped
                if results[i].reference is _PENDING:
                    results[i].reference = skipped
        elif self.streaming is not None:   # each case judged as it ends (streaming.py)
            reader.judge = self._judge
            candidates_seconds += self._streamed(cases, results, rest, reference_cases, by_key, reader)
        else:
            later = {key: n for n, key in enumerate(dict.fromkeys(cases[i].input_key for i in base + rest))}
            keys = sorted((key for key in missing if key not in first), key=later.__getitem__)
            ahead_keys = set(keys)
            reader.judge = self._judge
            candidates_seconds += self._rest(cases, results, rest, keys, reference_cases, by_key, reader)
        for worker in self.candidates.values():
            if worker is not None:
                worker.close()
        self.seconds["candidate"] = round(self.seconds.get("candidate", 0.0) + candidates_seconds, 3)
        self.seconds["read_back"] = round(reader.seconds, 3)
        started = time.perf_counter()
        # (a reference whose float64 never came, the candidate having failed first, is not kept)
        computed = [key for key in missing if by_key.get(key) is not None
                    and not by_key[key].meta.get("output64_later")]
        if computed:
            PROGRESS.info("the references' outputs handed to the judge")
            for key, outcome in hand_back(self, computed, ahead_keys, by_key).items():
                # Held by the judge: they live as long as this session (never kept for later ones).
                by_key[key] = outcome if outcome.meta.get("held") else \
                    REFERENCES.put(self.harness, self.mode, key, reference_cases[key]["record_ops"], outcome)
            for result in results:
                if result.case.call is None and by_key.get(result.case.input_key) is not None:
                    result.reference = by_key[result.case.input_key]
        if not (self.spec["judge_held"] and self.mode == "cuda"):
            self.ahead.close()   # (held on a GPU, the judge maps what it handed over: it ends with the session)
        self.took("release", started)
        for role in ("reference", "candidate"):   # each worker's start, from this side
            ready = self.environment.get(f"{role}_start_seconds", {}).get("ready")
            if ready is not None:
                self.seconds[f"{role}_ready"] = ready
        self.environment["seconds"] = dict(self.seconds)
        self.environment["case_seconds"] = list(self.case_seconds)
        if self.not_needed:
            self.environment["not_needed"] = list(self.not_needed)
        return results

    def _add_references(self, cases: list[Case], reference_cases: dict[str, dict], by_key: dict,
                        missing: list[str]) -> None:
        """The reference computations `cases` need, one per input set not met before: each found
        in this process's cache (`by_key`) or added to `missing`."""
        new = []
        for case in cases:
            if case.call is not None:  # a kernel harness's call: nothing to compute first
                continue
            if case.input_key not in reference_cases:
                reference_cases[case.input_key] = {**case.to_dict(), "record_ops": False}
                new.append(case.input_key)
            entry = reference_cases[case.input_key]
            entry["record_ops"] = entry["record_ops"] or case.record_ops
            entry["float64"] = entry["float64"] or case.float64
        for key in new:
            entry = reference_cases[key]
            by_key[key] = REFERENCES.get(self.harness, self.mode, key, entry["record_ops"], entry["float64"])
            if by_key[key] is None:
                missing.append(key)

    def _rest(self, cases: list[Case], results: list[Result], rest: list[int], keys: list[str],
              reference_cases: dict[str, dict], by_key: dict, reader: Reader) -> float:
        """The cases after the baseline, in the order of `rest`: their references (`keys`, those
        not known yet) computed ahead by the second reference worker while the candidate's
        workers run, in order, each stretch of cases whose references have come.  Returns the
        candidates' seconds, as `_candidates` does."""
        numbered = {key: n for n, key in enumerate(keys, start=self._reference_cases)}
        self._reference_cases += len(keys)
        if keys:
            self.ahead.compute([(numbered[key], reference_cases[key]) for key in keys])
        seconds, todo, stretches = 0.0, list(rest), []
        while todo:
            key = cases[todo[0]].input_key
            needed = cases[todo[0]].call is None and by_key.get(key) is None
            ended = self.ahead.outcomes([numbered[key]] if needed else [])
            stretch = []
            for i in todo:
                key = cases[i].input_key
                if cases[i].call is None and by_key.get(key) is None:
                    if numbered[key] not in ended:
                        break
                    by_key[key] = ended[numbered[key]]
                    self._add_steps("reference", by_key[key])
                if cases[i].call is None:
                    results[i].reference = by_key[key]
                stretch.append(i)
            todo = todo[len(stretch):]
            stretches.append(len(stretch))
            seconds += self._candidates(results, reader, stretch)
        # How many cases the candidate's side ran at a time: more than one stretch, and it ran
        # while the references of later cases were being computed.
        self.environment["stretches"] = stretches
        if keys:
            self.ahead.finish()
            REFERENCES.put_ready(self.harness, self.mode, self.ahead.ready)
            self.seconds["reference.ahead"] = round(self.ahead.seconds, 3)
        return seconds

    def _streamed(self, cases: list[Case], results: list[Result], rest: list[int], reference_cases: dict[str, dict],
                  by_key: dict, reader: Reader) -> float:
        """The cases after the baseline one at a time, each reference computed by the judge just before
        the candidate runs it, each case judged as it ends (streaming.py).  The candidates' seconds."""
        self.ahead.close()
        seconds = 0.0
        for i in self.streaming.order(cases, rest):
            if not self.streaming.in_time(results[i]):   # (it says why it was not run)
                continue
            key = cases[i].input_key
            if cases[i].call is None and by_key.get(key) is None:
                self._references([key], reference_cases, by_key)
            if cases[i].call is None:
                results[i].reference = by_key[key]
            seconds += self._candidates(results, reader, [i])
            self.streaming.ended(results, i)
        return seconds

    def _references(self, keys: list[str], reference_cases: dict[str, dict], by_key: dict) -> None:
        """Compute the references of `keys` in the reference worker (kept: it is the judge that
        reads a candidate's device arrays, and withholds its outputs until `release`)."""
        started = time.perf_counter()
        ready = REFERENCES.ready(self.harness, self.mode)
        if keys:
            # Indices unique in the session: a case's files in the worker's folder are named by them.
            numbered = list(enumerate(keys, start=self._reference_cases))
            self._reference_cases += len(keys)
            worker = self._judge or self.reference
            outcomes, ready, judge = run_cases("reference", self.mode, self.spec,
                                               [(i, reference_cases[key]) for i, key in numbered],
                                               self.limits, self.root, first_worker=worker,
                                               keep=True, job_extra=lambda indices: {"inputs_out": self.inputs})
            if judge is not worker:   # it ended (a case it did not finish): what it held for earlier cases with it
                how = next((o.detail for o in outcomes.values() if o.status != "done" and o.detail), "how, unsaid")
                self._judge_ended(worker, by_key, f"it ended while computing references ({how})")
            self._judge = judge
            REFERENCES.put_ready(self.harness, self.mode, ready)
            for i, key in numbered:
                by_key[key] = outcomes[i]
                self._reference_index[key] = i
                self._add_steps("reference", outcomes[i])
        self.took("reference", started)
        self.environment.update(describe_ready(ready, "reference"))

    def _judge_ended(self, worker: Worker, by_key: dict, why: str) -> None:
        """The reference worker that judges has ended: the outputs it held for earlier cases went
        with it (each says so), and the hand-over says how it ended."""
        self.judge_gone = why
        lose_what_it_held(by_key, [k for k in self._reference_index if k in by_key], "reference", why)
        worker.close()
        self._judge = None
        if self._reference is worker:
            self._reference = None

    def _float64_later(self, keys: list[str], by_key: dict) -> None:
        """The float64 references of the baseline, computed once the candidate has run there (a
        candidate that fails there, as many generated ones do, never waits for them) and added
        to their outcomes; where the worker cannot give one, the outcome says why."""
        started = time.perf_counter()
        later = {key: self._reference_index[key] for key in keys
                 if by_key.get(key) is not None and by_key[key].meta.get("output64_later")}
        worker = self._judge
        if not later or worker is None:
            return
        found, why = float64_later(worker, list(later.values()), self.limits)
        if worker.process.poll() is not None:   # it ended: the later references start another
            self._judge_ended(worker, by_key, f"it ended while computing float64 references ({why})")
        for key, index in later.items():
            steps = add_float64(by_key[key], found.get(str(index)), why)
            self._add_steps("reference", Outcome("done", meta={"seconds": steps}))
        self.took("reference", started)

    def _candidates(self, results: list[Result], reader: Reader, indices: list[int]) -> float:
        """Run the cases at `indices` through each variant's worker; returns the seconds it took,
        less the reading back."""
        started, read_before = time.perf_counter(), reader.seconds
        for variant, worker in list(self.candidates.items()):
            spec = self._specs.setdefault(variant, worker.spec if worker is not None else {})
            walls: dict[int, float] = {}   # (none for a case never started: the time limit's)
            runnable = [(i, sealed(results[i], results)) for i in indices
                        if results[i].case.variant == variant and results[i].reference_ok
                        and not self._not_needed(results, i)]
            if not runnable:
                continue

            def references(chosen, results=results):
                # The candidate's share of the reference's arrays: inputs and model state, never its outputs.
                return {"references": {str(i): {"meta": results[i].reference.meta,
                                                "arrays": results[i].reference.inputs} for i in chosen}}

            def ended(i, outcome, results=results, variant=variant):
                PROGRESS.info("the candidate's case %s (%s) ended", results[i].case.id, variant)
                return reader.read(i, outcome)

            outcomes, ready, worker = run_cases("candidate", self.mode, spec, runnable, self.limits, self.root,
                                                job_extra=references, first_worker=worker, keep=True,
                                                walls=walls, on_case=ended, on_inputs=lambda i, what, handles, results=results:
                                                reader.deliver(i, results[i].reference.meta, what, handles))
            self.candidates[variant] = worker   # None where it ended: the next call starts another
            if variant == "original" and ready:
                self.environment.update(describe_ready(ready, "candidate"))
            for i, outcome in outcomes.items():
                results[i].candidate = outcome
                steps = self._add_steps("candidate", outcome)
                self.case_seconds.append({"gate": results[i].case.gate, "case": results[i].case.id,
                                          "variant": variant, "seconds": round(sum(steps.values()), 3),
                                          "wall": walls.get(i), "steps": steps})
        return time.perf_counter() - started - (reader.seconds - read_before)

    def _not_needed(self, results: list[Result], i: int) -> bool:
        """Whether the gate of a variant's case `i` says, from the results so far, that it need not
        run (Gate.unneeded: ORD001's control once the reversed order agreed); said in the
        environment's `not_needed`.  The candidate as written runs every case."""
        if self.unneeded is None or results[i].case.variant == "original":
            return False
        why = self.unneeded(results, i)
        if why:
            self.not_needed.append({"gate": results[i].case.gate, "case": results[i].case.id, "why": why})
        return bool(why)

    def _add_steps(self, role: str, outcome: Outcome) -> dict[str, float]:
        """A worker's own account of a case's steps (`seconds` in its result), summed per step as
        `role.step`: descriptive only (a candidate's worker could say anything), never judged.
        Returns the case's steps."""
        steps = durations(outcome.meta.get("seconds") if isinstance(outcome.meta, dict) else None)
        for step, value in steps:
            name = f"{role}.{step}"
            self.seconds[name] = round(self.seconds.get(name, 0.0) + value, 3)
        return dict(steps)

    def took(self, what: str, started: float, minus: float = 0.0) -> None:
        self.seconds[what] = round(self.seconds.get(what, 0.0) + time.perf_counter() - started - minus, 3)

    def close(self) -> None:
        self.judges.close()   # first: the judge may map the second reference worker's arrays
        self.ahead.close()
        for worker in [self._reference, self._judge, *self.candidates.values()]:
            if worker is not None:
                worker.close()
        remove_scratch_root(self.root)


__all__ = ["BASELINE", "MAX_NUMEL", "NO_REFERENCE", "Session"]
