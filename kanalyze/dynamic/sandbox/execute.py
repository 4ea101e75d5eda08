"""Running one case in a worker: the candidate side, and what both sides share (imports torch).

Each side writes `case-N.json` (what happened) and `case-N.arrays/` (the
arrays, transport.save_arrays) into the job's output folder; the parent reads
both and decides.  The reference side (reference_side.py) saves what the
candidate needs of it (the model's state, inputs that a gate compares) apart, in
`case-N.inputs/`: that folder alone goes to the candidate's worker, never the
reference's outputs; the other inputs are drawn again and handed over when the
candidate's case starts (delivery.py).  Nothing here judges a result.
"""

from __future__ import annotations

import collections
import functools
import time
import traceback

import numpy as np
import torch

from kanalyze.dynamic.cases import model_key, model_seed
from kanalyze.dynamic.loading import build_candidate, built_on, load_matching_state
from kanalyze.dynamic.results import FATAL_MARKERS
from kanalyze.dynamic.sandbox import delivery
from kanalyze.dynamic.sandbox.device_share import DeviceArrays, export
from kanalyze.dynamic.sandbox.encoding import decode_list, decode_tensor, encode_leaves, encode_list, plain_tensor
from kanalyze.dynamic.sandbox.transport import dtype_name, flatten_value, numpy_to_tensor, save_arrays, tensor_to_numpy


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 600 else text[:599] + "…"


def traceback_tail(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines)[-3000:]


# The reference's arrays that the candidate's worker is given: inputs and the model's state.
CANDIDATE_SIDE_KEYS = ("in", "init", "state", "second_in", "upstream")
REPEAT_SEED_OFFSET = 1000   # the second input set of a repeated call (INT001): another seed, same shapes


def _device_lost(result: dict, arrays: dict) -> None:
    """A run of the candidate faulted the device (an illegal address): nothing on it can be read
    back, earlier runs' outputs included.  The case is the candidate's error, with the fault."""
    fault = next((run["error"] for run in result["runs"] if run.get("status") == "error"
                  and any(m in run.get("error", "") for m in FATAL_MARKERS)), "a CUDA error")
    for key in [key for key, value in arrays.items() if isinstance(value, torch.Tensor)]:
        del arrays[key]
    for run in result["runs"]:
        run.pop("output", None)
        run.pop("inputs_after", None)
    result.update(status="error", error=f"a run faulted the device: {fault}")


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def pending_fault(device: str) -> str | None:
    """After a candidate's call raised: a fault its kernels left on the device, or None.  A
    kernel's illegal address surfaces at the next synchronization, not at its launch: where
    the call raised before synchronizing (its next kernel did not compile, say), the fault
    would surface in kanalyze's own next step and read as kanalyze's crash."""
    try:
        synchronize(device)
    except BaseException as exc:   # its first line: CUDA's advice on debugging follows
        first = str(exc).strip().splitlines()[:1]
        return f"{type(exc).__name__}: {first[0]}" if first else describe_error(exc)
    return None


def lap(seconds: dict, step: str, since: float) -> float:
    """Add the time since `since` to `seconds[step]`; returns now (the next step's start)."""
    now = time.perf_counter()
    seconds[step] = round(seconds.get(step, 0.0) + now - since, 3)
    return now


def apart(seconds: dict, parts: dict, whole: str) -> None:
    """Move `parts` (steps timed within the step `whole`) out of it into steps of their own."""
    for step, value in parts.items():
        seconds[step] = value
        seconds[whole] = round(max(0.0, seconds.get(whole, 0.0) - value), 3)


def timed_build(device: str, build, reseed, seconds: dict):
    """`built_on` after `reseed()`, its steps in `seconds`: `model_wait` (the device's earlier
    work), `model_build` (a refused attempt on the device included: `model_build_refused`) and
    `model_build_device` (the build's own device work)."""
    since = time.perf_counter()
    synchronize(device)
    since = lap(seconds, "model_wait", since)
    reseed()
    model = built_on(device, build, reseed, seconds)
    since = lap(seconds, "model_build", since)
    synchronize(device)
    lap(seconds, "model_build_device", since)
    return model


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)


def reference_model_key(case: dict, reference: dict) -> str:
    """The key of the model the reference worker built for this case (it knows whether its
    problem's model reads the sizes: cases.model_key); the sizes' key where it did not say."""
    key = reference.get("model_key")
    return key if isinstance(key, str) else model_key(case)


# ---------------------------------------------------------------- candidate

class CandidateSide:
    """The candidate's model, built once per model key (sizes, dtype, model seed) and given the
    reference's state, which is restored before every case; called once per run.  `phase`
    tells the parent whose code runs: the candidate's (building the model, the call and the
    device work it queued) or kanalyze's (everything else, encoding the outputs included)."""

    def __init__(self, harness: dict, device: str, module, env, phase=lambda name: None,
                 device_share: bool = True) -> None:
        self.harness, self.device, self.module, self.env = harness, device, module, env
        self.device_share = device == "cuda" and device_share   # outputs through CUDA IPC (device_share.py)
        self.exported: dict = {}   # the last case's device arrays, alive until the parent has read them
        self.calls = 0             # calls of the candidate in this worker (the first may set itself up)
        self.phase = phase
        self.ask_inputs = None     # asks the parent for a case's inputs (worker.py; delivery.py)
        # (model key, model, the state restored before each case, whether it took the reference's)
        self.built: tuple | None = None
        self.build_seconds: dict[str, float] = {}   # the last new model's build (run's account)

    def run(self, case: dict, reference: dict, reference_arrays, out_base: str) -> dict:
        self.exported = {}
        arrays: dict = DeviceArrays() if self.device_share else {}
        seconds: dict[str, float] = {}   # where the case's time went, step by step
        result: dict = {"status": "ok", "runs": [], "seconds": seconds}
        since = time.perf_counter()
        key = reference_model_key(case, reference)
        if self.built is not None and self.built[0] != key:
            self.built = None   # another size or dtype: that model's gigabytes go first
        try:
            if reference.get("deliver"):   # the inputs come now, drawn again (delivery.py)
                reference_arrays = collections.ChainMap(
                    delivery.receive(reference["deliver"], self.device, self.device_share,
                                     functools.partial(self.ask_inputs, "inputs")), reference_arrays)
                since = lap(seconds, "inputs", since)
            init_inputs = decode_list(reference["init_inputs"], reference_arrays, "cpu")
            base_inputs = decode_list(reference["inputs"], reference_arrays, self.device)
            # A kept model has its state; an offered state (delivery.py) is taken once it is built.
            state = {} if self.built is not None or reference.get("deliver_state") else {
                name: numpy_to_tensor(reference_arrays[f"state{i}"], dtype, self.device)
                for i, (name, dtype) in enumerate(zip(reference.get("state", []), reference.get("state_dtypes", [])))}
            offered_state = reference.get("deliver_state") if self.built is None else None
        except BaseException as exc:  # kanalyze's own side: never the candidate's failure
            why = str(exc) if isinstance(exc, delivery.Undelivered) else describe_error(exc)
            result.update(status="internal", error=f"kanalyze could not prepare the inputs: {why}",
                          traceback=traceback_tail(exc))
            return result
        since = lap(seconds, "prepare", since)
        self.phase("candidate")
        self.build_seconds = {}
        try:
            result["state_loaded"] = self._model(key, case, init_inputs, state)
        except BaseException as exc:
            self.built = None
            result.update(status="error", error=describe_error(exc), traceback=traceback_tail(exc))
            result["fatal"] = any(m in result["error"] for m in FATAL_MARKERS)
            return result
        finally:
            self.phase("kanalyze")
        since = lap(seconds, "model", since)
        apart(seconds, self.build_seconds, "model")
        if offered_state:
            try:
                result["state_loaded"], crossed = self._offered_state(reference, offered_state)
                if crossed:
                    since = lap(seconds, "state", since)
            except BaseException as exc:   # kanalyze's own side: never the candidate's failure
                self.built = None
                why = str(exc) if isinstance(exc, delivery.Undelivered) else describe_error(exc)
                result.update(status="internal", error=f"kanalyze could not give the model its state: {why}",
                              traceback=traceback_tail(exc))
                return result
        model = self.built[1]
        seed_all(case["seed"])
        since = lap(seconds, "model", since)
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

                described = reference["upstream"]   # (saved, or handed over: delivery.py)
                upstream = [decode_tensor(reference_arrays[f"{described['prefix']}{i}"], dtype, self.device)
                            for i, dtype in enumerate(described["dtypes"])]
                self._record(result, candidate_gradients(model, base_inputs, upstream, reference, arrays,
                                                         self.phase))
        since = lap(seconds, "runs", since)
        if result.get("fatal"):
            _device_lost(result, arrays)
        self._finish(arrays, out_base, result)
        lap(seconds, "finish", since)
        return result

    def _model(self, key: str, case: dict, init_inputs: list, state: dict) -> bool:
        """Build the model on the first case of its key, given the reference's state where it has
        the same parameters; on later cases restore what it started with (whatever the candidate
        changed in its parameters is undone, its gradients dropped).  True when it took the state."""
        if self.built is None:
            self.build_seconds = {}
            model = timed_build(self.device, lambda: build_candidate(self.module, self.harness, init_inputs),
                                lambda: seed_all(model_seed(case)), self.build_seconds)
            loaded = load_matching_state(model, state)
            if not loaded and isinstance(model, torch.nn.Module):   # its own seeded parameters
                state = {name: value.detach().clone() for name, value in model.state_dict().items()}
            self.built = (key, model, state, loaded)
            return loaded
        _, model, state, loaded = self.built
        if isinstance(model, torch.nn.Module):
            if state:
                model.load_state_dict(state)
            model.zero_grad(set_to_none=True)
        return loaded

    def _offered_state(self, reference: dict, offered: dict) -> tuple[bool, bool]:
        """Give a model just built the reference's initial state (offered, not saved: delivery.py)
        where it has the same parameters: nothing crosses where its own seeded values already
        are the reference's, bit for bit; else it is handed over.  (whether it has that state,
        whether it crossed)."""
        key, model, _, _ = self.built
        names, wanted = reference.get("state", []), offered.get("arrays", {})
        own = model.state_dict() if isinstance(model, torch.nn.Module) else {}
        specs = {name: wanted.get(f"state{i}", {}) for i, name in enumerate(names)}
        if not own or set(own) != set(specs) or any(list(own[n].shape) != specs[n].get("shape") for n in own):
            return False, False   # other parameters: it keeps its own seeded ones (as load_matching_state)
        if all(dtype_name(own[n].dtype) == specs[n].get("dtype") and delivery.digest(own[n]) == specs[n].get("digest")
               for n in own):
            self.built = (key, model, self.built[2], True)
            return True, False
        given = delivery.receive(offered, self.device, self.device_share, functools.partial(self.ask_inputs, "state"))
        state = {name: decode_tensor(given[f"state{i}"], specs[name]["dtype"], self.device)
                 for i, name in enumerate(names)}
        self.phase("candidate")   # its own loading hooks may run
        try:
            load_matching_state(model, state)
        finally:
            self.phase("kanalyze")
        self.built = (key, model, {n: v.detach().clone() for n, v in model.state_dict().items()}, True)
        return True, True

    def _finish(self, arrays: dict, out_base: str, result: dict) -> None:
        """Save the case's arrays; on a GPU, export the device ones instead (device_share.py), or
        save those too where this platform cannot export them."""
        shared: dict = {}
        for key, value in list(arrays.items()):
            if isinstance(value, torch.Tensor):
                try:
                    shared[key] = export(value)
                except Exception as exc:
                    result.setdefault("device_share_error", describe_error(exc))
                    arrays[key] = tensor_to_numpy(value)
        save_arrays(out_base + ".arrays", {k: v for k, v in arrays.items() if k not in shared})
        if shared:
            result["shared"] = shared
            self.exported = {key: arrays[key] for key in shared}

    def _repeat(self, case, model, values, reference, reference_arrays, output_bytes, arrays, result) -> None:
        """The same model called again after new values were written into the very tensors of
        the last call (INT001: a result cached by buffer, shape or call count shows here), then
        once more on fresh tensors holding those new values (a cache that a write into its
        buffers invalidates, keyed by a tensor's version counter or its identity, shows there)."""
        second = decode_list(reference["inputs2"], reference_arrays, self.device)
        for buffer, new in zip(values, second):
            if isinstance(buffer, torch.Tensor) and isinstance(new, torch.Tensor) and buffer.shape == new.shape:
                buffer.copy_(new)
        record = self._run_once(case, case["runs"][-1], lambda: model(*values), output_bytes, arrays, "repeat_out")
        record["repeat"] = True
        if self._record(result, record):
            return
        fresh = [v.clone() if isinstance(v, torch.Tensor) else v for v in second]
        record = self._run_once(case, case["runs"][-1], lambda: model(*fresh), output_bytes, arrays, "fresh_out")
        record["repeat"] = "fresh"
        self._record(result, record)

    def run_call(self, case: dict, out_base: str) -> dict:
        """A kernel harness's case: make the call the case describes; no outputs to compare."""
        from kanalyze.dynamic import kernel_call

        result: dict = {"status": "ok", "runs": []}
        try:
            invoke, result["call"] = kernel_call.prepare(self.module, case["call"], self.device, case["seed"])
        except BaseException as exc:
            result.update(status="error", error=describe_error(exc), traceback=traceback_tail(exc))
            return result
        for run in case["runs"]:
            if self._record(result, self._run_once(case, run, invoke, [], None, "")):
                break
        save_arrays(out_base + ".arrays", {})
        return result

    def _run_once(self, case: dict, run: dict, invoke, output_bytes: list[int], arrays: dict | None,
                  prefix: str) -> dict:
        """One call under the run's knobs; the output is encoded into `arrays` unless that is None."""
        record = {"status": "ok", "call": self.calls}
        self.calls += 1
        self.env.before_run(run, case, output_bytes)
        started = time.perf_counter()
        flat = None
        self.phase("candidate")
        try:
            with torch.no_grad(), self.env.recording(True, run.get("nonce")):   # every run's trace (traces.py)
                out = invoke()
                if arrays is not None:   # what it returned, as plain tensors, or its error (TypeError)
                    structure, leaves = flatten_value(out)
                    flat = structure, [plain_tensor(leaf) for leaf in leaves]
            synchronize(self.device)
        except BaseException as exc:
            record.update(status="error", error=describe_error(exc), traceback=traceback_tail(exc))
            fault = pending_fault(self.device)
            if fault:   # an earlier kernel of this call faulted: the candidate's too, and the device is lost
                record["error"] += f"; its kernels faulted the device too: {fault}"
        finally:
            self.phase("kanalyze")
        record["seconds"] = time.perf_counter() - started
        if flat is not None:
            try:
                record["output"] = encode_leaves(*flat, prefix, arrays)
            except (MemoryError, OSError) as exc:  # kanalyze's own resources ran out
                record.update(status="internal", error=f"kanalyze could not read the output: {describe_error(exc)}",
                              traceback=traceback_tail(exc))
            except BaseException as exc:  # not a plain tensor kanalyze can read: the candidate's answer
                record.update(status="error", error=f"returned an output that is not a plain tensor: "
                                                    f"{describe_error(exc)}", traceback=traceback_tail(exc))
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
