"""Containment a candidate cannot walk out of: its own PID namespace, kanalyze non-dumpable, tools by real path.

The hostile candidates of fixtures/kernelbench/hostile/ run through `run_gates`
as any candidate does, forked from the zygote and as fresh processes.  Each is
copied next to an `observed/` folder, where it writes what it could do (the
worker's environment is scrubbed to an allow-list, so the folder is given by
the file's location): a setsid daemon that waits for the worker to end and then
writes a file; a scan of every pid in /proc with signal 0; opening the
environment, output and memory of its parent, its parent's parent, kanalyze and
the zygote; a `gcc` symlink to /bin/sh run as an allowed tool.  Then workers
that end by `os._exit(7)`, a segmentation fault or a signal to themselves must
reach the parent unchanged, and a worker the parent kills takes its daemons
with it.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from observed import observed_for

from kanalyze.dynamic.containment import gaps
from kanalyze.dynamic.harness import Harness, find_harness
from kanalyze.dynamic.runner import Options, cuda_present, run_gates
from kanalyze.dynamic.sandbox.execute import CANDIDATE_SIDE_KEYS
from kanalyze.dynamic.sandbox import mounts, zygote_client
from kanalyze.dynamic.sandbox.process import (
    Limits,
    Worker,
    WorkerGone,
    new_scratch_root,
    prestart_zygote,
    remove_scratch_root,
)

pytest.importorskip("torch")
pytest.importorskip("triton")

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
GRACE_SECONDS = 3.0


@pytest.fixture(params=["zygote", "fresh process"])
def start(request, monkeypatch) -> str:
    """How the workers start; with a zygote, it runs before the candidate does (its pid is a target)."""
    if request.param == "fresh process":
        monkeypatch.setenv(zygote_client.DISABLE, "1")
    else:
        assert prestart_zygote("cpu") == "zygote"
    return request.param


def _identity(pid: int) -> tuple[int, int]:
    """A process's pid and start time (clock ticks since boot): who it is, whatever its number."""
    with open(f"/proc/{pid}/stat") as handle:
        return pid, int(handle.read().rsplit(")", 1)[1].split()[19])


def _zygote_pid() -> int | None:
    zygote = zygote_client._zygotes.get("cpu")
    return zygote.process.pid if zygote is not None and not zygote.dead else None


def _run(tmp_path: Path, name: str, mode: str = "cpu", **more) -> tuple[dict, Path]:
    """Run MEM002 on a copy of the hostile candidate `name` (`more`: further targets for it):
    (its worker's confinement record, its observed/)."""
    copy = tmp_path / f"level1_problem6_{name}.py"
    shutil.copy(KB / "hostile" / copy.name, copy)
    observed = observed_for(copy)
    targets = {"kanalyze": os.getpid(), "zygote": _zygote_pid(), **more}
    (observed / "targets.json").write_text(json.dumps({k: v for k, v in targets.items() if v}))
    harness = find_harness(str(copy), kernelbench=str(KB))
    assert isinstance(harness, Harness), harness
    gate_run = run_gates(harness, ["MEM002"], options=Options(mode=mode, limits=Limits(case_seconds=60)))
    verdicts = {v.code: v for v in gate_run.verdicts}
    # The candidate is a correct kernel: its run went on undisturbed by what it tried.
    assert verdicts["MEM002"].status == "refuted" and "CMP001" not in verdicts, gate_run.verdicts
    return gate_run.environment["candidate_confinement"], observed


def _needs_pid_namespace(confinement: dict) -> None:
    """Skip, saying why, where the worker recorded that this machine gives it no PID namespace."""
    held = confinement.get("pid_namespace")
    if isinstance(held, str):
        pytest.skip(f"no PID namespace on this machine: {held}")


def test_a_setsid_daemon_does_not_outlive_the_run(tmp_path, start) -> None:
    confinement, observed = _run(tmp_path, "setsid_daemon")
    _needs_pid_namespace(confinement)
    assert (observed / "daemon-started").exists(), "the daemon never ran: the test would prove nothing"
    time.sleep(GRACE_SECONDS)
    assert not (observed / "daemon-outlived-the-worker").exists(), "the candidate's daemon outlived its worker"
    assert confinement["pid_namespace"] is True, confinement


def test_the_candidate_cannot_signal_kanalyze_or_anything_outside_its_namespace(tmp_path, start) -> None:
    confinement, observed = _run(tmp_path, "pid_scan")
    _needs_pid_namespace(confinement)
    scan = json.loads((observed / "pid-scan.json").read_text())
    ours = {"kanalyze": _identity(os.getpid())}
    if _zygote_pid():
        ours["zygote"] = _identity(_zygote_pid())
    signalable = {(int(pid), start_time) for pid, start_time in scan["signalable"].items()}
    for who, identity in ours.items():
        assert identity not in signalable, f"the candidate could signal {who} {identity}"
    assert not scan["grandparent_signalable"], scan
    # Nothing but its own ancestors in its namespace (the reference worker would be a sibling).
    assert {pid for pid, _ in signalable} <= set(scan["lineage"]), scan


def test_the_candidate_cannot_open_its_parents_or_kanalyzes_proc_files(tmp_path, start) -> None:
    _, observed = _run(tmp_path, "parent_environ")
    attempts = json.loads((observed / "parent-environ.json").read_text())
    assert {"parent", "kanalyze"} <= set(attempts), attempts
    for who, tried in attempts.items():
        for part in ("environ", "fd/1", "mem"):
            assert tried[part].startswith("refused"), f"/proc/{tried['pid']}/{part} of {who}: {tried[part]}"


def test_a_symlink_named_like_an_allowed_tool_is_refused(tmp_path, start) -> None:
    confinement, observed = _run(tmp_path, "tool_symlink")
    attempts = json.loads((observed / "tool-symlink.json").read_text())
    for how in ("by path", "relative", "through PATH"):
        assert attempts[how].startswith("refused"), f"{how}: {attempts[how]}"
    assert not list(observed.glob("shell-ran-*")), "the shell behind the symlink ran"
    assert attempts["uname"] == "ran: exit code 0", attempts   # a real allowed tool still runs
    assert confinement.get("tools", "").startswith("by real path"), confinement


# On a GPU too (`pytest -m gpu`): the worker opens its device before the socket filter goes on.
MODES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu,
                                            pytest.mark.skipif(not cuda_present(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("mode", MODES)
def test_a_socket_named_in_the_file_system_cannot_be_reached(tmp_path, start, mode) -> None:
    """A tmux server's, an agent's or docker's socket: connected, a candidate would run commands
    outside the sandbox.  Python's socket module is refused by the audit hook, libc's socket()
    through ctypes by the seccomp filter (sandbox/seccomp.py); the listener sees no one."""
    import socket
    import threading

    path = tmp_path / "host" / "server.sock"
    path.parent.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    listener.settimeout(0.2)
    reached: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            with client:
                client.settimeout(2)
                reached.append(client.recv(64) or b"(nothing sent)")

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        confinement, observed = _run(tmp_path, "unix_socket", mode, socket=str(path))
    finally:
        stop.set()
        server.join(5)
        listener.close()
    tried = json.loads((observed / "unix-socket.json").read_text())
    assert tried["python"].startswith("refused"), tried
    if not confinement.get("sockets", "").startswith("socket() refused"):
        pytest.skip(f"no seccomp filter on this machine: {confinement.get('sockets')}")
    assert tried["libc"] == "refused: socket(): Permission denied", tried
    assert reached == [], reached


# Candidates for a worker driven directly: how each one ends reaches the parent unchanged.
ENDINGS = {
    "import os\nos._exit(7)\n": "exited with code 7",
    "import ctypes\nctypes.string_at(0)\n": "died of SIGSEGV",
    "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)\n": "died of SIGTERM",
    "import os, time\nos.abort()\n": "died of SIGABRT",
}

DAEMON_THEN_HANG = r'''
import ctypes, os, time
OBSERVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observed")
libc = ctypes.CDLL(None, use_errno=True)
child = libc.fork()
if child == 0:
    try:
        os.setsid()
        if libc.fork() == 0:
            os.closerange(0, 4096)
            open(os.path.join(OBSERVED, "started"), "w").close()
            time.sleep(1.5)                     # the parent kills the worker meanwhile
            open(os.path.join(OBSERVED, "outlived"), "w").close()
    finally:
        os._exit(0)
os.waitpid(child, 0)
time.sleep(60)
'''


@pytest.fixture()
def scratch():
    root = new_scratch_root()
    yield root
    remove_scratch_root(root)


def _worker(tmp_path: Path, scratch: str, source: str, name: str = "candidate.py") -> Worker:
    candidate = tmp_path / name
    candidate.write_text(source)
    spec = {"harness": {"kind": "kernelbench", "candidate": str(candidate), "problem": str(candidate)}}
    return Worker("candidate", "cpu", spec, Limits(import_seconds=60), scratch)


@pytest.mark.parametrize("source,words", list(ENDINGS.items()), ids=["exit-7", "segfault", "sigterm", "abort"])
def test_how_the_worker_ends_reaches_the_parent_unchanged(tmp_path, scratch, start, source, words) -> None:
    worker = _worker(tmp_path, scratch, source)
    try:
        with pytest.raises(WorkerGone) as gone:
            worker.wait_ready()
        assert words in str(gone.value), str(gone.value)
        assert worker.phase == "candidate"               # blamed on the candidate's import
    finally:
        worker.close()


def test_a_killed_worker_takes_its_daemons_with_it(tmp_path, scratch, start) -> None:
    from kanalyze.dynamic.sandbox import namespaces

    _needs_pid_namespace({"pid_namespace": namespaces.probe_pid_namespace() or True})
    (tmp_path / "candidate.py").write_text(DAEMON_THEN_HANG)
    observed = observed_for(tmp_path / "candidate.py")
    worker = _worker(tmp_path, scratch, DAEMON_THEN_HANG)
    try:
        deadline = time.monotonic() + 60
        while not (observed / "started").exists():
            assert time.monotonic() < deadline and worker.process.poll() is None, worker.output()
            time.sleep(0.05)
        worker.kill()                                     # what the parent does on a timeout
        assert worker.process.returncode == -signal.SIGKILL
    finally:
        worker.close()
    time.sleep(1.5 + GRACE_SECONDS)
    assert not (observed / "outlived").exists(), "the daemon outlived the killed worker"


# First thing in each process below: no capability (where this runs as root, CAP_SYS_PTRACE would
# open any process's /proc files), as a same-user candidate has none.
NO_CAPABILITIES = ("import ctypes\n"
                   "header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()\n"
                   "assert ctypes.CDLL(None).capset(header, data) == 0\n")


def _open_as_a_candidate(pid: int) -> dict[str, str]:
    """Open /proc/PID/{environ,fd/1,mem} as a same-user candidate in no namespace of its own
    would (a worker where the kernel gives none; from a user namespace of its own the kernel
    refuses it anyway, non-dumpable or not)."""
    code = NO_CAPABILITIES + ("import json, os, sys\n"
                              "out = {}\n"
                              "for part in ('environ', 'fd/1', 'mem'):\n"
                              "    try:\n"
                              "        os.close(os.open(f'/proc/{sys.argv[1]}/{part}', os.O_RDONLY | os.O_NONBLOCK))\n"
                              "        out[part] = 'opened'\n"
                              "    except OSError as exc:\n"
                              "        out[part] = f'refused: {type(exc).__name__}'\n"
                              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code, str(pid)], check=False, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_kanalyze_made_non_dumpable_hides_its_proc_files() -> None:
    hold = NO_CAPABILITIES + ("import sys, time\nfrom kanalyze.dynamic.sandbox import namespaces\n{}\n"
                              "print('up', flush=True)\ntime.sleep(60)\n")
    seen = {}
    for protect in (False, True):
        code = hold.format("assert namespaces.protect_this_process()" if protect else "")
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                  cwd=Path(__file__).resolve().parent.parent)
        try:
            assert holder.stdout.readline().strip() == "up"
            seen[protect] = _open_as_a_candidate(holder.pid)
        finally:
            holder.kill()
            holder.wait()
    assert seen[False] == {"environ": "opened", "fd/1": "opened", "mem": "opened"}, seen   # unprotected: open
    assert all(result.startswith("refused") for result in seen[True].values()), seen


def test_this_process_is_protected_once_it_starts_a_worker(tmp_path, scratch) -> None:
    worker = _worker(tmp_path, scratch, "class ModelNew:\n    pass\n")
    try:
        worker.wait_ready()
        pr_get_dumpable = 3
        assert ctypes.CDLL(None, use_errno=True).prctl(pr_get_dumpable, 0, 0, 0, 0) == 0
        confinement = worker.ready["confinement"]
        assert {"pid_namespace", "proc", "capabilities", "parent_proc", "tools"} <= set(confinement), confinement
        assert confinement["capabilities"] == "none" and confinement["parent_proc"].startswith("closed"), confinement
    finally:
        worker.close()


def test_the_reference_worker_stays_where_it_can_read_the_candidates_device_arrays(tmp_path, scratch) -> None:
    """The reference worker (trusted: it runs the problem) keeps kanalyze's PID namespace: CUDA IPC
    from a candidate's namespace reaches a process that sees it (device_share.py)."""
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                       "def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n")
    spec = {"harness": {"kind": "kernelbench", "candidate": str(problem), "problem": str(problem)}}
    worker = Worker("reference", "cpu", spec, Limits(), scratch)
    try:
        confinement = worker.wait_ready()["confinement"]
        assert confinement["pid_namespace"].startswith("not for the reference worker"), confinement
        assert confinement["capabilities"] == "none", confinement
    finally:
        worker.close()


@pytest.mark.parametrize("mode", MODES)
def test_the_candidate_sees_no_file_of_kanalyzes_but_its_own_and_cannot_write_home(tmp_path, monkeypatch,
                                                                                   mode) -> None:
    """Its own mount namespace: kanalyze's run directory hidden (the reference's saved outputs and
    an earlier run's cached references were there to read), the signing key hidden, the home
    read-only.  The first run fills the process's reference cache; the second candidate looks."""
    from kanalyze import keys
    from kanalyze.dynamic.reference_cache import REFERENCES

    monkeypatch.setenv("KANALYZE_KEY_DIR", str(tmp_path / "keys"))
    keys.user_key(create=True)
    REFERENCES.clear()
    first = find_harness(str(KB / "candidates" / "level1_problem6_leaky_relu.py"), kernelbench=str(KB))
    run_gates(first, ["MEM002"], options=Options(mode=mode, limits=Limits(case_seconds=60)))
    copy = tmp_path / "sniffer" / "level1_problem6_file_sniffer.py"
    copy.parent.mkdir()
    shutil.copy(KB / "hostile" / copy.name, copy)
    observed = observed_for(copy)
    witnesses = tmp_path / "project" / ".kanalyze" / "witnesses"   # an earlier candidate's witness
    witnesses.mkdir(parents=True)
    (witnesses / "level1_problem6_other-CMP001-0123456789.npz").write_bytes(b"the reference's failing slice")
    mounts.hide_from_candidates(str(witnesses))
    planted = [Path(folder) / f"planted-{os.getpid()}-{tmp_path.name}" for folder in ("/tmp", "/dev/shm")]
    for path in planted:   # what the user keeps there, or a later kanalyze run's reference outputs
        path.write_text("a secret of the user's")
    libc = ctypes.CDLL(None, use_errno=True)
    sysv_key = 0x6B000000 + os.getpid() % 0xFFFF      # a System V segment of the user's (IPC_CREAT | 0600)
    segment = libc.shmget(sysv_key, 4096, 0o1000 | 0o600)
    (observed / "targets.json").write_text(json.dumps({"key_folder": str(tmp_path / "keys"),
                                                       "witness_folder": str(witnesses),
                                                       "planted": [str(path) for path in planted]}))
    try:
        gate_run = run_gates(find_harness(str(copy), kernelbench=str(KB)), ["MEM002"],
                             options=Options(mode=mode, limits=Limits(case_seconds=60)))
    finally:
        for path in planted:
            path.unlink()
        if segment >= 0:
            libc.shmctl(segment, 0, None)                 # IPC_RMID
    confinement = gate_run.environment["candidate_confinement"]
    if "hidden" not in confinement.get("files", ""):
        pytest.skip(f"no mount namespace of the worker's own here: {confinement.get('files')}")
    found = json.loads((observed / "file-sniffer.json").read_text())
    written = found["home"].removeprefix("written: ")
    if written != found["home"]:
        os.remove(written)
    # Only the inputs kanalyze saved for candidates are shown (read-only): never an output.
    shown = [path for path in found["arrays"] if "/reference-inputs-" in path or "/inputs/" in path]
    assert all(os.path.basename(path).startswith(CANDIDATE_SIDE_KEYS) for path in shown), shown
    assert sorted(set(found["arrays"]) - set(shown)) == [], f"the candidate found kanalyze's arrays: {found['arrays']}"
    assert found["key"].startswith("refused") or found["key"] == "empty", found
    # hidden under an empty folder, as the key's: the planted witness is not in sight
    assert found["witnesses"].startswith("refused") or found["witnesses"] == "empty", found
    assert found["home"].startswith("refused"), found
    # Its compile caches are its own: written there, refused where another's kernels are looked up.
    caches = found["caches"]
    assert caches["own"].startswith("written") and "/triton/" in caches["own"], caches
    assert caches["default"].startswith("refused") and caches["sibling"].startswith("refused"), caches
    assert found["telltale_variables"] == [], found   # no variable named after kanalyze in its environment
    # A /tmp of its own, and on the CPU a /dev/shm too: nothing of the user's there is in sight,
    # whenever it was made.  On a GPU /dev/shm is the host's (CUDA IPC needs it), and the run says so.
    shared = found["shared"]
    private = planted if mode == "cpu" else planted[:1]   # (planted: /tmp's, then /dev/shm's)
    assert all(shared["read"][str(path)].startswith("refused") for path in private), shared
    assert not any(path.name in shared["listed"][str(path.parent)] for path in private), shared
    assert "/tmp hidden" in confinement["files"], confinement
    assert ("/dev/shm its own" in confinement["files"]) == (mode == "cpu"), confinement
    assert any("/dev/shm" in gap for gap in gaps(confinement)) == (mode != "cpu"), gaps(confinement)
    # and an IPC namespace of its own: the user's System V segments are not in reach
    assert segment >= 0 and confinement.get("ipc") == "namespace", (segment, confinement)
    assert isinstance(shared["sysv_keys"], list) and sysv_key not in shared["sysv_keys"], shared
    assert {v.code: v.status for v in gate_run.verdicts}["MEM002"] == "refuted", gate_run.verdicts


def test_each_candidate_compiles_into_caches_of_its_own(tmp_path) -> None:
    from kanalyze.dynamic.sandbox.process import candidate_caches

    one, two, same = tmp_path / "one.py", tmp_path / "two.py", tmp_path / "same.py"
    one.write_text("x = 1\n")
    two.write_text("x = 2\n")
    same.write_text("x = 1\n")
    first, second, again = (candidate_caches({}, str(p)) for p in (one, two, same))
    assert set(first) == {"TRITON_CACHE_DIR", "KANALYZE_EXTENSIONS_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH"}
    assert all(first[k] != second[k] for k in first)     # another source: other folders
    assert first == again                                # the same source finds its builds again
    check = candidate_caches({}, str(one), "check")      # JIT caches apart (KernelBench's check), builds shared
    assert {k for k in first if check[k] != first[k]} == {"TRITON_CACHE_DIR", "CUDA_CACHE_PATH"}


# --- what held, said once per run ---------------------------------------------------

def test_degraded_containment_is_named_once_per_run() -> None:
    from kanalyze.dynamic.containment import gaps, note

    held = {"network": "namespace", "pid_namespace": True, "proc": "own", "capabilities": "none",
            "files": "/tmp/kanalyze-run-1 hidden; /dev/shm its own; /home/u read-only"}
    assert gaps(held) == [] and note([held, held]) is None
    refused = {"network": "audit hook", "pid_namespace": "unshare refused (EPERM)", "proc": "the host's",
               "capabilities": "none", "files": "shared (no mount namespace)"}
    found = gaps(refused)
    assert len(found) == 3
    assert "unshare refused (EPERM)" in found[0] and "signal" in found[0]
    assert "network" in found[1] and "file system" in found[2]
    said = note([held, refused, refused])
    assert said.startswith("containment: ") and said.count("PID namespace") == 1
    unsealed = {**held, "files": held["files"] + "; every other mount read-only; not done: read-only refused "
                                                  "for /opt (Permission denied)"}
    assert gaps(unsealed) == ["mounts left writable (/opt (Permission denied)): a candidate could write there, "
                              "into system folders too where kanalyze runs as root"]
    host_shm = {**held, "files": held["files"].replace("/dev/shm its own; ", "")}   # a GPU run's
    assert gaps(host_shm) == ["the host's /dev/shm (a GPU run: CUDA IPC needs it): POSIX shared memory of the "
                              "user's other processes in reach"]


def test_a_contained_run_says_nothing_about_containment(tmp_path, monkeypatch) -> None:
    """Where every namespace held (this machine: the test above reads what held), `check
    --dynamic` writes no containment line; the witness environment records what held either way."""
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    candidate = KB / "candidates" / "level1_problem6_leaky_relu.py"
    done = subprocess.run([sys.executable, "-m", "kanalyze", "check", str(candidate), "--dynamic", "--kernelbench",
                           str(KB), "--device", "cpu", "--isolated", "--no-cache", "--output-format", "json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(KB.parent.parent)})
    assert done.returncode in (0, 1), done.stderr
    from kanalyze.dynamic.containment import gaps

    gate_run = run_gates(find_harness(str(candidate), kernelbench=str(KB)), ["RES001"], options=Options(mode="cpu"))
    expected = bool(gaps(gate_run.environment["candidate_confinement"]))
    assert ("containment:" in done.stderr) == expected, done.stderr


def test_the_candidate_cannot_write_into_the_project_it_was_checked_from(tmp_path, monkeypatch) -> None:
    """The git work tree of the candidate (and of its problem, and kanalyze's working directory)
    is read-only to it: it cannot plant a file beside itself, rewrite its own source before a
    replay, or rewrite the problem a later candidate is judged against; and no other mount is
    writable to it (a candidate run by root would otherwise write into /usr or /etc)."""
    project = tmp_path / "project"
    (project / "level1").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    problem = project / "level1" / "6_leaky_relu.py"
    shutil.copy(KB / "level1" / "6_leaky_relu.py", problem)
    candidates = project / "candidates"
    candidates.mkdir()
    copy = candidates / "level1_problem6_project_writer.py"
    shutil.copy(KB / "hostile" / copy.name, copy)
    out = observed_for(copy)               # outside the project: where the candidate reports
    elsewhere = tmp_path / "elsewhere"     # this user's, outside home and project: read-only too
    elsewhere.mkdir()
    (out / "targets.json").write_text(json.dumps({"problem": str(problem), "cwd": str(project),
                                                  "elsewhere": str(elsewhere / "planted.txt"),
                                                  "system": f"/usr/local/planted-{os.getpid()}"}))
    monkeypatch.chdir(project)
    before = {path: path.read_bytes() for path in (problem, copy)}
    gate_run = run_gates(find_harness(str(copy), kernelbench=str(project)), ["MEM002"],
                         options=Options(mode="cpu", limits=Limits(case_seconds=60)))
    confinement = gate_run.environment["candidate_confinement"]
    if "hidden" not in confinement.get("files", ""):
        pytest.skip(f"no mount namespace of the worker's own here: {confinement.get('files')}")
    found = json.loads((out / "project-writer.json").read_text())
    assert set(found) == {"beside", "own_source", "problem", "cwd", "elsewhere", "system"}, found
    assert all(result.startswith("refused") for result in found.values()), found
    assert {path: path.read_bytes() for path in (problem, copy)} == before
    assert not list(project.rglob("planted-*")) and not list(elsewhere.iterdir())
    assert "every other mount read-only" in confinement["files"], confinement["files"]
    assert f"{project} read-only" in confinement["files"], confinement["files"]
    assert {v.code: v.status for v in gate_run.verdicts}["MEM002"] == "refuted", gate_run.verdicts
