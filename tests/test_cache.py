"""The static pass's findings cache (kanalyze/cache.py) is untrusted input.

Anything that can write `.kanalyze_cache/` (a candidate run by the dynamic pass, a
checked-out repository) must not get code run by the next `kanalyze check`, nor
make it crash or answer from a malformed cache: such a cache is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import textwrap
from pathlib import Path

import pytest

from kanalyze import cache as cache_module
from kanalyze import keys
from kanalyze.check import run_static
from kanalyze.cli import main
from kanalyze.config import load_config

KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        c = tl.dot(a, b)
        tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
''')


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A project with one flagged file (PRC001) and one whose finding noqa suppresses."""
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "quiet.py").write_text(KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC001"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    # The real fingerprint changes whenever a kanalyze source file is saved, which would make a
    # test in progress look at a new, empty cache: pin it (the settings still key the cache).
    monkeypatch.setattr(cache_module, "_fingerprint", lambda salt="": hashlib.sha256(salt.encode()).hexdigest()[:16])
    return tmp_path


def check():
    return run_static(["."], load_config(["."]), jobs=1)


def as_dicts(result) -> list[dict]:
    return [f.to_dict() for f in result.findings]


def cache_file(project: Path) -> Path:
    """The one cache file that a run wrote (its name carries the fingerprint)."""
    files = list((project / ".cache").glob("static-*"))
    assert len(files) == 1, files
    return files[0]


class Payload:
    """Unpickling this creates `marker`: what a hostile cache would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_a_warm_run_answers_from_the_cache(project) -> None:
    cold = check()
    assert (cold.files_parsed, cold.files_from_cache, cold.suppressed) == (2, 0, 1)
    assert [f.code for f in cold.findings] == ["PRC001"]
    assert cache_file(project).suffix == ".json"
    assert json.loads(cache_file(project).read_text())["format"] == cache_module.FORMAT

    warm = check()
    assert (warm.files_parsed, warm.files_from_cache, warm.suppressed) == (0, 2, 1)
    assert as_dicts(warm) == as_dicts(cold)


@pytest.mark.parametrize("suffix", [".pickle", ".json"])
def test_a_planted_pickle_is_never_unpickled(project, capsys, suffix) -> None:
    marker = project / "pwned"
    payload = pickle.dumps({"entries": Payload(marker)})
    pickle.loads(payload)  # the payload is armed: loading it does create the marker
    assert marker.exists()
    marker.unlink()

    assert main(["check", ".", "--output-format", "json"]) == 1
    cold = json.loads(capsys.readouterr().out)
    # Where kanalyze would look: this version's file, and the same fingerprint as a pickle
    # (the name that the pickle-based cache read).
    planted = cache_file(project).with_suffix(suffix)
    cache_file(project).unlink()
    planted.write_bytes(payload)

    code = main(["check", ".", "--output-format", "json"])
    assert not marker.exists()
    assert code == 1
    assert json.loads(capsys.readouterr().out) == cold
    assert not planted.with_suffix(".pickle").exists()  # a stale pickle is deleted when the cache is written
    assert cache_file(project).suffix == ".json"


def _mutate(path: str, change):
    """A change to the cache document that makes it malformed, applied to the entry of `path`."""
    def apply(document: dict) -> dict:
        entry = next(v for k, v in document["entries"].items() if k.endswith(path))
        change(entry)
        return document
    return apply


def _set_finding(key: str, value):
    return _mutate("kern.py", lambda entry: entry["findings"][0].__setitem__(key, value))


MALFORMED = {
    "not a dict": lambda d: [d],
    "another format": lambda d: {**d, "format": "kanalyze-static-cache/0"},
    "entries is a list": lambda d: {**d, "entries": list(d["entries"].items())},
    "entry is empty": _mutate("kern.py", lambda e: e.clear()),
    "extra entry key": _mutate("kern.py", lambda e: e.__setitem__("code", "print(1)")),
    "sha256 is an int": _mutate("kern.py", lambda e: e.__setitem__("sha256", 7)),
    "suppressed is a string": _mutate("quiet.py", lambda e: e.__setitem__("suppressed", "1")),
    "suppressed is a bool": _mutate("quiet.py", lambda e: e.__setitem__("suppressed", True)),
    "suppressed is negative": _mutate("quiet.py", lambda e: e.__setitem__("suppressed", -5)),
    "findings is a dict": _mutate("kern.py", lambda e: e.__setitem__("findings", {})),
    "finding is a string": _mutate("kern.py", lambda e: e["findings"].__setitem__(0, "PRC001")),
    "message is missing": _mutate("kern.py", lambda e: e["findings"][0].pop("message")),
    "message is a list": _set_finding("message", ["x"]),
    "row is a string": _set_finding("location", {"row": "10", "column": 9}),
    "row is a float": _set_finding("location", {"row": 10.0, "column": 9}),
    "unknown status": _set_finding("status", "fixed"),
    "unknown finding key": _set_finding("__class__", "os.system"),
    "evidence is a list": _set_finding("evidence", [1]),
    "kernel is an int": _set_finding("kernel", 3),
    "witness without a gate": _set_finding("witness", {"clause": "PRC001"}),
}


def _signed(document: dict, key: bytes | None = None) -> dict:
    """The document signed again, with this user's key unless another is given."""
    if not isinstance(document, dict) or "entries" not in document:
        return document                      # nothing a signature could cover
    key = key or keys.user_key(create=False)
    return {**document, "mac": cache_module._signature(key, document["entries"])}


@pytest.mark.parametrize("change", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_wrongly_typed_cache_is_ignored_and_rebuilt(project, change) -> None:
    """Signed again after the change: the type checks hold on their own, behind the signature."""
    cold = check()
    file = cache_file(project)
    file.write_text(json.dumps(_signed(change(json.loads(file.read_text())))))

    again = check()
    assert (again.files_parsed, again.files_from_cache, again.suppressed) == (2, 0, 1)
    assert as_dicts(again) == as_dicts(cold)
    assert check().files_from_cache == 2  # rebuilt: the next run reads it again


@pytest.mark.parametrize("signing", ["unsigned", "another key"])
def test_a_forged_clean_cache_is_not_believed(project, signing) -> None:
    """A well-formed cache that says the flagged file has no findings: not written by this user's kanalyze."""
    cold = check()
    file = cache_file(project)
    document = json.loads(file.read_text())
    for entry in document["entries"].values():
        entry["findings"] = []
    if signing == "another key":
        document = _signed(document, b"x" * 32)
    file.write_text(json.dumps(document))

    again = check()
    assert again.files_from_cache == 0 and [f.code for f in again.findings] == ["PRC001"]
    assert as_dicts(again) == as_dicts(cold)


CORRUPT = {
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "not UTF-8": lambda raw: b"\xff\xfe" + raw,
    "binary junk": lambda raw: bytes(range(256)),
    "nested too deeply to parse": lambda raw: b"[" * 200_000 + b"]" * 200_000,
    "huge number": lambda raw: raw.replace(b'"suppressed": 0', b'"suppressed": ' + b"9" * 10_000, 1),
}


@pytest.mark.parametrize("change", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_cache_is_ignored_and_rebuilt(project, change) -> None:
    cold = check()
    file = cache_file(project)
    file.write_bytes(change(file.read_bytes()))

    again = check()
    assert (again.files_parsed, again.files_from_cache) == (2, 0)
    assert as_dicts(again) == as_dicts(cold)
    assert check().files_from_cache == 2


def test_an_oversized_cache_is_not_read(project, monkeypatch) -> None:
    check()
    size = cache_file(project).stat().st_size
    monkeypatch.setattr(cache_module, "MAX_CACHE_BYTES", size - 1)
    assert check().files_from_cache == 0
    monkeypatch.setattr(cache_module, "MAX_CACHE_BYTES", size)
    assert check().files_from_cache == 2


def test_the_cache_does_not_write_through_a_planted_gitignore_symlink(project, tmp_path_factory) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "created-by-kanalyze"
    (project / ".cache").mkdir()
    (project / ".cache" / ".gitignore").symlink_to(target)
    check()
    assert not target.exists()
    assert cache_file(project).suffix == ".json"
