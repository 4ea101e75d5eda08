"""KernelBench's own criterion, as KernelBench runs it: a fresh process imports the
problem and the candidate, seeds, and runs five trials of
`torch.allclose(reference, output, atol=1e-2, rtol=1e-2)` at the problem's own sizes.

    check(problem, candidate, device, timeout) -> {"verdict", "detail", "contained", "seconds"}

verdict: PASS (every trial close: KernelBench accepts), FAIL (a trial's values or
shape differ), ERROR (the candidate raised: KernelBench rejects), TIMEOUT, CRASHED
(the process died without a verdict), or UNAVAILABLE (the problem itself could not be
run: its module, its reference model or the device failed before the candidate was
imported; the check says nothing of the candidate then).  The run's own output goes nowhere
(a candidate may print gigabytes).

The process is confined as a candidate's worker is (sandbox/cage.py).  It is the
candidate's process, and the check's own code shares it, as KernelBench's does: the
verdict is KernelBench's, exactly as trustworthy.  A candidate that patches
`torch.allclose` or writes the verdict file fools this check as it fools KernelBench;
none of kanalyze's verdicts rests on it (the audit reports it beside them).  What the
candidate cannot do from here is what it cannot do from a worker: reach kanalyze, the
host, or anything that outlives the check.  Before the problem and the candidate are
imported, the process sends what held of its confinement through a pipe (`contained`:
the protections it ran without, containment.gaps; empty when all held), then says there
when the candidate's import begins and ends, and closes it: the import has the gates' limit
(30 s; a CUDA C++ build at import, theirs), so a candidate that sleeps there is a TIMEOUT
that says so, not a check held for the pair's whole time.  The verdict comes back through
a file in its scratch folder, read bounded and checked.  A CUDA C++ candidate's extension
is built where the gates' workers build that candidate's (sandbox/extensions.py: keyed by
everything the binary depends on), so the check loads the gates' build instead of compiling
the same source again.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time

from kanalyze.audit.child import die_with_parent, kill_group

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOTSTRAP = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
             "from kanalyze.audit.allclose import main; main(sys.argv[1:])")
VERDICTS = ("PASS", "FAIL", "ERROR", "UNAVAILABLE")
MAX_VERDICT_BYTES = 64 * 1024     # what the parent reads of the verdict file (the candidate can write it)
TRIALS = 5
TOLERANCE = 1e-2


def _run(problem: str, candidate: str, device: str, out: str, phase=lambda name: None, opened=lambda: None) -> None:
    """In the caged process: import both, seed as KernelBench does, compare.  `phase` is told
    when the candidate's import begins and ends (the parent's import limit); `opened` is
    called once the problem runs and the device is open, before the candidate's import."""
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

    try:   # the problem and the device first: their failure is the check's, not the candidate's
        problem_module = load(problem, "problem")
        torch.manual_seed(42)
        init = problem_module.get_init_inputs()
        torch.manual_seed(42)
        reference = problem_module.Model(*init).to(device)
        torch.empty(1, device=device)   # the device itself (a model without parameters never touches it)
        opened()
    except Exception as exc:
        return verdict("UNAVAILABLE", f"the check could not run the problem: {type(exc).__name__}: {str(exc)[:300]}")
    phase("importing")
    try:
        candidate_module = load(candidate, "candidate")
        phase("imported")
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


def check(problem: str, candidate: str, device: str, timeout: float, share_builds: bool = True) -> dict:
    """`share_builds`: a CUDA C++ extension is built in the gates' build cache (False: torch's own
    build folder, as KernelBench builds it; a benchmark timing KernelBench's check wants that)."""
    from kanalyze.dynamic.sandbox.cage import Cage

    started = time.perf_counter()
    problem, candidate = os.path.abspath(problem), os.path.abspath(candidate)
    cage = Cage.build(device, candidate, problem)
    status_r, status_w = os.pipe()
    try:
        with open(os.path.join(cage.scratch, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"limits": cage.limits, "extensions_root": cage.extensions_root if share_builds else None},
                      handle)
        # A session of its own: at the time limit, or when this check ends, whatever the
        # candidate started ends with it (child.py: and it dies with this process).
        try:
            done = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, problem, candidate, device, str(os.getpid()),
                                     str(status_w)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, pass_fds=(status_w,), env=cage.env, cwd=cage.scratch,
                                    start_new_session=True)
        finally:
            os.close(status_w)
        status = _Status(status_r)
        deadline = time.monotonic() + max(timeout, 1.0)
        result = None
        if status.until(b"importing", deadline, done) == "seen":   # the candidate's import has a limit of its own
            limit = _import_seconds(candidate)
            if status.until(b"imported", min(deadline, time.monotonic() + limit), done) == "late" \
                    and time.monotonic() < deadline:
                result = {"verdict": "TIMEOUT", "detail": f"the candidate's import did not finish within {limit:.0f} s"}
        try:
            if result is None:
                done.wait(timeout=max(deadline - time.monotonic(), 0.1))
                result = _verdict(os.path.join(cage.scratch, "verdict.json"), done.returncode)
        except subprocess.TimeoutExpired:
            result = {"verdict": "TIMEOUT", "detail": f"no verdict within {timeout:.0f} s"}
        finally:
            kill_group(done)
        result["contained"] = _gaps(status.record())
    finally:
        os.close(status_r)
        cage.close()
    return {**result, "seconds": time.perf_counter() - started}


def _verdict(path: str, code: int) -> dict:
    """The verdict file, as the candidate may have left it: a regular file (not a link, not a
    FIFO that would block this read), its first 64 KiB, one of the verdicts KernelBench gives."""
    crashed = {"verdict": "CRASHED", "detail": f"the process {_ended(code)} and left no verdict "
                                               "(the problem failed to import, or it was killed)"}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return crashed
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {**crashed, "detail": "the verdict file is not a regular file"}
        data = os.read(fd, MAX_VERDICT_BYTES + 1)
    finally:
        os.close(fd)
    try:
        result = json.loads(data) if len(data) <= MAX_VERDICT_BYTES else None
    except ValueError:
        result = None
    if not (isinstance(result, dict) and result.get("verdict") in VERDICTS and isinstance(result.get("detail"), str)):
        return {**crashed, "detail": "the verdict file does not hold a verdict"}
    return {"verdict": result["verdict"], "detail": result["detail"][:500]}


def _ended(code: int) -> str:
    from kanalyze.dynamic.sandbox.exits import signal_words

    return f"died of {signal_words(code)}" if code is not None and code < 0 else f"ended with status {code}"


class _Status:
    """The caged process's status pipe: its confinement record (lines written before any
    candidate code), then `importing` and `imported` around the candidate's import.  The
    candidate can write there too while it imports: what it writes is read bounded, and the
    most it gains is to end its own import limit early (the check's time limit still holds)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.data, self.closed = fd, b"", False

    def _read(self, seconds: float) -> None:
        if self.closed or len(self.data) > MAX_VERDICT_BYTES or not select.select([self.fd], [], [], seconds)[0]:
            return
        chunk = os.read(self.fd, 65536)
        self.data += chunk
        self.closed = not chunk

    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")[:-1]

    def until(self, line: bytes, deadline: float, process) -> str:
        """"seen" when `line` came before `deadline`; "late" when the deadline passed first;
        "ended" when the process ended, or closed the pipe, first."""
        while line not in self.lines():
            if self.closed or len(self.data) > MAX_VERDICT_BYTES or process.poll() is not None:
                self._read(0)
                return "seen" if line in self.lines() else "ended"
            left = deadline - time.monotonic()
            if left <= 0:
                return "late"
            self._read(min(left, 0.5))
        return "seen"

    def record(self) -> dict | None:
        """What the process said of its confinement: its first line, updated by the lines it
        wrote before `importing` (the socket filter, on a GPU once the device is open)."""
        self._read(0)
        lines = self.lines()
        lines = lines[:lines.index(b"importing")] if b"importing" in lines else lines[:1]
        record = None
        for line in lines:
            try:
                said = json.loads(line)
            except ValueError:
                return None
            if not isinstance(said, dict):
                return None
            record = {**(record or {}), **said}
        return record


def _import_seconds(candidate: str) -> float:
    """The candidate's import limit: the gates' (a CUDA C++ build at import: the gates' build time)."""
    from kanalyze.dynamic.runner import BUILD_SECONDS
    from kanalyze.dynamic.sandbox import extensions
    from kanalyze.dynamic.sandbox.process import Limits

    return BUILD_SECONDS if extensions.builds_at_import(candidate) else Limits().import_seconds


def _gaps(record: dict | None) -> list[str]:
    from kanalyze.dynamic.containment import gaps

    return gaps(record) if record else ["no record of its confinement: the process ended before it was made"]


def main(argv: list[str]) -> None:
    """The caged process: end with the caller, confine itself (still single-threaded), say
    what held, then run KernelBench's trials, saying when the candidate's import begins and ends."""
    problem, candidate, device, parent, status_fd = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    end_with(parent)
    with open("spec.json", encoding="utf-8") as handle:
        spec = json.load(handle)
    os.unlink("spec.json")
    from kanalyze.dynamic.sandbox import confine, extensions

    applied = confine.apply_limits(spec["limits"])   # returns in the caged process (namespaces.py)
    os.chdir(os.getcwd())   # the scratch folder as its file view shows it (bound back writable)
    die_with_parent()
    os.write(status_fd, json.dumps(applied, default=str).encode() + b"\n")
    importlib.import_module("torch")   # before the guards, as in a worker
    if spec.get("extensions_root"):   # the gates' builds of this candidate, shared
        extensions.keep_root(spec["extensions_root"])
        if extensions.builds_at_import(candidate):
            extensions.install()
    confine.install_guards()

    def opened() -> None:   # a GPU's driver has started: the socket filter, and what held, said
        confined: dict = {}
        confine.deny_sockets_now(spec["limits"], confined)
        if confined:
            os.write(status_fd, json.dumps(confined).encode() + b"\n")

    def phase(name: str) -> None:
        try:
            os.write(status_fd, name.encode() + b"\n")
            if name == "imported":
                os.close(status_fd)
        except OSError:   # the candidate closed it during its import: the parent's limit stands
            pass

    _run(problem, candidate, device, os.path.abspath("verdict.json"), phase, opened)


def end_with(parent: int) -> None:
    """SIGKILL when the caller's thread ends; gone at once if the caller already is."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
