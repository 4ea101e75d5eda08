"""Running one case in a worker: the reference side and the candidate side (imports torch).

Each side writes `case-N.json` (what happened) and `case-N.npz` (the arrays)
into the job's output folder; the parent reads both and decides.  The reference
side writes what the candidate needs (inputs, the model's state) apart, in
`case-N.inputs.npz`: that file alone goes to the candidate's worker, never the
reference's outputs.  Nothing here judges a result.
"""

from __future__ import annotations

import copy
import json
import time
import traceback

import numpy as np
import torch

from kanalyze.dynamic import inputs as input_values
from kanalyze.dynamic.loading import Problem, build_candidate, load_matching_state, move
from kanalyze.dynamic.results import FATAL_MARKERS
from kanalyze.dynamic.sandbox.transport import dtype_name, flatten_value, numpy_to_tensor, tensor_to_numpy



def describe_error(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 600 else text[:599] + "…"


def _tail(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines)[-3000:]


def encode_list(values: list, prefix: str, arrays: dict) -> list[dict]:
    described = []
    for i, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            key = f"{prefix}{i}"
            arrays[key] = tensor_to_numpy(value)
            described.append({"kind": "tensor", "dtype": dtype_name(value.dtype), "key": key})
        else:
            try:
                json.dumps(value)
            except TypeError:
                value = repr(value)
                described.append({"kind": "unsupported", "value": value})
                continue
            described.append({"kind": "value", "value": value})
    return described


def decode_list(described: list[dict], arrays, device: str) -> list:
    out = []
    for item in described:
        if item["kind"] == "tensor":
            out.append(numpy_to_tensor(arrays[item["key"]], item["dtype"], device))
        elif item["kind"] == "value":
            out.append(item["value"])
        else:
            raise TypeError(f"an input of the problem cannot cross processes: {item['value']}")
    return out


def encode_output(value, prefix: str, arrays: dict) -> dict:
    return encode_leaves(*flatten_value(value), prefix, arrays)


def encode_leaves(structure: str, leaves: list, prefix: str, arrays: dict) -> dict:
    dtypes, nbytes = [], []
    for i, leaf in enumerate(leaves):
        arrays[f"{prefix}{i}"] = array = tensor_to_numpy(leaf)
        dtypes.append(dtype_name(leaf.dtype))
        nbytes.append(int(array.nbytes))
    return {"structure": structure, "dtypes": dtypes, "prefix": prefix, "nbytes": nbytes}


# The reference's arrays that the candidate's worker is given: inputs and the model's state.
CANDIDATE_SIDE_KEYS = ("in", "init", "state", "second_in", "upstream")
REPEAT_SEED_OFFSET = 1000   # the second input set of a repeated call (INT001): another seed, same shapes


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)


# ---------------------------------------------------------------- reference

class ReferenceSide:
    def __init__(self, harness: dict, device: str, recorder_factory) -> None:
        self.harness, self.device, self.recorder_factory = harness, device, recorder_factory
        self._problems: dict[str, Problem] = {}

    def problem(self, sizes: dict, dtype: str | None) -> Problem:
        key = json.dumps([sorted(sizes.items()), dtype])
        if key not in self._problems:
            self._problems[key] = Problem(self.harness, sizes, dtype)
        return self._problems[key]

    def run(self, case: dict, out_base: str) -> dict:
        arrays: dict[str, np.ndarray] = {}
        result: dict = {"status": "ok"}
        try:
            problem = self.problem(case["sizes"], case.get("dtype"))
            _seed(case["seed"])
            init_inputs = problem.init_inputs()
            _seed(case["seed"])
            model = move(problem.model(init_inputs), self.device)
            _seed(case["seed"] + 1)
            values = [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in problem.inputs()]
            values = input_values.apply(values, case["distribution"], case.get("special"), case["seed"])
        except BaseException as exc:  # the problem rejects these sizes, or is broken
            return {"status": "rejected", "error": describe_error(exc), "traceback": _tail(exc)}
        result["inputs"] = encode_list(values, "in", arrays)
        result["init_inputs"] = encode_list(init_inputs, "init", arrays)
        if isinstance(model, torch.nn.Module):
            state = model.state_dict()
            result["state"] = list(state)
            for i, tensor in enumerate(state.values()):
                arrays[f"state{i}"] = tensor_to_numpy(tensor)
            result["state_dtypes"] = [dtype_name(t.dtype) for t in state.values()]
        recorder = self.recorder_factory() if case.get("record_ops") else None
        try:
            with torch.no_grad():
                if recorder is not None:
                    with recorder:
                        out = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
                    result["ops"] = dict(recorder.calls)
                else:
                    out = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
            _synchronize(self.device)
            result["output"] = encode_output(out, "out", arrays)
        except BaseException as exc:
            return {"status": "rejected", "error": describe_error(exc), "traceback": _tail(exc)}
        try:  # the same computation in float64, on upcast inputs
            model64 = copy.deepcopy(model).to(torch.float64) if isinstance(model, torch.nn.Module) else model
            values64 = [v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                        for v in values]
            with torch.no_grad():
                out64 = model64(*values64)
            _synchronize(self.device)
            result["output64"] = encode_output(out64, "out64_", arrays)
        except BaseException as exc:
            result["output64_error"] = describe_error(exc)
        if case.get("gradients"):
            from kanalyze.dynamic.gradients import reference_gradients

            try:
                reference_gradients(model, values, case["seed"], result, arrays)
            except BaseException as exc:  # the problem cannot be differentiated: the gate says so
                result["gradients_error"] = describe_error(exc)
        if case.get("repeat_new_values"):
            try:
                self._second_inputs(problem, model, case, result, arrays)
            except BaseException as exc:
                return {"status": "rejected", "error": f"second input set: {describe_error(exc)}",
                        "traceback": _tail(exc)}
        given = {key: arrays.pop(key) for key in list(arrays) if key.startswith(CANDIDATE_SIDE_KEYS)}
        np.savez(out_base + ".inputs.npz", **given)
        np.savez(out_base + ".npz", **arrays)
        return result

    def _second_inputs(self, problem: Problem, model, case: dict, result: dict, arrays: dict) -> None:
        """INT001's second call: new values of the same shapes (the problem's own `get_inputs`,
        another seed) and the reference's outputs for them, in the working dtype and float64."""
        _seed(case["seed"] + 1 + REPEAT_SEED_OFFSET)
        values = [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in problem.inputs()]
        values = input_values.apply(values, case["distribution"], case.get("special"), case["seed"] + 1)
        result["inputs2"] = encode_list(values, "second_in", arrays)
        with torch.no_grad():
            out = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
        _synchronize(self.device)
        result["output2"] = encode_output(out, "second_out", arrays)
        try:
            model64 = copy.deepcopy(model).to(torch.float64) if isinstance(model, torch.nn.Module) else model
            values64 = [v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                        for v in values]
            with torch.no_grad():
                out64 = model64(*values64)
            result["output2_64"] = encode_output(out64, "second_out64_", arrays)
        except BaseException as exc:
            result["output2_64_error"] = describe_error(exc)


# ---------------------------------------------------------------- candidate

class CandidateSide:
    """The candidate's model, built once per case, called once per run.  `phase` tells the
    parent whose code runs: the candidate's (building the model, the call and the device
    work it queued) or kanalyze's (everything else, encoding the outputs included)."""

    def __init__(self, harness: dict, device: str, module, env, phase=lambda name: None) -> None:
        self.harness, self.device, self.module, self.env = harness, device, module, env
        self.phase = phase

    def run(self, case: dict, reference: dict, reference_arrays, out_base: str) -> dict:
        arrays: dict[str, np.ndarray] = {}
        result: dict = {"status": "ok", "runs": []}
        try:
            init_inputs = decode_list(reference["init_inputs"], reference_arrays, "cpu")
            base_inputs = decode_list(reference["inputs"], reference_arrays, self.device)
            state = {name: numpy_to_tensor(reference_arrays[f"state{i}"], dtype, self.device)
                     for i, (name, dtype) in enumerate(zip(reference.get("state", []),
                                                           reference.get("state_dtypes", [])))}
        except BaseException as exc:  # kanalyze's own side: never the candidate's failure
            result.update(status="internal", error=f"kanalyze could not prepare the inputs: {describe_error(exc)}",
                          traceback=_tail(exc))
            return result
        _seed(case["seed"])
        self.phase("candidate")
        try:
            model = move(build_candidate(self.module, self.harness, init_inputs), self.device)
            result["state_loaded"] = load_matching_state(model, state)
        except BaseException as exc:
            result.update(status="error", error=describe_error(exc), traceback=_tail(exc))
            result["fatal"] = any(m in result["error"] for m in FATAL_MARKERS)
            return result
        finally:
            self.phase("kanalyze")
        output_bytes = output_sizes(reference)
        values: list = []
        for j, run in enumerate(case["runs"]):
            values = [v.clone() if isinstance(v, torch.Tensor) else v for v in base_inputs]
            record = self._run_once(case, run, lambda: model(*values), output_bytes, arrays, f"r{j}_out")
            if case.get("return_inputs"):
                record["inputs_after"] = encode_list(values, f"r{j}_in", arrays)
            if self._record(result, record):
                break
        else:
            if case.get("repeat_new_values") and "inputs2" in reference:
                self._repeat(case, model, values, reference, reference_arrays, output_bytes, arrays, result)
            if case.get("gradients") and "upstream" in reference:
                from kanalyze.dynamic.gradients import candidate_gradients

                self._record(result, candidate_gradients(model, base_inputs, reference, reference_arrays, arrays,
                                                         self.phase))
        np.savez(out_base + ".npz", **arrays)
        return result

    def _repeat(self, case, model, values, reference, reference_arrays, output_bytes, arrays, result) -> None:
        """The same model called again after new values were written into the very tensors of
        the last call (INT001: a result cached by buffer, shape or call count shows here)."""
        second = decode_list(reference["inputs2"], reference_arrays, self.device)
        for buffer, new in zip(values, second):
            if isinstance(buffer, torch.Tensor) and isinstance(new, torch.Tensor) and buffer.shape == new.shape:
                buffer.copy_(new)
        record = self._run_once(case, case["runs"][-1], lambda: model(*values), output_bytes, arrays, "repeat_out")
        record["repeat"] = True
        self._record(result, record)

    def run_call(self, case: dict, out_base: str) -> dict:
        """A kernel harness's case: make the call the case describes; no outputs to compare."""
        from kanalyze.dynamic import kernel_call

        result: dict = {"status": "ok", "runs": []}
        try:
            invoke, result["call"] = kernel_call.prepare(self.module, case["call"], self.device, case["seed"])
        except BaseException as exc:
            result.update(status="error", error=describe_error(exc), traceback=_tail(exc))
            return result
        for run in case["runs"]:
            if self._record(result, self._run_once(case, run, invoke, [], None, "")):
                break
        np.savez(out_base + ".npz")
        return result

    def _run_once(self, case: dict, run: dict, invoke, output_bytes: list[int], arrays: dict | None,
                  prefix: str) -> dict:
        """One call under the run's knobs; the output is encoded into `arrays` unless that is None."""
        record = {"status": "ok"}
        self.env.before_run(run, case, output_bytes)
        started = time.perf_counter()
        flat = None
        self.phase("candidate")
        try:
            with torch.no_grad(), self.env.recording(case.get("record_ops")):
                out = invoke()
            _synchronize(self.device)
            if arrays is not None:
                flat = flatten_value(out)  # what it returned: tensors, or its error (TypeError)
        except BaseException as exc:
            record.update(status="error", error=describe_error(exc), traceback=_tail(exc))
        finally:
            self.phase("kanalyze")
        record["seconds"] = time.perf_counter() - started
        if flat is not None:
            try:
                record["output"] = encode_leaves(*flat, prefix, arrays)
            except (MemoryError, OSError) as exc:  # kanalyze's own resources ran out
                record.update(status="internal", error=f"kanalyze could not read the output: {describe_error(exc)}",
                              traceback=_tail(exc))
            except BaseException as exc:  # not a plain tensor kanalyze can read: the candidate's answer
                record.update(status="error", error=f"returned an output that is not a plain tensor: "
                                                    f"{describe_error(exc)}", traceback=_tail(exc))
        record.update(self.env.after_run(case))
        if record.get("out_of_bounds"):
            record["status"] = "out_of_bounds"
            record.pop("output", None)
        return record

    @staticmethod
    def _record(result: dict, record: dict) -> bool:
        """Add a run's record; True when the device is gone and the remaining runs cannot go on."""
        result["runs"].append(record)
        if record["status"] == "error" and any(m in record["error"] for m in FATAL_MARKERS):
            result["fatal"] = True
            return True
        return False


def output_sizes(reference: dict) -> list[int]:
    """Byte sizes of the reference's outputs: the blocks the allocator is poisoned with on a GPU."""
    return [int(n) for n in (reference.get("output") or {}).get("nbytes", [])]
