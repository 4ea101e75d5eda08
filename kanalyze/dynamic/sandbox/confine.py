"""What a worker does to itself before any problem or candidate code runs (stdlib only).

* a cgroup of its own, joined first of all (a candidate's worker, where the
  parent could make one: cgroups.py): memory and a task count for the worker
  and every process it starts together;
* resource limits: address space (CPU runs only: CUDA maps far more virtual
  memory than it uses), file size, no core files, and a process count where
  the user is not root (Linux counts threads there too, so it is the current
  count plus a margin, not a small number);
* namespaces of its own (namespaces.py): user, PID (with a tiny init, so that
  every process the candidate starts ends with the worker), mount (its own
  /proc) and network (no interfaces), as far as the kernel lets this process
  make them;
* no new socket, below Python too (seccomp.py: a socket named in the file system would
  reach a tmux server, an agent or docker outside every namespace); on a GPU only once
  the device is open (`deny_sockets_now`), since the CUDA driver needs sockets to start;
* an audit hook refusing network sockets and new processes either way, except
  for the compiler tools Triton and torch's extension builder run on a GPU.
  Those are found once, when the worker starts: each name in `ALLOWED_TOOLS`
  on PATH, in CUDA's and Triton's tool folders and in $CC/$CXX, resolved to
  its real path.  A program may start only if it is reached through one of
  those folders and resolves to one of those real paths: a link named `gcc`
  in the candidate's scratch folder is refused, whatever it points to.

A fresh worker calls `apply_limits` first thing, while it is still
single-threaded (a user namespace cannot be entered by a threaded process),
and `install_guards` once torch and triton are imported.  The zygote
(zygote.py) calls `confine_zygote` before its imports: a network namespace
for itself, no core files, and its /proc files closed to the workers it forks;
each forked worker (single-threaded again after the fork) then calls
`apply_limits` for its own limits and namespaces.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
from typing import NamedTuple

from kanalyze.dynamic.sandbox import cgroups, namespaces, seccomp

ALLOWED_TOOLS = {"ptxas", "ptxas-blackwell", "cuobjdump", "nvdisasm", "nvlink", "fatbinary", "ldconfig",
                 "gcc", "cc", "g++", "c++", "clang", "clang++", "nvcc", "ninja", "which", "uname"}


class Tools(NamedTuple):
    """The allowed tools as found when the worker started (real paths throughout)."""

    real: frozenset[str]        # the tools themselves
    folders: frozenset[str]     # the folders they were found in
    searched: frozenset[str]    # those and the folders on PATH: where a search may pass on the way


_tools: Tools | None = None


def _set(limit: int, value: int) -> None:
    soft, hard = resource.getrlimit(limit)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (value, value))


def _user_tasks() -> int:
    """This user's tasks (threads), as RLIMIT_NPROC counts them: from /proc/PID/status, which
    stays readable for non-dumpable processes (kanalyze, the zygote, namespace inits), whose
    /proc/PID folders then belong to root."""
    uid, count = str(os.getuid()), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                    fields = dict(line.split(":", 1) for line in handle if ":" in line)
                if fields.get("Uid", "").split()[:1] == [uid]:
                    count += int(fields.get("Threads", "1"))
            except (OSError, ValueError):
                continue
    return count


# When a worker refuses new sockets (`limits["deny_sockets"]`): at once (the CPU), or once the
# device is open (a GPU: the CUDA driver opens sockets when it starts, and cudaGetDeviceCount
# fails with error 304 under the filter; once started it needs none).
NOW, AFTER_DEVICE = "now", "once the device is open"


def apply_limits(limits: dict) -> dict:
    """Apply the limits; returns what was applied (it goes into every witness's environment)."""
    applied: dict = {}
    if limits.get("cgroup") is not None:   # first: the namespaces' processes and all the candidate starts are inside
        applied["cgroup"] = cgroups.join(limits["cgroup"])
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
    applied.update(namespaces.enter(network=limits.get("network_namespace", True),
                                    own_pids=limits.get("pid_namespace", True), files=limits.get("files"),
                                    own_ipc=limits.get("ipc_namespace", False),
                                    allowed=limits.get("namespaces", True)))
    applied["tools"] = f"by real path ({len(resolve_tools().real)} allowed)"
    # In the worker itself, the namespaces' init already apart.
    if limits.get("deny_sockets") == NOW:
        applied["sockets"] = seccomp.deny_sockets()
    elif limits.get("deny_sockets") == AFTER_DEVICE:
        applied["sockets"] = "not refused below the audit hook (the device did not open)"   # until it does
    else:
        applied["sockets"] = "not refused below the audit hook"
    return applied


def deny_sockets_now(limits: dict, applied: dict) -> None:
    """The socket filter of a worker that waited for its device to open (`AFTER_DEVICE`): call
    once the CUDA driver has started, before any candidate code; `applied` gets what held."""
    if limits.get("deny_sockets") == AFTER_DEVICE:
        applied["sockets"] = seccomp.deny_sockets()


def confine_zygote() -> dict:
    """The zygote's own confinement: no core files, a network namespace, and non-dumpable (a
    worker cannot open its /proc files: it holds kanalyze's socket).  No limits: each worker
    it forks sets its own.  The allowed tools are found here, before any worker runs, and
    every worker inherits them."""
    try:
        _set(resource.RLIMIT_CORE, 0)
    except (ValueError, OSError):
        pass
    network = "namespace" if namespaces.unshare_network() else "audit hook"
    namespaces.probe_pid_namespace()   # once for all its workers, as the tools below: they inherit both
    resolve_tools()                    # (they share its environment: zygote_client.PER_WORKER)
    return {"network": network, "dumpable": not namespaces.protect_this_process()}


def _tool_folders(env) -> list[str]:
    """Where the allowed tools are looked for: PATH, the system's, CUDA's and Triton's own."""
    folders = list(os.get_exec_path(env)) + ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            folders.append(os.path.join(env[variable], "bin"))
    folders.append("/usr/local/cuda/bin")
    try:
        triton = importlib.util.find_spec("triton")   # found, not imported
    except (ImportError, ValueError):
        triton = None
    for location in (triton.submodule_search_locations or []) if triton else []:
        folders.append(os.path.join(location, "backends", "nvidia", "bin"))
    return folders


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _real_folder(path: str) -> str:
    return os.path.realpath(os.path.dirname(os.path.abspath(path)))


def resolve_tools(env=None) -> Tools:
    """The allowed tools, found once per worker (before any candidate code: what the candidate
    later puts on PATH or in its folders does not count)."""
    global _tools
    if _tools is None:
        env = os.environ if env is None else env
        candidates = [os.path.join(folder, name) for folder in _tool_folders(env) for name in ALLOWED_TOOLS]
        for variable in ("CC", "CXX"):   # the compilers the user chose, by name or by path
            words = env.get(variable, "").split()
            found = _find(words[0], None, env, spawn=False, trusted=None) if words else None
            candidates += found or []
        found = [path for path in candidates if _executable(path)]
        folders = frozenset(_real_folder(path) for path in found)
        searched = frozenset(os.path.realpath(folder) for folder in os.get_exec_path(env) if os.path.isabs(folder))
        _tools = Tools(frozenset(os.path.realpath(path) for path in found), folders, folders | searched)
    return _tools


def _find(program: str, cwd, env, spawn: bool, trusted) -> list[str] | None:
    """Every file that starting `program` may run, as exec does: a path from `cwd`; a bare name
    through the PATH of the environment it gets (and from `cwd` for `os.posix_spawn`, which
    shares its audit event with `posix_spawnp`).  None if a folder searched before the one
    that holds it is not `trusted`: a file planted there after this check would run instead."""
    here = cwd or os.getcwd()
    if os.sep in program:
        return [os.path.join(here, program)]
    paths = [os.path.join(here, program)] if spawn and os.path.lexists(os.path.join(here, program)) else []
    for folder in os.get_exec_path(env):
        path = os.path.join(folder, program)
        if _executable(path):
            return paths + [path]
        if trusted is not None and not (os.path.isabs(folder) and os.path.realpath(folder) in trusted):
            return None
    return paths


def tool_allowed(program, cwd=None, env=None, spawn: bool = False) -> bool:
    """Whether every file starting `program` may run is an allowed tool's real path, reached
    through a folder an allowed tool was found in."""
    tools = resolve_tools()
    try:
        paths = _find(os.fsdecode(program), None if cwd is None else os.fsdecode(cwd), env, spawn, tools.searched)
    except (TypeError, ValueError):
        return False
    return bool(paths) and all(os.path.realpath(path) in tools.real and _real_folder(path) in tools.folders
                               for path in paths)


def install_guards() -> None:
    """Refuse network sockets and new processes, but the allowed tools, from here on (an audit hook)."""
    import socket

    resolve_tools()

    refused_families = {socket.AF_INET, socket.AF_INET6}

    def hook(event: str, args) -> None:
        if event == "socket.__new__" and len(args) > 1 and args[1] in refused_families:
            raise PermissionError("kanalyze sandbox: network access is refused")
        if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"):
            raise PermissionError("kanalyze sandbox: network access is refused")
        if event in ("os.fork", "os.forkpty", "os.system", "os.exec", "os.spawn"):
            raise PermissionError(f"kanalyze sandbox: {event} is refused")
        if event == "subprocess.Popen":   # (executable, args, cwd, env); executable is args[0] if not given
            program, cwd, env = args[0], args[2], args[3]
        elif event == "os.posix_spawn":   # (path, argv, env); posix_spawnp searches PATH too
            program, cwd, env = args[0], None, args[2]
        else:
            return
        if not tool_allowed(program, cwd, env, spawn=event == "os.posix_spawn"):
            raise PermissionError(f"kanalyze sandbox: starting {os.fsdecode(program)!r} is refused "
                                  "(not an allowed tool by its real path)")

    sys.addaudithook(hook)
