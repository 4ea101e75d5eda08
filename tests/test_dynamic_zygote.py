"""Workers forked from the zygote keep every property of a fresh sandboxed worker; without a zygote, fresh ones.

A probe candidate reports, while it is imported in the worker, what a
candidate could see: its working directory, HOME/TMPDIR, limits, open file
descriptors, its pids, network namespace.  Which process forked a worker, and
its session, are read from outside: inside its PID namespace a worker sees
only itself (pid 2) and its namespace's init (pid 1).  The hostile candidates of
test_dynamic_controls.py run through the zygote (the default); here some run
through fresh processes too (`KANALYZE_NO_ZYGOTE=1`), and the zygote is killed,
replaced, refused and shut down under running workers.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from kanalyze.dynamic.harness import Harness, find_harness
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox import zygote_client
from kanalyze.dynamic.sandbox.process import Limits, Worker, WorkerGone, new_scratch_root, remove_scratch_root

pytest.importorskip("torch")
pytest.importorskip("triton")

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"

PROBE = r'''
import json, os, resource, tempfile
fds = {}
for name in os.listdir("/proc/self/fd"):
    try:
        fds[name] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        pass
print("PROBE " + json.dumps({
    "cwd": os.getcwd(), "home": os.environ.get("HOME"), "tmpdir": os.environ.get("TMPDIR"),
    "gettempdir": tempfile.gettempdir(), "interpret": os.environ.get("TRITON_INTERPRET"),
    "memory": resource.getrlimit(resource.RLIMIT_AS)[0], "file": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
    "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "fds": fds,
    "net": os.readlink("/proc/self/ns/net"), "torch_loaded": "torch" in __import__("sys").modules,
}), flush=True)

class ModelNew:
    pass
'''


@pytest.fixture()
def scratch():
    root = new_scratch_root()
    yield root
    remove_scratch_root(root)


@pytest.fixture()
def probe_spec(tmp_path) -> dict:
    candidate = tmp_path / "probe.py"
    candidate.write_text(PROBE)
    return {"harness": {"kind": "kernelbench", "candidate": str(candidate), "problem": str(candidate)}}


def _probe(spec: dict, scratch: str, limits: Limits) -> tuple[Worker, dict, dict]:
    """A candidate worker that has imported the probe: (worker, ready message, what the probe saw)."""
    worker = Worker("candidate", "cpu", spec, limits, scratch)
    ready = worker.wait_ready()
    deadline = time.monotonic() + 10
    while "PROBE " not in worker.output() and time.monotonic() < deadline:
        time.sleep(0.02)  # the output drains in a thread of its own
    line = next(line for line in worker.output().splitlines() if line.startswith("PROBE "))
    return worker, ready, json.loads(line[len("PROBE "):])


def _parent_of(pid: int) -> int:
    """The parent of a process, as this process sees it."""
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _zygote_pid() -> int:
    return zygote_client._zygotes["cpu"].process.pid


def _assert_sandboxed(worker: Worker, ready: dict, seen: dict, limits: Limits) -> None:
    assert ready["error"] is None and ready["import_error"] is None, ready
    assert seen["cwd"] == seen["home"] == seen["tmpdir"] == seen["gettempdir"] == worker.scratch
    assert seen["interpret"] == "1" and seen["torch_loaded"]
    assert seen["memory"] == limits.memory_bytes and seen["file"] == limits.file_bytes
    assert os.getsid(worker.process.pid) == worker.process.pid  # a session of its own: killed as a group
    if ready["confinement"].get("pid_namespace") is True:      # a PID namespace: nothing else in sight
        assert (seen["pid"], seen["ppid"], seen["sid"]) == (2, 1, 0), seen
    sockets = {fd: target for fd, target in seen["fds"].items() if target.startswith("socket:")}
    assert not sockets, f"the worker holds sockets it did not open: {sockets}"
    assert len(seen["fds"]) <= 6, seen["fds"]                  # stdio, control, status, the listing itself
    if ready["confinement"]["network"] == "namespace":
        assert seen["net"] != os.readlink("/proc/self/ns/net")


def test_forked_workers_are_confined_like_fresh_ones(probe_spec, scratch, monkeypatch) -> None:
    workers, seen = [], []
    try:
        for memory in (3 * 2 ** 30, 5 * 2 ** 29):  # each worker sets its own limits after the fork
            limits = Limits(memory_bytes=memory, file_bytes=2 ** 29)
            worker, ready, saw = _probe(probe_spec, scratch, limits)
            workers.append(worker)
            assert ready["confinement"]["start"] == "forked from the zygote", ready["confinement"]
            _assert_sandboxed(worker, ready, saw, limits)
            seen.append(saw)
        parents = [_parent_of(worker.process.pid) for worker in workers]
        assert parents[0] == parents[1] == _zygote_pid() != os.getpid()   # both children of the one zygote
        if seen[0]["net"] != os.readlink("/proc/self/ns/net"):
            assert seen[0]["net"] != seen[1]["net"]                # a network namespace per worker
    finally:
        for worker in workers:
            worker.close()

    monkeypatch.setenv(zygote_client.DISABLE, "1")
    limits = Limits(memory_bytes=3 * 2 ** 30, file_bytes=2 ** 29)
    worker, ready, seen = _probe(probe_spec, scratch, limits)
    try:
        assert ready["confinement"]["start"] == f"fresh process ({zygote_client.DISABLE} is set)"
        assert _parent_of(worker.process.pid) == os.getpid()
        _assert_sandboxed(worker, ready, seen, limits)
    finally:
        worker.close()


def test_a_dead_zygote_is_replaced_and_its_running_workers_go_on(probe_spec, scratch) -> None:
    limits = Limits()
    first, _, seen = _probe(probe_spec, scratch, limits)
    try:
        zygote = _zygote_pid()
        os.kill(zygote, signal.SIGKILL)
        second, ready, seen_second = _probe(probe_spec, scratch, limits)
        try:
            assert ready["confinement"]["start"] == "forked from the zygote"
            assert _parent_of(second.process.pid) == _zygote_pid() != zygote   # a new zygote
            assert first.process.poll() is None                    # the orphan runs on, and answers
            first.send({"kind": "cases", "id": 1, "indices": [], "cases": [], "out": first.scratch})
            assert first.next_event(30) == {"event": "job-done", "job": 1}
        finally:
            second.close()
    finally:
        first.close()                                              # returns although its exit status is lost


def test_a_zygote_that_cannot_start_means_fresh_processes(probe_spec, scratch, monkeypatch) -> None:
    zygote_client.shutdown_all()
    monkeypatch.setattr(zygote_client, "BOOTSTRAP", "import sys; print('no zygote today'); sys.exit(5)")
    try:
        worker, ready, seen = _probe(probe_spec, scratch, Limits())
        try:
            start = ready["confinement"]["start"]
            assert start.startswith("fresh process (the cpu zygote could not start") and "no zygote today" in start
            assert _parent_of(worker.process.pid) == os.getpid()
        finally:
            worker.close()
        assert "could not start" in zygote_client.status()["cpu"]
    finally:
        zygote_client.shutdown_all()                               # forget the failure for the next tests


def test_shutting_the_zygote_down_ends_its_workers(probe_spec, scratch) -> None:
    worker, _, seen = _probe(probe_spec, scratch, Limits())
    try:
        zygote_client.shutdown_all()
        assert not zygote_client._running(worker.process.pid)
        with pytest.raises(WorkerGone):                             # its status pipe closed with it
            worker.next_event(10)
    finally:
        worker.close()


def test_another_environment_gets_another_zygote(probe_spec, scratch, monkeypatch) -> None:
    worker, _, _ = _probe(probe_spec, scratch, Limits())
    before = _parent_of(worker.process.pid)
    worker.close()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # read when torch is imported: the zygote's import does not fit
    worker, _, _ = _probe(probe_spec, scratch, Limits())
    after = _parent_of(worker.process.pid)
    worker.close()
    assert after != before


def test_a_zygote_begun_early_serves_the_first_worker(probe_spec, scratch) -> None:
    """`check --dynamic` starts the zygote before its static pass (process.prestart_zygote, wait=False): the first
    worker waits for that zygote's imports instead of starting another."""
    from kanalyze.dynamic.sandbox.process import prestart_zygote

    zygote_client.shutdown_all()
    prestart_zygote("cpu", wait=False)
    begun = _zygote_pid()
    assert not zygote_client._zygotes["cpu"].ready          # begun, not waited for
    worker, ready, _ = _probe(probe_spec, scratch, Limits())
    try:
        assert ready["confinement"]["start"] == "forked from the zygote"
        assert _parent_of(worker.process.pid) == begun
        assert set(zygote_client._zygotes["cpu"].seconds) >= {"imports", "meta", "wall"}
    finally:
        worker.close()


def test_a_zygote_begun_and_never_used_ends_at_once(scratch) -> None:
    """A run whose static pass flags nothing never waits for the zygote it began: shutting it
    down mid-import kills it rather than waiting for its imports to finish."""
    from kanalyze.dynamic.sandbox.process import prestart_zygote

    zygote_client.shutdown_all()
    prestart_zygote("cpu", wait=False)
    process = zygote_client._zygotes["cpu"].process
    zygote_client.shutdown_all()
    assert process.poll() == -signal.SIGKILL       # killed mid-import, not waited for


@pytest.mark.parametrize("name,words", [("segfault", "SIGSEGV"), ("fork", "os.fork is refused")])
def test_hostile_candidates_are_contained_in_fresh_processes_too(name, words, monkeypatch) -> None:
    monkeypatch.setenv(zygote_client.DISABLE, "1")
    harness = find_harness(str(KB / "hostile" / f"level1_problem6_{name}.py"), kernelbench=str(KB))
    assert isinstance(harness, Harness)
    gate_run = run_gates(harness, ["MEM002"], options=Options(mode="cpu", limits=Limits(case_seconds=8)))
    verdicts = {v.code: v for v in gate_run.verdicts}
    assert verdicts["CMP001"].status == "confirmed" and words in verdicts["CMP001"].summary
    assert gate_run.environment["candidate_confinement"]["start"].startswith("fresh process")
