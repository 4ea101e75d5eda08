"""A cgroup over each candidate's worker and all it starts (kanalyze/dynamic/sandbox/cgroups.py).

Where this machine lets kanalyze make one (root, or a delegated cgroup v2
subtree), the hostile candidates of fixtures/kernelbench/hostile/ run through
`run_gates`, forked from the zygote and as fresh processes, copied next to an
`observed/` folder where they write what they did: four children of 1.5 GiB
each share the worker's 4 GiB (at most two of them can hold theirs) and none
outlives the run; writes into the root cgroup's `cgroup.procs` fail (the cgroup
file systems are hidden), and a cgroup namespace of the candidate's own leaves
it inside its group.  After each run no group of kanalyze's is left.  Where no
cgroup can be made, those tests are skipped with the reason; the reason path
itself (a reason in words, never an exception) is tested everywhere.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from observed import observed_for

from kanalyze.dynamic.containment import gaps, note
from kanalyze.dynamic.sandbox import cgroups, zygote_client
from kanalyze.dynamic.sandbox.process import Limits, Worker, new_scratch_root, prestart_zygote, remove_scratch_root

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
GRACE_SECONDS = 3.0
HELD = {"network": "namespace", "pid_namespace": True, "proc": "own", "capabilities": "none",
        "files": "/tmp/kanalyze-run-1 hidden; /sys/fs/cgroup hidden; /dev/shm its own; /home/u read-only"}


# --- where no cgroup can be made: a reason, in words, everywhere -------------------------

def test_where_no_cgroup_can_be_made_the_reason_is_said_and_nothing_raises(tmp_path) -> None:
    none_mounted = cgroups.create("t", 2 ** 30, 16, mountinfo="", own="0::/\n")
    assert isinstance(none_mounted, str) and "no memory controller is mounted" in none_mounted, none_mounted
    absent = ("35 31 0:32 / /nonexistent/memory rw,relatime - cgroup cgroup rw,memory\n"
              "39 31 0:36 / /nonexistent/pids rw,relatime - cgroup cgroup rw,pids\n")
    refused = cgroups.create("t", 2 ** 30, 16, mountinfo=absent, own="8:pids:/\n4:memory:/a\n")
    assert isinstance(refused, str) and "/nonexistent/memory/a" in refused and "No such file" in refused, refused
    assert cgroups.create("t", None, None) == "no memory or process limit asked for"
    # The worker: a reason is recorded as "none (why)", a group it cannot join too.
    assert cgroups.join(refused) == f"none ({refused})"
    joined = cgroups.join({"groups": [{"procs": str(tmp_path / "gone" / "cgroup.procs"), "held": ["memory 4.0 GiB"]}]})
    assert joined.startswith("none (could not join its group"), joined
    for handle in (None, refused, {"groups": [{"folder": str(tmp_path / "gone")}]}, {"groups": [None]}):
        cgroups.remove(handle)


def test_a_missing_cgroup_is_a_gap_said_once_per_run() -> None:
    held = {**HELD, "cgroup": "memory 4.0 GiB and 512 tasks for the worker and its children"}
    assert gaps(held) == [] and gaps(HELD) == []   # a record from before cgroups says nothing of them
    refused = {**HELD, "cgroup": "none (not permitted to make a cgroup in /sys/fs/cgroup/memory)"}
    found = gaps(refused)
    assert len(found) == 1 and "no cgroup (not permitted" in found[0] and "children" in found[0], found
    said = note([held, refused, refused])
    assert said.startswith("containment: ") and said.count("no cgroup") == 1, said
    in_sight = {**held, "files": HELD["files"] + "; not done: /sys/fs/cgroup (Operation not permitted)"}
    assert any("cgroup file systems in sight" in gap for gap in gaps(in_sight)), gaps(in_sight)


def test_the_cgroup_mounts_are_found_to_be_hidden() -> None:
    hybrid = ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
              "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
              "50 23 0:40 / /srv/my\\040cgroups rw - cgroup cgroup rw,pids\n")
    assert cgroups.mount_roots(hybrid) == ["/srv/my cgroups", "/sys/fs/cgroup"]
    assert cgroups.mount_roots("29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n") == ["/sys/fs/cgroup"]


def test_a_delegated_cgroup_v2_subtree_gets_its_limits_one_level_above_the_worker(tmp_path) -> None:
    """The v2 path on a stand-in folder: controllers handed down from this process's own group,
    the limits on kanalyze-NAME, the worker's processes one level below."""
    own = tmp_path / "user.slice" / "me"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    mountinfo = f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    handle = cgroups.create("t", 2 ** 32, 512, mountinfo=mountinfo, own="0::/user.slice/me\n")
    try:
        assert isinstance(handle, dict) and handle["missing"] == {}, handle
        [group] = handle["groups"]
        folder = Path(group["folder"])
        assert folder.parent == own and folder.name.startswith(cgroups._prefix())
        assert folder.name.endswith(f"-{os.getpid()}-t")   # tmp<PID namespace>-<pid>-<name>
        assert group["held"] == ["memory 4.0 GiB", "512 tasks"]
        assert group["procs"] == str(folder / "worker" / "cgroup.procs")
        assert (folder / "memory.max").read_text() == str(2 ** 32) and (folder / "pids.max").read_text() == "512"
        assert (own / "cgroup.subtree_control").read_text().startswith("+")   # handed down (a real one keeps all)
    finally:
        for folder in own.glob(f"{cgroups._prefix()}*"):
            shutil.rmtree(folder, ignore_errors=True)


def _kernel(root: Path, real_write, born=()):
    """A stand-in for the kernel's cgroup v2 files under `root`: handing controllers down is
    refused (EBUSY) while the group holds a process, and a pid written into a group's
    `cgroup.procs` leaves the group it was in.  `born`: pids started in the group, one before
    each attempt to hand controllers down (processes born there meanwhile)."""
    newcomers = iter(born)

    def write(path: str, text: str) -> None:
        folder, name = os.path.split(path)
        if name == "cgroup.subtree_control":
            newcomer = next(newcomers, None)
            if newcomer is not None:
                with open(os.path.join(folder, "cgroup.procs"), "a") as procs:
                    procs.write(f"{newcomer}\n")
            if Path(folder, "cgroup.procs").read_text().split():
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), path)
        if name == "cgroup.procs" and text.isdigit():
            for procs in root.rglob("cgroup.procs"):   # a process is in one group at a time
                procs.write_text("".join(f"{pid}\n" for pid in procs.read_text().split() if pid != text))
            Path(path).write_text((Path(path).read_text() if Path(path).exists() else "") + text + "\n")
            return
        real_write(path, text)

    return write


def test_a_cgroup_v2_group_that_holds_processes_moves_them_into_its_leaf(tmp_path, monkeypatch) -> None:
    """The v2 path where kanalyze's own group holds processes (a container's: every process
    of it), on a stand-in folder whose two files behave as the kernel's do: handing
    controllers down is refused while the group holds a process, and a pid written into a
    group's `cgroup.procs` leaves the group it was in.  The processes go into `init/`, the
    controller is handed down, the limits are set on a sibling of `init/`; a later kanalyze
    process, started inside `init/`, makes its groups beside it, not below it."""
    own = tmp_path / "container"
    own.mkdir()
    (own / "cgroup.controllers").write_text("memory\n")   # no pids controller, as on an H200 seen here
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text("1\n7\n")
    monkeypatch.setattr(cgroups, "_write", _kernel(tmp_path, cgroups._write))
    mountinfo = f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    handle = cgroups.create("t", 2 ** 32, 512, mountinfo=mountinfo, own="0::/container\n")
    assert isinstance(handle, dict), handle
    assert (own / cgroups.LEAF / "cgroup.procs").read_text().split() == ["1", "7"]
    assert (own / "cgroup.procs").read_text().split() == []
    assert "memory" in (own / "cgroup.subtree_control").read_text()
    [group] = handle["groups"]
    assert Path(group["folder"]).parent == own and group["held"] == ["memory 4.0 GiB"], handle
    assert "no pids controller" in handle["missing"]["pids"], handle
    later = cgroups.create("u", 2 ** 32, 512, mountinfo=mountinfo, own=f"0::/container/{cgroups.LEAF}\n")
    assert isinstance(later, dict) and Path(later["groups"][0]["folder"]).parent == own, later
    # Where a process cannot be moved (another owner's, say), the reason is said, nothing raises.
    (own / "cgroup.procs").write_text("9\n")
    monkeypatch.setattr(cgroups, "_write", lambda path, text: (_ for _ in ()).throw(
        OSError(errno.EBUSY if path.endswith("subtree_control") else errno.EPERM, "refused", path)))
    (own / "cgroup.subtree_control").write_text("")
    refused = cgroups.create("v", 2 ** 32, 512, mountinfo=mountinfo, own="0::/container\n")
    assert isinstance(refused, str) and "moving process 9 into init/" in refused, refused


def test_processes_born_in_the_group_meanwhile_are_moved_on_later_attempts(tmp_path, monkeypatch) -> None:
    """On an H100 and an H200, 17 of 128 pairs ran their candidates with no cgroup: handing the
    memory controller down stayed refused (EBUSY) because processes kept being born in the group
    (pairs starting workers side by side, the machine's own tools) while the others were moved.
    Here each attempt finds one process more, five times: the sixth is handed down (three
    attempts were made before)."""
    own = tmp_path / "container"
    own.mkdir()
    (own / "cgroup.controllers").write_text("memory\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text("1\n")
    monkeypatch.setattr(cgroups, "_write", _kernel(tmp_path, cgroups._write, born=range(100, 105)))
    mountinfo = f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    handle = cgroups.create("t", 2 ** 32, 512, mountinfo=mountinfo, own="0::/container\n")
    assert isinstance(handle, dict), handle
    assert sorted((own / cgroups.LEAF / "cgroup.procs").read_text().split()) == ["1", "100", "101", "102", "103",
                                                                                  "104"]
    assert "memory" in (own / "cgroup.subtree_control").read_text()


# --- where this machine gives cgroups: the limits hold for the worker and its children -----------

@pytest.fixture(params=["zygote", "fresh process"])
def start(request, monkeypatch) -> str:
    if request.param == "fresh process":
        monkeypatch.setenv(zygote_client.DISABLE, "1")
    else:
        assert prestart_zygote("cpu") == "zygote"
    return request.param


def _needs_cgroups(*controllers: str) -> list[str]:
    """Skip, saying why, where this machine lets kanalyze make no group with `controllers` (both,
    where none are named); the controllers its groups get."""
    handle = cgroups.create(f"{os.getpid()}-probe", 2 ** 30, 16)
    cgroups.remove(handle)
    if not isinstance(handle, dict):
        pytest.skip(f"no cgroup can be made here: {handle}")
    lacking = {c: why for c, why in handle["missing"].items() if c in (controllers or cgroups.CONTROLLERS)}
    if lacking:
        pytest.skip(f"no cgroup with the {' and '.join(lacking)} controller here: {lacking}")
    return [c for c in cgroups.CONTROLLERS if c not in handle["missing"]]


def _left_behind() -> list[str]:
    """This process's groups still in place, in every hierarchy kanalyze makes them in."""
    with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
        places, _ = cgroups.locate(mountinfo.read(), own.read())
    return sorted(path for _, folder in set(places.values())
                  for path in glob.glob(os.path.join(folder, f"{cgroups._prefix()}{os.getpid()}-*")))


def _run(tmp_path: Path, name: str) -> tuple[dict, Path]:
    """MEM002 on a copy of the hostile candidate `name`: (its worker's confinement, its observed/)."""
    from kanalyze.dynamic.harness import Harness, find_harness
    from kanalyze.dynamic.runner import Options, run_gates

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    copy = tmp_path / f"level1_problem6_{name}.py"
    shutil.copy(KB / "hostile" / copy.name, copy)
    observed = observed_for(copy)
    harness = find_harness(str(copy), kernelbench=str(KB))
    assert isinstance(harness, Harness), harness
    gate_run = run_gates(harness, ["MEM002"], options=Options(mode="cpu", limits=Limits(case_seconds=120)))
    verdicts = {v.code: v for v in gate_run.verdicts}
    # The candidate is a correct kernel: its run ends with its verdict, undisturbed by what it tried.
    assert verdicts["MEM002"].status == "refuted" and "CMP001" not in verdicts, gate_run.verdicts
    confinement = gate_run.environment["candidate_confinement"]
    held = "memory 4.0 GiB and 512 tasks" if "pids" in _needs_cgroups("memory") else "memory 4.0 GiB"
    assert confinement["cgroup"].startswith(f"{held} for the worker and its children"), confinement
    assert "/sys/fs/cgroup hidden" in confinement["files"], confinement
    return confinement, observed


def test_children_share_the_workers_memory_limit_and_none_outlives_the_run(tmp_path, start) -> None:
    _needs_cgroups("memory")
    _, observed = _run(tmp_path, "fork_memory")
    children = json.loads((observed / "children.json").read_text())
    assert len(children) == 4 and all(child["forked"] for child in children.values()), children
    holding = [i for i, child in children.items() if (child["said"] or "").startswith("holding") and not child["ended"]]
    stopped = [i for i, child in children.items()
               if child["ended"] == "killed by signal 9" or (child["said"] or "").startswith("MemoryError")]
    # 1.5 GiB each: three would hold 4.5 GiB, past the worker's 4 GiB; per-process limits let all four.
    assert len(holding) <= 2 and sorted(holding + stopped) == sorted(children), children
    time.sleep(GRACE_SECONDS)
    assert not list(observed.glob("outlived-*")), "a child outlived its worker"
    assert _left_behind() == []


def test_the_candidate_cannot_leave_its_cgroup(tmp_path, start) -> None:
    controllers = _needs_cgroups("memory")
    _, observed = _run(tmp_path, "cgroup_escape")
    found = json.loads((observed / "cgroup-escape.json").read_text())
    assert found["listing"] == [], found["listing"]        # /sys/fs/cgroup: an empty tmpfs
    assert found["writes"] and all(tried.startswith("refused") for tried in found["writes"].values()), found
    with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
        places, _ = cgroups.locate(mountinfo.read(), own.read())
    for controller in controllers:
        # /proc/self/cgroup names a v1 group by its controller, the v2 group as the unified one
        before = found["before"][controller if places[controller][0] == 1 else "unified"]
        assert f"/{cgroups._prefix()}" in before and before.endswith("/worker"), found["before"]
        assert "kanalyze" not in before, found["before"]          # its own cgroup's name tells nothing
        key = controller if places[controller][0] == 1 else "unified"
        assert found["after"][key] == before, found
        # Its own cgroup namespace (where the kernel gave one) has the worker's group as its root.
        assert found["child_after"][key].startswith(before), found
        seen = found["namespace"].get(controller) or {}
        assert not any(name.startswith(cgroups._prefix()) for name in seen.get("groups_at_its_root", [])), found
    assert _left_behind() == []     # the group it made inside its own was removed with the rest


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_worker_leaves_no_cgroup_and_nothing_in_it(tmp_path) -> None:
    _needs_cgroups("memory")
    candidate = tmp_path / "candidate.py"
    candidate.write_text("import time\ntime.sleep(60)\n")
    scratch = new_scratch_root()
    spec = {"harness": {"kind": "kernelbench", "candidate": str(candidate), "problem": str(candidate)}}
    worker = Worker("candidate", "cpu", spec, Limits(import_seconds=60), scratch)
    try:
        handle = worker._cgroup
        procs = [group["procs"] for group in handle["groups"]]
        deadline = time.monotonic() + 60
        while not all(Path(path).read_text().split() for path in procs):   # joined, importing the candidate
            assert time.monotonic() < deadline and worker.process.poll() is None, worker.output()
            time.sleep(0.05)
        inside = {int(pid) for path in procs for pid in Path(path).read_text().split()}
        worker.kill()
        assert _left_behind() == [] and worker._cgroup is None
        deadline = time.monotonic() + 10   # SIGKILL is delivered at once, the exit is the kernel's to finish
        while [pid for pid in inside if _alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in inside if _alive(pid)], inside
    finally:
        worker.close()
        remove_scratch_root(scratch)


def test_the_groups_of_a_killed_kanalyze_process_are_removed_by_the_next(tmp_path) -> None:
    """A kanalyze process killed before it closed its workers leaves its groups (and maybe their
    processes); the next one of the same PID namespace removes them when it makes its own."""
    _needs_cgroups("memory")
    gone = subprocess.Popen(["true"])
    gone.wait()
    with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
        places, _ = cgroups.locate(mountinfo.read(), own.read())
    left = {f"{cgroups._prefix()}{gone.pid}-candidate-x", f"{cgroups._prefix(earlier=True)}{gone.pid}-earlier",
            f"tmp1-{gone.pid}-another-namespace"}
    folders = [os.path.join(folder, name) for _, folder in set(places.values()) for name in left]
    for folder in folders:
        os.makedirs(os.path.join(folder, "worker"))
    try:
        handle = cgroups.create("next", 2 ** 30, 16)
        cgroups.remove(handle)
        assert isinstance(handle, dict), handle
        remaining = sorted(os.path.basename(folder) for folder in folders if os.path.isdir(folder))
        assert set(remaining) == {f"tmp1-{gone.pid}-another-namespace"}, remaining   # not ours to judge
    finally:
        for folder in folders:
            for path in (os.path.join(folder, "worker"), folder):
                if os.path.isdir(path):
                    os.rmdir(path)
