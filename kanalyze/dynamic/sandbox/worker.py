"""The worker process: where problem and candidate code runs, never in kanalyze's own.

Forked by the zygote (zygote.py), which has done `import_modules` once, or,
where there is no zygote, started by `process.py` as a fresh process:

    python -E -s -B -u -c LAUNCHER FD

where FD is a pipe that holds BOOTSTRAP with ARGS = [ROLE, MODE, CONTROL_FD, STATUS_FD,
SPEC.json] (zygote_client.launcher: nothing of kanalyze's on the command line).

ROLE is `reference` or `candidate`; MODE is `cpu` (Triton's interpreter, with
`TRITON_INTERPRET=1` already in the environment the parent gave it) or `cuda`.
A fresh worker applies its limits, then imports torch and triton; either way
`serve` then hides kanalyze from the candidate (candidate role: no module, file,
variable or frame named after it, disguise.py), installs the hooks and guards,
imports the candidate (candidate role), says `ready` on the status pipe, then
runs each job that the parent sends on the control pipe and reports each case
as it is done.
Case results go to files (`case-N.json` + the folder `case-N.arrays/`); the
status pipe only carries short JSON lines, among them `phase` events around every stretch of the
candidate's own code (import, model construction, call), so that the parent
blames a crash or a timeout on whoever was running.  The parent treats any line
it does not expect as the candidate's doing (a protocol violation, INT001).  Candidate output on stdout/stderr is the parent's to
capture and cap.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
import traceback

from kanalyze.dynamic.sandbox import disguise, sealed_io


def _send(status, **message) -> None:
    status.write(sealed_io.dumps(message) + "\n")   # (not `json`: the candidate's process may have replaced it)
    status.flush()


def phase_reporter(status):
    """`phase("candidate")` before the candidate's code runs, `phase("kanalyze")` after: the
    parent blames a crash or a timeout on whoever was running (process.py, `Outcome.blame`)."""
    return lambda name: _send(status, event="phase", phase=name)


def _interpreting_told(phase, report, env):
    """The phase reporter, and the launch counter told to say "interpreter" while a launch the
    candidate made runs under Triton's interpreter: a case out of time there is too slow to
    judge on the CPU, not a hang of the candidate's (results.py, `kanalyze_failure`)."""
    now = {"phase": "kanalyze"}

    def tracked(name: str) -> None:
        now["phase"] = name
        phase(name)

    def interpreting(running: bool) -> None:
        if now["phase"] == "candidate":
            report("interpreter" if running else "candidate")

    env.launches.interpreting = interpreting
    return tracked


def import_modules(mode: str) -> None:
    """The imports every worker needs (the zygote does these once for all its workers).

    Imports only: CUDA must not be initialised here, since the zygote forks
    workers after this and CUDA does not survive a fork."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401  (after TRITON_INTERPRET is set: the parent set it)

    from kanalyze.dynamic import cases
    from kanalyze.dynamic import environment
    from kanalyze.dynamic import gradients, integrity, kernel_call, loading  # noqa: F401  (all a worker imports)
    from kanalyze.dynamic.sandbox import device_share, execute, held, reference_side, transport  # noqa: F401

    if mode == "cpu":
        from kanalyze.dynamic import autotune_cpu, devicemap  # noqa: F401  (autotune_cpu: Environment's)
        from kanalyze.dynamic import interpreter  # noqa: F401
    else:
        from kanalyze.dynamic import autotune_pin  # noqa: F401  (Environment's, after kanalyze is hidden)


def main(argv: list[str]) -> int:
    """A fresh worker process: limits first (still single-threaded), then the imports, then `serve`."""
    role, mode, control_fd, status_fd, spec_path = argv
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    from kanalyze.dynamic.sandbox.confine import apply_limits

    confinement = apply_limits(spec.get("limits", {}))
    try:
        import_modules(mode)
    except BaseException as exc:
        with os.fdopen(int(status_fd), "w") as status:
            _send(status, event="ready", error=f"the worker could not start: {type(exc).__name__}: {exc}")
        return 3
    return serve(role, mode, int(control_fd), int(status_fd), spec_path, confinement=confinement)


def serve(role: str, mode: str, control_fd: int, status_fd: int, spec_path: str,
          confinement: dict | None = None) -> int:
    """Everything a worker does after its imports: limits (unless applied before the imports),
    device set-up, guards, the candidate's import, `ready`, then the job loop."""
    started = time.perf_counter()
    seconds: dict[str, float] = {}   # where the start went: set-up, the candidate's import, the device
    status = os.fdopen(status_fd, "w", buffering=1)
    control = os.fdopen(control_fd, "r")
    if role == "reference":   # where it is, should a job go unanswered (stacks.py)
        from kanalyze.dynamic.sandbox import stacks

        stacks.register()
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    from kanalyze.dynamic.sandbox.confine import apply_limits

    if confinement is None:
        confinement = apply_limits(spec.get("limits", {}))
    harness = spec["harness"]
    hiding = None
    try:
        import torch

        if mode != "cpu" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is visible to the worker")
        import triton  # noqa: F401

        from kanalyze.dynamic import cases as case_sizes
        from kanalyze.dynamic import loading, numerics
        from kanalyze.dynamic.environment import Environment
        from kanalyze.dynamic.sandbox import extensions

        if role == "candidate":   # kanalyze out of the candidate's sight, before it installs anything
            os.remove(spec_path)
            extensions.keep_root(spec.get("extensions_root"))
            hiding = disguise.hide()
            disguise.neutral_module_names(loading)
        if mode == "cpu":
            from kanalyze.dynamic import devicemap

            device_map = devicemap.install("cpu")
        policy = numerics.apply(mode != "cpu")   # the same on both sides, before any problem or candidate code
        env = Environment(mode)     # its watch starts from the policy (integrity.py)
    except BaseException as exc:
        _send(status, event="ready", error=f"the worker could not start: {type(exc).__name__}: {exc}")
        return 3
    try:
        return _start(role, mode, spec, harness, status, control, hiding, env, policy, seconds, started,
                      confinement, device_map if mode == "cpu" else None, case_sizes)
    except BaseException as exc:  # kanalyze's set-up failed (a device out of memory, say): say which way
        traceback.print_exc()
        _send(status, event="ready", error=f"the worker could not start: {type(exc).__name__}: {exc}")
        return 3


def _start(role, mode, spec, harness, status, control, hiding, env, policy, seconds, started, confinement,
           device_map, case_sizes) -> int:
    """The device, guards, the candidate's import and `ready`; then the job loop."""
    import torch

    from kanalyze.dynamic import loading, numerics
    from kanalyze.dynamic.sandbox.confine import deny_sockets_now, install_guards
    from kanalyze.dynamic.sandbox.execute import CandidateSide, describe_error
    from kanalyze.dynamic.sandbox.reference_side import ReferenceSide

    device = "cpu" if mode == "cpu" else "cuda"
    seconds["setup"] = round(time.perf_counter() - started, 3)
    opening = time.perf_counter()   # the device's name opens its context: a GPU's start-up cost
    device_name = torch.cuda.get_device_name(0) if mode == "cuda" else "Triton interpreter (CPU)"
    seconds["device"] = round(time.perf_counter() - opening, 3)
    deny_sockets_now(spec.get("limits", {}), confinement)   # a GPU's driver has started: no socket from here
    install_guards()
    import_error = None
    phase = phase_reporter(status) if hiding is None else hiding.around(phase_reporter(status))
    if role == "candidate" and mode == "cpu":
        phase = _interpreting_told(phase, phase_reporter(status), env)
    if role == "candidate":
        phase("candidate")
        importing = time.perf_counter()
        try:
            env.watch.watch_candidate(spec.get("candidate_file") or harness["candidate"])
            module = loading.load_candidate(spec.get("candidate_file") or harness["candidate"])
        except BaseException as exc:
            import_error = describe_error(exc)
        seconds["import"] = round(time.perf_counter() - importing, 3)
        phase("kanalyze")
        side = CandidateSide(harness, device, None if import_error else module, env, phase,
                             device_share=spec.get("device_share", True))
    else:
        # What a candidate's worker is given of memory: its limit on the CPU (the machine's without
        # one), the device's on a GPU (causes.py weighs a candidate's shortage against it).
        budget = (torch.cuda.get_device_properties(0).total_memory if mode == "cuda" else
                  spec.get("limits", {}).get("candidate_memory_bytes")
                  or os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        side = ReferenceSide(harness, device, env.op_recorder, budget, deliver=spec.get("deliver_inputs", False),
                             hold=spec.get("judge_held", False))
    in_force = numerics.settings()   # what the candidate's import left, if it changed anything
    _send(status, event="ready", error=None, import_error=import_error, confinement=confinement,
          numerics={"policy": policy, **({"changed_by_import": in_force} if in_force != policy else {})},
          versions={"torch": torch.__version__, "triton": sys.modules["triton"].__version__, "device": device_name},
          seconds=seconds)
    try:
        return _serve_jobs(role, control, status, side, harness, import_error, device_map, case_sizes)
    except BaseException:  # kanalyze's own code failed: its traceback is the parent's to show
        traceback.print_exc()
        sys.stderr.flush()
        return 70


def _reference_case(side, case: dict, out_base: str, inputs: str | None) -> dict:
    """The reference's result for one case.  Where kanalyze's own steps run short (memory for
    the copies it saves, disk for its files: a case at a size past what the machine holds), that
    case alone is kanalyze's failure (`internal`); the worker goes on with the others."""
    from kanalyze.dynamic.sandbox.execute import describe_error

    try:
        return side.run(case, out_base, inputs)
    except (MemoryError, OSError) as exc:   # (the problem's own failures are its answer: side.run)
        return {"status": "internal",
                "error": f"kanalyze's reference worker could not keep this case's arrays: {describe_error(exc)}"}


def _serve_jobs(role, control, status, side, harness, import_error, device_map, case_sizes) -> int:
    """The job loop.  A candidate's worker waits after each case until the parent has read it
    (`ack`): nothing the candidate leaves running can rewrite a case's arrays before then."""
    from kanalyze.dynamic.sandbox import held
    from kanalyze.dynamic.sandbox.transport import ArrayFolder

    for line in control:
        job = json.loads(line)
        if job["kind"] == "plan":
            _send(status, event="plan", **_plan(job, harness, device_map, case_sizes))
            continue
        if job["kind"] == "release":   # the reference's withheld outputs, now that no candidate runs
            memory = job.get("memory") if isinstance(job.get("memory"), str) else None
            lost, handed = side.release(job.get("export", False), memory)
            _send(status, event="job-done", job=job.get("id"), lost=lost, **handed)
            continue
        if job["kind"] == "judge" and role == "reference":   # a summary of held arrays (held.py)
            _send(status, event="job-done", job=job.get("id"), answer=held.answer(side.store, job["request"]))
            continue
        if job["kind"] == "adopt" and role == "reference":   # arrays another worker held or saved (held.py)
            _send(status, event="job-done", job=job.get("id"),
                  **held.adopt(side.store, job.get("exported"), job.get("saved"), job["max_bytes"],
                               map_exported=job.get("map") is True))
            continue
        if job["kind"] == "float64" and role == "reference":   # the baseline's, once the candidate ran there
            later = {str(index): side.float64_later(os.path.join(job["out"], f"case-{index}"))
                     for index in job["indices"]}
            _send(status, event="job-done", job=job.get("id"), results=later)
            continue
        if job["kind"] == "fill" and role == "reference":   # a case's inputs for the candidate (delivery.py)
            error = side.fill(job["deliver"], job.get("tensors"), job.get("folder"))
            _send(status, event="job-done", job=job.get("id"), error=error)
            continue
        if job["kind"] == "ingest" and role == "reference":   # a candidate's device arrays (CUDA IPC)
            from kanalyze.dynamic.sandbox.device_share import save_shared

            error = save_shared(job["tensors"], job["out"], job["max_bytes"])
            _send(status, event="job-done", job=job.get("id"), error=error)
            continue
        for index, case in zip(job["indices"], job["cases"]):
            out_base = os.path.join(job["out"], f"case-{index}")
            if role == "reference":
                inputs = job.get("inputs_out")   # the folder a candidate's worker is shown (mounts.py)
                inputs = inputs and os.path.join(inputs, f"job-{job.get('id')}-case-{index}")
                result = _reference_case(side, case, out_base, inputs)
            elif import_error:
                result = {"status": "error", "error": f"the candidate does not import: {import_error}", "runs": []}
            elif case.get("call"):  # a kernel harness: no reference
                result = side.run_call(case, out_base)
            else:
                reference = job["references"][str(index)]
                side.ask_inputs = functools.partial(_ask_inputs, status, control, job.get("id"), index)
                result = side.run(case, reference["meta"], ArrayFolder(reference["arrays"]), out_base)
            sealed_io.write_text(out_base + ".json", sealed_io.dumps(result))
            _send(status, event="case", index=index, job=job.get("id"))
            if result.get("fatal"):
                _send(status, event="fatal", index=index, job=job.get("id"))
                return 4
            if role == "candidate" and job.get("ack"):
                reply = json.loads(control.readline() or "{}")
                if reply.get("kind") != "ack" or reply.get("index") != index:
                    return 0   # the parent ended the job
        _send(status, event="job-done", job=job.get("id"))
    return 0


def _ask_inputs(status, control, job, index: int, what: str, handles: dict | None) -> dict:
    """Ask the parent for the case's inputs or its model's state (`what`, delivery.py): into the
    device buffers of `handles`, else into a folder its reply names; its reply, or why there is none."""
    _send(status, event="inputs", job=job, index=index, what=what, tensors=handles)
    reply = json.loads(control.readline() or "{}")
    if reply.get("kind") != "filled" or reply.get("index") != index:
        return {"error": "the parent ended the job before the inputs came"}
    return reply


def _plan(job: dict, harness: dict, device_map, case_sizes) -> dict:
    """The knobs scaled down until the inputs hold at most `max_numel` elements (None: the
    problem's own sizes, as on a GPU), the inputs' element count there, and its growth in each
    knob (planning.py).  The inputs' sizes come from meta tensors: nothing is allocated or
    computed."""
    import torch

    from kanalyze.dynamic.loading import Problem

    @contextlib.contextmanager
    def on_meta():
        """The problem's tensors made on the meta device: shapes only, nothing allocated."""
        if device_map is not None:
            device_map.target = "meta"
        try:
            with torch.device("meta"), torch.no_grad():
                yield
        finally:
            if device_map is not None:
                device_map.target = "cpu"

    def numels_of(sizes) -> list[int] | None:
        try:
            with on_meta():
                values = Problem(harness, sizes, job.get("dtype")).inputs()
        except BaseException:
            return None
        return [v.numel() for v in values if isinstance(v, torch.Tensor)]

    def numel_of(sizes):
        numels = numels_of(sizes)
        return None if numels is None else sum(numels)

    def accepts(sizes) -> bool:
        """Whether the reference runs at these sizes: its model built and called on meta tensors."""
        try:
            with on_meta():
                problem = Problem(harness, sizes, job.get("dtype"))
                problem.model(problem.init_inputs())(*problem.inputs())
        except BaseException:
            return False
        return True

    if job["max_numel"] is None:   # a GPU: the problem's own sizes
        sizes = dict(job["knobs"])
    else:
        sizes = case_sizes.scale_down(job["knobs"], numel_of, job["max_numel"], accepts)
    numels = numels_of(sizes) or []
    inputs = [{"numel": n, "growth": {}} for n in numels]
    for name, value in sizes.items():   # each knob doubled: how each input's count grows in it
        doubled = numels_of({**sizes, name: 2 * value}) if value > 0 else None
        if doubled is None or len(doubled) != len(numels):
            continue
        for tensor, n, n2 in zip(inputs, numels, doubled):
            if n > 0 and n2 > 0:
                tensor["growth"][name] = math.log2(n2 / n)
    return {"sizes": sizes, "inputs": inputs}


disguise.rename_own_code(globals())   # its frames are below the candidate's: neutral from the start

if __name__ == "__main__":  # pragma: no cover - started through sandbox.BOOTSTRAP
    sys.exit(main(sys.argv[1:]))
