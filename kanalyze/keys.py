"""This user's signing key: what makes kanalyze's own files tamper-evident.

Witnesses (dynamic/witness.py) and the static cache (cache.py) are written by
kanalyze and read back later, while untrusted code (a candidate kernel run by
the dynamic pass, a checked-out repository) may be able to write where they
lie.  Both carry an HMAC-SHA256 under one per-user key, so that a changed file
is told apart from one kanalyze wrote.  The key is 32 random bytes in
`$KANALYZE_KEY_DIR`, else `$XDG_DATA_HOME/kanalyze`, else
`~/.local/share/kanalyze`; file `signing.key`, mode 0600 in a 0700 folder,
created on first use.  A process running as the same user that can read the
key can forge a signature: keeping candidates from reading it is the sandbox's
job.  Nothing here imports anything of kanalyze's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

KEY_DIRECTORY_VARIABLE = "KANALYZE_KEY_DIR"
KEY_FILE = "signing.key"
KEY_BYTES = 32


class KeyUnavailable(Exception):
    """The key cannot be read or made (a read-only home, a damaged key file)."""


def key_directory() -> str:
    """Where this user's key lives: never inside a project or a worker's scratch directory."""
    explicit = os.environ.get(KEY_DIRECTORY_VARIABLE)
    if explicit:
        return explicit
    data = os.environ.get("XDG_DATA_HOME")
    if not data or not os.path.isabs(data):  # the XDG spec: a relative value is ignored
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "kanalyze")


def key_path() -> str:
    return os.path.join(key_directory(), KEY_FILE)


def user_key(create: bool) -> bytes | None:
    """This user's key; with `create`, made on first use.  None when there is none and `create` is False."""
    path = key_path()
    if os.path.exists(path):
        return _read_key(path)
    if not create:
        return None
    return _create_key(path)


def key_id(key: bytes) -> str:
    """Names a key without revealing it: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:16]


def mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _read_key(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            key = handle.read(KEY_BYTES + 1)
    except OSError as exc:
        raise KeyUnavailable(f"cannot read the signing key {path}: {exc}") from exc
    if len(key) != KEY_BYTES:
        raise KeyUnavailable(f"the signing key {path} holds {len(key)} bytes, not {KEY_BYTES}: delete it "
                             f"(what it signed can then no longer be verified)")
    return key


def _create_key(path: str) -> bytes:
    """Write a new key so that no reader ever sees a partial one: a private file of our own
    (O_CREAT|O_EXCL, mode 0600), then a hard link to the key's name, which fails if another
    process made the key first; then theirs is the key."""
    directory = os.path.dirname(path)
    mine = os.path.join(directory, f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(8)}")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(mine, path)
        except FileExistsError:
            pass  # another process created it first: read theirs
    except OSError as exc:
        raise KeyUnavailable(f"cannot create the signing key in {directory}: {exc} "
                             f"(set {KEY_DIRECTORY_VARIABLE} to a private directory of yours)") from exc
    finally:
        if os.path.exists(mine):
            os.unlink(mine)
    return _read_key(path)
