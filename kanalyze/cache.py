"""A content-hash cache of per-file findings, as ruff's `.ruff_cache`.

One pickle per project under `.kanalyze_cache/`, keyed by path, holding the
SHA-256 of the text that was analyzed and the findings (before select/ignore,
which change without the text changing).  The cache is invalidated as a whole
when kanalyze itself changes (its version and the modification times of its
own source files form the key of the cache file).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path

import kanalyze

CACHE_DIRNAME = ".kanalyze_cache"


def _fingerprint(salt: str = "") -> str:
    package = Path(kanalyze.__file__).parent
    digest = hashlib.sha256((kanalyze.__version__ + salt).encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()[:16]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Cache:
    def __init__(self, file: Path | None) -> None:
        self.file = file
        self.entries: dict[str, tuple[str, list[dict], int]] = {}
        self.dirty = False
        if file is not None and file.is_file():
            try:
                with open(file, "rb") as handle:
                    self.entries = pickle.load(handle)
            except Exception:  # a corrupt or foreign cache is simply rebuilt
                self.entries = {}

    @classmethod
    def open(cls, root: str, salt: str = "") -> "Cache":
        """`salt`: settings that change findings (the proof ranges) key the cache too."""
        directory = Path(os.environ.get("KANALYZE_CACHE_DIR") or Path(root) / CACHE_DIRNAME)
        return cls(directory / f"static-{_fingerprint(salt)}.pickle")

    @classmethod
    def disabled(cls) -> "Cache":
        return cls(None)

    def get(self, path: str, text: str) -> tuple[list[dict], int] | None:
        entry = self.entries.get(os.path.abspath(path))
        if entry is None or entry[0] != _hash(text):
            return None
        return entry[1], entry[2]

    def put(self, path: str, text: str, findings: list[dict], suppressed: int) -> None:
        if self.file is None:
            return
        self.entries[os.path.abspath(path)] = (_hash(text), findings, suppressed)
        self.dirty = True

    def save(self) -> None:
        if self.file is None or not self.dirty:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.file.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Automatically created by kanalyze.\n*\n")
            for stale in self.file.parent.glob("static-*.pickle"):
                if stale != self.file:
                    stale.unlink(missing_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(self.entries, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.file)
        except OSError:
            pass  # a read-only tree still gets checked, just not cached
