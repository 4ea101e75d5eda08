"""Linux namespaces around a worker, and kanalyze's own /proc files closed to it (stdlib only).

`enter` is what a worker does right after its rlimits, while it is still
single-threaded and before any problem or candidate code, using only what Linux
lets an unprivileged user do:

1. one `unshare` into a new user namespace (the worker keeps its uid and gid,
   mapped to themselves, and has no capability in the host's namespaces, even
   where kanalyze runs as root), PID namespace, mount namespace and network
   namespace (no interfaces);
2. a fork: the child is PID 1 of the new PID namespace, a tiny init;
3. the init mounts a /proc of its own namespace (the candidate sees its own
   processes only) and the file view kanalyze planned (mounts.py: kanalyze's
   run directory and signing key hidden, the home read-only), then forks the
   worker proper, PID 2, which drops every
   capability and returns from `enter` to run the problem or the candidate;
4. the process kanalyze started (or the zygote forked) stays outside, waits,
   and ends the way the worker ended: the same exit code, or the same signal
   raised on itself, so that the parent's timeouts, kills and exit-code
   reasons are untouched.

Three processes, and why: signals to the init of a PID namespace from inside
it are ignored unless it handles them, so the worker must not be PID 1 (its
own `os.kill(os.getpid(), SIGTERM)`, `abort()` would not end it); and the
parent knows only the outer process, so that one must end as the worker does.
When the init ends, the kernel kills everything left in its namespace: a
double-forked `setsid` daemon dies with the worker.  The init dies when the
outer process does (`PR_SET_PDEATHSIG`), so a parent that kills the outer
process (or its process group, on a timeout) ends the whole namespace.

Where the kernel refuses a step, the worker goes on with what it got (a network
namespace alone, as before, or nothing) and `enter`'s record says what held and
why not.  `protect_this_process` makes a process non-dumpable, so that a
same-user candidate cannot open its /proc/PID/environ, fd/ or mem: kanalyze
calls it before its first worker, the zygote at its start.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import sys

from kanalyze.dynamic.sandbox import landlock, mounts

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
_CAPABILITY_VERSION_3 = 0x20080522
_MAX_FD = 1 << 16
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _error() -> str:
    return os.strerror(ctypes.get_errno())


def _set_dumpable(dumpable: bool) -> bool:
    return _libc().prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) == 0


def protect_this_process() -> bool:
    """Make this process non-dumpable: its /proc/PID/environ, fd/ and mem open only to
    processes with CAP_SYS_PTRACE in its user namespace, never to a candidate's worker.
    Idempotent and cheap; it stays so for the life of the process (new programs it
    runs start dumpable again).  Returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _set_dumpable(False)
    except (OSError, AttributeError):
        return False


def unshare_network() -> bool:
    """A network namespace with no interfaces for this process (the zygote's own)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _unshare([CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET]) is not None
    except (OSError, AttributeError):
        return False


def _unshare(attempts: list[int]) -> int | None:
    """The first set of flags the kernel accepts (None if none); a new user namespace
    gets this process's ids mapped to themselves, so that files keep their owners."""
    uid, gid = os.getuid(), os.getgid()
    for flags in attempts:
        if _libc().unshare(flags) != 0:
            continue
        if flags & CLONE_NEWUSER:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                try:
                    with open(f"/proc/self/{name}", "w") as handle:
                        handle.write(text)
                except OSError:
                    pass
        return flags
    return None


def enter(network: bool = True, own_pids: bool = True, files: dict | None = None, own_ipc: bool = False,
          allowed: bool = True) -> dict:
    """Put this (single-threaded) worker into namespaces of its own, and drop every capability
    (in every case: a worker of root's with no namespace holds none either); returns, in the
    worker only, what held: `network` ("namespace" or "audit hook"), `ipc` (with `own_ipc`:
    "namespace" or "shared"), `pid_namespace` (True or
    why not), `proc` ("own" or whose), `files` (the view mounted, or else Landlock's:
    landlock.py), `capabilities` ("none" or why kept) and `parent_proc` (can this worker open
    its parent's /proc files?).  `allowed=False` makes none, as on a machine that refuses
    them (Ubuntu's AppArmor policy for unprivileged user namespaces).  The other processes this
    makes never return from here."""
    net = CLONE_NEWNET if network else 0
    ipc = CLONE_NEWIPC if own_ipc else 0
    record: dict = {"network": "audit hook"}
    if not sys.platform.startswith("linux"):
        return {**record, "pid_namespace": "not Linux", "proc": "none", "capabilities": "not Linux"}
    if not own_pids:   # the reference worker (trusted): it must see the candidate's, to read its device arrays
        flags = (_unshare([net, CLONE_NEWUSER | net]) if net else None) or 0
        record.update(network="namespace" if flags & CLONE_NEWNET else "audit hook", parent_proc=_parent_proc(),
                      pid_namespace="not for the reference worker, which reads the candidate's device arrays",
                      proc="the host's")
        record["capabilities"] = _drop_capabilities()
        return record
    try:
        _set_dumpable(True)   # inherited non-dumpable (the zygote), /proc/self/uid_map is not ours to write
        why = probe_pid_namespace() if allowed else "namespaces not allowed to the worker"
        flags = None if why else _unshare([CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | net | ipc,
                                           CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | net,
                                           CLONE_NEWPID | CLONE_NEWNS | net | ipc,
                                           CLONE_NEWPID | CLONE_NEWNS | net])
        if flags is None:
            why = why or f"unshare refused ({_error()})"
            flags = (_unshare([CLONE_NEWUSER | net, net]) if net and allowed else None) or 0
    except (OSError, AttributeError) as exc:
        flags, why = 0, f"unshare failed ({exc})"
    if flags & CLONE_NEWNET:
        record["network"] = "namespace"
    if own_ipc:   # System V IPC and POSIX message queues: none of the user's other processes' in sight
        record["ipc"] = "namespace" if flags & CLONE_NEWIPC else "shared"
    record["parent_proc"] = _parent_proc()
    if flags & CLONE_NEWPID:
        record.update(_start_init(files))   # returns in the worker, PID 2 of the new namespace
    else:
        record.update(pid_namespace=why or "not asked for", proc="the host's", files="shared (no mount namespace)")
    if files and str(record.get("files", "")).startswith("shared"):
        record.update(landlock.confine(files))
    record["capabilities"] = _drop_capabilities()
    return record


_NOT_PROBED = "not probed"
_probed: str | None = _NOT_PROBED


def probe_pid_namespace() -> str | None:
    """None if a PID namespace with a /proc of its own can be made here, else why not.

    Tried once, in a throwaway child: a PID namespace whose /proc is still the host's is
    worse than none (CUDA does not initialise where getpid() and /proc/self disagree), and
    once unshared it cannot be undone.  The zygote asks before its imports, so that the
    workers it forks inherit the answer; a fresh worker asks for itself."""
    global _probed
    if _probed is _NOT_PROBED:
        try:
            _probed = _probe()
        except (OSError, AttributeError) as exc:
            _probed = f"the probe failed ({exc})"
    return _probed


def _probe() -> str | None:
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        code = 70
        try:
            os.close(read_end)
            _set_dumpable(True)
            if _unshare([CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, CLONE_NEWPID | CLONE_NEWNS]) is None:
                os.write(write_end, f"unshare refused ({_error()})".encode())
            elif os.fork() == 0:   # PID 1 of the namespace: the one that can mount its /proc
                proc = _mount_proc()
                os.write(write_end, b"" if proc == "own" else f"no /proc of its own: {proc}".encode())
                os._exit(0)
            else:
                os.wait()
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        why = answer.read().decode("utf-8", "replace")
    _, status = os.waitpid(child, 0)
    if not why and os.waitstatus_to_exitcode(status) != 0:
        why = f"the probe ended with status {status}"
    return why or None


def _parent_proc() -> str:
    """Whether this process, with the candidate's privileges, can open the /proc files of the
    process that started it (kanalyze or the zygote: `protect_this_process` closes them)."""
    parent = os.getppid()
    try:
        os.close(os.open(f"/proc/{parent}/environ", os.O_RDONLY))
    except OSError as exc:
        return f"closed ({type(exc).__name__})"
    return "open"


def _start_init(files: dict | None) -> dict:
    """Fork the namespace's init; this process stays outside, the init forks the worker.
    Returns in the worker only."""
    outside, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        init = os.fork()
    except OSError as exc:
        outside.close()
        inside.close()
        return {"pid_namespace": f"fork failed ({exc})", "proc": "the host's"}
    if init != 0:
        inside.close()
        _wait_outside(init, outside)
    worker = -1
    try:
        outside.close()
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if select.select([inside], [], [], 0)[0]:
            os._exit(70)   # the outer process died before the line above: end with it
        proc = _mount_proc()
        view = mounts.apply(files) if proc == "own" else "shared (no mount namespace of its own)"
        worker = os.fork()
    finally:
        if worker != 0:    # the init, or a failure on the way to it: never back into the caller
            _be_init(worker, inside)
    inside.close()
    return {"pid_namespace": True, "proc": proc, "files": view}


def _mount_proc() -> str:
    """This namespace's own /proc, in a mount namespace whose changes stay in it."""
    libc = _libc()
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"the host's (mount namespace: {_error()})"
    if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return f"the host's (mounting /proc: {_error()})"
    return "own"


def _quiet(keep: int) -> None:
    """Default signal actions, and no descriptor but `keep`: the worker's pipes close when it ends."""
    for number in signal.valid_signals():
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    os.closerange(0, keep)
    os.closerange(keep + 1, _MAX_FD)


def _be_init(worker: int, link: socket.socket) -> None:
    """PID 1 of the namespace: reap whatever ends there; when the worker ends, hand its wait
    status out and exit, which kills everything still in the namespace."""
    status = None
    try:
        _set_dumpable(False)          # the candidate cannot reach this process's descriptors
        _quiet(link.fileno())
        while status is None and worker > 0:
            pid, wait_status = os.waitpid(-1, 0)
            if pid == worker:
                status = wait_status
        link.sendall(str(status).encode())
    finally:
        os._exit(0 if status is not None else 70)


def _wait_outside(init: int, link: socket.socket) -> None:
    """The process the parent knows: wait for the namespace, then end as the worker did."""
    status = None
    try:
        _quiet(link.fileno())
        data = b""
        while chunk := link.recv(64):
            data += chunk
        _, init_status = os.waitpid(init, 0)
        status = int(data) if data.strip().isdigit() else init_status
    finally:
        _end_as(status)


def _end_as(status: int | None) -> None:
    """Exit with the worker's code, or die of the signal it died of (no core: RLIMIT_CORE is 0)."""
    if status is None:
        os._exit(70)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> str:
    """No capability, now or after an exec (the bounding set emptied first): the worker
    cannot unmount its /proc to uncover the host's, nor enter other namespaces."""
    libc = _libc()
    for capability in range(64):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break   # EINVAL past the last capability the kernel knows
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), data) != 0:
        return f"kept ({_error()})"
    return "none"
