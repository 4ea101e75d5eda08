"""`make demo` shows what sets kanalyze apart: the static findings on the bundled kernels, then one
flag confirmed on the CPU with its witness, and that witness replayed (exit 1 while it fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.mark.slow
def test_make_demo_checks_confirms_and_replays(tmp_path) -> None:
    if not (ROOT / ".venv" / "bin" / "kanalyze").exists() or shutil.which("make") is None:
        pytest.fail("make demo needs the project's .venv (make test builds it) and make")
    env = {**os.environ, "KANALYZE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("KANALYZE_OUTPUT_FORMAT", None)
    done = subprocess.run(["make", "--no-print-directory", "demo", "DEMO_WITNESSES=" + str(tmp_path / "witnesses")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "PRC001" in out and "Found" in out                                    # the static pass
    assert "ORD001 [confirmed]" in out and "(witness " in out                    # the flag confirmed
    witnesses = list((tmp_path / "witnesses").glob("*.json"))
    assert len(witnesses) == 1
    replay = out.split("replaying the witness")[-1]
    assert "ORD001 confirmed" in replay                                          # and replayed
