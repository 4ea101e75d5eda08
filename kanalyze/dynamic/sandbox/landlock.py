"""A candidate's view of the file system where it gets no mount namespace: Landlock (stdlib only).

Ubuntu 24.04 and other distributions refuse unprivileged user namespaces to most
programs, and then a worker gets no mount namespace (namespaces.py): without more, a
candidate could read kanalyze's run directory and write into the user's home and project.
Landlock (Linux 5.13 and later) lets an unprivileged process restrict itself and all it
starts, with no namespace and no privilege.  `confine` applies the same plan mounts.py
would have mounted (`mounts.plan`), as Landlock rules:

* reading (and executing) is allowed everywhere but the hidden folders: /tmp and the
  folder kanalyze's run directories are made in, the run directory, the signing key's
  folder, the run's witness folders and the cgroup file systems, and on the CPU /dev/shm
  (no private one can be made without a mount namespace, so none at all); the folders a
  hidden one holds that the worker needs are allowed back (its scratch folder, the inputs
  saved for it, the folders of the candidate and its problem, those it runs from).  An
  entry made in a hidden folder's parent after the worker started is not readable either;
* writing (making, removing, renaming, truncating files) is allowed only in its scratch
  folder and its caches, and on a GPU /dev/shm (CUDA IPC keeps its files there); files in
  /dev (the null device, the GPU's) may still be opened for writing;
* nothing written there may be executed (`execve` of a file the candidate wrote, through
  ctypes too: the audit hook's allow-list of tools holds below Python for what it writes);
* where the kernel has Landlock's scopes (ABI 6, Linux 6.12), no signal to a process outside
  the worker's domain (kanalyze, the zygote, other workers) and no connection to an abstract
  UNIX socket made outside it.

What Landlock cannot do is said in the record: a file's existence and metadata stay
visible (`stat` is not restricted), and processes stay visible in /proc.
"""

from __future__ import annotations

import ctypes
import os
import struct

from kanalyze.dynamic.sandbox.mounts import _inside

# System call numbers (the same on x86_64 and aarch64: the generic table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Access rights on files (LANDLOCK_ACCESS_FS_*), and the ABI that introduced each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14          # ABI 2, ABI 3
_ABI1 = (1 << 13) - 1
_BY_ABI = {1: _ABI1, 2: _ABI1 | REFER}       # 3 and later: TRUNCATE too (IOCTL_DEV left unhandled: GPU ioctls)
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE   # the rights a rule on a file (not a folder) may hold
READ = READ_FILE | READ_DIR | EXECUTE
DEVICE_WRITE = WRITE_FILE | TRUNCATE
# Scopes (ABI 6): no connection to an abstract UNIX socket, and no signal, outside the domain.
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_libc = None


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.syscall


def abi() -> int:
    """The Landlock ABI this kernel offers (0: none, or not Linux)."""
    try:
        version = _syscall()(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                             ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def handled(version: int) -> int:
    return _BY_ABI.get(version, _ABI1 | REFER | TRUNCATE) if version >= 1 else 0


def readable_roots(hidden: list[str], root: str = "/") -> list[str]:
    """The folders and files that together hold everything under `root` but the hidden folders:
    each entry of a folder on the way to a hidden one, but that way itself (symbolic links left
    out: what they point to is allowed where it lies)."""
    roots: list[str] = []
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return roots
    for entry in entries:
        path = entry.path
        if entry.is_symlink() or any(_inside(path, folder) for folder in hidden):
            continue
        if any(_inside(folder, path) for folder in hidden) and entry.is_dir(follow_symlinks=False):
            roots += readable_roots(hidden, path)
        else:
            roots.append(path)
    return roots


def rules(view: dict, version: int) -> list[tuple[str, int]]:
    """(path, rights) for a planned view (mounts.plan): what may be read, what written."""
    rights = handled(version)
    hidden = [*view.get("hide", []), *(["/dev/shm"] if view.get("private_shm") else [])]
    writable = [view["keep"], *view.get("writable", []), *([] if view.get("private_shm") else ["/dev/shm"])]
    found = []
    for path in readable_roots(hidden):
        found.append((path, READ | (DEVICE_WRITE if _inside(path, "/dev") else 0)))
    for path in [*view.get("visible", []), *view.get("shown", [])]:
        found.append((path, READ))
    for path in writable:   # no EXECUTE: nothing the candidate writes can be run
        found.append((path, rights & ~EXECUTE))
    return [(path, access & rights) for path, access in found]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def confine(view: dict | None) -> dict:
    """Restrict this (single-threaded) process and all it starts to `view`; returns what held for
    the worker's record: `files`, and `signals` where the kernel scopes them."""
    if not view:
        return {"files": "shared (no mount namespace, no view planned)"}
    if view.get("mode") != "cpu":   # (the CUDA driver's own files under these rules: not yet tried on a GPU)
        return {"files": "shared (no mount namespace; Landlock is applied on the CPU only)"}
    version = abi()
    if version < 1:
        return {"files": "shared (no mount namespace, no Landlock in this kernel)"}
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    attr = struct.pack("=QQQ", handled(version), 0, scoped)[:24 if version >= 6 else 16 if version >= 4 else 8]
    syscall = _syscall()
    ruleset = syscall(ctypes.c_long(_CREATE_RULESET), attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return {"files": f"shared (no mount namespace; Landlock refused: {os.strerror(ctypes.get_errno())})"}
    try:
        missing = _add_rules(syscall, ruleset, rules(view, version))
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or syscall(ctypes.c_long(_RESTRICT_SELF), ruleset,
                                                                         ctypes.c_uint32(0)) != 0:
            return {"files": f"shared (no mount namespace; Landlock refused: {os.strerror(ctypes.get_errno())})"}
    finally:
        os.close(ruleset)
    return _record(view, version, missing)


def _add_rules(syscall, ruleset: int, found: list[tuple[str, int]]) -> list[str]:
    """Add each rule; the paths that could not be opened or were refused (left out: less allowed)."""
    missing = []
    for path, access in found:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            missing.append(path)
            continue
        try:
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                access &= FILE_RIGHTS
            rule = _PathBeneath(access, fd)
            if syscall(ctypes.c_long(_ADD_RULE), ruleset, ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                       ctypes.c_uint32(0)) != 0:
                missing.append(f"{path} ({os.strerror(ctypes.get_errno())})")
        finally:
            os.close(fd)
    return missing


def _record(view: dict, version: int, missing: list[str]) -> dict:
    hidden = [folder for folder in view.get("hide", []) if os.path.isdir(folder)]
    said = [f"Landlock (ABI {version}, no mount namespace)", *(f"{folder} hidden" for folder in hidden)]
    said.append("/dev/shm hidden" if view.get("private_shm") else "/dev/shm the host's")
    said.append("writable: its scratch folder and caches only; nothing written there executable")
    said.append("names and metadata of hidden files still visible (stat is not restricted)")
    if missing:
        said.append("not allowed back: " + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    record = {"files": "; ".join(said)}
    if version >= 6:
        record["signals"] = "scoped (Landlock): none to a process outside the worker"
    return record
