"""The zygotes of this kanalyze process (parent side; stdlib only): one per device mode.

Starting a worker as a fresh process costs its imports (torch, triton: about
2 s of CPU) every time; a zygote (zygote.py) pays them once and forks a
worker per request in milliseconds.  A zygote is started on first need and
lives as long as this process (the LSP and `check --dynamic` over many files
reuse it); it is shut down at exit, and dies by itself when this process
does (its socket closes).

`fork_worker` raises `ZygoteUnavailable` (with the reason) whenever there is
no zygote to ask: `KANALYZE_NO_ZYGOTE=1` is set, it could not start, or it
died too often; the caller then starts a fresh process and says why in the
run's environment record.  A zygote that dies is restarted on the next
request, until it has died `MAX_DEATHS` times.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import kanalyze
from kanalyze.dynamic.sandbox import rundir

DISABLE = "KANALYZE_NO_ZYGOTE"
MAX_DEATHS = 3
FORK_SECONDS = 30.0
MAX_MESSAGE = 1 << 20
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kanalyze.__file__)))
BOOTSTRAP = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
             "from kanalyze.dynamic.sandbox.zygote import main; sys.exit(main(ARGS))")
# The command line a zygote or a fresh worker is started with names nothing of kanalyze's (a
# candidate reads /proc/self/cmdline, and a forked worker's is its zygote's): the code and its
# arguments (`ARGS`) come through a pipe whose read end is the one argument (`launcher`).
LAUNCHER = "import os, sys; exec(os.read(int(sys.argv[1]), 1 << 20))"


def launcher(bootstrap: str, args: list[str]) -> tuple[list[str], int]:
    """(the `python` command line, the pipe's read end to pass to it) that runs `bootstrap`
    with `ARGS` = `args`; the caller closes the read end once the process has started."""
    read, write = os.pipe()
    code = f"import os as _os; _os.close({read}); del _os\nARGS = {args!r}\n{bootstrap}\n"
    try:
        os.write(write, code.encode())
    finally:
        os.close(write)
    return [sys.executable, "-E", "-s", "-B", "-u", "-c", LAUNCHER, str(read)], read
# Set per worker after the fork, and read only after it; every other variable must match
# what the zygote imported with (another value starts another zygote).
PER_WORKER = ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH")


class ZygoteUnavailable(Exception):
    pass


def _imported_with(env: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER))


class ForkedProcess:
    """A worker the zygote forked, with the part of `subprocess.Popen` that `sandbox.Worker` uses.

    It is the zygote's child, not ours: its exit status comes from the zygote.
    `lost` is set when the zygote died before reporting it."""

    def __init__(self, zygote: "Zygote", pid: int, stdout) -> None:
        self._zygote, self.pid, self.stdout = zygote, pid, stdout
        self.returncode: int | None = None
        self.lost = False

    def poll(self) -> int | None:
        if self.returncode is None and not self.lost:
            status = self._zygote.exit_status(self.pid)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif self._zygote.dead and not _running(self.pid):
                self.lost = True
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and not self.lost:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("worker", timeout)
            self._zygote.wait_for_exit(min(left, 0.1) if left is not None else 0.1)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None and not self.lost:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a child of someone else: we cannot wait for it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Zygote:
    """One zygote process and the socket to it."""

    def __init__(self, mode: str, env: dict[str, str]) -> None:
        """Start the zygote's process; `await_ready` waits for its imports (zygote.py)."""
        self.mode, self.imported_with = mode, _imported_with(env)
        self.ready = False
        self.home = rundir.scratch(f"zygote-{mode}-")
        self.log = os.path.join(self.home, "zygote.log")
        self.dead: str | None = None
        self._ids = itertools.count(1)
        self._request_lock = threading.Lock()     # one request in flight: the zygote answers in order
        self._changed = threading.Condition()
        self._replies: dict[int, dict] = {}
        self._exits: dict[int, int] = {}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.started_at = time.monotonic()
        command, code = launcher(BOOTSTRAP, [mode, str(theirs.fileno())])
        try:
            with open(self.log, "wb") as log:
                self.process = subprocess.Popen(
                    command, cwd=self.home, env={**env, "HOME": self.home, "TMPDIR": self.home},
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(), code), start_new_session=True)
        except OSError as exc:
            ours.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise ZygoteUnavailable(f"the {mode} zygote could not start: {exc}") from exc
        finally:
            theirs.close()
            os.close(code)
        self.sock = ours

    def await_ready(self, start_seconds: float) -> None:
        """Wait for the zygote's `ready` (its imports done); raises ZygoteUnavailable if it fails."""
        if self.ready:
            return
        try:
            ready = self._first_message(start_seconds)
        except (OSError, ValueError) as exc:
            ready = {"error": f"{type(exc).__name__}: {exc}"}
        if ready.get("error"):
            self.shutdown()
            raise ZygoteUnavailable(f"the {self.mode} zygote could not start: {ready['error']}")
        # Where its start went: its imports, the meta device's warm-up, the fork check; `wall` from here.
        seconds = ready.get("seconds") if isinstance(ready.get("seconds"), dict) else {}
        self.seconds = {**seconds, "wall": round(time.monotonic() - self.started_at, 3)}
        self.ready = True
        threading.Thread(target=self._read, name=f"kanalyze-zygote-{self.mode}", daemon=True).start()

    def _first_message(self, timeout: float) -> dict:
        readable, _, _ = select.select([self.sock], [], [], timeout)
        data = self.sock.recv(MAX_MESSAGE) if readable else None
        if not data:
            why = f"did not answer within {timeout:.0f} s" if data is None else "exited"
            return {"error": f"the zygote {why}{self._log_tail()}"}
        return json.loads(data)

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as handle:
                text = handle.read()[-600:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f": {text}" if text else ""

    def _read(self) -> None:
        """Replies to requests and exit statuses of forked workers, until the zygote ends."""
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                try:
                    code = self.process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                with self._changed:
                    self.dead = "the zygote stopped answering" if code is None else \
                        f"the zygote ended ({_describe_exit(code)})"
                    self._changed.notify_all()
                return
            try:
                message = json.loads(data)
            except ValueError:
                message = {"event": "garbled"}
            with self._changed:
                if message.get("event") == "forked":
                    self._replies[message.get("id")] = message
                elif message.get("event") == "exited":
                    self._exits[message["pid"]] = message["status"]
                self._changed.notify_all()

    def fork(self, request: dict, fds: list[int], stdout) -> ForkedProcess:
        with self._request_lock:
            if self.dead:
                raise ZygoteUnavailable(self.dead)
            request_id = next(self._ids)
            try:
                socket.send_fds(self.sock, [json.dumps({**request, "id": request_id}).encode()], fds)
            except OSError as exc:
                self.dead = self.dead or f"the zygote does not take requests: {exc}"
                raise ZygoteUnavailable(self.dead) from exc
            deadline = time.monotonic() + FORK_SECONDS
            with self._changed:
                while request_id not in self._replies and not self.dead:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.dead = f"the zygote did not answer within {FORK_SECONDS:.0f} s"
                        break
                    self._changed.wait(left)
                reply = self._replies.pop(request_id, None)
        if reply is None:
            self.shutdown()
            raise ZygoteUnavailable(self.dead or "the zygote did not answer")
        if reply.get("error"):
            raise ZygoteUnavailable(f"the zygote could not fork: {reply['error']}")
        return ForkedProcess(self, reply["pid"], stdout)

    def exit_status(self, pid: int) -> int | None:
        """The worker's wait status, handed out once (its ForkedProcess keeps it)."""
        with self._changed:
            return self._exits.pop(pid, None)

    def wait_for_exit(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def shutdown(self) -> None:
        """Close the socket (the zygote kills its workers and exits); kill it if it lingers."""
        if self.dead is None:
            self.dead = "the zygote was shut down"
        if not self.ready:   # still importing: it would not read the socket before it is done
            self.process.kill()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
            self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


_lock = threading.Lock()
_zygotes: dict[str, Zygote] = {}
_deaths: dict[str, int] = {}
_unavailable: dict[str, str] = {}


def _zygote_for(mode: str, env: dict[str, str], start_seconds: float | None) -> Zygote:
    """The zygote for `mode`, started if need be and, unless `start_seconds` is None, ready."""
    with _lock:
        zygote = _zygotes.get(mode)
        if zygote is not None and (zygote.dead or zygote.imported_with != _imported_with(env)):
            _zygotes.pop(mode)
            if zygote.dead:
                _deaths[mode] = _deaths.get(mode, 0) + 1
            zygote.shutdown()  # dead, or imported under other environment variables
            zygote = None
        if zygote is None:
            if mode in _unavailable:
                raise ZygoteUnavailable(_unavailable[mode])
            if _deaths.get(mode, 0) >= MAX_DEATHS:
                _unavailable[mode] = f"the {mode} zygote died {MAX_DEATHS} times"
                raise ZygoteUnavailable(_unavailable[mode])
            try:
                zygote = Zygote(mode, env)
            except (ZygoteUnavailable, OSError, ValueError) as exc:
                _unavailable[mode] = str(exc)
                raise ZygoteUnavailable(str(exc)) from exc
            _zygotes[mode] = zygote
        if start_seconds is not None and not zygote.ready:
            try:
                zygote.await_ready(start_seconds)
            except (ZygoteUnavailable, OSError, ValueError) as exc:
                _zygotes.pop(mode, None)
                _unavailable[mode] = str(exc)
                raise ZygoteUnavailable(str(exc)) from exc
        return zygote


def start(mode: str, env: dict[str, str], start_seconds: float | None) -> None:
    """Make sure the zygote for `mode` runs, ready within `start_seconds` (None: started, not
    waited for; the first worker's request waits for its imports); raises ZygoteUnavailable
    if there can be none."""
    _check_enabled()
    _zygote_for(mode, env, start_seconds)


def fork_worker(mode: str, request: dict, fds: list[int], stdout, env: dict[str, str],
                start_seconds: float) -> ForkedProcess:
    """A worker forked by this process's zygote for `mode`; raises ZygoteUnavailable if there is none.

    `fds` are the worker's control (read), status (write) and output (write)
    ends; the caller closes its own copies once this returns or raises."""
    _check_enabled()
    zygote = _zygote_for(mode, env, start_seconds)
    try:
        return zygote.fork({**request, "mode": mode, "env": env}, fds, stdout)
    except ZygoteUnavailable:
        if not zygote.dead:
            raise
    # It died since the last request (its death may not have been noticed yet): once more, with a new one.
    return _zygote_for(mode, env, start_seconds).fork({**request, "mode": mode, "env": env}, fds, stdout)


def _check_enabled() -> None:
    if os.environ.get(DISABLE, "") not in ("", "0"):
        raise ZygoteUnavailable(f"{DISABLE} is set")
    if not sys.platform.startswith("linux"):
        raise ZygoteUnavailable("the zygote needs Linux (/proc, descriptor passing)")


def shutdown_all() -> None:
    """Shut every zygote down (at exit; tests call it too).  Later requests start new ones."""
    with _lock:
        zygotes = list(_zygotes.values())
        _zygotes.clear()
        _deaths.clear()
        _unavailable.clear()
    for zygote in zygotes:
        zygote.shutdown()


def started_since(mode: str, since: float) -> dict | None:
    """How the zygote of `mode` spent its start, if it started after `since` (time.monotonic())."""
    with _lock:
        zygote = _zygotes.get(mode)
    if zygote is None or zygote.dead or not zygote.ready or zygote.started_at < since:
        return None
    return dict(zygote.seconds)


def status() -> dict[str, str]:
    """Per mode: "running (pid N)" or why there is none (for tests and the benchmark)."""
    with _lock:
        out = {mode: f"running (pid {z.process.pid})" for mode, z in _zygotes.items() if not z.dead}
        out.update(_unavailable)
        return out


atexit.register(shutdown_all)
