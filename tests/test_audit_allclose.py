"""KernelBench's allclose check runs the candidate in a process of its own: nothing of it
outlives the check, whether the check times out or whoever asked for it dies first (a
Verifier's overlapped check, an audit pair's worker killed at its limit)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kanalyze.audit import allclose

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
PROBLEM = str(KB / "level1" / "6_leaky_relu.py")


def _running(marker: str) -> list[int]:
    """Processes whose command line names `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _gone(marker: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _running(marker)


def _hanging_candidate(tmp_path: Path) -> str:
    path = tmp_path / f"hang_{os.getpid()}_{time.monotonic_ns()}.py"   # a name no other process has
    shutil.copyfile(KB / "hostile" / "level1_problem6_hang.py", path)
    return str(path)


def test_a_check_past_its_limit_leaves_nothing_running(tmp_path) -> None:
    candidate = _hanging_candidate(tmp_path)
    result = allclose.check(PROBLEM, candidate, "cpu", 4.0)
    assert result["verdict"] == "TIMEOUT"
    assert _gone(candidate)


def test_a_check_whose_caller_dies_ends_with_it(tmp_path) -> None:
    candidate = _hanging_candidate(tmp_path)
    caller = textwrap.dedent(f"""
        import os, threading, time
        from kanalyze.audit import allclose
        threading.Thread(target=allclose.check, args=({PROBLEM!r}, {candidate!r}, "cpu", 600.0),
                         daemon=True).start()
        time.sleep(4)
        os._exit(0)   # gone mid-check, as a killed audit pair or a crashed training loop
    """)
    subprocess.run([sys.executable, "-c", caller], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   timeout=60, check=True)
    assert _gone(candidate), "the allclose check outlived its caller"
