"""What a worker does to itself before any problem or candidate code runs (stdlib only).

* resource limits: address space (CPU runs only: CUDA maps far more virtual
  memory than it uses), file size, no core files, and a process count where
  the user is not root (Linux counts threads there too, so it is the current
  count plus a margin, not a small number);
* a new network namespace with no interfaces, where the kernel lets this
  process make one (as root, or through a user namespace);
* an audit hook refusing network sockets and new processes either way, except
  for the compiler tools Triton and torch's extension builder run on a GPU.

A fresh worker calls `apply_limits` first thing, while it is still
single-threaded (a user namespace cannot be entered by a threaded process),
and `install_guards` once torch and triton are imported.  The zygote
(zygote.py) calls `confine_zygote` before its imports, so that the workers it
forks start inside its namespace; each forked worker (single-threaded again
after the fork) then calls `apply_limits` for its own limits and a network
namespace of its own.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
ALLOWED_TOOLS = {"ptxas", "ptxas-blackwell", "cuobjdump", "nvdisasm", "nvlink", "fatbinary", "ldconfig",
                 "gcc", "cc", "g++", "c++", "clang", "clang++", "nvcc", "ninja", "which", "uname"}


def _set(limit: int, value: int) -> None:
    soft, hard = resource.getrlimit(limit)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (value, value))


def _user_tasks() -> int:
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def _unshare_network() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return True
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            return False
        # Map ourselves to the same ids inside, so that files keep their owners.
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            try:
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
            except OSError:
                pass
        return True
    except (OSError, AttributeError):
        return False


def apply_limits(limits: dict) -> dict:
    """Apply the limits; returns what was applied (it goes into every witness's environment)."""
    applied: dict = {}
    for key, limit in (("memory_bytes", resource.RLIMIT_AS), ("file_bytes", resource.RLIMIT_FSIZE)):
        if limits.get(key):
            try:
                _set(limit, int(limits[key]))
                applied[key] = int(limits[key])
            except (ValueError, OSError):
                pass
    try:
        _set(resource.RLIMIT_CORE, 0)
    except (ValueError, OSError):
        pass
    if os.getuid() != 0 and limits.get("process_margin"):
        try:
            _set(resource.RLIMIT_NPROC, _user_tasks() + int(limits["process_margin"]))
            applied["nproc"] = True
        except (ValueError, OSError):
            pass
    applied["network"] = "namespace" if limits.get("network_namespace", True) and _unshare_network() \
        else "audit hook"
    return applied


def confine_zygote() -> dict:
    """The zygote's own confinement: no core files and a network namespace (no limits:
    each worker it forks sets its own)."""
    try:
        _set(resource.RLIMIT_CORE, 0)
    except (ValueError, OSError):
        pass
    return {"network": "namespace" if _unshare_network() else "audit hook"}


def install_guards() -> None:
    """Refuse network sockets and new processes from here on (an audit hook)."""
    import socket

    refused_families = {socket.AF_INET, socket.AF_INET6}

    def hook(event: str, args) -> None:
        if event == "socket.__new__" and len(args) > 1 and args[1] in refused_families:
            raise PermissionError("kanalyze sandbox: network access is refused")
        if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"):
            raise PermissionError("kanalyze sandbox: network access is refused")
        if event in ("os.fork", "os.forkpty", "os.system", "os.exec", "os.spawn"):
            raise PermissionError(f"kanalyze sandbox: {event} is refused")
        if event in ("subprocess.Popen", "os.posix_spawn"):  # subprocess may go through posix_spawn
            program = args[0] or (args[1][0] if args[1] else "")
            if os.path.basename(os.fsdecode(program)) not in ALLOWED_TOOLS:
                raise PermissionError(f"kanalyze sandbox: starting {os.path.basename(os.fsdecode(program))!r} "
                                      "is refused")

    sys.addaudithook(hook)
