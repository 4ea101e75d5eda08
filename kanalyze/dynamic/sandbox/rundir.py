"""One run directory per kanalyze process for everything the dynamic pass writes: workers'
scratch folders, zygotes' homes, kept reference results.

`kanalyze-run-<pid>-*` under the temporary directory, removed when the process exits.  A
process killed with `kill -9` cannot remove its own, so each new one removes those of this
user whose process is gone: nothing a crash left behind outlives the next run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from functools import lru_cache

PREFIX = "kanalyze-run-"
MIN_FREE_BYTES = 1 << 30   # below this, a dynamic run stops cleanly instead of filling the disk


@lru_cache(maxsize=1)
def run_directory() -> str:
    reap()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, path, True)
    return path


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
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        path = os.path.join(parent, name)
        try:
            if not pid.isdigit() or os.lstat(path).st_uid != os.getuid() or _alive(int(pid)):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
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
