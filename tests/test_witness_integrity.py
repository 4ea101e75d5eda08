"""Witnesses are signed when written, and `kanalyze replay` refuses one that changed since.

A candidate (or a daemon it left running) that edits its witness — the
injected special, the seed, the candidate's path, the `.npz` — must never turn
a failing witness into "fixed" (exit 0): replay checks the HMAC first and
exits 2 with what differs.  Every test signs with a key in a tmp directory
(KANALYZE_KEY_DIR); the gate itself is replaced by a stand-in that records
whether it ran, except in the last test, which replays for real on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kanalyze import keys as keys_module
from kanalyze.cli import main
from kanalyze.dynamic import witness
from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates.base import Verdict
from kanalyze.dynamic.harness import Harness

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
PLANT, TWIN = "level1_problem2_tanh_exp_ratio.py", "level1_problem2_tanh_stable.py"
RETRUST = "kanalyze check --dynamic"


@pytest.fixture
def keys(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "keys"
    monkeypatch.setenv("KANALYZE_KEY_DIR", str(directory))
    return directory


def _write(project: Path, special: str = "+inf") -> Path:
    """An EXC001 witness as the gate writes it for the tanh-as-a-ratio plant (no worker runs)."""
    project.mkdir(parents=True, exist_ok=True)
    shutil.copy(KB / "candidates" / PLANT, project / PLANT)
    harness = Harness("kernelbench", str(project / PLANT), str(KB / "level1/2_tanh.py"),
                      {"batch_size": 16, "dim": 1024}, "ModelNew")
    case = Case(f"EXC001/{special}", "EXC001", {"batch_size": 16, "dim": 1024}, seed=3, special=special)
    verdict = Verdict("EXC001", "confirmed", f"with {special} injected: 3 of 16384 elements in the wrong class",
                      [case], {"special": special, "observed": np.float32("nan"), "expected": 1.0},
                      {"observed": np.full(4, np.nan), "expected": np.ones(4)}, "exc001-nonfinite-injection")
    return Path(witness.write(verdict, harness, {"mode": "cpu"}, str(project / ".kanalyze" / "witnesses")))


class FakeGate:
    """Stands in for run_gates: answers `status` and remembers whether replay got that far."""

    def __init__(self, status: str) -> None:
        self.status, self.calls = status, []

    def __call__(self, harness, codes, flags, options, cases=None):
        self.calls.append(cases)
        return SimpleNamespace(verdicts=[Verdict(codes[0], self.status, f"stand-in {self.status}", cases)])


@pytest.fixture
def gate(monkeypatch) -> FakeGate:
    fake = FakeGate("refuted")   # what a tampered witness would hope for
    monkeypatch.setattr("kanalyze.dynamic.runner.run_gates", fake)
    return fake


def _replay(path: Path, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["replay", str(path), "--device", "cpu", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def _edit(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=2))


# ---------------------------------------------------------------- a fresh witness

def test_a_fresh_witness_is_signed_and_replays(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    record = json.loads(path.read_text())
    integrity = record["integrity"]
    key = (keys / "signing.key").read_bytes()
    npz = path.with_suffix(".npz")
    assert integrity["algorithm"] == "hmac-sha256"
    assert integrity["key_id"] == hashlib.sha256(key).hexdigest()[:16]
    assert integrity["files"] == {npz.name: hashlib.sha256(npz.read_bytes()).hexdigest()}
    assert len(integrity["digest"]) == 64

    witness.verify(witness.load(str(path)), str(path))          # raises if it does not hold
    assert _replay(path, capsys)[:2] == (0, "EXC001 refuted: stand-in refuted\n")
    gate.status = "confirmed"
    assert _replay(path, capsys)[0] == 1
    assert [c[0].special for c in gate.calls] == ["+inf", "+inf"]   # the witness's own cases ran


def test_a_witness_survives_being_moved_with_its_npz(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    moved = tmp_path / "elsewhere"
    shutil.copytree(path.parent, moved)
    assert _replay(moved / path.name, capsys)[0] == 0 and len(gate.calls) == 1


# ---------------------------------------------------------------- changed witnesses

def _case(field, value):
    def change(record):
        record["cases"][0][field] = value
    return change


def _set_candidate(record):
    record["harness"]["candidate"] = record["harness"]["candidate"].replace("exp_ratio", "stable")


JSON_EDITS = {
    "injected special": _case("special", "nan"),
    "seed": _case("seed", 4),
    "sizes": _case("sizes", {"batch_size": 1, "dim": 1}),
    "candidate path": _set_candidate,
    "clause": lambda record: record.update(clause="ORD001"),
    "recorded npz hash": lambda record: record["integrity"]["files"].update(
        {record["arrays"]: hashlib.sha256(b"other arrays").hexdigest()}),
    "digest": lambda record: record["integrity"].update(digest="0" * 64),
    "arrays renamed": lambda record: record.update(arrays="../../elsewhere.npz"),
}


@pytest.mark.parametrize("edit", sorted(JSON_EDITS))
def test_an_edited_json_is_refused(tmp_path, keys, gate, capsys, edit) -> None:
    path = _write(tmp_path / "project")
    if edit == "candidate path":
        shutil.copy(KB / "candidates" / TWIN, path.parents[2] / TWIN)   # a fixed twin to point at
    _edit(path, JSON_EDITS[edit])
    code, out, err = _replay(path, capsys)
    assert code == 2 and out == "" and not gate.calls
    assert "the witness was changed after it was written" in err and "it cannot be replayed" in err
    assert RETRUST in err


def test_an_edited_value_is_named_as_the_record(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    _edit(path, JSON_EDITS["injected special"])
    err = _replay(path, capsys)[2]
    assert "the JSON record does not match its signature" in err and ".npz" not in err


def test_a_changed_byte_of_the_npz_is_refused(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    npz = path.with_suffix(".npz")
    data = bytearray(npz.read_bytes())
    data[-30] ^= 0x01
    npz.write_bytes(bytes(data))
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls
    assert f"the .npz {npz.name}'s SHA-256 is" in err and RETRUST in err


def test_a_deleted_npz_is_refused(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    path.with_suffix(".npz").unlink()
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls
    assert f"the .npz {path.with_suffix('.npz').name} is missing" in err


@pytest.mark.parametrize("integrity", [None, "absent", "garbage", {"algorithm": "sha1"}])
def test_a_stripped_or_malformed_integrity_record_is_refused(tmp_path, keys, gate, capsys, integrity) -> None:
    path = _write(tmp_path / "project")

    def change(record):
        if integrity == "absent":
            del record["integrity"]
        else:
            record["integrity"] = integrity
    _edit(path, change)
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls and RETRUST in err
    if integrity in (None, "absent"):
        assert "the witness is not signed" in err
    else:
        assert "integrity record is malformed" in err


def test_a_witness_signed_with_another_key_is_refused(tmp_path, monkeypatch, gate, capsys) -> None:
    monkeypatch.setenv("KANALYZE_KEY_DIR", str(tmp_path / "their-keys"))
    path = _write(tmp_path / "project")
    theirs = keys_module.key_id((tmp_path / "their-keys" / "signing.key").read_bytes())

    monkeypatch.setenv("KANALYZE_KEY_DIR", str(tmp_path / "my-keys"))   # no key here yet
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls
    assert f"signed with another key ({theirs}; this user has no witness key yet" in err
    assert not (tmp_path / "my-keys").exists()                          # replay creates no key
    assert RETRUST in err and "--trust" in err

    _write(tmp_path / "mine")                                           # now there is one, a different one
    mine = keys_module.key_id((tmp_path / "my-keys" / "signing.key").read_bytes())
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls
    assert f"signed with another key ({theirs}; this user's key is {mine}" in err


def test_trust_replays_anyway_with_a_warning(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    _edit(path, JSON_EDITS["injected special"])
    code, out, err = _replay(path, capsys, "--trust")
    assert code == 0 and len(gate.calls) == 1 and gate.calls[0][0].special == "nan"
    assert "warning: --trust" in err and "without checking its signature" in err


# ---------------------------------------------------------------- the key

def test_the_key_is_private_and_made_once(tmp_path, keys) -> None:
    first = _write(tmp_path / "a")
    key_file = keys / "signing.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert len(key_file.read_bytes()) == 32
    second = _write(tmp_path / "b")
    key_ids = {json.loads(p.read_text())["integrity"]["key_id"] for p in (first, second)}
    assert key_ids == {keys_module.key_id(key_file.read_bytes())}
    assert os.listdir(keys) == ["signing.key"]                          # no temporary file left behind


def test_callers_racing_to_make_the_key_agree_on_one(keys) -> None:
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: keys_module.user_key(create=True), range(16)))
    assert len(set(made)) == 1 and made[0] == (keys / "signing.key").read_bytes()


def test_an_existing_key_is_used_not_replaced(keys) -> None:
    keys.mkdir(mode=0o700)
    (keys / "signing.key").write_bytes(b"k" * 32)
    assert keys_module.user_key(create=True) == b"k" * 32


def test_a_damaged_key_is_an_error_that_says_what_to_do(tmp_path, keys, gate, capsys) -> None:
    path = _write(tmp_path / "project")
    (keys / "signing.key").write_bytes(b"short")
    code, out, err = _replay(path, capsys)
    assert code == 2 and not gate.calls
    assert "holds 5 bytes, not 32" in err and "delete it" in err


def test_the_key_lives_in_the_user_data_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KANALYZE_KEY_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert keys_module.key_path() == str(tmp_path / "data" / "kanalyze" / "signing.key")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert keys_module.key_path() == str(tmp_path / "home" / ".local" / "share" / "kanalyze" / "signing.key")


# ---------------------------------------------------------------- for real, on the CPU

def test_the_attack_for_real(tmp_path, keys, capsys) -> None:
    """The plant turns +inf into NaN; editing the witness to inject NaN instead (which it
    propagates correctly) would replay as fixed.  Signed, the edit is refused."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    path = _write(tmp_path / "project")
    code, out, err = _replay(path, capsys)
    assert code == 1 and out.startswith("EXC001 confirmed: with +inf injected"), out + err

    _edit(path, JSON_EDITS["injected special"])
    code, out, err = _replay(path, capsys)
    assert code == 2 and "the witness was changed after it was written" in err
    code, out, err = _replay(path, capsys, "--trust")                  # what the edit was after
    assert code == 0 and out.startswith("EXC001 refuted"), out + err


def test_a_large_array_keeps_the_window_around_the_failure() -> None:
    big = np.arange(1000 * 1000, dtype=np.float32).reshape(1000, 1000)
    kept, slices = witness.failing_slices({"observed0": big, "small": np.zeros(3)}, [500, 7])
    window = kept["observed0"]
    assert window.size == witness.MAX_WITNESS_ELEMENTS and kept["small"].size == 3
    info = slices["observed0"]
    assert info["shape"] == [1000, 1000] and "small" not in slices
    flat = 500 * 1000 + 7
    assert info["offset"] <= flat < info["offset"] + info["count"]
    assert window[flat - info["offset"]] == big[500, 7]
