"""One cgroup per candidate worker: memory and task limits over the worker and all it starts (stdlib, rundir.py).

An rlimit holds per process: a candidate that starts four children gets four
times the memory, and on a GPU there is no memory rlimit at all (CUDA maps far
more address space than it uses).  A cgroup counts the worker and every process
it starts together.  The parent (`create`, when it starts a candidate's worker)
makes one below this process's own cgroup, in each hierarchy that holds the
`memory` or `pids` controller (cgroup v1, a controller per mount; or the
unified cgroup v2 hierarchy, where this process's cgroup must be delegated to
it), as

    <own cgroup>/tmp<ns>-<pid>-<name>/          the limits
    <own cgroup>/tmp<ns>-<pid>-<name>/worker/   the worker's processes

(<ns> and <pid>: the PID namespace and pid of the kanalyze process that made it; a
neutral name, since a candidate reads its own in /proc/self/cgroup: disguise.py)

cgroup v2 lets a group hand controllers down only while it holds no process of its
own ("no internal processes"), and in a container kanalyze's own group usually holds
every process of the container.  Where handing them down is refused for that reason
(EBUSY), the group's processes are moved into a leaf of their own, `<own cgroup>/init/`
(kanalyze among them; no limit on it: they run as before), and the controllers handed
down again, as container init systems do; the workers' groups are then siblings of
`init/`.  A later kanalyze process that finds itself in such an `init/` makes its
groups beside it.

The worker joins `worker/` as its very first step (`join`, from
confine.apply_limits: before its namespaces and any candidate code), so that
everything it and the candidate start is inside.  The limits sit one level
above the processes: a candidate that makes a user and a cgroup namespace of
its own sees `worker/` as its root and may rewrite that group's files (where
kanalyze runs as root, it is root to the files' owner check), never the ones
above it.  Being below this process's own cgroup, the group stays inside
whatever limits kanalyze itself runs under.  In the candidate's mount
namespace the cgroup file systems are hidden (`mount_roots`, mounts.py): it
cannot write itself into another group's `cgroup.procs`.

`remove` (when the worker is closed or killed) kills whatever is still in the
group, its sub-groups included, and removes it.  A kanalyze process killed
before it closed its workers cannot; as with its run directory (rundir.py),
the next one removes the groups of the kanalyze processes of its PID namespace
that are gone, with whatever they left running.  Nothing here raises: what
cannot be done is a reason, in words, that the worker's confinement record
carries (`cgroup`: "none (why)") and containment.py says once per run.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import time

from kanalyze.dynamic.sandbox import rundir

CGROUP_ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "pids")
_V1_LIMITS = {"memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"), "pids": ("pids.max",)}
_V2_LIMITS = {"memory": ("memory.max",), "pids": ("pids.max",)}
LEAF = "init"   # where a cgroup v2 group's own processes go, so that it can hand controllers down
HAND_DOWN_ATTEMPTS = 10   # moves into LEAF before handing controllers down is given up (EBUSY)


def memory_limit(mode: str, memory_bytes: int | None) -> int | None:
    """The group's memory limit.  On the CPU, the worker's own (`Limits.memory_bytes`, 4 GiB), now
    for the worker and its children together.  On a GPU there is no address-space limit, and the
    worker holds host copies of inputs of up to 2^31 elements (their float64 copies too), pinned
    buffers and CUDA's own mappings: three quarters of the machine's memory, a bound no real
    kernel comes near, yet one that leaves kanalyze, the reference worker and the system a quarter
    (the OOM killer then ends the candidate's group, not kanalyze or the reference worker).  A
    fixed figure would be no bound on a small machine and too tight on a large one."""
    if mode == "cpu":
        return memory_bytes
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 3 // 4
    except (ValueError, OSError, AttributeError):
        return None


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def parse_mountinfo(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(file system type, mount point, root inside the file system, its options) per mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 5 and len(rest) >= 3:
            found.append((rest[0], _unescape(fields[4]), _unescape(fields[3]), set(rest[2].split(","))))
    return found


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (a space is \\040)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), text)


def mount_roots(mountinfo: str | None = None) -> list[str]:
    """Where cgroup file systems are mounted, as folders to hide: /sys/fs/cgroup for any mount
    at or below it (cgroup v1's tmpfs of mounts, v2's unified mount), any other as it is."""
    try:
        text = _read("/proc/self/mountinfo") if mountinfo is None else mountinfo
    except OSError:
        return []
    roots = {CGROUP_ROOT if point == CGROUP_ROOT or point.startswith(CGROUP_ROOT + "/") else point
             for fstype, point, _, _ in parse_mountinfo(text) if fstype in ("cgroup", "cgroup2")}
    return sorted(roots)


def _below(mount_point: str, mount_root: str, path: str) -> str | None:
    """The folder of cgroup `path` under a mount of the hierarchy's `mount_root`."""
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return os.path.normpath(mount_point.rstrip("/") + path[len(root):])


def locate(mountinfo: str, own: str) -> tuple[dict[str, tuple[int, str]], dict[str, str]]:
    """Per controller, (cgroup version, the folder of this process's own cgroup) where it is
    mounted; and why not, for the others.  `own` is /proc/self/cgroup's text."""
    paths = {}
    for line in own.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else ["(unified)"]:
                paths[name] = parts[2].strip()
    places: dict[str, tuple[int, str]] = {}
    unified = None
    for fstype, point, root, options in parse_mountinfo(mountinfo):
        if fstype == "cgroup2" and unified is None and "(unified)" in paths:
            unified = _below(point, root, paths["(unified)"])
        for controller in CONTROLLERS:
            if fstype == "cgroup" and controller in options and controller in paths and controller not in places:
                folder = _below(point, root, paths[controller])
                if folder:
                    places[controller] = (1, folder)
    if unified and os.path.basename(unified) == LEAF and _holds_no_process(os.path.dirname(unified)):
        unified = os.path.dirname(unified)   # a leaf made so that its parent could hand controllers down
    why = {}
    for controller in CONTROLLERS:
        if controller in places:
            continue
        if unified and controller in _controllers(unified):
            places[controller] = (2, unified)
        else:
            why[controller] = f"no {controller} controller is mounted where this process's cgroup is"
    return places, why


def _controllers(folder: str) -> list[str]:
    try:
        return _read(os.path.join(folder, "cgroup.controllers")).split()
    except OSError:
        return []


def _handed_down(folder: str) -> list[str]:
    """The controllers a cgroup v2 group hands down to the groups below it."""
    try:
        return _read(os.path.join(folder, "cgroup.subtree_control")).split()
    except OSError:
        return []


def _holds_no_process(folder: str) -> bool:
    try:
        return not _read(os.path.join(folder, "cgroup.procs")).split()
    except OSError:
        return False


def _hand_down(parent: str, controllers: list[str]) -> None:
    """Enable `controllers` for the groups below `parent` (cgroup v2).  Refused because `parent`
    holds processes (EBUSY), its processes go into its leaf `init/` first; raises OSError with
    the cause when that cannot be done either.  Processes the group's others start meanwhile
    are born in it too (an audit's pairs start workers side by side; a machine's own tools
    start processes there): each attempt moves those found, a little later each time."""
    for attempt in range(HAND_DOWN_ATTEMPTS):
        try:
            for controller in controllers:
                if controller not in _handed_down(parent):
                    _write(os.path.join(parent, "cgroup.subtree_control"), f"+{controller}")
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == HAND_DOWN_ATTEMPTS - 1:
                raise
        time.sleep(0.005 * attempt)
        leaf = os.path.join(parent, LEAF)
        os.makedirs(leaf, exist_ok=True)
        for pid in _pids(parent):   # a process that started meanwhile is moved on the next attempt
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except OSError as exc:
                if exc.errno != errno.ESRCH:   # gone meanwhile: nothing to move
                    raise OSError(exc.errno, f"moving process {pid} into {LEAF}/: {exc.strerror}") from exc


def _why(exc: OSError, parent: str, folder: str) -> str:
    """Why no group could be made below `parent`, the same words for every worker of a run
    (the group's own name, `folder`, left out)."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"not permitted to make a cgroup in {parent} ({exc.strerror}): kanalyze is not root and "
                f"its cgroup is not delegated to its user")
    if exc.errno == errno.EROFS:
        return f"{parent} is read-only"
    if exc.errno == errno.EBUSY:
        return (f"{parent}: {exc.strerror} (a cgroup v2 group that holds processes cannot hand controllers "
                f"down, and its processes could not all be moved into {LEAF}/)")
    name = exc.filename if isinstance(exc.filename, str) else folder
    where = f" ({os.path.relpath(name, folder)})" if name.startswith(folder + "/") else ""
    return f"{parent}{where}: {exc.strerror or exc}"


def _limit(version: int, folder: str, controller: str, value: int) -> str:
    """Set one controller's limit on the group; what it holds, in words."""
    if version == 2:
        _write(os.path.join(folder, _V2_LIMITS[controller][0]), str(value))
        if controller == "memory" and os.path.exists(os.path.join(folder, "memory.swap.max")):
            _write(os.path.join(folder, "memory.swap.max"), "0")
    else:
        hierarchy = os.path.join(folder, "memory.use_hierarchy")
        if controller == "memory" and os.path.exists(hierarchy):   # so that the limit holds for worker/ below
            try:
                _write(hierarchy, "1")
            except OSError:
                pass
            if _read(hierarchy).strip() != "1":
                raise OSError(errno.EINVAL, "memory.use_hierarchy is off (the limit would not hold below)")
        for name in _V1_LIMITS[controller]:   # memory, then memory and swap together (where counted)
            if name == _V1_LIMITS[controller][0] or os.path.exists(os.path.join(folder, name)):
                _write(os.path.join(folder, name), str(value))
    return f"memory {value / 2 ** 30:.1f} GiB" if controller == "memory" else f"{value} tasks"


def create(name: str, memory_bytes: int | None, max_pids: int | None,
           mountinfo: str | None = None, own: str | None = None) -> dict | str:
    """Make the group `tmp<ns>-<pid>-<name>` (with `worker/` below it) in each hierarchy
    that holds a wanted controller.  Returns the handle the worker joins and `remove` removes
    ({"groups": [{"folder", "procs", "held"}], "missing": {controller: why}}), or why none."""
    wanted = {c: v for c, v in (("memory", memory_bytes), ("pids", max_pids)) if v}
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if not wanted:
        return "no memory or process limit asked for"
    try:
        places, why = locate(_read("/proc/self/mountinfo") if mountinfo is None else mountinfo,
                             _read("/proc/self/cgroup") if own is None else own)
    except OSError as exc:
        return f"cannot read this process's cgroups ({exc.strerror or exc})"
    by_folder: dict[tuple[int, str], list[str]] = {}
    for controller in wanted:
        if controller in places:
            by_folder.setdefault(places[controller], []).append(controller)
    groups = []
    for (version, parent), controllers in by_folder.items():
        _reap(parent)
        folder, made = os.path.join(parent, f"{_prefix()}{os.getpid()}-{name}"), False
        try:
            if version == 2:   # the controllers handed down to the groups below this process's own
                _hand_down(parent, controllers)
            os.mkdir(folder)
            made = True
            held = [_limit(version, folder, controller, wanted[controller]) for controller in controllers]
            os.mkdir(os.path.join(folder, "worker"))
        except OSError as exc:
            if made:
                _remove_tree(folder, attempts=1)
            why.update({controller: _why(exc, parent, folder) for controller in controllers})
            continue
        groups.append({"folder": folder, "procs": os.path.join(folder, "worker", "cgroup.procs"), "held": held})
    missing = {controller: why[controller] for controller in wanted if controller in why}
    if not groups:
        return "; ".join(missing.values()) or "no cgroup made"
    return {"groups": groups, "missing": missing}


def _prefix(earlier: bool = False) -> str:
    """tmp<this PID namespace>-: a pid means a process only within its namespace, and a
    hierarchy (cgroup v1's pids, here at its root) may be shared with other namespaces.
    `earlier`: the prefix of earlier versions (kanalyze-<ns>-), whose groups are reaped too."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return f"{'kanalyze-' if earlier else 'tmp'}{namespace}-"


def _reap(parent: str) -> None:
    """Remove the groups below `parent` that kanalyze processes of this PID namespace left when
    they were killed (their pid is gone), with whatever still runs in them."""
    prefixes = (_prefix(), _prefix(earlier=True))
    try:
        entries = [entry for entry in os.listdir(parent) if entry.startswith(prefixes)]
    except OSError:
        return
    for entry in entries:
        prefix = next(p for p in prefixes if entry.startswith(p))
        pid = entry[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not rundir.alive(int(pid)):
            _remove_tree(os.path.join(parent, entry), attempts=3)


def join(handle: dict | str | None) -> str:
    """In the worker, first thing: move this process into its group(s).  What holds, in words."""
    if not isinstance(handle, dict):
        return f"none ({handle or 'not made'})"
    held, failed = [], []
    for group in handle.get("groups", []):
        try:
            _write(group["procs"], "0")   # "0": the writing process itself
            held += group["held"]
        except (OSError, KeyError, TypeError) as exc:
            failed.append(f"could not join its group ({getattr(exc, 'strerror', None) or exc})")
    if not held:
        return f"none ({'; '.join(failed) or 'no group'})"
    also = [f"no {controller} limit: {why}" for controller, why in (handle.get("missing") or {}).items()]
    also += failed
    return f"{' and '.join(held)} for the worker and its children" + (f" ({'; '.join(also)})" if also else "")


def remove(handle: dict | str | None) -> None:
    """Kill everything still in the group and remove it (safe to call twice, never raises)."""
    if isinstance(handle, dict):
        for group in handle.get("groups", []):
            if isinstance(group, dict) and group.get("folder"):
                _remove_tree(group["folder"])


def _remove_tree(top: str, attempts: int = 40) -> None:
    """The deepest groups first (a candidate in a cgroup namespace of its own may have made
    some); each one's processes killed, then the folder removed; again until it is gone."""
    for _ in range(attempts):
        try:
            _write(os.path.join(top, "cgroup.kill"), "1")   # cgroup v2 (Linux 5.14+): the whole tree at once
        except OSError:
            pass
        for folder, _, _ in os.walk(top, topdown=False):
            for pid in _pids(folder):
                _kill(pid, folder)
            try:
                os.rmdir(folder)
            except OSError:
                pass
        if not os.path.isdir(top):
            return
        time.sleep(0.05)


def _pids(folder: str) -> list[int]:
    try:
        return [int(word) for word in _read(os.path.join(folder, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def _kill(pid: int, folder: str) -> None:
    """SIGKILL `pid`, through a pidfd taken while it was still listed in `folder`: never
    another process that reused the number."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return
    try:
        if pid in _pids(folder):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(pidfd)
