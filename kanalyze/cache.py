"""A content-hash cache of per-file findings, as ruff's `.ruff_cache`.

One JSON file per project under `.kanalyze_cache/` (or `--cache-dir`, else
`$KANALYZE_CACHE_DIR`, else `cache-dir` in `[tool.kanalyze]`), keyed by
absolute path, holding the SHA-256 of the text that was analyzed, the
findings as `Finding.to_dict()` dicts (before select/ignore, which change
without the text changing) and how many findings noqa suppressed.  The cache is
invalidated as a whole when kanalyze itself changes: its version, the
modification times of its own source files and the settings that change
findings form the fingerprint in the cache file's name.

The cache is untrusted input.  Anything that can write the directory (a
candidate run by the dynamic pass, a checked-out repository) controls it, so it
is JSON, never pickle (unpickling runs code), and the loader accepts only what
`save` writes: every field is type-checked, every finding must round-trip
through `Finding`, and anything else is an empty cache that gets rebuilt.
A well-formed file could still claim that a file has no findings, so the
entries carry an HMAC under this user's signing key (keys.py): a cache that
kanalyze did not write is not read.  `static-*.pickle` files that older
versions wrote are deleted unread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import kanalyze
from kanalyze.findings import Finding
from kanalyze.keys import KeyUnavailable, key_id, mac, user_key

CACHE_DIRNAME = ".kanalyze_cache"
FORMAT = "kanalyze-static-cache/1"  # the file's "format" field: a JSON file of any other shape is ignored

# A real cache is a few hundred bytes per finding (megabytes for a large tree);
# a larger file was not written by kanalyze, and reading it would only cost memory.
MAX_CACHE_BYTES = 256 * 1024 * 1024

# path -> (sha256 of the text, finding dicts, suppressed count)
Entries = dict[str, tuple[str, list[dict], int]]


def _fingerprint(salt: str = "") -> str:
    package = Path(kanalyze.__file__).parent
    digest = hashlib.sha256((kanalyze.__version__ + salt).encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()[:16]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _is_finding(data: Any) -> bool:
    """Whether `data` is a dict that `Finding.to_dict` wrote: the right type in every field, and
    nothing that `Finding.from_dict` would drop or change (so no extra or missing keys)."""
    try:
        finding = Finding.from_dict(data)
        loc, witness = finding.location, finding.witness
        typed = (
            all(isinstance(s, str) for s in (finding.code, finding.name, finding.message, loc.file))
            and all(type(n) is int for n in (loc.row, loc.column, loc.end_row, loc.end_column))
            and (finding.kernel is None or isinstance(finding.kernel, str))
            and isinstance(finding.evidence, dict)
            and (witness is None or (isinstance(witness.clause, str) and isinstance(witness.gate, str)
                                     and (witness.path is None or isinstance(witness.path, str))))
        )
        # from_dict keeps the evidence dict itself, so this holds even with a NaN in it.
        return typed and finding.to_dict() == data
    except Exception:  # a missing key, a wrong type, an unknown status, ...: not ours
        return False


def _signature(key: bytes, entries: dict) -> str:
    return mac(key, json.dumps(entries, sort_keys=True, separators=(",", ":")).encode())


def _parse(raw: bytes) -> Entries:
    """The entries of a cache file's bytes; ValueError if they are not exactly what `save` writes,
    signed with this user's key."""
    document = json.loads(raw)
    if not isinstance(document, dict) or document.get("format") != FORMAT \
            or not isinstance(document.get("entries"), dict) or not isinstance(document.get("mac"), str):
        raise ValueError(f"not a {FORMAT} file")
    key = user_key(create=False)
    if key is None or not hmac.compare_digest(document["mac"], _signature(key, document["entries"])):
        raise ValueError("not signed with this user's key")
    entries: Entries = {}
    for path, entry in document["entries"].items():
        if not isinstance(entry, dict) or set(entry) != {"sha256", "findings", "suppressed"}:
            raise ValueError(f"malformed entry for {path!r}")
        digest, findings, suppressed = entry["sha256"], entry["findings"], entry["suppressed"]
        if not (isinstance(digest, str) and type(suppressed) is int and suppressed >= 0
                and isinstance(findings, list) and all(_is_finding(f) for f in findings)):
            raise ValueError(f"malformed entry for {path!r}")
        entries[path] = (digest, findings, suppressed)
    return entries


def _load(file: Path) -> Entries:
    """What `file` holds, or no entries if it is missing, unreadable, too large or malformed."""
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_CACHE_BYTES + 1)
        if len(raw) > MAX_CACHE_BYTES:
            return {}
        return _parse(raw)
    except Exception:  # OSError, bad JSON, too deeply nested (RecursionError), a wrong shape, ...
        return {}


class Cache:
    """One run's view of the cache: `get` before analyzing a file, `put` after, `save` at the end."""

    def __init__(self, file: Path | None) -> None:
        self.file = file
        self.entries: Entries = _load(file) if file is not None and file.is_file() else {}
        self.dirty = False

    @classmethod
    def open(cls, root: str, salt: str = "", directory: str | None = None) -> "Cache":
        """`salt`: settings that change findings (the proof ranges) key the cache too.
        `directory`: `--cache-dir` or `cache-dir` (Config.cache_dir); else $KANALYZE_CACHE_DIR,
        else `.kanalyze_cache` in `root`."""
        directory = Path(directory or os.environ.get("KANALYZE_CACHE_DIR") or Path(root) / CACHE_DIRNAME)
        return cls(directory / f"static-{_fingerprint(salt)}.json")

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
        directory = self.file.parent
        entries = {path: {"sha256": digest, "findings": findings, "suppressed": suppressed}
                   for path, (digest, findings, suppressed) in self.entries.items()}
        try:
            key = user_key(create=True)
        except KeyUnavailable:
            return  # no key, no cache: the next run analyzes again
        document = {"format": FORMAT, "key_id": key_id(key), "mac": _signature(key, entries), "entries": entries}
        try:
            directory.mkdir(parents=True, exist_ok=True)
            gitignore = directory / ".gitignore"
            if not os.path.lexists(gitignore):  # not `exists()`: never write through a planted symlink
                gitignore.write_text("# Automatically created by kanalyze.\n*\n")
            # Caches of other fingerprints are stale; pickles (from older versions) are never read.
            for stale in [*directory.glob("static-*.json"), *directory.glob("static-*.pickle")]:
                if stale != self.file:
                    stale.unlink(missing_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle)
            os.replace(tmp, self.file)
        except OSError:
            pass  # a read-only tree still gets checked, just not cached
