"""`kanalyze audit --executor ray` on a real Ray cluster started on this machine
(`ray start --head --num-cpus 2`, stopped by its own process group at the end).

The same four pairs from fixtures/kernelbench (the MEM002 plant and twin, the CMP001
plant, a candidate with no problem) are audited once by the local executor and once
through Ray: the journals must hold the same pair ids and the same result lines
apart from timings and paths (statuses per clause, static flags, allclose); the
witnesses written on a Ray worker come back and replay here; a rerun through Ray
skips every finished pair, and Ray resumes a journal the local executor started.

Needs `ray` (pip install 'kanalyze[ray]'): without it, the cluster tests are skipped
with that reason and a warning in pytest's summary (never silently), and the usage
error for `--executor ray` is still checked."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from kanalyze.cli import main

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())
GATES = "MEM002,CMP001"
NO_RAY = "ray is not installed (pip install 'kanalyze[ray]'): the Ray executor's cluster tests need it"

PAIRS = [
    {"candidate": "candidates/" + CONTROLS["MEM002"]["plant"], "problem": "level1/7_bias_relu.py"},
    {"candidate": "candidates/" + CONTROLS["MEM002"]["twin"], "problem": "level1/7_bias_relu.py"},
    {"candidate": "candidates/" + CONTROLS["CMP001"]["plant"], "problem": "level1/5_softmax.py"},
    {"candidate": "candidates/level1_problem6_leaky_relu.py"},                # no problem: a line all the same
]


def _need_ray() -> None:
    try:
        import ray  # noqa: F401
    except ModuleNotFoundError:
        warnings.warn(NO_RAY, stacklevel=2)          # shown in the warnings summary, even under -q
        pytest.skip(NO_RAY)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """A one-node Ray cluster of 2 CPUs; its address.  Ended through its own process group."""
    _need_ray()
    port = _free_port()
    folder = tempfile.mkdtemp(prefix="kray-", dir="/tmp")        # short: Ray's socket paths live below it
    log = open(os.path.join(folder, "start.log"), "w+")
    start = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()",
             "start", "--head", "--block", "--num-cpus", "2", "--port", str(port), "--disable-usage-stats",
             "--include-dashboard", "false", "--object-store-memory", str(100 << 20), "--temp-dir", folder]
    head = subprocess.Popen(start, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in Path(log.name).read_text(errors="replace"):
            assert head.poll() is None, "ray start exited:\n" + Path(log.name).read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "ray start did not finish within 120 s"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)          # `ray start --block` ends the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)   # whatever of that cluster is left in its group
        except ProcessLookupError:
            pass
        head.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    lines = [{key: os.path.relpath(KB / value, folder) for key, value in pair.items()} | {"sample": n}
             for n, pair in enumerate(PAIRS)]
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _command(manifest: Path, output: Path, *more: str) -> list[str]:
    return ["audit", "--manifest", str(manifest), "--output", str(output), "--gates", GATES, "--device", "cpu",
            "-q", *more]


def _ray_audit(manifest: Path, output: Path, address: str, *more: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kanalyze", *_command(manifest, output, "--executor", "ray", "--address",
                                                           address, "--output-format", "json", *more)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _records(output: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (output / "results.jsonl").read_text().splitlines())}


def _comparable(value, output: Path):
    """A record without its timings, with its own output folder written OUT and each
    witness as whether its file is there (a witness's name hashes the path it ran at)."""
    if isinstance(value, dict):
        return {key: (Path(item).is_file() if key == "witness" and item else _comparable(item, output))
                for key, item in value.items() if key not in ("seconds", "wall_seconds", "standby_seconds")}
    if isinstance(value, list):
        return [_comparable(item, output) for item in value]
    return value.replace(str(output), "OUT") if isinstance(value, str) else value


@pytest.fixture(scope="module")
def local_run(manifest, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("local") / "out"
    assert main(_command(manifest, output, "--jobs", "2")) == 1        # violations were confirmed
    return output


@pytest.fixture(scope="module")
def ray_run(manifest, cluster, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    output = tmp_path_factory.mktemp("ray") / "out"
    return output, _ray_audit(manifest, output, cluster)


def test_ray_gives_the_local_executors_ids_and_result_lines(ray_run, local_run) -> None:
    output, done = ray_run
    assert done.returncode == 1, done.stderr[-3000:]
    assert json.loads(done.stdout)["pairs"] == len(PAIRS)             # stdout holds the summary alone
    local, ray = _records(local_run), _records(output)
    assert sorted(ray) == sorted(local) and len(ray) == len(PAIRS)
    for identifier, record in local.items():
        theirs = ray[identifier]
        assert theirs["status"] == record["status"] == "done", theirs
        assert {c: v["status"] for c, v in theirs["verdicts"].items()} == \
               {c: v["status"] for c, v in record["verdicts"].items()}
        assert theirs["allclose"]["verdict"] == record["allclose"]["verdict"]
        assert theirs["candidate"] == record["candidate"] and theirs["problem"] == record["problem"]
        assert _comparable(theirs, output) == _comparable(record, local_run)
    confirmed = sorted(Path(r["candidate"]).name for r in ray.values()
                       if any(v["status"] == "confirmed" for v in r["verdicts"].values()))
    assert confirmed == sorted([CONTROLS["MEM002"]["plant"], CONTROLS["CMP001"]["plant"]])


def test_a_witness_written_on_a_ray_worker_lies_in_the_output_and_replays_here(ray_run) -> None:
    output, _ = ray_run
    plant = next(r for r in _records(output).values() if r["candidate"].endswith(CONTROLS["MEM002"]["plant"]))
    witness = Path(plant["verdicts"]["MEM002"]["witness"])
    assert witness.parent == output / "witnesses" and witness.is_file()
    assert witness.with_suffix(".npz").is_file()
    replayed = subprocess.run([sys.executable, "-m", "kanalyze", "replay", str(witness), "--device", "cpu"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 1 and "MEM002 confirmed" in replayed.stdout, replayed.stderr[-3000:]


def test_a_rerun_through_ray_skips_finished_pairs_and_resumes_a_local_journal(
        cluster, manifest, ray_run, local_run, tmp_path) -> None:
    output, _ = ray_run
    before = (output / "results.jsonl").read_bytes()
    started = time.monotonic()
    again = _ray_audit(manifest, output, cluster)
    assert again.returncode == 1, again.stderr[-3000:]
    assert (output / "results.jsonl").read_bytes() == before                   # nothing ran, nothing written
    assert time.monotonic() - started < 30
    # The local executor's journal, its last pair lost: Ray runs that pair alone and keeps the rest.
    lines = (local_run / "results.jsonl").read_text().splitlines(keepends=True)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "results.jsonl").write_text("".join(lines[:-1]))
    done = _ray_audit(manifest, resumed, cluster)
    assert done.returncode == 1, done.stderr[-3000:]
    after = (resumed / "results.jsonl").read_text().splitlines(keepends=True)
    assert after[:-1] == lines[:-1] and len(after) == len(lines)
    lost = json.loads(lines[-1])
    assert json.loads(after[-1])["id"] == lost["id"]
    assert _comparable(json.loads(after[-1]), resumed) == _comparable(lost, local_run)


def _processes(marker: bytes, start: bool = False) -> list[int]:
    """The processes whose command line holds `marker` (begins with it, with `start`)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (line.startswith(marker) if start else marker in line) and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def _running_pairs() -> list[int]:
    """The Ray workers running a pair now (Ray titles a worker by the task it runs)."""
    return _processes(b"ray::run_shipped", start=True)


def test_a_ray_worker_killed_mid_pair_loses_and_duplicates_nothing(cluster, manifest, local_run, tmp_path) -> None:
    """The Ray worker running a pair is SIGKILLed a few seconds into it: Ray runs the task again
    (or the pair's line says the task failed), the audit ends with every pair once, the pairs
    that ran give the local executor's lines, nothing of the killed pair is left running, and
    a rerun finds nothing to do."""
    output = tmp_path / "out"
    command = [sys.executable, "-m", "kanalyze", *_command(manifest, output, "--executor", "ray", "--address",
                                                           cluster, "--output-format", "json")]
    audit = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, deadline = None, time.monotonic() + 180
    while killed is None and audit.poll() is None and time.monotonic() < deadline:
        workers = _running_pairs()
        if workers:
            time.sleep(3)                     # into the pair: its static pass, its gates' workers
            alive = [pid for pid in workers if pid in _running_pairs()]
            if alive:
                os.kill(alive[0], signal.SIGKILL)
                killed = alive[0]
        time.sleep(0.2)
    _, err = audit.communicate(timeout=900)
    assert killed is not None, "no Ray worker was seen running a pair: the test would prove nothing"
    assert audit.returncode == 1, err[-3000:]
    lines = (output / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["id"] for r in records) == sorted(_records(local_run)) and len(records) == len(PAIRS)
    local = _records(local_run)
    for record in records:
        if record["status"] == "done":
            assert _comparable(record, output) == _comparable(local[record["id"]], local_run), record["candidate"]
        else:
            assert "the pair's Ray task failed" in record.get("reason", ""), record
    time.sleep(2)   # the audit has ended: no pair of it may still run (the killed one's included)
    assert _processes(b"kanalyze.audit.pair") == [], "a pair's process outlived the audit"
    again = _ray_audit(manifest, output, cluster)
    assert again.returncode == 1, again.stderr[-3000:]
    assert (output / "results.jsonl").read_text().splitlines() == lines          # nothing left to run


def test_ray_is_an_optional_extra_and_its_address_is_checked(manifest, tmp_path) -> None:
    hidden = tmp_path / "no-ray" / "ray"                   # an `import ray` that fails, installed or not
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError('ray is hidden from this audit', name='ray')\n")
    command = [sys.executable, "-m", "kanalyze", *_command(manifest, tmp_path / "out", "--executor", "ray")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(hidden.parent)})
    assert done.returncode == 2 and "pip install 'kanalyze[ray]'" in done.stderr, done.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
    assert main(_command(manifest, tmp_path / "out", "--address", "127.0.0.1:6379")) == 2     # without --executor ray
    assert main(_command(manifest, tmp_path / "out", "--executor", "ray", "--stop-after", "60")) == 2  # the local one's
    assert main(_command(manifest, tmp_path / "out", "--stop-after", "-1")) == 2


def test_an_address_where_no_cluster_answers_is_a_usage_error(manifest, tmp_path, capsys) -> None:
    _need_ray()
    started = time.monotonic()
    assert main(_command(manifest, tmp_path / "out", "--executor", "ray", "--address",
                         f"127.0.0.1:{_free_port()}")) == 2
    assert "no Ray cluster answers at" in capsys.readouterr().err
    assert time.monotonic() - started < 30


def test_a_cuda_audit_on_a_cluster_without_a_gpu_stops_with_a_usage_error(cluster, manifest, tmp_path) -> None:
    done = _ray_audit(manifest, tmp_path / "out", cluster, "--device", "cuda")      # the last --device wins
    assert done.returncode == 2 and "the Ray cluster has no GPU" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out" / "results.jsonl").exists()


PACKING = r'''
import json, os, sys, time
import ray
from kanalyze.audit.ray_executor import RayExecutor

LOG = sys.argv[1]

def pair(payload, seconds, version):
    """Stands in for a pair: says when it ran and on which GPU; the first run of "short" runs
    out of device memory, as a pair beside others may."""
    import os, platform, time
    name = payload["spec"]["name"]
    started = time.time()
    time.sleep(1.5)
    marker = os.path.join(os.path.dirname(LOG), "short-ran-once")
    result = {"status": "done", "verdicts": {}}
    if name == "short" and not os.path.exists(marker):
        open(marker, "w").close()
        result["reason"] = "the reference crashed: torch.OutOfMemoryError: CUDA out of memory"
    with open(LOG, "a") as handle:
        handle.write(json.dumps({"name": name, "start": started, "end": time.time(),
                                 "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
    return {"kanalyze": version, "node": platform.node(), "witnesses": {}, "result": result}

ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
         _temp_dir=sys.argv[2])
jobs = [(name, {"name": name, "device": "cuda"}) for name in ("a", "b", "short", "c")]
lines = [(job[0], result.get("retried")) for job, result in RayExecutor(per_gpu=2, task=pair).run(jobs)]
ray.shutdown()
print(json.dumps(lines))
'''


def test_a_cuda_audit_through_ray_runs_jobs_pairs_on_each_gpu_and_a_short_one_again_alone(tmp_path) -> None:
    """`--jobs 2 --executor ray --device cuda`: Ray runs two pairs at once on a GPU (a GPU the
    test's Ray declares: the tasks stand in for pairs and run no CUDA); a pair that ran out of
    memory beside another runs again on the whole GPU, beside nothing, and its line says so."""
    _need_ray()
    log = tmp_path / "runs.jsonl"
    (tmp_path / "home").mkdir()
    folder = tempfile.mkdtemp(prefix="kray-", dir="/tmp")        # short: Ray's socket paths live below it
    try:   # a home of its own: the Ray it starts keeps its token there, not where the cluster tests' driver looks
        done = subprocess.run([sys.executable, "-c", PACKING, str(log), folder], capture_output=True, text=True,
                              cwd=ROOT, timeout=240, env={**os.environ, "HOME": str(tmp_path / "home")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    assert sorted(lines) == ["a", "b", "c", "short"]                    # each pair once
    assert lines["short"] and lines["short"].startswith("ran again alone") and "CUDA out of memory" in lines["short"]
    assert not any(lines[name] for name in ("a", "b", "c")), lines
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 5 and all(run["gpus"] == "0" for run in runs), runs

    def overlapping(run) -> list[str]:
        return [o["name"] for o in runs if o is not run and o["start"] < run["end"] and run["start"] < o["end"]]

    assert any(overlapping(run) for run in runs), runs           # two at once on the one GPU
    again = [run for run in runs if run["name"] == "short"][-1]
    assert overlapping(again) == [], runs                         # the retry had the GPU alone
