"""One run directory per kanalyze process for everything the dynamic pass writes: workers'
scratch folders, zygotes' homes, kept reference results.

`tmp<pid>-*` under the temporary directory, holding the file `MARKER`, removed when the
process exits.  The name is neutral because a candidate's working directory is a folder
of it (disguise.py); the marker tells kanalyze's run directories from other folders of
that name (those of earlier versions, `kanalyze-run-<pid>-*`, are known by their name).
A process killed with `kill -9` cannot remove its own, so each new one removes those of
this user whose process is gone: nothing a crash left behind outlives the next run.

On a GPU run a second one lives in shared memory (`memory_directory`, under
/dev/shm/kanalyze-<uid>: RAM, not disk), for arrays that change hands between reference
workers at a problem's real size (held.hand_over); it is named, marked and reaped the
same way, and hidden from candidates as the first is.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import tempfile
from functools import lru_cache

PREFIX = "tmp"
SHARED_MEMORY = "/dev/shm"
MARKER = ".owner"
_NAME = re.compile(rf"{PREFIX}(\d+)-")
_EARLIER = re.compile(r"kanalyze-run-(\d+)-")   # the run directories of earlier versions
MIN_FREE_BYTES = 1 << 30   # below this, a dynamic run stops cleanly instead of filling the disk


@lru_cache(maxsize=1)
def run_directory() -> str:
    reap()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, path, True)
    open(os.path.join(path, MARKER), "x").close()
    return path


def memory_root() -> str | None:
    """The folder of this user's run directories in shared memory, `/dev/shm/kanalyze-<uid>`
    (made here, this user's own, no link), or None where there is none to be had.  One fixed
    folder, so that a candidate's view hides them all, those of runs beside this one too
    (mounts.candidate_view: on a GPU a candidate sees the host's /dev/shm)."""
    root = os.path.join(SHARED_MEMORY, f"kanalyze-{os.getuid()}")
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        status = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
        return None   # another user's, or a link: nothing of kanalyze's goes there
    return root


@lru_cache(maxsize=1)
def memory_directory() -> str | None:
    """This process's run directory in shared memory, or None where the machine has none."""
    root = memory_root()
    if root is None:
        return None
    reap(root)
    try:
        path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
        open(os.path.join(path, MARKER), "x").close()
    except OSError:
        return None
    atexit.register(shutil.rmtree, path, True)
    return path


def is_run_directory(path: str) -> bool:
    """A run directory of a kanalyze process (this one's or another's, of any version)."""
    return _owner(path) is not None


def _owner(path: str) -> int | None:
    """The pid in a run directory's name, or None where `path` is not a run directory."""
    name = os.path.basename(path)
    match = _EARLIER.match(name) or (_NAME.match(name) if os.path.isfile(os.path.join(path, MARKER)) else None)
    return int(match.group(1)) if match else None


def scratch(prefix: str) -> str:
    """A new folder of this run's."""
    return tempfile.mkdtemp(prefix=prefix, dir=run_directory())


def reap(parent: str | None = None) -> list[str]:
    """Remove the run directories of this user's kanalyze processes that are gone, from `parent`
    (default: the temporary directory)."""
    removed = []
    parent = parent or tempfile.gettempdir()
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for name in entries:
        path = os.path.join(parent, name)
        pid = _owner(path) if name.startswith((PREFIX, "kanalyze-run-")) else None
        if pid is None:
            continue
        try:
            if os.lstat(path).st_uid != os.getuid() or alive(pid):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def alive(pid: int) -> bool:
    """Whether a process of this pid is there (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_space_problem() -> str | None:
    """Why the temporary directory cannot hold a dynamic run, or None."""
    parent = tempfile.gettempdir()
    try:
        free = shutil.disk_usage(parent).free
    except OSError as exc:
        return f"cannot read the free space of {parent}: {exc}"
    if free < MIN_FREE_BYTES:
        return (f"only {free / 2 ** 20:.0f} MiB free in {parent}; the dynamic pass needs at least "
                f"{MIN_FREE_BYTES / 2 ** 30:.0f} GiB there (set TMPDIR to a larger disk)")
    return None
