"""`kanalyze replay` over several witnesses or a folder of them: one line each, its path first;
one that cannot be replayed is said on its line and the others go on; exit 1 while any still
fails, else 2 while any is undecided, else 0.  The gate is the stand-in of
tests/test_witness_integrity.py, except in the last test, which replays for real on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_witness_integrity import FakeGate, _write

from kanalyze.cli import main


@pytest.fixture
def keys(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KANALYZE_KEY_DIR", str(tmp_path / "keys"))
    return tmp_path / "keys"


@pytest.fixture
def gate(monkeypatch) -> FakeGate:
    fake = FakeGate("confirmed")
    monkeypatch.setattr("kanalyze.dynamic.runner.run_gates", fake)
    return fake


def _three(project: Path) -> tuple[Path, Path, Path]:
    """Three witnesses in one folder, the last changed after it was written."""
    plus, minus, changed = (_write(project, special) for special in ("+inf", "-inf", "nan"))
    record = json.loads(changed.read_text())
    record["cases"][0]["seed"] += 1
    changed.write_text(json.dumps(record, indent=2))
    return plus, minus, changed


def _replay(capsys, *paths) -> tuple[int, str]:
    code = main(["replay", *map(str, paths), "--device", "cpu"])
    return code, capsys.readouterr().out


def test_a_folder_replays_every_witness_and_a_bad_one_stops_none(tmp_path, keys, gate, capsys) -> None:
    plus, minus, changed = _three(tmp_path / "project")
    code, out = _replay(capsys, plus.parent)
    lines = out.splitlines()
    assert code == 1, out                                     # two still fail
    assert len(lines) == 3 and sorted(lines) == lines         # one a witness, in the folder's sorted order
    by_path = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines}
    assert by_path[str(plus)].startswith("EXC001 confirmed: stand-in confirmed")
    assert by_path[str(minus)].startswith("EXC001 confirmed")
    refused = by_path[str(changed)]
    assert refused.startswith("not replayed: ") and "changed after it was written" in refused
    assert sorted(c[0].special for c in gate.calls) == ["+inf", "-inf"]   # the changed one never ran


def test_the_exit_says_whether_all_are_fixed(tmp_path, keys, gate, capsys) -> None:
    plus, minus, changed = _three(tmp_path / "project")
    gate.status = "refuted"
    assert _replay(capsys, plus, minus)[0] == 0               # every one fixed
    assert _replay(capsys, plus, minus, changed)[0] == 2      # fixed, but one could not be replayed
    gate.status = "unconfirmed"
    assert _replay(capsys, plus, minus)[0] == 2               # undecided is never "fixed"
    assert len(gate.calls) == 6


def test_json_lists_each_witness(tmp_path, keys, gate, capsys) -> None:
    plus, _, changed = _three(tmp_path / "project")
    code = main(["replay", str(plus), str(changed), "--device", "cpu", "--output-format", "json"])
    found = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [(r["witness"], r["code"], r["status"]) for r in found] == [(str(plus), "EXC001", "confirmed"),
                                                                        (str(changed), None, "error")]
    assert "changed after it was written" in found[1]["summary"]


def test_a_missing_path_or_an_empty_folder_is_a_usage_error(tmp_path, keys, gate, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["replay", str(tmp_path / "nowhere.json")]) == 2
    assert "no such witness file or folder" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "empty")]) == 2
    assert "no witness (*.json)" in capsys.readouterr().err
    assert gate.calls == []


def test_two_witnesses_for_real_in_one_process(tmp_path, keys, capsys, monkeypatch) -> None:
    """The tanh-as-a-ratio plant turns +inf into NaN; -inf reaches no output as a non-finite value
    (tanh(-inf) = -1), so that witness cannot show the violation: each witness gets its own
    verdict, and the workers of both are forked by one zygote (the process's: its imports paid once)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from kanalyze.dynamic.sandbox import zygote_client

    started = []
    real = zygote_client.Zygote

    class Counted(real):
        def __init__(self, *args, **kwargs) -> None:
            started.append(args[0])
            super().__init__(*args, **kwargs)

    zygote_client.shutdown_all()
    monkeypatch.setattr(zygote_client, "Zygote", Counted)
    plus, minus = _write(tmp_path / "project", "+inf"), _write(tmp_path / "project", "-inf")
    code, out = _replay(capsys, plus, minus)
    assert code == 1, out
    assert [line.split(": ", 2)[1] for line in out.splitlines()] == ["EXC001 confirmed", "EXC001 unconfirmed"], out
    assert started == ["cpu"] or zygote_client.status().get("cpu", "").startswith(zygote_client.DISABLE), started
