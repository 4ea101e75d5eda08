"""The zygote: a process that has imported torch and triton once and forks one worker per request.

Started by `zygote_client.py` as

    python -E -s -B -u -c LAUNCHER FD

(FD: a pipe that holds BOOTSTRAP with ARGS = [MODE, SOCKET_FD]; zygote_client.launcher)

with the scrubbed environment a worker of MODE gets (for "cpu",
`TRITON_INTERPRET=1` is set before triton is imported).  Before any import it
applies what must be done while the process is still single-threaded (a
network namespace with no interfaces, no core files), makes itself
non-dumpable (a worker cannot open its /proc files), and finds what every
worker it forks inherits (confine.py): the allowed tools' real paths, and
whether a PID namespace can be made here; then it imports numpy,
torch, triton and the worker's modules, checks that CUDA was not initialised
(forking after CUDA initialisation breaks CUDA in the child), says so on the
socket, and serves requests.

A request (one SOCK_SEQPACKET message) carries the worker's control, status
and output pipe ends as file descriptors; the zygote forks, answers with the
child's pid, and reports each child's exit status when it reaps it.  The
child does what a fresh worker does after its imports (`worker.serve`): new
session, output into the parent's capped pipe, every other descriptor closed
(the zygote's socket above all), its own scratch directory and environment,
the per-worker limits and namespaces (its own PID namespace: the pid the
zygote reports is the process outside it, which ends as the worker does),
guards, the candidate's import, the job loop; then it
ends with `os._exit`, never returning into the zygote's loop.

Its own code and the worker's carry neutral file names from import on (their
frames sit below every candidate's: disguise.py).

The zygote never runs problem or candidate code, so no candidate's state can
reach another candidate's worker through it.  When its socket closes (the
kanalyze process ended or shut it down) it kills the workers still running
and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import tempfile
import time
import traceback

from kanalyze.dynamic.sandbox import disguise

MAX_MESSAGE = 1 << 20


def _send(sock: socket.socket, **message) -> None:
    sock.send(json.dumps(message).encode())


def _import_worker_modules(mode: str) -> dict:
    """The imports every worker shares, and on the CPU what torch imports lazily on first
    use that a worker would otherwise pay for each time (the reference worker's size plan
    scales the knobs on the meta device, whose first use of some operations imports
    torch._dynamo: 1.5-2.5 s; on a GPU the problem's own sizes run, and nothing uses the
    meta device).  Nothing here may initialise CUDA or start a thread."""
    from kanalyze.dynamic.sandbox.worker import import_modules

    started = time.perf_counter()
    import_modules(mode)
    torch, triton = sys.modules["torch"], sys.modules["triton"]
    imported = time.perf_counter()
    if mode == "cpu":
        import torch._dynamo  # noqa: F401

        with torch.device("meta"):
            x = torch.ones(4, 4)
            torch.softmax((x - x) ** 2 @ x, -1).sum().mean()
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised while importing; workers cannot be forked from here")
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise RuntimeError(f"{threads} threads after importing; forking would copy only one of them")
    warmed = time.perf_counter()
    if mode == "cuda":
        _check_cuda_after_fork()
    seconds = {"imports": imported - started, "meta": warmed - imported, "cuda_check": time.perf_counter() - warmed}
    return {"torch": torch.__version__, "triton": triton.__version__}, {k: round(v, 3) for k, v in seconds.items()}


def _check_cuda_after_fork() -> None:
    """Fork once and use the device in the child: CUDA breaks in children of a process
    that initialised it, and an import that did so (cuInit) need not tell torch."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            torch.empty(1, device="cuda").fill_(1)
            torch.cuda.synchronize()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("a worker forked from here cannot use the CUDA device (was CUDA initialised while "
                           "importing, or is no device visible?)")


def _child(request: dict, fds: list[int], sock: socket.socket) -> int:
    """In the forked child: become a worker (see `worker.serve`)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control_fd, status_fd, output_fd = fds
    try:
        os.setsid()  # its own process group: the parent kills it and whatever it starts together
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        sock.detach()  # closed below with every other descriptor the zygote held
        keep = {0, 1, 2, control_fd, status_fd}
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        os.chdir(request["scratch"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # recomputed from the new TMPDIR on first use
    except BaseException as exc:
        with os.fdopen(status_fd, "w") as status:
            status.write(json.dumps({"event": "ready", "error": f"the forked worker could not start: "
                                     f"{type(exc).__name__}: {exc}"}) + "\n")
        return 3
    from kanalyze.dynamic.sandbox.worker import serve

    return serve(request["role"], request["mode"], control_fd, status_fd, request["spec_path"])


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        try:
            _send(sock, event="exited", pid=pid, status=status)
        except OSError:
            pass


def _kill_all(children: set[int]) -> None:
    for pid in children:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
                break
            except (ProcessLookupError, PermissionError):
                continue
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def main(argv: list[str]) -> int:
    mode, sock_fd = argv[0], int(argv[1])
    sock = socket.socket(fileno=sock_fd)
    from kanalyze.dynamic.sandbox.confine import confine_zygote

    try:
        confinement = confine_zygote()
        versions, seconds = _import_worker_modules(mode)
    except BaseException as exc:
        _send(sock, event="ready", error=f"{type(exc).__name__}: {exc}")
        return 3
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, event="ready", error=None, pid=os.getpid(), versions=versions, confinement=confinement,
          seconds=seconds)
    children: set[int] = set()
    try:
        while True:
            readable, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in readable:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                _reap(sock, children)
            if sock not in readable:
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
            except OSError:
                return 0
            if not data:
                return 0  # the kanalyze process is gone or shut us down
            request = json.loads(data)
            if len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                _send(sock, event="forked", id=request.get("id"), error="the request did not carry 3 descriptors")
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                pid, error = None, f"fork failed: {exc}"
            if pid == 0:
                code = 70
                try:
                    code = _child(request, fds, sock)
                except BaseException:   # on the worker's output: the parent names it (exits.py)
                    traceback.print_exc()
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            for fd in fds:
                os.close(fd)
            if pid is None:
                _send(sock, event="forked", id=request.get("id"), error=error)
                continue
            children.add(pid)
            _send(sock, event="forked", id=request.get("id"), pid=pid)
            _reap(sock, children)
    finally:
        _kill_all(children)


disguise.rename_own_code(globals())   # its frames are below every candidate's: neutral from the start

if __name__ == "__main__":  # pragma: no cover - started through zygote_client.BOOTSTRAP
    sys.exit(main(sys.argv[1:]))
