"""The reference side of a case, in the reference worker (imports torch).

For each case the problem's model and inputs at the case's sizes, the reference's output
in the working dtype and in float64, and what the candidate is given (inputs and the model's
state).  The model is built once per sizes, dtype and model seed (cases.model_key; once per
init inputs where the problem's model reads its sizes only through them, so that a changed
batch size keeps the weights; on the device, from the model's seed as the candidate's side
builds its own: loading.built_on) and its initial state is restored before each case; its
state is saved once per model and hard-linked into each case's inputs (a model's weights can
be gigabytes).  The inputs are made where they are used (`get_inputs` under the device: a GPU
draws gigabytes in milliseconds).  Where a case injects special values (EXC001), the outputs
they reach only through a product with zero are marked (dependence.py).

What the candidate's worker is given is saved at once (`case-N.inputs/`, in
the session's folder of inputs, the one folder of kanalyze's that a
candidate's worker is shown);
the reference's outputs are withheld in this process's memory until the
parent asks for them after the candidate's workers have ended (`release`), so
that a candidate never finds them on disk while it runs.  Above
`WITHHOLD_BYTES` they are saved at once and the case says so (`withheld`:
false).  Where this worker holds arrays for the session's judge (a GPU run:
held.py), the outputs stay on the device as tensors and are never saved at all
(`held` in the case's result names them); nothing here judges a result, the
judge's comparisons are asked of it by the parent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import nullcontext

import numpy as np
import torch

from kanalyze.dynamic import inputs as input_values
from kanalyze.dynamic.cases import model_key, model_seed
from kanalyze.dynamic.loading import Problem
from kanalyze.dynamic.reductions import ReductionRecorder
from kanalyze.dynamic.sandbox import delivery, held, model_state
from kanalyze.dynamic.sandbox.dependence import ThroughZero
from kanalyze.dynamic.sandbox.device_share import DeviceArrays
from kanalyze.dynamic.sandbox.encoding import encode_list, encode_output
from kanalyze.dynamic.sandbox.execute import (CANDIDATE_SIDE_KEYS, REPEAT_SEED_OFFSET, apart, describe_error, lap,
                                              seed_all, synchronize, timed_build, traceback_tail)
from kanalyze.dynamic.sandbox.float64 import float64_reference
from kanalyze.dynamic.sandbox.store import with_room
from kanalyze.dynamic.sandbox.transport import dtype_name, save_arrays, tensor_to_numpy

WITHHOLD_BYTES = 8 * 2 ** 30   # reference outputs kept in memory until release; more is saved at once
KEPT_MODELS = 2                # models kept built (sizes, dtype, seed): most cases share the first


class ReferenceSide:
    def __init__(self, harness: dict, device: str, recorder_factory, budget_bytes: int | None = None,
                 deliver: bool = False, hold: bool = False) -> None:
        self.harness, self.device, self.recorder_factory = harness, device, recorder_factory
        self.budget_bytes = budget_bytes   # what a candidate's worker is given of memory (worker.py)
        self.deliver = deliver   # inputs drawn again when the candidate's case starts (delivery.py)
        self._problems: dict[str, Problem] = {}
        self._models: dict[str, tuple] = {}
        self.build_seconds: dict[str, float] = {}   # the last new model's steps (model)
        self._states: dict[str, str] = {}   # model key -> the folder its state was saved in
        self._state_offers: dict[str, dict] = {}   # model key -> its state as offered (delivery.py)
        self._withheld: dict[str, dict[str, np.ndarray]] = {}
        self._withheld_bytes = 0
        self._later: dict[str, tuple] = {}   # case -> (model, inputs) whose float64 reference waits
        # The reference's outputs held for the session's judge instead of saved (held.py).
        self.store = held.Store(device) if hold else None
        self.through_zero = ThroughZero()   # EXC001's outputs that a special reaches only through zero

    def problem(self, sizes: dict, dtype: str | None) -> Problem:
        key = json.dumps([sorted(sizes.items()), dtype])
        if key not in self._problems:
            self._problems[key] = Problem(self.harness, sizes, dtype)
        return self._problems[key]

    def model(self, problem: Problem, case: dict):
        """(model on the device, init inputs, its key) for the case's sizes, dtype and seed; built
        once per key (cases.model_key: per init inputs where the problem's model reads its sizes
        only through them), given every later case as it was built (model_state.py)."""
        seed_all(model_seed(case))
        init_inputs = problem.init_inputs()
        key = model_key(case, None if problem.sized_model else init_inputs)
        self.build_seconds = {}   # a new model's steps, for the case's account (run)
        if key not in self._models:
            since = time.perf_counter()
            if len(self._models) >= KEPT_MODELS:   # a problem's weights can be gigabytes: keep the latest
                del self._models[next(iter(self._models))]
                if self.device == "cuda":
                    torch.cuda.empty_cache()
                since = lap(self.build_seconds, "model_evict", since)
            model = timed_build(self.device, lambda: problem.model(init_inputs),
                                lambda: seed_all(model_seed(case)), self.build_seconds)
            since = time.perf_counter()
            self._models[key] = (model, init_inputs, model_state.initial(model))
            synchronize(self.device)
            lap(self.build_seconds, "model_clone", since)
        model, init_inputs, kept = self._models[key]
        if not model_state.restore(model, kept):
            del self._models[key]   # its forward wrote into its own weights: built again, seeded alike
            return self.model(problem, case)
        return model, init_inputs, key

    def inputs(self, problem: Problem, case: dict, seed: int) -> list:
        """The problem's own `get_inputs`, drawn on the device (on the CPU where it cannot be)."""
        for where in ((self.device, "cpu") if self.device != "cpu" else ("cpu",)):
            seed_all(seed)
            try:
                with torch.device(where) if where != "cpu" else nullcontext():
                    values = problem.inputs()
                break
            except Exception:
                if where == "cpu":
                    raise
        values = [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]
        return input_values.apply(values, case["distribution"], case.get("special"), case["seed"])

    def run(self, case: dict, out_base: str, inputs_folder: str | None = None) -> dict:
        """The case's reference; what the candidate is given goes to `inputs_folder` (a folder the
        candidate's worker is shown: mounts.py), else beside the case's own files."""
        arrays = self._new_arrays()
        seconds: dict[str, float] = {}   # where the case's time went, step by step
        result: dict = {"status": "ok", "seconds": seconds}
        since = time.perf_counter()
        try:
            problem = self.problem(case["sizes"], case.get("dtype"))
            since = lap(seconds, "problem", since)
            model, init_inputs, key = self.model(problem, case)
            since = lap(seconds, "model", since)
            apart(seconds, self.build_seconds, "model")
            values = self._first_values(problem, case)
            since = lap(seconds, "inputs", since)
        except BaseException as exc:  # the problem rejects these sizes, or is broken
            return {"status": "rejected", "error": describe_error(exc), "traceback": traceback_tail(exc)}
        # The inputs are handed over when the candidate's case starts (delivery.py), except where
        # a gate compares them in kanalyze (MEM002's `return_inputs`) and no judge holds them:
        # those are saved below.  Where one does, it holds a copy of its own (`kept_in`: held.py).
        compared = bool(case.get("return_inputs"))
        offered = delivery.offer(case) if self.deliver and (not compared or self.store is not None) else None
        result["inputs"] = encode_list(values, "in", arrays, keep=offered is None)
        if compared and self.store is not None:
            arrays.update((f"kept_in{i}", v) for i, v in enumerate(values) if isinstance(v, torch.Tensor))
            result["inputs_kept"] = "kept_"
        if offered is not None:
            for i, value in enumerate(values):
                if isinstance(value, torch.Tensor):
                    delivery.describe(offered["arrays"], f"in{i}", value)
            result["deliver"] = offered
        result["init_inputs"] = encode_list(init_inputs, "init", arrays)
        result["inputs_folder"] = inputs_folder = inputs_folder or out_base + ".inputs"
        state_folder, state = None, {}
        if isinstance(model, torch.nn.Module):
            state = model.state_dict()
            result["state"] = list(state)
            result["state_dtypes"] = [dtype_name(t.dtype) for t in state.values()]
            if self.deliver:   # offered: taken only where the candidate's own differs (delivery.py)
                result["deliver_state"] = self._state_offer(key, case, state)
            else:
                state_folder = self._saved_state(key, state, os.path.dirname(inputs_folder))
        result["model_key"] = key   # the candidate's worker keeps its model as long as this stays
        # What the problem itself holds (its model, inputs and, below, outputs), beside what a
        # candidate is given: a candidate's shortage of memory is weighed against both (causes.py).
        held = sum(t.numel() * t.element_size()
                   for t in [*state.values(), *values] if isinstance(t, torch.Tensor))
        result["budget_bytes"] = self.budget_bytes
        since = lap(seconds, "encode", since)
        kept: dict = {}   # the reference's output, for what follows the forward

        def forward() -> None:
            recorder = self.recorder_factory() if case.get("record_ops") else None
            reductions = ReductionRecorder()
            drawn = _generators(self.device)
            with torch.no_grad(), (recorder if recorder is not None else nullcontext()), reductions:
                out = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
            # A forward that moved a random generator (dropout in training mode, torch.rand) gives
            # other values on every call: nothing of the candidate's can be held to them (judging.py).
            result["draws_random"] = _generators(self.device) != drawn
            if recorder is not None:
                result["ops"] = dict(recorder.calls)
            result["reduction_length"] = reductions.longest
            synchronize(self.device)
            result["output"] = encode_output(out, "out", arrays)
            kept["out"] = out if case.get("special") else None
            result["problem_bytes"] = held + sum(result["output"]["nbytes"])

        try:   # (out of the device's memory beside what this worker holds for the judge: once more)
            with_room(forward, self.store)
        except BaseException as exc:
            return {"status": "rejected", "error": describe_error(exc), "traceback": traceback_tail(exc)}
        since = lap(seconds, "forward", since)
        if case.get("float64_later"):   # the baseline: only once the candidate has run there (float64_later)
            self._later[out_base] = (model, values)
            result["output64_later"] = True
        elif case.get("float64", True):   # (a case whose gates compare no float64: none computed)
            self._float64(model, values, result, arrays, "output64", "out64_")
        since = lap(seconds, "float64", since)
        if case.get("special"):   # (dependence.py)
            self.through_zero.mark(model, values, kept.pop("out"), case, self.device, self.store, result, arrays)
        if case.get("gradients"):
            from kanalyze.dynamic.gradients import reference_gradients

            try:
                reference_gradients(model, values, case["seed"], result, arrays, offered)
            except BaseException as exc:  # the problem cannot be differentiated: the gate says so
                result["gradients_error"] = describe_error(exc)
        if case.get("repeat_new_values"):
            try:
                self._second_inputs(problem, model, case, result, arrays, offered)
            except BaseException as exc:
                return {"status": "rejected", "error": f"second input set: {describe_error(exc)}",
                        "traceback": traceback_tail(exc)}
        since = lap(seconds, "more", since)
        save_arrays(inputs_folder, {key: _numpy(arrays.pop(key)) for key in list(arrays)
                                    if key.startswith(CANDIDATE_SIDE_KEYS)})
        if state_folder is not None:
            _link_files(state_folder, inputs_folder)
        result["held"], arrays = self._hold(out_base + ".arrays", arrays)
        result["withheld"] = self._withhold(out_base + ".arrays", arrays)
        lap(seconds, "save", since)
        return result

    def float64_later(self, out_base: str) -> dict:
        """The float64 reference of a case run with `float64_later`, added to its arrays; returns
        what to add to its result (`output64`, or `output64_error` with why there is none)."""
        if out_base not in self._later:
            return {"output64_error": "kanalyze kept no model for this case's float64 reference"}
        model, values = self._later.pop(out_base)
        started = time.perf_counter()
        part: dict = {}
        arrays = self._new_arrays()
        self._float64(model, values, part, arrays, "output64", "out64_")
        folder = out_base + ".arrays"
        part["held"], arrays = self._hold(folder, arrays)
        if folder in self._withheld:
            self._withheld[folder].update(arrays)
            self._withheld_bytes += sum(int(a.nbytes) for a in arrays.values())
        else:   # saved at once (too large to withhold): the float64 arrays beside the others
            save_arrays(folder, arrays)
        return {**part, "seconds": {"float64": round(time.perf_counter() - started, 3)}}

    def _state_offer(self, key: str, case: dict, state: dict) -> dict:
        """The model's initial state as delivery.py offers it (digests computed once per model)."""
        if key not in self._state_offers:
            offered = delivery.offer(case)
            for i, value in enumerate(state.values()):
                delivery.describe(offered["arrays"], f"state{i}", value)
            self._state_offers[key] = offered
        return self._state_offers[key]

    def _saved_state(self, key: str, state: dict, parent: str) -> str:
        """The folder holding the model's initial state (`stateN.npy`), saved on the first case
        of its model and kept for the others.  One model, one name: the session's other
        reference worker (ahead.py) finds a state already saved there (the same key is the same
        model from the same seed) and saves none; a folder appears whole (renamed into place)."""
        folder = self._states.get(key)
        if folder is None or not os.path.isdir(folder):
            digest = hashlib.sha256(key.encode()).hexdigest()[:16]
            folder = os.path.join(parent, f"model-{digest}.state")
            if not os.path.isdir(folder):
                os.makedirs(parent, exist_ok=True)
                partial = tempfile.mkdtemp(dir=parent, prefix=".saving-")
                try:
                    save_arrays(partial, {f"state{i}": tensor_to_numpy(t, shared=True)   # written at once
                                          for i, t in enumerate(state.values())})
                    os.rename(partial, folder)
                except OSError:
                    if not os.path.isdir(folder):   # not saved by the other worker meanwhile: a real failure
                        raise
                finally:
                    shutil.rmtree(partial, ignore_errors=True)
            self._states[key] = folder
        return folder

    def _float64(self, model, values: list, result: dict, arrays: dict, name: str, prefix: str) -> None:
        """The same computation in float64 on upcast inputs, or why there is none (`NAME_error`)."""
        float64_reference(model, values, self.device, self.store, result, arrays, name, prefix)

    def _second_inputs(self, problem: Problem, model, case: dict, result: dict, arrays: dict,
                       offered: dict | None) -> None:
        """INT001's second call: new values of the same shapes (the problem's own `get_inputs`,
        another seed) and the reference's outputs for them, in the working dtype and float64."""
        values = self._second_values(problem, case)
        result["inputs2"] = encode_list(values, "second_in", arrays, keep=offered is None)
        for i, value in enumerate(values):
            if offered is not None and isinstance(value, torch.Tensor):
                delivery.describe(offered["arrays"], f"second_in{i}", value)
        with torch.no_grad():
            out = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
        synchronize(self.device)
        result["output2"] = encode_output(out, "second_out", arrays)
        self._float64(model, values, result, arrays, "output2_64", "second_out64_")

    def _first_values(self, problem: Problem, case: dict) -> list:
        return self.inputs(problem, case, case["seed"] + 1)

    def _second_values(self, problem: Problem, case: dict) -> list:
        return self.inputs(problem, {**case, "seed": case["seed"] + 1}, case["seed"] + 1 + REPEAT_SEED_OFFSET)

    # ------------------------------------------------------------ inputs handed over (delivery.py)

    def fill(self, offered: dict, handles: dict | None, folder: str | None) -> str | None:
        """Draw what a case offered again (its inputs, or its model's initial state) and hand it to
        the candidate's worker: into the device buffers whose CUDA IPC `handles` it sent, else
        saved into `folder`.  None, or why not (kanalyze's failure: the case cannot run)."""
        from kanalyze.dynamic.sandbox.device_share import Refused, write

        try:
            case, wanted = offered["case"], offered["arrays"]
            problem = self.problem(case["sizes"], case.get("dtype"))
            drawn: dict = {}
            if any(key.startswith("state") for key in wanted):   # the model's initial state
                _, _, built = self.model(problem, case)
                drawn.update((f"state{i}", v) for i, v in enumerate(self._models[built][0].state_dict().values()))
            if any(key.startswith("in") for key in wanted):
                drawn.update((f"in{i}", v) for i, v in enumerate(self._first_values(problem, case)))
            if any(key.startswith("second_") for key in wanted):
                drawn.update((f"second_in{i}", v) for i, v in enumerate(self._second_values(problem, case)))
            upstream = sorted((key for key in wanted if key.startswith("upstream")),
                              key=lambda key: int(key.removeprefix("upstream")))
            if upstream:   # CMP002's upstream gradients, from the case's seed (gradients.py)
                from kanalyze.dynamic.gradients import upstream_gradients

                drawn.update(zip(upstream, upstream_gradients(
                    [(wanted[k]["shape"], getattr(torch, wanted[k]["dtype"])) for k in upstream], case["seed"],
                    self.device)))
            for key, spec in wanted.items():
                if not isinstance(drawn.get(key), torch.Tensor) or delivery.digest(drawn[key]) != spec["digest"]:
                    what = ("the problem's model, built again from the same seed, has other values for its "
                            f"{key}" if key.startswith("state") else
                            f"the problem's get_inputs drew other values for input {key} a second time under the "
                            f"same seed")
                    return f"{what}: kanalyze cannot hand the candidate what the reference used"
            if handles is None:
                save_arrays(folder, {key: tensor_to_numpy(drawn[key], shared=True) for key in wanted})
                return None
            if not isinstance(handles, dict) or set(handles) != set(wanted):
                return "the candidate's worker sent buffers for other inputs than the case's"
            for key in wanted:
                write(handles[key], drawn[key])
            return None
        except Refused as exc:
            return f"kanalyze refused a buffer of the candidate's worker: {exc}"
        except BaseException as exc:
            return f"kanalyze could not draw the case's inputs again: {describe_error(exc)}"

    # ------------------------------------------------------------ withheld outputs

    def _new_arrays(self) -> dict:
        """Where a case's arrays go: tensors kept as they are where this worker holds them."""
        if self.store is None:
            return {}
        arrays = DeviceArrays()
        arrays.any_device = True
        return arrays

    def _hold(self, folder: str, arrays: dict) -> tuple[dict, dict]:
        """({key: dtype and shape} of the arrays held for the judge, the rest as numpy arrays)."""
        if self.store is None:
            return {}, arrays
        described, rest = {}, {}
        for key, value in arrays.items():
            if isinstance(value, torch.Tensor) and self.store.hold(f"{folder}/{key}", value):
                described[key] = self.store.describe(f"{folder}/{key}")
            else:
                rest[key] = _numpy(value)
        return described, rest

    def _withhold(self, folder: str, arrays: dict[str, np.ndarray]) -> bool:
        size = sum(int(a.nbytes) for a in arrays.values())
        if self._withheld_bytes + size > WITHHOLD_BYTES:
            save_arrays(folder, arrays)
            return False
        self._withheld[folder] = arrays
        self._withheld_bytes += size
        return True

    def release(self, export: bool = False, memory: str | None = None) -> tuple[dict[str, str], dict]:
        """Save every withheld output (the candidate's workers have ended); returns the folders
        that could not be saved (the disk ran short: NoRoom), each with why, and with `export`
        what this worker held for the judge, handed over (`hand_over`, through `memory`).  One
        such case costs its own arrays only: the others are saved, and this worker goes on."""
        lost: dict[str, str] = {}
        for folder, arrays in self._withheld.items():
            try:
                save_arrays(folder, arrays)
            except OSError as exc:   # NoRoom included
                shutil.rmtree(folder, ignore_errors=True)
                lost[folder] = f"kanalyze could not save the reference's outputs: {describe_error(exc)}"
        self._withheld.clear()
        self._withheld_bytes = 0
        self._later.clear()   # a float64 reference never asked for: its candidate failed first
        return lost, (held.hand_over(self.store, memory) if export and self.store is not None else {})


def _generators(device: str) -> list[bytes]:
    """The states of torch's default random generators (the CPU's, and the device's)."""
    states = [torch.get_rng_state()] + ([torch.cuda.get_rng_state()] if device == "cuda" else [])
    return [state.numpy().tobytes() for state in states]


def _numpy(value):
    return tensor_to_numpy(value) if isinstance(value, torch.Tensor) else value


def _link_files(folder: str, into: str) -> None:
    """Every file of `folder` also in `into`: hard links (no copy of gigabytes), copies where the
    file system has none."""
    os.makedirs(into, exist_ok=True)
    for name in os.listdir(folder):
        source, target = os.path.join(folder, name), os.path.join(into, name)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
