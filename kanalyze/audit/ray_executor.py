"""The Ray executor: the audit's pairs as Ray tasks on a cluster (`--executor ray`).

    executor = RayExecutor(address="10.0.0.1:6379", seconds=600)
    for job, result in executor.run(jobs):     # as each pair ends, in any order
        ...

The same contract as executor.LocalExecutor: a job `(id, spec)` in, a result out,
streamed back as each pair ends, and the caller (run.py) writes the journal.  The
ids are computed before any executor sees a pair (run.plan), so a journal started
with one executor is resumed by the other.

What a task gets, and what it does with it.  A task does not assume the driver's
file system: it gets the spec and the bytes of the candidate and the problem,
writes them into a temporary folder of its own, under the same absolute paths
below that folder (`<tmp>/fs/home/me/c.py`), and runs the pair there with the
local executor's own `run_one`: `python -m kanalyze.audit.pair` in a child
process, under the same time limit, with the same `crashed` and `timeout` lines.
Its result comes back with `<tmp>/fs` taken out of every string, so that paths
in it are the driver's.  The witnesses it wrote (into `<tmp>/fs/OUTPUT/witnesses`)
come back as bytes, and the driver writes them into OUTPUT/witnesses.  A witness
is signed with the key of the user the Ray worker runs as: on another machine,
`kanalyze replay` it with `--trust`, or copy the key (kanalyze/keys.py).

Each task asks for one CPU, and a GPU when the audit's device is cuda (Ray then
sets CUDA_VISIBLE_DEVICES for it): a whole one, or with `per_gpu` (the audit's
`--jobs`) that share of one, so that Ray runs `per_gpu` pairs at once on each GPU
(most pairs leave a GPU nearly idle).  A pair that ran short of memory or disk beside
others, or reached a time limit there (executor.starved, executor.slowed), runs again at
once on a whole GPU, where Ray places no other pair, and its line says so (`retried`), as
the local executor's does.  At most
twice as many tasks as the cluster has slots (CPUs, or GPUs times `per_gpu`) are
submitted at a time, so that a large corpus is not all in Ray's object store at once.

What stops the audit instead of giving a line (ExecutorError, exit 2): no Ray
cluster at the address, a cuda audit on a cluster without a GPU, and a worker
whose kanalyze is another version (a pair id holds kanalyze's version).  A task that Ray itself loses (its node died, after
Ray's retries) gets a `crashed` line.  `import ray` happens only here, and only
when the executor is built: Ray is an optional extra, `pip install 'kanalyze[ray]'`.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import socket
import tempfile
from typing import Iterable, Iterator

from kanalyze import __version__
from kanalyze.audit.executor import ExecutorError, LocalExecutor, slowed, starved

INSTALL = "pip install 'kanalyze[ray]'"


class RayExecutor:
    def __init__(self, address: str | None = None, seconds: float = 600.0, per_gpu: int = 1,
                 task=None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ExecutorError(f"--executor ray needs Ray, an optional extra of kanalyze: {INSTALL}") from exc
        self._ray = ray
        self.address = address          # None: $RAY_ADDRESS, the cluster last started here, or a new local Ray
        self.seconds = seconds
        self.per_gpu = max(1, per_gpu)   # pairs at once on one GPU (a cuda audit)
        self._task = task or run_shipped  # what a Ray task runs (tests swap in one that records)

    def run(self, jobs: Iterable[tuple[str, dict]]) -> Iterator[tuple[tuple[str, dict], dict]]:
        queue = list(jobs)
        if not queue:
            return
        ray = self._ray
        connected_here = self._connect()
        pending: dict = {}
        short: dict[str, str] = {}   # pair id -> the shortage it ran into beside other pairs
        try:
            task = ray.remote(self._task)
            cuda = queue[0][1]["device"] == "cuda"
            window = _window(ray, queue[0][1]["device"]) * (self.per_gpu if cuda else 1)
            waiting = iter(queue)

            def send(job, gpus: float) -> None:
                reference = task.options(num_cpus=1, num_gpus=gpus).remote(ship(job[1]), self.seconds, __version__)
                pending[reference] = job, gpus

            def submit() -> None:
                for job in waiting:
                    send(job, 1 / self.per_gpu if job[1]["device"] == "cuda" else 0)
                    if len(pending) >= window:
                        return

            submit()
            while pending:
                (reference,), _ = ray.wait(list(pending), num_returns=1)
                job, gpus = pending.pop(reference)
                result = self._result(reference, job[1])
                shortage = (starved(result) or slowed(result)) if 0 < gpus < 1 else None
                if shortage:   # alone on a GPU now: Ray places no share of it beside a whole one
                    short[job[0]] = shortage
                    send(job, 1)
                    continue
                if job[0] in short:
                    result = {**result, "retried": f"ran again alone: beside other pairs it ran short "
                                                   f"({short[job[0]]})"}
                submit()
                yield job, result
        finally:
            for reference in pending:        # the audit stopped early: leave nothing running
                try:
                    ray.cancel(reference, force=True)
                except Exception:  # already finished or already gone: nothing to end
                    pass
            if connected_here:
                ray.shutdown()

    def _connect(self) -> bool:
        """Connect to the cluster; True when this executor did (and so disconnects at the end)."""
        ray = self._ray
        if ray.is_initialized():
            return False
        _reachable(self.address)
        try:
            ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
        except Exception as exc:  # Ray raises ConnectionError, ValueError, RuntimeError ... for an unreachable address
            where = self.address or "$RAY_ADDRESS or this machine"
            raise ExecutorError(f"--executor ray: cannot connect to a Ray cluster at {where}: "
                                f"{type(exc).__name__}: {exc}") from exc
        return True

    def _result(self, reference, spec: dict) -> dict:
        try:
            answer = self._ray.get(reference)
        except Exception as exc:  # Ray lost the task (worker or node died, after its retries)
            lines = str(exc).strip().splitlines() or [""]
            return {"status": "crashed",
                    "reason": f"the pair's Ray task failed: {type(exc).__name__}: {lines[-1][:500]}"}
        if answer["kanalyze"] != __version__:
            raise ExecutorError(f"--executor ray: the Ray worker on {answer['node']} runs kanalyze "
                                f"{answer['kanalyze']}, this audit kanalyze {__version__}: install the same "
                                "kanalyze on every node of the cluster (a pair's id holds the version)")
        save_witnesses(answer["witnesses"], spec.get("witness_dir"))
        return answer["result"]


def _reachable(address: str | None, seconds: float = 10.0) -> None:
    """Fail at once on a `host:port` nothing answers at (Ray itself retries for minutes)."""
    if not address or "://" in address or ":" not in address:
        return                          # None, "auto", "local", ray://...: Ray's own resolution
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except (OSError, ValueError) as exc:
        raise ExecutorError(f"--executor ray: no Ray cluster answers at {address}: {exc}; start one with "
                            f"`ray start --head --port {port}` or pass its address") from exc


def _window(ray, device: str) -> int:
    """How many tasks to keep submitted: twice the cluster's CPUs (GPUs on cuda), at least 2.
    A cuda audit on a cluster without a GPU stops here: its tasks could never be scheduled."""
    try:
        resources = ray.cluster_resources()
    except Exception:  # a cluster that will not say: submit a few at a time
        return 2
    kind = "GPU" if device == "cuda" else "CPU"
    if device == "cuda" and not resources.get(kind):
        raise ExecutorError("--executor ray --device cuda: the Ray cluster has no GPU (`ray status` lists its "
                            "resources); start its nodes where CUDA is visible, or audit with --device cpu")
    return max(2, 2 * int(resources.get(kind, 1)))


# ------------------------------------------------------------ what travels to a task and back

def ship(spec: dict) -> dict:
    """The spec and the bytes of its candidate and problem (None for a file the driver cannot
    read: the task then keeps the path, and the pair fails as it does locally)."""
    files = {}
    for key in ("candidate", "problem"):
        path = spec.get(key)
        if path and path not in files:
            try:
                with open(path, "rb") as handle:
                    files[path] = handle.read()
            except OSError:
                files[path] = None
    return {"spec": spec, "files": files}


def run_shipped(payload: dict, seconds: float, version: str) -> dict:
    """A Ray task's body: the shipped pair, run in a folder of the task's own by the
    local executor's `run_one`; returns the result and the witnesses it wrote."""
    import kanalyze

    answer = {"kanalyze": kanalyze.__version__, "node": platform.node()}
    if kanalyze.__version__ != version:
        return answer
    folder = tempfile.mkdtemp(prefix="kanalyze-ray-")
    root = os.path.join(folder, "fs")
    try:
        spec = dict(payload["spec"])
        for key in ("candidate", "problem"):
            path = spec.get(key)
            data = payload["files"].get(path) if path else None
            if data is not None:
                spec[key] = _place(root, path, data)
        witness_dir = spec.get("witness_dir")
        if witness_dir:
            spec["witness_dir"] = root + witness_dir
        result = LocalExecutor(1, seconds).run_one(spec)
        answer["result"] = _unplace(result, root)
        answer["witnesses"] = _read_folder(spec["witness_dir"]) if witness_dir else {}
        return answer
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _place(root: str, path: str, data: bytes) -> str:
    """Write `data` at the driver's absolute `path` below `root`; return where."""
    local = root + os.path.abspath(path)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(local, "wb") as handle:
        handle.write(data)
    return local


def _unplace(value, root: str):
    """`value` with the task's folder taken out of every string: the driver's paths again."""
    if isinstance(value, str):
        return value.replace(root, "")
    if isinstance(value, dict):
        return {key: _unplace(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [_unplace(item, root) for item in value]
    return value


def _read_folder(folder: str) -> dict[str, bytes]:
    if not os.path.isdir(folder):
        return {}
    files = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                files[name] = handle.read()
    return files


def save_witnesses(files: dict[str, bytes], folder: str | None) -> None:
    """Write a task's witness files into the audit's witnesses/ folder, each renamed into place."""
    if not files or not folder:
        return
    os.makedirs(folder, exist_ok=True)
    for name, data in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            continue                    # only plain file names come from a task
        path = os.path.join(folder, name)
        with open(path + ".part", "wb") as handle:
            handle.write(data)
        os.replace(path + ".part", path)
