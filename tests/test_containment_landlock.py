"""Containment where the machine gives a worker no namespace: Landlock (sandbox/landlock.py).

`Limits(namespaces=False)` makes a candidate's worker run as it does where user namespaces
are refused (Ubuntu's AppArmor policy for unprivileged user namespaces): no PID, mount,
network or IPC namespace.  The file view kanalyze planned for the mount namespace then
holds through Landlock rules.  The hostile candidates of fixtures/kernelbench/hostile/ look
for kanalyze's files, write into the home and the project, signal kanalyze and run a file
they wrote; each test skips, saying why, where this kernel has no Landlock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from observed import observed_for

from kanalyze.dynamic.containment import gaps
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox import landlock, mounts
from kanalyze.dynamic.sandbox.process import Limits

pytest.importorskip("torch")
pytest.importorskip("triton")

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
NO_NAMESPACES = Limits(case_seconds=60, namespaces=False)


def _run(copy: Path, kernelbench: Path = KB) -> tuple[dict, dict]:
    """MEM002 on `copy` with no namespace for its worker: (its confinement, its verdicts)."""
    if landlock.abi() < 1:
        pytest.skip("no Landlock in this kernel")
    gate_run = run_gates(find_harness(str(copy), kernelbench=str(kernelbench)), ["MEM002"],
                         options=Options(mode="cpu", limits=NO_NAMESPACES))
    confinement = gate_run.environment["candidate_confinement"]
    assert confinement["pid_namespace"] == "namespaces not allowed to the worker", confinement
    assert confinement.get("files", "").startswith("Landlock"), confinement
    return confinement, {v.code: v.status for v in gate_run.verdicts}


def _hostile(tmp_path: Path, name: str) -> tuple[Path, Path]:
    copy = tmp_path / name / f"level1_problem6_{name}.py"
    copy.parent.mkdir()
    shutil.copy(KB / "hostile" / copy.name, copy)
    return copy, observed_for(copy)


def test_readable_roots_hold_everything_but_the_hidden_folders(tmp_path) -> None:
    for path in ("a/hidden/secret", "a/kept/file", "a/hidden-too/x", "b/file", "c/d/e"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "a" / "hidden")
    hidden = [str(tmp_path / "a" / "hidden"), str(tmp_path / "c" / "d")]
    roots = landlock.readable_roots(hidden, str(tmp_path))
    assert roots == [str(tmp_path / name) for name in ("a/hidden-too", "a/kept", "b")]


def test_rules_give_writes_to_the_scratch_and_caches_only_and_no_execution_there(tmp_path) -> None:
    scratch, cache = tmp_path / "run" / "scratch", tmp_path / "cache"
    scratch.mkdir(parents=True)
    cache.mkdir()
    view = {"keep": str(scratch), "hide": [str(tmp_path / "run")], "visible": [], "shown": [],
            "writable": [str(cache)], "private_shm": True, "mode": "cpu"}
    rules = dict(landlock.rules(view, 3))
    write = landlock.WRITE_FILE | landlock.MAKE_REG | landlock.REMOVE_FILE | landlock.TRUNCATE
    assert rules[str(scratch)] & write == write and rules[str(cache)] & write == write
    assert not rules[str(scratch)] & landlock.EXECUTE and not rules[str(cache)] & landlock.EXECUTE
    assert str(tmp_path / "run") not in rules and "/dev/shm" not in rules
    assert all(not access & landlock.MAKE_REG for path, access in rules.items() if path not in (str(scratch), str(cache)))
    assert rules["/dev/null"] == landlock.READ | landlock.DEVICE_WRITE
    assert not any(access & landlock.REFER for _, access in landlock.rules(view, 1))   # ABI 1 has no REFER


def test_the_candidate_sees_no_file_of_kanalyzes_and_writes_only_its_own(tmp_path, monkeypatch) -> None:
    from kanalyze import keys

    monkeypatch.setenv("KANALYZE_KEY_DIR", str(tmp_path / "keys"))
    keys.user_key(create=True)
    copy, observed = _hostile(tmp_path, "file_sniffer")
    witnesses = tmp_path / "project" / ".kanalyze" / "witnesses"
    witnesses.mkdir(parents=True)
    (witnesses / "level1_problem6_other-CMP001-0123456789.npz").write_bytes(b"the reference's failing slice")
    mounts.hide_from_candidates(str(witnesses))
    planted = [Path(folder) / f"planted-{os.getpid()}-{tmp_path.name}" for folder in ("/tmp", "/dev/shm")]
    for path in planted:
        path.write_text("a secret of the user's")
    (observed / "targets.json").write_text(json.dumps({"key_folder": str(tmp_path / "keys"),
                                                       "witness_folder": str(witnesses),
                                                       "planted": [str(path) for path in planted]}))
    try:
        confinement, verdicts = _run(copy)
    finally:
        for path in planted:
            path.unlink()
    found = json.loads((observed / "file-sniffer.json").read_text())
    assert found["arrays"] == [] and found["key"].startswith("refused"), found
    assert found["witnesses"].startswith("refused") and found["home"].startswith("refused"), found
    caches = found["caches"]
    assert caches["own"].startswith("written") and "/triton/" in caches["own"], caches
    assert caches["default"].startswith("refused") and caches["sibling"].startswith("refused"), caches
    shared = found["shared"]
    assert all(shared["read"][str(path)].startswith("refused") for path in planted), shared
    assert all(str(listed).startswith("refused") for listed in shared["listed"].values()), shared
    assert "/tmp hidden" in confinement["files"] and "/dev/shm hidden" in confinement["files"], confinement
    said = " ".join(gaps(confinement))
    assert "private view of the file system" not in said and "/dev/shm" not in said, said
    assert "no PID namespace" in said and "no IPC namespace" in said, said   # what Landlock does not give
    assert verdicts["MEM002"] == "refuted", verdicts


def test_the_candidate_cannot_write_into_the_project_or_system_folders(tmp_path, monkeypatch) -> None:
    project = tmp_path / "project"
    (project / "level1").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    problem = project / "level1" / "6_leaky_relu.py"
    shutil.copy(KB / "level1" / "6_leaky_relu.py", problem)
    copy = project / "candidates" / "level1_problem6_project_writer.py"
    copy.parent.mkdir()
    shutil.copy(KB / "hostile" / copy.name, copy)
    out = observed_for(copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "targets.json").write_text(json.dumps({"problem": str(problem), "cwd": str(project),
                                                  "elsewhere": str(elsewhere / "planted.txt"),
                                                  "system": f"/usr/local/planted-{os.getpid()}"}))
    monkeypatch.chdir(project)
    before = {path: path.read_bytes() for path in (problem, copy)}
    _, verdicts = _run(copy, kernelbench=project)
    found = json.loads((out / "project-writer.json").read_text())
    assert set(found) == {"beside", "own_source", "problem", "cwd", "elsewhere", "system"}, found
    assert all(result.startswith("refused") for result in found.values()), found
    assert {path: path.read_bytes() for path in (problem, copy)} == before
    assert not list(project.rglob("planted-*")) and not list(elsewhere.iterdir())
    assert verdicts["MEM002"] == "refuted", verdicts


def test_the_candidate_cannot_signal_or_read_kanalyze(tmp_path) -> None:
    copy, observed = _hostile(tmp_path, "pid_scan")
    (observed / "targets.json").write_text(json.dumps({"kanalyze": os.getpid()}))
    confinement, _ = _run(copy)
    if "signals" not in confinement:
        pytest.skip(f"Landlock without scopes here (ABI {landlock.abi()}, scopes from 6)")
    scan = json.loads((observed / "pid-scan.json").read_text())
    assert os.getpid() in scan["visible"], scan                 # processes stay in sight (no PID namespace)
    assert str(os.getpid()) not in scan["signalable"] and not scan["grandparent_signalable"], scan
    assert scan["signalable"] == {}, scan
    parent, observed = _hostile(tmp_path, "parent_environ")
    (observed / "targets.json").write_text(json.dumps({"kanalyze": os.getpid()}))
    _run(parent)
    attempts = json.loads((observed / "parent-environ.json").read_text())
    for who, tried in attempts.items():
        for part in ("environ", "fd/1", "mem"):
            assert tried[part].startswith("refused"), f"/proc/{tried['pid']}/{part} of {who}: {tried[part]}"


def test_a_file_the_candidate_wrote_cannot_be_executed_below_python(tmp_path) -> None:
    copy, observed = _hostile(tmp_path, "dropped_executable")
    confinement, verdicts = _run(copy)
    attempts = json.loads((observed / "dropped-executable.json").read_text())
    assert attempts["uname"] == "ran", attempts            # a system program still runs (the control)
    assert attempts["dropped"].startswith("refused"), attempts
    assert not (observed / "dropped-ran").exists(), "the dropped script ran"
    assert "nothing written there executable" in confinement["files"], confinement
    assert verdicts["MEM002"] == "refuted", verdicts
