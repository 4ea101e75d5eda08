"""What a candidate's worker was not contained by, in words (parent side; stdlib only).

Each worker records what held (`candidate_confinement` in a run's environment,
every witness carries it): its own PID namespace, a network namespace, a private
view of the file system, no capabilities, a cgroup over the worker and its
children (`cgroup`; a record made before kanalyze made cgroups has none, and
says nothing of them).  Where the kernel refused one, the
candidate ran with less containment than docs/worker-protocol.md describes; the
run says so once (`kanalyze: containment: …` on stderr) so that nobody reads its
verdicts as if it had held.
"""

from __future__ import annotations


def gaps(confinement: dict | None) -> list[str]:
    """The protections a candidate's worker ran without, one sentence each (empty: all held)."""
    if not confinement:
        return []
    missing = []
    pids = confinement.get("pid_namespace")
    if pids is not True and confinement.get("signals"):   # Landlock's scope (landlock.py)
        missing.append(f"no PID namespace of its own ({pids or 'not recorded'}): the candidate could see "
                       f"this user's other processes (not signal them: {confinement['signals']}), and what it "
                       f"starts may outlive the run")
    elif pids is not True:
        missing.append(f"no PID namespace of its own ({pids or 'not recorded'}): the candidate could see "
                       f"and signal this user's other processes, and what it starts may outlive the run")
    if confinement.get("network") != "namespace":
        missing.append("no network namespace: network access is refused only by an audit hook inside the "
                       "candidate's own process")
    files = str(confinement.get("files") or "shared (no mount namespace)")
    if "hidden" not in files:
        missing.append(f"no private view of the file system ({files}): the candidate could read kanalyze's "
                       f"run directory and write to the user's home")
    elif "read-only refused for" in files:
        missing.append("mounts left writable (" + files.partition("read-only refused for ")[2].partition(";")[0]
                       + "): a candidate could write there, into system folders too where kanalyze runs as root")
    cgroup = confinement.get("cgroup")
    if isinstance(cgroup, str) and cgroup.startswith("none"):
        missing.append(f"no cgroup {cgroup.removeprefix('none').strip()}: the memory and process limits hold per "
                       f"process, so children the candidate starts each get their own")
    elif cgroup and "cgroup" in files.partition("not done:")[2]:
        missing.append("the cgroup file systems in sight: a candidate running as root could move itself out "
                       "of its worker's cgroup")
    if isinstance(cgroup, str) and "no pids limit" in cgroup:
        missing.append("no task limit over the worker and its children (no pids controller): a candidate's "
                       "processes are bounded only by the user's own process limit")
    if "hidden" in files and "/dev/shm its own" not in files and "/dev/shm hidden" not in files:
        missing.append("the host's /dev/shm (a GPU run: CUDA IPC needs it): POSIX shared memory of the user's "
                       "other processes in reach")
    if confinement.get("ipc") == "shared":
        missing.append("no IPC namespace: System V shared memory and message queues of the user's other "
                       "processes (other candidates run beside it) in reach")
    sockets = confinement.get("sockets")
    if isinstance(sockets, str) and sockets.startswith("not refused"):
        missing.append(f"sockets {sockets}: through ctypes, a candidate could connect to a socket named in "
                       f"the file system (a tmux server, an agent, docker) and run commands outside the sandbox")
    capabilities = confinement.get("capabilities")
    if capabilities not in (None, "none"):
        missing.append(f"capabilities kept ({capabilities})")
    return missing


def note(confinements: list[dict | None]) -> str | None:
    """One line for a whole run: every gap any of its candidate workers had, each said once."""
    seen: list[str] = []
    for confinement in confinements:
        seen += [gap for gap in gaps(confinement) if gap not in seen]
    return "containment: the candidates ran with " + "; ".join(seen) if seen else None
