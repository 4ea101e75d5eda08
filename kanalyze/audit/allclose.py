"""KernelBench's own criterion, as KernelBench runs it: a fresh process imports the
problem and the candidate, seeds, and runs five trials of
`torch.allclose(reference, output, atol=1e-2, rtol=1e-2)` at the problem's own sizes.

    check(problem, candidate, device, timeout) -> {"verdict": ..., "detail": ..., "seconds": ...}

verdict: PASS (every trial close: KernelBench accepts), FAIL (a trial's values or
shape differ), ERROR (the candidate raised: KernelBench rejects), TIMEOUT, or
CRASHED (the process died without a verdict).  The run's own output goes nowhere
(a candidate may print gigabytes); the verdict comes back through a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from kanalyze.audit.child import die_with_parent, kill_group

TRIALS = 5
TOLERANCE = 1e-2


def _run(problem: str, candidate: str, device: str, out: str) -> None:
    """In the fresh process: import both, seed as KernelBench does, compare."""
    import importlib.util

    def load(path: str, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def verdict(name: str, detail: str) -> None:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"verdict": name, "detail": detail}, handle)

    import torch

    problem_module = load(problem, "problem")
    try:
        candidate_module = load(candidate, "candidate")
        torch.manual_seed(42)
        init = problem_module.get_init_inputs()
        torch.manual_seed(42)
        reference = problem_module.Model(*init).to(device)
        torch.manual_seed(42)
        model = candidate_module.ModelNew(*init).to(device)
        with torch.no_grad():
            for trial in range(TRIALS):
                torch.manual_seed(trial)
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem_module.get_inputs()]
                expected, observed = reference(*inputs), model(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                if not isinstance(observed, torch.Tensor) or observed.shape != expected.shape:
                    shape = tuple(observed.shape) if isinstance(observed, torch.Tensor) else type(observed).__name__
                    return verdict("FAIL", f"trial {trial}: output {shape}, expected shape {tuple(expected.shape)}")
                if not torch.allclose(expected, observed, atol=TOLERANCE, rtol=TOLERANCE):
                    error = (expected.double() - observed.double()).abs().max().item()
                    return verdict("FAIL", f"trial {trial}: max abs error {error:.3g} beyond atol=rtol={TOLERANCE}")
    except Exception as exc:  # the candidate's failure is KernelBench's rejection
        return verdict("ERROR", f"{type(exc).__name__}: {str(exc)[:300]}")
    return verdict("PASS", f"{TRIALS} trials within atol=rtol={TOLERANCE}")


def check(problem: str, candidate: str, device: str, timeout: float) -> dict:
    started = time.perf_counter()
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"        # Triton kernels run in its interpreter on the CPU
    with tempfile.TemporaryDirectory(prefix="kanalyze-allclose-") as folder:
        out = os.path.join(folder, "verdict.json")
        # A session of its own: at the time limit, or when this check ends, whatever the
        # candidate started ends with it (child.py: and it dies with this process).
        done = subprocess.Popen([sys.executable, "-m", "kanalyze.audit.allclose", problem, candidate, device, out],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env, cwd=folder, start_new_session=True)
        try:
            done.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            return {"verdict": "TIMEOUT", "detail": f"no verdict within {timeout:.0f} s",
                    "seconds": time.perf_counter() - started}
        finally:
            kill_group(done)
        try:
            with open(out, encoding="utf-8") as handle:
                result = json.load(handle)
        except (OSError, ValueError):
            result = {"verdict": "CRASHED", "detail": f"the process ended with status {done.returncode} "
                                                      "and no verdict (the problem failed to import, or it was killed)"}
    return {**result, "seconds": time.perf_counter() - started}


if __name__ == "__main__":
    die_with_parent()
    _run(*sys.argv[1:5])
