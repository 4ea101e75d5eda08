"""The IR stage's cache: compiled artifacts and compilation plans, on disk.

Compiling is slow (about a second per kernel configuration), so every result
is kept under `.kanalyze_cache/ir/`, one gzip'd JSON file per key:

  - `job-<sha>`: the compiled configurations of one kernel launch context for
    one target (PTX, TTIR, compact SASS, resources, or the error), keyed by
    the scratch module's text, the context, the target, the Triton version and
    the `TRITON_*` environment; an edit elsewhere in the file (a wrapper, a
    test) changes none of these, so nothing recompiles;
  - `plan-<sha>`: the plan of one file, keyed by its text and the settings,
    so a warm run does not even parse the file.

Timeouts and crashes are not cached (they may pass next time); compile errors
are (they will not).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

FORMAT = "ir-4"  # bump when what is stored changes


@lru_cache(maxsize=None)
def tool_versions() -> str:
    """Triton's version and the `TRITON_*` settings that change its output; no import of triton."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        triton = version("triton")
    except PackageNotFoundError:
        triton = "none"
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and k != "TRITON_CACHE_DIR")
    return json.dumps([FORMAT, triton, env])


@lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """The analyzer's own code (plans and scans are computed by it): versions and
    modification times of kanalyze/analyzer/**.py.  Once per process."""
    import kanalyze

    package = Path(kanalyze.__file__).parent / "analyzer"
    stamp = hashlib.sha256(kanalyze.__version__.encode())
    for directory, _, files in sorted(os.walk(package)):
        for name in sorted(files):
            if name.endswith(".py"):
                stat = os.stat(os.path.join(directory, name))
                stamp.update(f"{directory}/{name}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return stamp.hexdigest()[:16]


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:40]


class ArtifactCache:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0

    @classmethod
    def open(cls, root: str) -> "ArtifactCache":
        base = Path(os.environ.get("KANALYZE_CACHE_DIR") or Path(root) / ".kanalyze_cache")
        return cls(base / "ir")

    @classmethod
    def disabled(cls) -> "ArtifactCache":
        return cls(None)

    def get(self, key: str) -> Any | None:
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json.gz"
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                value = json.load(handle)
        except (OSError, ValueError, EOFError):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: Any) -> None:
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            gitignore = self.directory.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Automatically created by kanalyze.\n*\n")
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5) as handle:
                handle.write(json.dumps(value).encode("utf-8"))
            os.replace(tmp, self.directory / f"{key}.json.gz")
        except OSError:
            pass  # a read-only tree is still checked, just not cached
