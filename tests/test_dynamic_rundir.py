"""The dynamic pass's temporary files: one run directory per process, reaped after a crash."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kanalyze.dynamic.sandbox import rundir

ROOT = Path(__file__).resolve().parent.parent


def test_a_run_directory_left_by_a_killed_process_is_reaped(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    # A kanalyze process that makes its run directory and is then killed with SIGKILL.
    code = ("import os, signal; from kanalyze.dynamic.sandbox import rundir; "
            "open(os.path.join(rundir.scratch('session-'), 'case-0.npz'), 'wb').write(b'x' * 1000); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == -9
    left = [p for p in tmp_path.iterdir() if p.name.startswith(rundir.PREFIX)]
    assert len(left) == 1                                      # what the crash left behind
    mine = tmp_path / f"{rundir.PREFIX}{os.getpid()}-alive"    # a live process's: kept
    mine.mkdir()
    assert rundir.reap() == [str(left[0])]
    assert not left[0].exists() and mine.exists()


def test_too_little_room_is_a_stated_reason(monkeypatch) -> None:
    monkeypatch.setattr(rundir, "MIN_FREE_BYTES", 1 << 62)
    assert "set TMPDIR to a larger disk" in rundir.free_space_problem()


def test_arrays_that_would_fill_the_disk_are_refused_with_the_reason(tmp_path, monkeypatch) -> None:
    """Runs side by side (an audit's pairs) must not fill the disk under each other: arrays
    that would leave less than the margin free are not written, and the error says why."""
    import shutil

    import numpy as np
    import pytest

    from kanalyze.dynamic.sandbox import transport

    free = shutil.disk_usage(tmp_path).free
    # Room for 64 MiB more and no more (other processes' writes move `free` a little meanwhile).
    monkeypatch.setattr(transport, "MIN_FREE_BYTES", free - (64 << 20))
    transport.save_arrays(str(tmp_path / "small"), {"a": np.zeros(256, np.float32)})        # 1 KiB: written
    assert (tmp_path / "small" / "a.npy").exists()
    big = np.zeros(1 << 28, np.float32)   # 1 GiB, never touched: zero pages are not allocated
    with pytest.raises(transport.NoRoom, match="no room for 1.00 GiB of arrays .*set TMPDIR to a larger disk"):
        transport.save_arrays(str(tmp_path / "big"), {"b": big})
    assert not list((tmp_path / "big").iterdir())                  # nothing half-written


def test_the_shared_memory_run_directory_is_this_users_reaped_and_hidden_from_candidates(tmp_path, monkeypatch) -> None:
    """On a GPU, arrays change hands between reference workers through shared memory (RAM, not
    disk): under one folder of this user's, which a candidate's view hides, those of runs beside
    this one included; a directory whose process is gone is reaped there too."""
    from kanalyze.dynamic.sandbox import mounts

    monkeypatch.setattr(rundir, "SHARED_MEMORY", str(tmp_path))
    rundir.memory_directory.cache_clear()
    root = tmp_path / f"kanalyze-{os.getuid()}"
    gone = root / f"{rundir.PREFIX}999999999-left"     # a pid no process has
    gone.mkdir(parents=True)
    (gone / rundir.MARKER).touch()
    try:
        mine = rundir.memory_directory()
        assert mine is not None and Path(mine).parent == root and Path(mine).name.startswith(f"{rundir.PREFIX}{os.getpid()}-")
        assert not gone.exists()
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        assert str(root) in mounts.candidate_view(str(scratch), {}, [], [], "cuda")["hide"]
        assert str(root) not in mounts.candidate_view(str(scratch), {}, [], [], "cpu")["hide"]   # a /dev/shm of its own
    finally:
        rundir.memory_directory.cache_clear()


def test_no_shared_memory_run_directory_in_a_folder_another_user_could_have_placed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(rundir, "SHARED_MEMORY", str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"kanalyze-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    rundir.memory_directory.cache_clear()
    try:
        assert rundir.memory_root() is None and rundir.memory_directory() is None
    finally:
        rundir.memory_directory.cache_clear()
