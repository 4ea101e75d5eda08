"""Where a hostile candidate reports what it could do (its `observed/` folder).

The fixtures write to `observed/` beside their own file when that folder exists.  In its
worker a candidate can write only to its scratch folder (gone with the worker) and its
own compile caches (mounts.py: every other mount is read-only to it), so the test links
`observed` beside the copied candidate to a fresh folder in that candidate's folder of
torch's extension cache, which outlives the run, and reads the report there.  (That cache,
not Triton's: KernelBench's check compiles Triton kernels in JIT caches of its own, while
its workers and its check share the candidate's build folders: process.candidate_caches.)
"""

from __future__ import annotations

import atexit
import os
import shutil
import uuid
from pathlib import Path


def observed_for(candidate: Path) -> Path:
    """Link `observed` beside `candidate` (its final text already written) to a new folder the
    candidate's worker may write to; returns that folder (removed when the tests end)."""
    from kanalyze.dynamic.sandbox.process import candidate_caches

    cache = Path(candidate_caches(dict(os.environ), str(candidate))["TORCH_EXTENSIONS_DIR"])
    folder = cache / f"observed-{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True)
    (candidate.parent / "observed").symlink_to(folder, target_is_directory=True)
    atexit.register(shutil.rmtree, folder, True)
    return folder
