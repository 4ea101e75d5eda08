"""One run directory per kanalyze process for everything the dynamic pass writes: workers'
scratch folders, zygotes' homes, kept reference results.

`tmp<pid>-*` under the temporary directory, holding the file `MARKER`, removed when the
process exits.  The name is neutral because a candidate's working directory is a folder
of it (disguise.py); the marker tells kanalyze's run directories from other folders of
that name (those of earlier versions, `kanalyze-run-<pid>-*`, are known by their name).
A process killed with `kill -9` cannot remove its own, so each new one removes those of
this user whose process is gone: nothing a crash left behind outlives the next run.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from functools import lru_cache

PREFIX = "tmp"
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


def reap() -> list[str]:
    """Remove the run directories of this user's kanalyze processes that are gone."""
    removed = []
    parent = tempfile.gettempdir()
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
