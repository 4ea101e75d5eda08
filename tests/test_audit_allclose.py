"""KernelBench's allclose check runs the candidate in a process of its own, confined as a
candidate's worker is (sandbox/cage.py): nothing of it outlives the check, whether the check
times out or whoever asked for it dies first (a Verifier's overlapped check, an audit pair's
worker killed at its limit); it cannot write into the project, signal the caller or open its
/proc files; and what it leaves as its verdict is read as untrusted input (a FIFO, a link, a
huge file or garbage is a CRASHED verdict, never a hang or a traceback).  The hostile
candidates are those of fixtures/kernelbench/hostile/, reporting through `observed/` as in
tests/test_containment.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from observed import observed_for

from kanalyze.audit import allclose

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
PROBLEM = str(KB / "level1" / "6_leaky_relu.py")


def _running(marker: str) -> list[int]:
    """Processes whose command line names `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _gone(marker: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _running(marker)


def _hanging_candidate(tmp_path: Path) -> str:
    path = tmp_path / f"hang_{os.getpid()}_{time.monotonic_ns()}.py"   # a name no other process has
    shutil.copyfile(KB / "hostile" / "level1_problem6_hang.py", path)
    return str(path)


def test_a_check_past_its_limit_leaves_nothing_running(tmp_path) -> None:
    candidate = _hanging_candidate(tmp_path)
    result = allclose.check(PROBLEM, candidate, "cpu", 4.0)
    assert result["verdict"] == "TIMEOUT"
    assert _gone(candidate)


def test_a_candidate_that_sleeps_at_import_is_cut_off_at_the_import_limit(tmp_path, monkeypatch) -> None:
    """The candidate's import has the gates' limit (here 3 s): the check is a TIMEOUT that says
    so well before the check's own limit, and nothing of the candidate is left running."""
    monkeypatch.setattr(allclose, "_import_seconds", lambda candidate: 3.0)
    candidate = tmp_path / f"sleep_{os.getpid()}_{time.monotonic_ns()}.py"
    shutil.copyfile(KB / "hostile" / "level1_problem6_import_sleep.py", candidate)
    result = allclose.check(PROBLEM, str(candidate), "cpu", 120.0)
    assert result["verdict"] == "TIMEOUT" and "import did not finish within 3 s" in result["detail"], result
    assert result["seconds"] < 60, result
    assert _gone(str(candidate))
    # an import that fails ends the import too: KernelBench's rejection, never a timeout
    failing = allclose.check(PROBLEM, str(KB / "hostile" / "level1_problem6_import_error.py"), "cpu", 120.0)
    assert failing["verdict"] == "ERROR" and "ImportError" in failing["detail"], failing


def test_a_check_whose_caller_dies_ends_with_it(tmp_path) -> None:
    candidate = _hanging_candidate(tmp_path)
    caller = textwrap.dedent(f"""
        import os, threading, time
        from kanalyze.audit import allclose
        threading.Thread(target=allclose.check, args=({PROBLEM!r}, {candidate!r}, "cpu", 600.0),
                         daemon=True).start()
        time.sleep(4)
        os._exit(0)   # gone mid-check, as a killed audit pair or a crashed training loop
    """)
    subprocess.run([sys.executable, "-c", caller], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   timeout=60, check=True)
    assert _gone(candidate), "the allclose check outlived its caller"


def _hostile(tmp_path: Path, name: str) -> tuple[dict, Path]:
    """KernelBench's check of a copy of the hostile candidate `name`: (its result, its observed/)."""
    copy = tmp_path / f"level1_problem6_{name}.py"
    shutil.copy(KB / "hostile" / copy.name, copy)
    observed = observed_for(copy)
    (observed / "targets.json").write_text(json.dumps({"kanalyze": os.getpid()}))
    result = allclose.check(PROBLEM, str(copy), "cpu", 60.0)
    # Each is a correct kernel: what it tried did not disturb its own run.
    assert result["verdict"] == "PASS", result
    return result, observed


def _needs(result: dict, words: str) -> None:
    """Skip, saying why, where this machine gave the check's process no such confinement."""
    lacking = [gap for gap in result["contained"] if words in gap]
    if lacking:
        pytest.skip(lacking[0])


def test_the_checks_process_cannot_write_into_the_project(tmp_path, monkeypatch) -> None:
    project = tmp_path / "project"
    (project / "level1").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    problem = project / "level1" / "6_leaky_relu.py"
    shutil.copy(PROBLEM, problem)
    copy = project / "level1_problem6_project_writer.py"
    shutil.copy(KB / "hostile" / copy.name, copy)
    out = observed_for(copy)
    (out / "targets.json").write_text(json.dumps({"problem": str(problem), "cwd": str(project)}))
    monkeypatch.chdir(project)
    before = {path: path.read_bytes() for path in (problem, copy)}
    result = allclose.check(str(problem), str(copy), "cpu", 60.0)
    assert result["verdict"] == "PASS", result
    _needs(result, "private view of the file system")
    found = json.loads((out / "project-writer.json").read_text())
    assert set(found) == {"beside", "own_source", "problem", "cwd"}, found
    assert all(attempt.startswith("refused") for attempt in found.values()), found
    assert {path: path.read_bytes() for path in (problem, copy)} == before
    assert not list(project.rglob("planted-*"))


def test_the_checks_process_cannot_signal_or_read_its_caller(tmp_path) -> None:
    result, observed = _hostile(tmp_path, "pid_scan")
    _needs(result, "PID namespace")
    scan = json.loads((observed / "pid-scan.json").read_text())
    assert str(os.getpid()) not in scan["signalable"], scan
    assert not scan["grandparent_signalable"], scan
    assert {int(pid) for pid in scan["signalable"]} <= set(scan["lineage"]), scan


def test_the_checks_process_cannot_open_its_callers_proc_files(tmp_path) -> None:
    _, observed = _hostile(tmp_path, "parent_environ")
    attempts = json.loads((observed / "parent-environ.json").read_text())
    for who, tried in attempts.items():
        for part in ("environ", "fd/1", "mem"):
            assert tried[part].startswith("refused"), f"/proc/{tried['pid']}/{part} of {who}: {tried[part]}"


def test_a_daemon_the_candidate_starts_ends_with_the_check(tmp_path) -> None:
    result, observed = _hostile(tmp_path, "setsid_daemon")
    _needs(result, "PID namespace")
    assert (observed / "daemon-started").exists(), "the daemon never ran: the test would prove nothing"
    time.sleep(3.0)
    assert not (observed / "daemon-outlived-the-worker").exists(), "the candidate's daemon outlived the check"


@pytest.mark.parametrize("forgery", ["fifo", "link", "huge", "garbage"])
def test_what_the_candidate_leaves_as_its_verdict_is_read_as_untrusted(tmp_path, forgery) -> None:
    candidate = tmp_path / f"level1_problem6_verdict_forger_{forgery}.py"
    shutil.copy(KB / "hostile" / "level1_problem6_verdict_forger.py", candidate)
    result = allclose.check(PROBLEM, str(candidate), "cpu", 60.0)
    assert result["verdict"] == "CRASHED", result
    assert "verdict" in result["detail"], result


NEEDS_A_COMPILER = pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("c++")),
                                      reason="needs ninja and a C++ compiler")


def builds_at_import(folder: Path) -> Path:
    """A problem-6 candidate that builds a C++ library `custom_op` at import (as KernelBench's CUDA
    solutions build theirs; plain C++ here, so that the CPU builds it in a second)."""
    (folder / "answer.cpp").write_text('extern "C" int answer() { return 1; }\n')
    candidate = folder / "level1_problem6_builds_at_import.py"
    candidate.write_text(textwrap.dedent(f"""
        import ctypes
        import torch
        from torch.utils import cpp_extension

        LIBRARY = ctypes.CDLL(cpp_extension.load(name="custom_op", sources=[{str(folder / "answer.cpp")!r}],
                                                 is_python_module=False))

        class ModelNew(torch.nn.Module):
            def __init__(self, negative_slope: float = 0.01):
                super().__init__()
                self.negative_slope = negative_slope * LIBRARY.answer()

            def forward(self, x):
                return torch.nn.functional.leaky_relu(x, self.negative_slope)
        """))
    return candidate


@NEEDS_A_COMPILER
def test_the_check_builds_an_extension_where_the_gates_workers_build_it(tmp_path, monkeypatch) -> None:
    """A candidate that builds a C++ library at import (as KernelBench's CUDA solutions build
    theirs; plain C++ here, so that the CPU builds it in a second) gets it built in its own
    folder of kanalyze's build cache, the folder its gates' workers build it in, marked
    complete: one compile for the gates and the check.  torch's own build folder stays empty."""
    from kanalyze.dynamic.sandbox import extensions
    from kanalyze.dynamic.sandbox.process import candidate_caches

    monkeypatch.setenv(extensions.ROOT_VARIABLE, str(tmp_path / "builds"))
    candidate = builds_at_import(tmp_path)
    result = allclose.check(PROBLEM, str(candidate), "cpu", 300.0)
    assert result["verdict"] == "PASS", result
    caches = candidate_caches({}, str(candidate))
    builds = list(Path(caches[extensions.ROOT_VARIABLE]).glob("custom_op-*"))
    assert len(builds) == 1 and (builds[0] / "kanalyze-complete").exists(), builds
    assert not list(Path(caches["TORCH_EXTENSIONS_DIR"]).glob("custom_op*")), "built in torch's folder too"
    # As KernelBench builds it (a benchmark timing KernelBench's check): torch's own folder only.
    shutil.rmtree(builds[0])
    result = allclose.check(PROBLEM, str(candidate), "cpu", 300.0, share_builds=False)
    assert result["verdict"] == "PASS", result
    assert not list(Path(caches[extensions.ROOT_VARIABLE]).glob("custom_op-*"))
    assert list(Path(caches["TORCH_EXTENSIONS_DIR"]).glob("custom_op*")), "not built in torch's folder"


def test_the_check_compiles_kernels_in_jit_caches_of_its_own(tmp_path) -> None:
    """KernelBench's fresh process compiles the candidate's kernels; run after the gates, the check
    must not load what they compiled (its time would be a cache hit's, not KernelBench's).  Its
    Triton and CUDA driver caches are the candidate's but apart from its workers'; the build
    folders stay shared (the test above)."""
    from kanalyze.dynamic.sandbox.cage import JIT
    from kanalyze.dynamic.sandbox.process import candidate_caches

    candidate = tmp_path / "level1_problem6_reports_its_caches.py"
    candidate.write_text("import json, os\nwith open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "
                         "'observed', 'caches'), 'w') as f:\n    json.dump({k: os.path.realpath(os.environ[k]) for k in "
                         "('TRITON_CACHE_DIR', 'CUDA_CACHE_PATH', 'TORCH_EXTENSIONS_DIR')}, f)\n"
                         + (KB / "candidates" / "level1_problem6_leaky_relu.py").read_text())
    observed = observed_for(candidate)
    assert allclose.check(PROBLEM, str(candidate), "cpu", 60.0)["verdict"] == "PASS"
    seen = json.loads((observed / "caches").read_text())
    check, workers = candidate_caches({}, str(candidate), JIT), candidate_caches({}, str(candidate))
    for jit in ("TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert seen[jit] == os.path.realpath(check[jit]) != os.path.realpath(workers[jit]), (jit, seen)
    assert seen["TORCH_EXTENSIONS_DIR"] == os.path.realpath(workers["TORCH_EXTENSIONS_DIR"]), seen


def test_a_problem_the_check_cannot_run_is_unavailable_never_the_candidates_error(tmp_path) -> None:
    """The device or the problem fails before the candidate is imported (here: a cuda check on a
    machine without CUDA; on an H200 a CUDA driver that would not start gave the same): the
    check says UNAVAILABLE with the cause, never ERROR, which KernelBench counts against the
    candidate; and the candidate was never imported."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    candidate = tmp_path / "level1_problem6_says_it_ran.py"
    candidate.write_text("import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'observed', "
                         "'imported'), 'w').close()\n" + (KB / "candidates" / "level1_problem6_leaky_relu.py").read_text())
    observed = observed_for(candidate)
    result = allclose.check(PROBLEM, str(candidate), "cuda", 60.0)
    assert result["verdict"] == "UNAVAILABLE", result
    assert result["detail"].startswith("the check could not run the problem") and "CUDA" in result["detail"], result
    assert not (observed / "imported").exists()
    # the same candidate on a device the check can run: imported, and its marker written
    assert allclose.check(PROBLEM, str(candidate), "cpu", 60.0)["verdict"] == "PASS"
    assert (observed / "imported").exists()


def test_the_confinement_record_is_what_the_check_wrote_before_the_candidates_import() -> None:
    """On a GPU the caged process says its socket filter once the device is open, on a line of
    its own after its record; what it writes after `importing` is the candidate's, and never
    part of the record."""
    from kanalyze.audit.allclose import _Status

    read_end, write_end = os.pipe()
    lines = [json.dumps({"network": "namespace", "sockets": "not refused below the audit hook (the device did "
                                                            "not open)"}),
             json.dumps({"sockets": "socket() refused to every thread (seccomp)"}),
             "importing", json.dumps({"sockets": "forged by the candidate"}), "imported"]
    os.write(write_end, ("\n".join(lines) + "\n").encode())
    os.close(write_end)
    try:
        record = _Status(read_end).record()
    finally:
        os.close(read_end)
    assert record == {"network": "namespace", "sockets": "socket() refused to every thread (seccomp)"}, record
