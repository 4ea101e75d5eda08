"""Starting, feeding and containing worker processes (parent side; stdlib and numpy only).

A `Worker` is one process running `kanalyze.dynamic.sandbox.worker` (forked by this
process's zygote, which has imported torch and triton already; a fresh
`python` process where there is none: see zygote_client.py) with:
a scratch working directory of its own, a scrubbed environment (HOME and
TMPDIR point into the scratch directory; only what Python, CUDA and Triton
need is passed on; for a candidate's worker, no folder or variable named after
kanalyze: disguise.py), resource limits and no network (applied by the worker to
itself before any problem or candidate code runs: see confine.py), stdin
closed, and stdout and stderr drained into a capped buffer (a candidate that
prints megabytes costs memory of at most `Limits.output_bytes`).  How each
worker was started goes into the run's environment record (`start` beside the
confinement); `KANALYZE_NO_ZYGOTE=1` makes every worker a fresh process.

`run_cases` runs a list of cases through workers of one role and returns an
`Outcome` per case, whatever happens: a case that hangs past its timeout, or
a worker that dies (a crash, `os._exit`, the OOM killer, a CUDA fault), is
recorded for that case, and the remaining cases go on in a fresh worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

import kanalyze
from kanalyze.dynamic.sandbox import cgroups, disguise, exits, extensions, mounts, namespaces, rundir, zygote_client

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kanalyze.__file__)))
BOOTSTRAP = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
             "from kanalyze.dynamic.sandbox.worker import main; sys.exit(main(ARGS))")

# Passed on to the worker as they are; everything else is dropped.
_KEEP = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
         "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
         # how CUDA C++ candidates are built, as the user set it up (extensions.py keys builds by them)
         "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
_KEEP_PREFIXES = ("NVIDIA_", "NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")


@dataclass
class Limits:
    case_seconds: float = 120.0        # one case, every run of it
    start_seconds: float = 120.0       # importing torch, triton and the candidate
    import_seconds: float = 30.0       # of that, the candidate's own import (its CUDA C++ build: more)
    memory_bytes: int | None = 4 * 2 ** 30   # address space, CPU runs only (a worker peaks near 1 GiB)
    file_bytes: int = 1 * 2 ** 30      # the candidate's worker: what it may write to one file
    output_bytes: int = 64 * 1024      # stdout/stderr kept per worker
    process_margin: int = 512
    namespaces: bool = True            # False: none for the candidate, as where the machine refuses them
    until: float | None = None         # time.perf_counter() by which every case ends (the audit's pair
                                       # limit): a candidate's still running then is cut (dispatch.py)

    def for_worker(self, mode: str, role: str = "candidate") -> dict:
        """The limits a worker applies to itself.  The reference worker runs the problem,
        not the candidate: its arrays (inputs near 2^31 elements, their float64 copies)
        are not held to the candidate's file-size limit, and it stays in kanalyze's PID
        and IPC namespaces, from which CUDA IPC reaches the candidate's (device_share.py).
        Every worker refuses new sockets, on a GPU once its device is open (confine.py).  The
        reference may use half the machine's memory on the CPU: a problem's unscaled weights (a
        list of layer sizes is no knob) and their float64 copy can need more than 4 GiB."""
        from kanalyze.dynamic.sandbox.confine import AFTER_DEVICE, NOW

        memory = self.memory_bytes if role == "candidate" else _reference_memory(self.memory_bytes)
        return {"memory_bytes": memory if mode == "cpu" else None, "candidate_memory_bytes": self.memory_bytes,
                "file_bytes": self.file_bytes if role == "candidate" else None,
                "process_margin": self.process_margin, "pid_namespace": role == "candidate",
                "ipc_namespace": role == "candidate", "deny_sockets": NOW if mode == "cpu" else AFTER_DEVICE,
                "namespaces": self.namespaces}


def _reference_memory(candidate_bytes: int | None) -> int | None:
    """The reference worker's limit on the CPU: a candidate's, or half the machine's memory."""
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None if candidate_bytes is None else max(candidate_bytes, machine // 2)


@dataclass
class Outcome:
    """What became of one case."""

    status: str                    # "done" | "timeout" | "crashed" | "not-started" | "violation"
    meta: dict = field(default_factory=dict)
    arrays: str | None = None      # the .npz the worker wrote
    inputs: str | None = None      # the reference's inputs and model state, apart (the candidate's share)
    detail: str = ""               # for anything but "done": what happened, in words
    output: str = ""               # the tail of the worker's stdout/stderr
    # Whose code was running when a worker timed out or ended: "candidate" (its import,
    # its model's construction, its call) or "kanalyze" (everything else).  Only the
    # candidate's failures can confirm a clause (DESIGN.md, "What a verdict must mean").
    blame: str = ""


class _Drain(threading.Thread):
    """Keeps the first and last bytes of a worker's output, counts the rest."""

    def __init__(self, stream, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.cap = stream, cap
        self.head, self.tail, self.total = b"", b"", 0

    def run(self) -> None:
        while True:
            chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
            if not chunk:
                return
            self.total += len(chunk)
            if len(self.head) < self.cap // 4:
                self.head += chunk[: self.cap // 4 - len(self.head)]
            self.tail = (self.tail + chunk)[-(self.cap - self.cap // 4):]

    def text(self) -> str:
        after_head = self.total - len(self.head)          # bytes that came after the head
        if after_head <= len(self.tail):                  # nothing was dropped
            data = self.head + (self.tail[-after_head:] if after_head else b"")
        else:
            dropped = after_head - len(self.tail)
            data = self.head + f"\n… {dropped} bytes left out …\n".encode() + self.tail
        return data.decode("utf-8", "replace")


def candidate_caches(env: dict[str, str], candidate: str | None, jit: str = "") -> dict[str, str]:
    """A candidate's own compile caches (Triton's kernel cache, kanalyze's and torch's CUDA C++
    build caches, the CUDA driver's JIT cache) in folders keyed by the candidate's source, so
    that what one candidate writes there (a cubin, a shared library) is never loaded by another,
    and the same source finds its builds again.  `jit` names JIT caches (Triton's, the driver's)
    apart: KernelBench's check compiles in its own, never loading what the gates compiled."""
    try:
        with open(candidate or "", "rb") as handle:
            key = hashlib.sha256(handle.read()).hexdigest()[:24]
    except OSError:
        key = "unreadable"
    jit_key = f"{key}-{jit}" if jit else key
    caches = os.path.dirname(extensions.cache_root())          # ~/.cache/kanalyze
    return {"TRITON_CACHE_DIR": os.path.join(caches, "triton", jit_key),
            extensions.ROOT_VARIABLE: os.path.join(extensions.cache_root(), key),
            "TORCH_EXTENSIONS_DIR": os.path.join(caches, "torch_extensions_default", key),
            "CUDA_CACHE_PATH": os.path.join(caches, "cuda_compute_cache", jit_key)}


def scrubbed_environment(scratch: str, mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _KEEP or k.startswith(_KEEP_PREFIXES)}
    home = os.path.expanduser("~")
    env.setdefault("TRITON_CACHE_DIR", os.path.join(home, ".triton", "cache"))
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(home, ".cache", "torch_extensions"))
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1", PATH=env.get("PATH", "/usr/bin:/bin"))
    # numpy's OpenBLAS starts one thread per core when imported: a zygote with threads
    # cannot fork workers (and the workers' numpy does no heavy work).
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if mode == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def candidate_environment(scratch: str, mode: str, candidate: str | None, jit: str = "") -> tuple[dict, dict]:
    """A candidate's process environment (a worker's, or the allclose check's cage) and its
    caches' real folders: the compile caches shown through a link in its scratch folder
    (disguise.py), no variable named after kanalyze (the extension builds' folder, which
    only kanalyze's builder reads, is handed over apart)."""
    env = scrubbed_environment(scratch, mode)
    caches = candidate_caches(env, candidate, jit)
    env.update(disguise.cache_view(scratch, {k: v for k, v in caches.items() if k != extensions.ROOT_VARIABLE}))
    return env, caches


# The longest status line a worker may send; the candidate shares the worker's process, so
# the parent reads that channel as it reads anything the candidate controls: bounded.
MAX_STATUS_LINE = 1 << 20


class WorkerGone(Exception):
    pass


class OutOfTime(WorkerGone):
    """A candidate's worker was stopped as it started because the time by which every case ends
    had come (`Limits.until`): kanalyze's limit, not the candidate's."""


class ProtocolViolation(Exception):
    """Something on a worker's status channel that kanalyze's worker code never sends:
    the candidate wrote to it (INT001)."""


class Worker:
    def __init__(self, role: str, mode: str, spec: dict, limits: Limits, scratch_root: str) -> None:
        namespaces.protect_this_process()   # before any worker runs: kanalyze's /proc files closed to it
        self._created = time.monotonic()
        self.role, self.mode, self.limits, self.spec = role, mode, limits, spec
        self.scratch = tempfile.mkdtemp(dir=scratch_root)   # a neutral name: the worker's cwd, HOME, TMPDIR
        spec_path = os.path.join(self.scratch, "spec.json")
        env, caches, shown = self._environment(spec)
        # A candidate's worker and all it starts share one cgroup (cgroups.py), which it joins first.
        self._cgroup = cgroups.create(os.path.basename(self.scratch),
                                      cgroups.memory_limit(mode, limits.memory_bytes),
                                      limits.process_margin) if role == "candidate" else None
        with open(spec_path, "w", encoding="utf-8") as handle:
            json.dump({**spec, **shown, "limits": {**limits.for_worker(mode, role), "files": self._view(spec, caches),
                                                   "cgroup": self._cgroup}}, handle)
        control_r, self._control_w = os.pipe()
        self._status_r, status_w = os.pipe()
        try:
            self.process = self._fork(spec_path, control_r, status_w, env)
            self.started_by = "forked from the zygote"
        except zygote_client.ZygoteUnavailable as exc:
            command, code = zygote_client.launcher(BOOTSTRAP, [role, mode, str(control_r), str(status_w), spec_path])
            try:
                self.process = subprocess.Popen(
                    command, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, pass_fds=(control_r, status_w, code), start_new_session=True)
            finally:
                os.close(code)
            self.started_by = f"fresh process ({exc})"
        finally:
            os.close(control_r)
            os.close(status_w)
        self.start_seconds = round(time.monotonic() - self._created, 3)   # a zygote's own start included
        self._drain = _Drain(self.process.stdout, limits.output_bytes)
        self._drain.start()
        self._buffer = b""
        self._closed = False
        self.ready: dict | None = None
        self.phase = "kanalyze"           # whose code the worker is running (its "phase" events)
        self._phase_since = time.monotonic()

    def _environment(self, spec: dict) -> tuple[dict[str, str], dict[str, str], dict]:
        """The worker's environment, a candidate's caches (the real folders) and what its spec
        adds.  A candidate is shown its compile caches through its scratch folder (disguise.py);
        its extension builds' folder comes through the spec rather than a variable named after
        kanalyze, by its real path (torch rebuilds an extension whose folder moved)."""
        if self.role != "candidate":
            return scrubbed_environment(self.scratch, self.mode), {}, {}
        env, caches = candidate_environment(self.scratch, self.mode, (spec.get("harness") or {}).get("candidate"))
        return env, caches, {"extensions_root": caches[extensions.ROOT_VARIABLE]}

    def _view(self, spec: dict, caches: dict[str, str]) -> dict | None:
        """What a candidate's worker sees of the files (mounts.py); the reference worker sees all."""
        if self.role != "candidate":
            return None
        harness = spec.get("harness") or {}
        return mounts.candidate_view(self.scratch, caches, spec.get("visible", []),
                                     [harness.get("candidate"), harness.get("problem")], self.mode)

    def _fork(self, spec_path: str, control_r: int, status_w: int, env: dict[str, str]):
        """The worker, forked by the zygote; its output comes through a pipe of ours."""
        output_r, output_w = os.pipe()
        stdout = os.fdopen(output_r, "rb", buffering=0)
        try:
            return zygote_client.fork_worker(
                self.mode, {"role": self.role, "spec_path": spec_path, "scratch": self.scratch},
                [control_r, status_w, output_w], stdout, env, self.limits.start_seconds)
        except BaseException:
            stdout.close()
            raise
        finally:
            os.close(output_w)

    def output(self) -> str:
        return self._drain.text()

    def next_event(self, timeout: float) -> dict | None:
        """The next status event, None on timeout; raises WorkerGone when the worker ended and
        ProtocolViolation on anything the worker's own code never writes.  "phase" events
        (whose code runs now) are consumed here: they set `self.phase`."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self._buffer:
                if len(self._buffer) > MAX_STATUS_LINE:
                    raise ProtocolViolation(f"a status line of over {MAX_STATUS_LINE} bytes")
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                readable, _, _ = select.select([self._status_r], [], [], min(left, 1.0))
                if not readable:
                    continue
                chunk = os.read(self._status_r, 65536)
                if not chunk:
                    raise WorkerGone(self._how_it_ended())
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            event = _parse_event(line)
            if event.get("event") != "phase":
                return event
            phase = event.get("phase") if event.get("phase") in ("candidate", "interpreter") else "kanalyze"
            if (phase == "kanalyze") != (self.phase == "kanalyze"):   # (a launch inside the candidate's
                self._phase_since = time.monotonic()                  # time does not restart its clock)
            self.phase = phase

    def wait_ready(self) -> dict:
        """The worker's `ready` message.  Its start has `start_seconds`; the candidate's own
        import, once the worker says it began, has `import_seconds` of that."""
        if self.ready is None:
            started = time.monotonic()
            until = (started + self.limits.until - time.perf_counter()   # (a candidate's worker only, as in dispatch)
                     if self.limits.until is not None and self.role == "candidate" else None)
            while True:
                deadline = started + self.limits.start_seconds
                if self.phase != "kanalyze":   # the candidate's import (a launch it makes there included)
                    deadline = min(deadline, self._phase_since + self.limits.import_seconds)
                if until is not None and until < deadline:   # the time every case ends by comes first
                    left = until - time.monotonic()
                    if left <= 0:
                        self.kill()
                        raise OutOfTime("the time by which every case ends came while the worker started")
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.kill()
                        if self.phase != "kanalyze":
                            raise WorkerGone(f"the candidate's import did not finish within "
                                             f"{self.limits.import_seconds:.0f} s")
                        raise WorkerGone(f"the worker did not start within {self.limits.start_seconds:.0f} s")
                event = self.next_event(min(left, 0.5))
                if event is not None:
                    break
            # How it was started goes into the run's environment record, beside the confinement.
            event["confinement"] = {**(event.get("confinement") or {}), "start": self.started_by}
            # Where the start went: the fork (with a zygote's own start), the worker's set-up,
            # the candidate's import, the device; `ready` is the whole, from this side.
            event["seconds"] = {**(event.get("seconds") if isinstance(event.get("seconds"), dict) else {}),
                                "fork": self.start_seconds, "ready": round(time.monotonic() - self._created, 3)}
            self.ready = event
        return self.ready

    def send(self, job: dict) -> None:
        try:
            os.write(self._control_w, (json.dumps(job) + "\n").encode())
        except OSError as exc:
            raise WorkerGone(self._how_it_ended()) from exc

    def _how_it_ended(self) -> str:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        # The traceback it printed as it ended may still be in the pipe: read it before naming the cause.
        self._drain.join(timeout=2)
        return exits.describe(code, self.output(), lost=getattr(self.process, "lost", False),
                              started=getattr(self, "ready", None) is not None)

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        cgroup, self._cgroup = self._cgroup, None
        cgroups.remove(cgroup)   # whatever the worker left in its cgroup is killed with it

    def close(self) -> None:
        """End the worker (it exits when its control pipe closes).  Safe to call twice:
        the pipe ends are closed once, since another thread may reuse their numbers."""
        if self._closed:
            return
        self._closed = True
        os.close(self._control_w)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        os.close(self._status_r)
        self._drain.join(timeout=2)


def prestart_zygote(mode: str, limits: Limits | None = None, wait: bool = True) -> str:
    """Start this process's zygote for `mode` now rather than on the first worker's request
    (a long-lived caller, or a benchmark that keeps the one-time start out of its timings).
    Returns how workers will start: "zygote" or "fresh process (why)".  `wait=False` returns
    at once: the zygote's imports overlap what the caller does next (`check --dynamic`'s static
    pass), and the first worker waits for them (or says why there is no zygote)."""
    scratch = rundir.scratch("tmp")
    try:
        zygote_client.start(mode, scrubbed_environment(scratch, mode),
                            (limits or Limits()).start_seconds if wait else None)
        return "zygote"
    except zygote_client.ZygoteUnavailable as exc:
        return f"fresh process ({exc})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


KNOWN_EVENTS = {"ready", "plan", "case", "fatal", "job-done", "phase", "inputs"}


def _parse_event(line: bytes) -> dict:
    """One status line as the worker's code writes it: a JSON object with a known "event"."""
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    if not isinstance(event, dict) or event.get("event") not in KNOWN_EVENTS:
        shown = line[:200].decode("utf-8", "replace")
        raise ProtocolViolation(f"an unknown status line: {shown!r}")
    return event


def new_scratch_root() -> str:
    return rundir.scratch("tmp")


def remove_scratch_root(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
