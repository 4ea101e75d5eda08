"""The worker process: where problem and candidate code runs, never in kanalyze's own.

Started by `sandbox.py` as

    python -E -s -c BOOTSTRAP ROLE MODE CONTROL_FD STATUS_FD SPEC.json

ROLE is `reference` or `candidate`; MODE is `cpu` (Triton's interpreter, with
`TRITON_INTERPRET=1` already in the environment the parent gave it) or `cuda`.
The worker imports torch and triton, installs its hooks and guards, imports the
candidate (candidate role), says `ready` on the status pipe, then runs each job
that the parent sends on the control pipe and reports each case as it is done.
Case results go to files (`case-N.json` + `case-N.npz`); the status pipe only
carries short JSON lines.  Candidate output on stdout/stderr is the parent's to
capture and cap.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

class Environment:
    """The knobs of one candidate run: poison, program order, TF32, recorders."""

    def __init__(self, mode: str) -> None:
        import torch

        from kanalyze.dynamic.recording import HostTransfers, LaunchCounter, OpRecorder

        self.torch, self.mode = torch, mode
        self.driver = None
        if mode == "cpu":
            from kanalyze.dynamic.interpreter import InterpreterDriver

            self.driver = InterpreterDriver()
        self.launches = LaunchCounter()
        self.host = HostTransfers(self.launches)
        self._op_recorder_cls = OpRecorder
        self._ops = None
        self.poison: int | None = None
        self._patch_allocations()

    def op_recorder(self):
        return self._op_recorder_cls(self.launches)

    def _patch_allocations(self) -> None:
        """Fresh memory from torch.empty* is filled with the run's poison byte first."""
        torch, environment = self.torch, self

        def fill(tensor):
            if environment.poison is not None and isinstance(tensor, torch.Tensor) and tensor.numel() > 0:
                storage = tensor.untyped_storage()
                torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage).fill_(environment.poison)
            return tensor

        def wrap(original):
            def allocate(*args, **kwargs):
                return fill(original(*args, **kwargs))
            allocate.__name__ = getattr(original, "__name__", "empty")
            return allocate

        for name in ("empty", "empty_like", "empty_strided"):
            setattr(torch, name, wrap(getattr(torch, name)))
        torch.Tensor.new_empty = wrap(torch.Tensor.new_empty)

    def before_run(self, run: dict, case: dict, output_bytes: list[int]) -> None:
        torch = self.torch
        self.poison = run.get("poison")
        self.launches.launches.clear()
        self.host.calls.clear()
        if self.driver is not None:
            self.driver.reset(run.get("order_seed"), bool(case.get("emulate_tf32")))
        elif self.poison is not None:
            # The caching allocator hands a freed block of the same size to the
            # next request: fill and free one per output, so that stale memory
            # holds the sentinel, not a previous result.
            blocks = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in output_bytes if n]
            for block in blocks:
                block.fill_(self.poison)
            del blocks
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def recording(self, record_ops: bool):
        self._ops = self.op_recorder() if record_ops else None
        self.host.active = True
        try:
            if self._ops is not None:
                with self._ops:
                    yield
            else:
                yield
        finally:
            self.host.active = False
            self.poison = None

    def after_run(self, case: dict) -> dict:
        out = {"launches": dict(self.launches.launches), "host_transfers": dict(self.host.calls)}
        if self._ops is not None:
            out["ops"] = dict(self._ops.ops)
        if self.driver is not None:
            out["tf32_dots"] = self.driver.tf32_dots
            if self.driver.out_of_bounds:
                out["out_of_bounds"] = self.driver.out_of_bounds
        return out


def _send(status, **message) -> None:
    status.write(json.dumps(message) + "\n")
    status.flush()


def main(argv: list[str]) -> int:
    role, mode, control_fd, status_fd, spec_path = argv
    status = os.fdopen(int(status_fd), "w", buffering=1)
    control = os.fdopen(int(control_fd), "r")
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    from kanalyze.dynamic.confine import apply_limits, install_guards

    confinement = apply_limits(spec.get("limits", {}))
    harness = spec["harness"]
    try:
        import numpy as np
        import torch

        if mode == "cpu":
            from kanalyze.dynamic import devicemap

            device_map = devicemap.install("cpu")
        elif not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is visible to the worker")
        import triton  # noqa: F401  (after TRITON_INTERPRET is set: the parent set it)

        from kanalyze.dynamic import cases as case_sizes
        from kanalyze.dynamic.execute import CandidateSide, ReferenceSide, describe_error

        env = Environment(mode)
    except BaseException as exc:
        _send(status, event="ready", error=f"the worker could not start: {type(exc).__name__}: {exc}")
        return 3
    device = "cpu" if mode == "cpu" else "cuda"
    install_guards()
    import_error = None
    if role == "candidate":
        from kanalyze.dynamic.loading import load_candidate

        try:
            module = load_candidate(spec.get("candidate_file") or harness["candidate"])
        except BaseException as exc:
            import_error = describe_error(exc)
        side = CandidateSide(harness, device, None if import_error else module, env)
    else:
        side = ReferenceSide(harness, device, env.op_recorder)
    _send(status, event="ready", error=None, import_error=import_error, confinement=confinement,
          versions={"torch": torch.__version__, "triton": sys.modules["triton"].__version__,
                    "device": torch.cuda.get_device_name(0) if mode == "cuda" else "Triton interpreter (CPU)"})
    for line in control:
        job = json.loads(line)
        if job["kind"] == "plan":
            _send(status, event="plan", sizes=_plan(job, harness, device_map if mode == "cpu" else None, case_sizes))
            continue
        for index, case in zip(job["indices"], job["cases"]):
            out_base = os.path.join(job["out"], f"case-{index}")
            if role == "reference":
                result = side.run(case, out_base)
            elif import_error:
                result = {"status": "error", "error": f"the candidate does not import: {import_error}", "runs": []}
            else:
                reference = job["references"][str(index)]
                with np.load(reference["arrays"], allow_pickle=False) as reference_arrays:
                    result = side.run(case, reference["meta"], reference_arrays, out_base)
            with open(out_base + ".json", "w", encoding="utf-8") as handle:
                json.dump(result, handle)
            _send(status, event="case", index=index)
            if result.get("fatal"):
                _send(status, event="fatal", index=index)
                return 4
        _send(status, event="job-done")
    return 0


def _plan(job: dict, harness: dict, device_map, case_sizes) -> dict:
    """Scale the knobs down until the inputs hold at most `max_numel` elements."""
    import torch

    from kanalyze.dynamic.loading import Problem

    def numel_of(sizes):
        try:
            if device_map is not None:
                device_map.target = "meta"
            with torch.device("meta"):
                values = Problem(harness, sizes, job.get("dtype")).inputs()
            return sum(v.numel() for v in values if isinstance(v, torch.Tensor))
        except BaseException:
            return None
        finally:
            if device_map is not None:
                device_map.target = "cpu"

    return case_sizes.scale_down(job["knobs"], numel_of, job["max_numel"])


if __name__ == "__main__":  # pragma: no cover - started through sandbox.BOOTSTRAP
    sys.exit(main(sys.argv[1:]))
