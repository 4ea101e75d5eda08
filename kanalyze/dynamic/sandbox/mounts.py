"""What a candidate's worker sees of the file system, in its own mount namespace
(stdlib, keys.py, rundir.py, cgroups.py).

The parent plans it (`plan`, when it starts a candidate's worker) and the
namespace's init applies it (`apply`, namespaces.py) before the worker proper
is forked, while it still holds the capabilities of its user namespace:

* the temporary folders, /tmp and the one kanalyze's run directories are made in
  (`$TMPDIR`), are hidden under an empty tmpfs each, with the worker's own scratch
  folder bound back in place, the folders of inputs the reference worker saved for
  candidates bound back read-only, and the folders of the candidate and its problem
  (read-only) and of its caches (writable) where they lie in one: the reference's own
  folders (its outputs, once released), other workers', the process-wide cache of
  reference outputs and every other kanalyze process's run directory, those made after
  the worker started too (an audit's later pairs of the same problem), are not there
  to read, nor anything else of the user's there;
* kanalyze's run directory (and those of other kanalyze processes beside it) is hidden
  the same way wherever it is;
* on the CPU, /dev/shm is an empty tmpfs of its own too (no channel to the candidates run
  beside it); on a GPU it stays the host's: the CUDA driver keeps what CUDA IPC needs there
  (`cuda.shm.*`), and the reference worker cannot map a candidate's memory from a private one;
* the folder of kanalyze's signing key is hidden the same way, and so are the
  witness folders of the run (`hide_from_candidates`: an earlier candidate's
  witness holds the reference's values at its failing elements), and the
  cgroup file systems (/sys/fs/cgroup: cgroups.py), so that the candidate
  cannot write itself into a group other than its worker's;
* the user's home is read-only, except the caches a worker must write
  (Triton's kernel cache, kanalyze's build cache of CUDA C++ extensions,
  CUDA's own), bound back writable; so are the git work trees of the
  candidate, its problem and kanalyze's working directory (the project);
* then every other mount is read-only (`_seal`: where kanalyze runs as root,
  a root candidate would otherwise write into /etc or /usr): only the scratch
  folder, the caches and /dev/shm stay writable.

Each step that the kernel refuses is left out and said in the record
(`files` in the worker's confinement); the worker runs either way.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

from kanalyze import keys
from kanalyze.dynamic.sandbox import cgroups, rundir
from kanalyze.dynamic.sandbox.rundir import is_run_directory

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 0x1, 0x2, 0x4, 0x20, 0x1000, 0x4000


# Folders of kanalyze's results that a later candidate must not read: witnesses hold the
# reference's values at the failing elements of an earlier candidate of the same problem.
_results: set[str] = set()


def hide_from_candidates(folder: str) -> None:
    """Hide `folder` (a witness folder) from every candidate's process started from now on; made
    now, so that it is hidden before its first witness is written."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return
    _results.add(os.path.realpath(folder))


def plan(scratch: str, run_directory: str, key_directory: str, writable: list[str],
         visible: list[str], project: list[str] = (), private_shm: bool = True) -> dict:
    """The view of a worker whose scratch folder is `scratch`; `visible` are folders of the run
    directory it reads (the inputs the reference worker saved for it), bound back read-only;
    `project` are paths of the checked project (the candidate, its problem, the working
    directory), whose git work trees are read-only with the home, and whose folders are bound
    back read-only where a hidden folder holds them.  Paths are resolved here, in kanalyze."""
    home = os.path.realpath(os.path.expanduser("~"))
    real = os.path.realpath
    read_only = [home, *project_roots(project)]
    needed = [real(path) for path in [scratch, *project] if path]
    results = [folder for folder in sorted(_results) if not any(_inside(path, folder) for path in needed)]
    temporary = sorted({real(folder) for folder in ("/tmp", os.path.dirname(real(run_directory)))
                        if folder != "/" and os.path.isdir(folder)})
    return {"keep": real(scratch), "hide": [*temporary, real(run_directory), *other_runs(run_directory),
                                            real(key_directory), *results, *cgroups.mount_roots()],
            "visible": sorted({real(path) for path in visible if path}),
            # bound back read-only where a hidden folder holds them: the candidate's and its
            # problem's folders, and those the worker runs from
            "shown": sorted({_in_sight(path, [*temporary, real(run_directory)])
                               for path in project if path and os.path.isfile(path)}
                              | set(runtime_folders([*temporary, real(run_directory)]))),
            "read_only": [path for i, path in enumerate(read_only) if path != "/" and path not in read_only[:i]],
            "writable": sorted({real(path) for path in writable if path}),
            "private_shm": private_shm}


def candidate_view(scratch: str, caches: dict[str, str], visible: list[str], paths: list, mode: str) -> dict:
    """The view of a candidate's process (a worker, or the allclose check's cage): `caches`
    writable (made now: a read-only home leaves no room to make them later), `visible` folders
    of the run directory read-only, the git work trees of `paths` (the candidate, its problem)
    and of kanalyze's working directory read-only, a /tmp of its own, and on the CPU (`mode`) a
    /dev/shm of its own (on a GPU the host's: CUDA IPC from a private one fails in the reading
    process, "mapping of buffer object failed", measured on an H200)."""
    writable = list(caches.values())
    for folder in writable:
        try:
            os.makedirs(folder, exist_ok=True)
        except (OSError, TypeError):
            pass
    view = plan(scratch, rundir.run_directory(), keys.key_directory(), writable, visible, [os.getcwd(), *paths],
                private_shm=mode == "cpu")
    # On a GPU the host's /dev/shm: kanalyze's folder there hidden (made now, before it is used).
    shared_memory = rundir.memory_root() if mode != "cpu" else None
    if shared_memory:
        view["hide"].append(shared_memory)
    return {**view, "mode": mode}   # (Landlock's rules, where no mount namespace holds: landlock.py)


def runtime_folders(hidden: list[str]) -> list[str]:
    """The folders the worker runs from, wherever they are (a clone and its virtual environment
    in /tmp, as CI makes them): Python's own, every `sys.path` entry (kanalyze, torch, Triton)
    and the PATH and LD_LIBRARY_PATH folders (compilers, libraries); bound back read-only where
    a hidden folder holds them, unless one holds a hidden folder itself (`/tmp` on a path)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # kanalyze/
    found = [package, sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *sys.path, *os.environ.get("PATH", "").split(os.pathsep),
             *os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)]
    folders = {os.path.realpath(entry) for entry in found if entry and os.path.isabs(entry) and os.path.isdir(entry)}
    return sorted(folder for folder in folders if not any(_inside(root, folder) for root in hidden))


def _in_sight(path: str, hidden: list[str]) -> str:
    """What of a hidden folder a candidate's or problem's file needs back: its folder (modules
    beside it), or the file alone where that folder holds a hidden folder (a candidate saved
    in /tmp itself must not bring /tmp back)."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    if any(_inside(root, folder) for root in hidden):
        return os.path.join(folder, os.path.basename(path))
    return folder


def project_roots(paths) -> list[str]:
    """The git work trees the paths are in: read-only to a candidate, which could otherwise
    rewrite its problem, a later candidate, the project's configuration or its own file after
    the run.  A path outside any work tree names no project (a scratch copy, a test's folder)."""
    roots = []
    for path in paths:
        if not path:
            continue
        top = os.path.realpath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
        while not os.path.exists(os.path.join(top, ".git")) and os.path.dirname(top) != top:
            top = os.path.dirname(top)
        if os.path.exists(os.path.join(top, ".git")):
            roots.append(top)
    return roots


def other_runs(run_directory: str) -> list[str]:
    """The run directories of other kanalyze processes beside this one (another check, an audit's
    concurrent pairs): hidden too, so that no reference of theirs is in sight."""
    parent, own = os.path.split(os.path.realpath(run_directory))
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return sorted(os.path.join(parent, name) for name in names
                  if name != own and is_run_directory(os.path.join(parent, name)))


def apply(view: dict | None) -> str:
    """Apply a planned view in this (mount-namespaced) process; what held, in words."""
    if not view:
        return "shared (no view planned)"
    done, failed = [], []
    keep = view["keep"]
    keep_fd = _open_dir(keep)
    visible = [(path, _open_dir(path)) for path in view.get("visible", []) if os.path.isdir(path)]
    shown = [(path, _open_dir(path) if os.path.isdir(path) else _open_file(path))
             for path in view.get("shown", []) if os.path.exists(path)]
    writable = [(path, _open_dir(path)) for path in view.get("writable", []) if os.path.isdir(path)]
    # What a hidden folder gets back in place, in this order (a scratch folder inside a shown one stays writable).
    back = [(path, fd, True) for path, fd in shown] + [(path, fd, True) for path, fd in visible] + \
        [(path, fd, False) for path, fd in writable] + [(keep, keep_fd, False)]
    for folder in view.get("hide", []):
        if not os.path.isdir(folder):
            continue   # not there: inside a folder hidden before it, or gone
        if not _mount(b"tmpfs", folder, b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64k,mode=0755"):
            failed.append(f"{folder} ({_error()})")
            continue
        done.append(f"{folder} hidden")
        for path, fd, read_only in back:
            if fd is not None and _inside(path, folder) and not _bind_back(fd, path, read_only=read_only):
                failed.append(f"{path} (could not bind it back: {_error()})")
        if not any(fd is not None and _inside(path, folder) for path, fd, _ in back):
            # nothing bound back in it: read-only too (no file named like a cgroup's can be made there)
            _mount(None, folder, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY, None)
    if view.get("private_shm") and os.path.isdir("/dev/shm"):
        if _mount(b"tmpfs", "/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=1777"):
            done.append("/dev/shm its own")
        else:
            failed.append(f"/dev/shm its own ({_error()})")
    for folder in view.get("read_only", []):
        if not os.path.isdir(folder):
            continue   # under a hidden folder, and not bound back: out of sight, which is more than read-only
        if not (_mount(folder.encode(), folder, None, MS_BIND | MS_REC, None)
                and _mount(None, folder, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)):
            failed.append(f"{folder} read-only ({_error()})")
            continue
        done.append(f"{folder} read-only")
        for path, fd in writable:
            if fd is not None and _inside(path, folder):
                if _bind_back(fd, path, read_only=False):
                    done.append(f"{path} writable")
                else:
                    failed.append(f"{path} writable ({_error()})")
    sealed, not_sealed = _seal(keep, keep_fd, writable)
    done += sealed
    failed += not_sealed
    for fd in [keep_fd] + [fd for _, fd in writable + visible + shown]:
        if fd is not None:
            os.close(fd)
    record = "; ".join(done) or "nothing changed"
    return record + (f"; not done: {'; '.join(failed)}" if failed else "")


def _seal(keep: str, keep_fd: int | None, writable: list[tuple[str, int | None]]) -> tuple[list[str], list[str]]:
    """Every other mount read-only: a candidate that runs as root (kanalyze run as root, as in
    many containers) would otherwise write into /etc, /usr or a site-packages folder that
    kanalyze itself loads.  The scratch folder and the caches are bound onto themselves first
    (mounts of their own, left writable); /dev/shm and /proc stay as they are.  Device files
    still open for writing on a read-only mount (the GPU's included)."""
    done, failed = [], []
    own = [(keep, keep_fd), *writable]
    for path, fd in own:
        if fd is not None and path not in _mount_points() and not _bind_back(fd, path, read_only=False):
            failed.append(f"{path} (could not keep it writable: {_error()})")
    # /dev/shm stays writable: the worker's own, or on a GPU the host's (CUDA IPC needs it).
    kept = {path for path, _ in own} | {"/dev/shm"}
    refused = []
    for point in _mount_points():
        if point in kept or point == "/proc" or point.startswith("/proc/") or not os.path.exists(point):
            continue   # (a mount point that is not there is under a hidden folder: out of reach)
        if not _mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(point), None):
            refused.append(f"{point} ({_error()})")
    done.append("every other mount read-only")
    if refused:
        failed.append("read-only refused for " + ", ".join(refused[:5]) + (" ..." if len(refused) > 5 else ""))
    return done, failed


def _mount_points() -> list[str]:
    """This namespace's mount points, parents before children (/proc/self/mountinfo, field 5)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            mounts = cgroups.parse_mountinfo(handle.read())
    except OSError:
        return []
    return list(dict.fromkeys(point for _, point, _, _ in mounts))


# statvfs flags → the mount flags a remount must repeat (a user namespace cannot clear them).
_LOCKED = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (getattr(os, "ST_NOEXEC", 8), 0x8),
           (getattr(os, "ST_NOATIME", 1024), 0x400), (getattr(os, "ST_NODIRATIME", 2048), 0x800),
           (getattr(os, "ST_RELATIME", 4096), 0x200000))


def _locked_flags(point: str) -> int:
    try:
        flags = os.statvfs(point).f_flag
    except OSError:
        return 0
    return sum(mount_flag for stat_flag, mount_flag in _LOCKED if flags & stat_flag)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _open_dir(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None


def _open_file(path: str) -> int | None:
    try:
        return os.open(path, os.O_PATH)
    except OSError:
        return None


def _bind_back(fd: int, path: str, read_only: bool) -> bool:
    """Bind the folder (or file) held open as `fd` at `path` again (creating the mount point in a tmpfs)."""
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o444))
    except OSError:
        pass
    if not _mount(f"/proc/self/fd/{fd}".encode(), path, None, MS_BIND | MS_REC, None):
        return False
    return not read_only or _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)


_libc = None


def _mount(source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None) -> bool:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.mount(source, target.encode(), fstype, ctypes.c_ulong(flags), data) == 0


def _error() -> str:
    return os.strerror(ctypes.get_errno())
