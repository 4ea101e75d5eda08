"""`kanalyze audit` on the CPU: verdicts over a small manifest, a journal that survives
`kill -9` at random points, torn lines, crashing and hanging pairs, and a summary that
agrees with the journal.  Pairs come from fixtures/kernelbench (controls.json's plants and
twins, one hostile candidate); only the cheap gates MEM002 and CMP001 run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kanalyze.audit.executor import LocalExecutor
from kanalyze.audit.journal import Journal, read_records
from kanalyze.audit.pairs import Pair, from_manifest
from kanalyze.audit.run import AuditOptions, audit
from kanalyze.audit.summary import summarize
from kanalyze.cli import main

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())
GATES = "MEM002,CMP001"

# candidate → (problem, the verdicts expected of MEM002 and CMP001, KernelBench's allclose)
EXPECTED = {
    "candidates/" + CONTROLS["MEM002"]["plant"]: ("7_bias_relu.py", {"MEM002": "confirmed", "CMP001": "refuted"}, "PASS"),
    "candidates/" + CONTROLS["MEM002"]["twin"]: ("7_bias_relu.py", {"MEM002": "refuted", "CMP001": "refuted"}, "PASS"),
    "candidates/" + CONTROLS["CMP001"]["plant"]: ("5_softmax.py", {"MEM002": "refuted", "CMP001": "confirmed"}, "PASS"),
    "hostile/level1_problem6_hard_exit.py": ("6_leaky_relu.py", {"MEM002": "unconfirmed", "CMP001": "confirmed"},
                                             "CRASHED"),
}


def _manifest(folder: Path) -> Path:
    """The four pairs (paths relative to the manifest, as a corpus ships them), then one duplicate line."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"candidate": os.path.relpath(KB / candidate, folder), "problem": os.path.relpath(KB / "level1" / problem,
                                                                                               folder),
              "sample": n} for n, (candidate, (problem, _, _)) in enumerate(EXPECTED.items())]
    lines.append(lines[1])
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _command(manifest: Path, output: Path) -> list[str]:
    return ["audit", "--manifest", str(manifest), "--output", str(output), "--gates", GATES, "--device", "cpu",
            "--jobs", "2", "-q"]


def _four_pairs() -> tuple[list[str], list[Pair]]:
    """Four pairs of problem 6 for the executor's own tests (their workers are stand-ins: what the
    candidates are does not matter), and the candidates' file names in order."""
    names = ["level1_problem6_hang.py", "level1_problem6_hard_exit.py", "level1_problem6_no_model_new.py",
             "level1_problem6_wrong_shape.py"]
    return names, _problem6_pairs("hostile", *names)


def _problem6_pairs(folder: str, *names: str) -> list[Pair]:
    """Pairs of these candidates (in KB/`folder`) with problem 6."""
    return [Pair(str(KB / folder / name), str(KB / "level1" / "6_leaky_relu.py")) for name in names]


def _stand_in(tmp_path: Path, source: str) -> list[str]:
    """The command line of a stand-in pair worker (`source`, run with SPEC and OUT as arguments),
    written to tmp_path/worker.py: the executor's own tests swap it in for the real one."""
    worker = tmp_path / "worker.py"
    worker.write_text(source)
    return [sys.executable, str(worker)]


def _records(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]


def _verdicts(records: list[dict]) -> dict[str, tuple]:
    return {r["id"]: (r["status"], {c: v["status"] for c, v in r.get("verdicts", {}).items()},
                      (r.get("allclose") or {}).get("verdict")) for r in records}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    manifest = _manifest(folder / "corpus")
    started = time.monotonic()
    code = main(_command(manifest, folder / "out"))
    return {"manifest": manifest, "output": folder / "out", "code": code, "seconds": time.monotonic() - started}


def test_audit_over_a_manifest_gives_the_expected_verdicts(uninterrupted) -> None:
    assert uninterrupted["code"] == 1                       # violations were confirmed
    records = _records(uninterrupted["output"])
    assert len(records) == 5 and len({r["id"] for r in records}) == 5
    duplicate = [r for r in records if r["status"] == "duplicate"]
    assert len(duplicate) == 1 and duplicate[0]["duplicate_of"] in {r["id"] for r in records}
    for record in records:
        if record["status"] == "duplicate":
            continue
        candidate = os.path.relpath(record["candidate"], KB)
        problem, verdicts, allclose = EXPECTED[candidate]
        assert record["status"] == "done", record
        assert Path(record["problem"]).name == problem
        assert {c: v["status"] for c, v in record["verdicts"].items()} == verdicts, candidate
        assert record["allclose"]["verdict"] == allclose, (candidate, record["allclose"])
        # what the candidate's cages lacked, in words (empty where this machine gave them all)
        assert isinstance(record["contained"], list) and isinstance(record["allclose"]["contained"], list)
        assert "sample" in record["metadata"]                # extra manifest keys kept
        # where the gates' time went: the candidate's cases of each gate (and of the problem's own
        # inputs, which they share), and their seconds
        by_gate = record["seconds"]["by_gate"]
        assert set(by_gate) <= {"baseline", *GATES.split(",")} and "baseline" in by_gate, by_gate
        assert all(cases >= 1 and seconds >= 0 for cases, seconds, _ in by_gate.values()), by_gate
        # from kanalyze's side a case takes at least what its worker says it took (clocks apart)
        assert all(wall >= seconds - 0.05 for _, seconds, wall in by_gate.values()), by_gate
        slowest = record["seconds"]["slowest"]   # the slowest cases, each with its worker's steps
        assert slowest and {c["gate"] or "baseline" for c in slowest} <= set(by_gate), slowest
        assert all(c["seconds"] == pytest.approx(sum(c["steps"].values()), abs=0.01) for c in slowest), slowest
        # slowest first from kanalyze's side (None: a case that never answered, as a worker that died)
        walls = [c["seconds"] if c["wall"] is None else c["wall"] for c in slowest]
        assert walls == sorted(walls, reverse=True), slowest
        assert any(isinstance(c["wall"], float) for r in records for c in r.get("seconds", {}).get("slowest", []))
    # the later pairs' processes were started while the first two ran, and stood by (executor.py's spares)
    stood = [r["standby_seconds"] for r in records if "standby_seconds" in r]
    assert stood and all(seconds >= 0 for seconds in stood), stood
    plant = next(r for r in records if r["candidate"].endswith(CONTROLS["MEM002"]["plant"]))
    assert plant["verdicts"]["MEM002"]["static_flag"] is True       # the static pass flagged it first
    assert Path(plant["verdicts"]["MEM002"]["witness"]).is_file()
    assert any(f["code"] == "MEM002" for f in plant["static"])


def test_summary_numbers_match_the_journal(uninterrupted, capsys) -> None:
    records = [r for r in _records(uninterrupted["output"]) if r["status"] != "duplicate"]
    assert main(["audit", "--summary", str(uninterrupted["output"]), "--output-format", "json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["pairs"] == len(records) == 4 and summary["duplicates"] == 1
    for code in ("MEM002", "CMP001"):
        for status in ("confirmed", "refuted", "unconfirmed"):
            assert summary["clauses"][code][status] == sum(r["verdicts"][code]["status"] == status for r in records)
    # allclose accepts the in-place bias_relu and the softmax without its max: kanalyze confirms both
    accepted = {Path(p["candidate"]).name for p in summary["differential"]["accepted_pairs"]}
    assert accepted == {CONTROLS["MEM002"]["plant"], CONTROLS["CMP001"]["plant"]}
    assert summary["differential"]["allclose_accepts_kanalyze_confirms"] == 2
    assert summary["kanalyze_failed"] == 0
    confirmed = [v for r in records for v in r["verdicts"].values() if v["status"] == "confirmed"]
    flagged = sum(v["static_flag"] for v in confirmed)
    assert (summary["static"]["all"]["predicted"], summary["static"]["all"]["missed"]) == \
        (flagged, len(confirmed) - flagged)
    assert summary["static"]["all"]["recall"] == round(flagged / len(confirmed), 4)
    assert main(["audit", "--summary", str(uninterrupted["output"])]) == 1
    assert "differential: 2 pairs accepted by allclose" in capsys.readouterr().out


def test_a_rerun_skips_every_finished_pair(uninterrupted, capsys) -> None:
    before = (uninterrupted["output"] / "results.jsonl").read_bytes()
    started = time.monotonic()
    assert main(_command(uninterrupted["manifest"], uninterrupted["output"])) == 1
    assert time.monotonic() - started < 5                   # nothing ran again
    assert (uninterrupted["output"] / "results.jsonl").read_bytes() == before


def test_the_journal_survives_kill_9_at_random_points(uninterrupted, tmp_path) -> None:
    """Kill the whole audit (parent and children) at random moments, then finish it: the same
    pair ids as the uninterrupted run, each exactly once, with the same verdicts."""
    output = tmp_path / "out"
    command = [sys.executable, "-m", "kanalyze", *_command(uninterrupted["manifest"], output)]
    chance = random.Random(13)
    for _ in range(3):
        audit_process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
        time.sleep(chance.uniform(0.5, uninterrupted["seconds"] * 0.6))
        os.killpg(audit_process.pid, signal.SIGKILL)          # the pair workers die with their parent
        audit_process.wait()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    lines = (output / "results.jsonl").read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert len(ids) == len(set(ids)), "a pair was written twice"
    assert _verdicts(_records(output)) == _verdicts(_records(uninterrupted["output"]))


def test_a_torn_last_line_is_dropped_and_the_pair_runs_again(tmp_path) -> None:
    journal_path = tmp_path / "results.jsonl"
    whole = [json.dumps({"id": "a", "status": "done"}), json.dumps({"id": "b", "status": "done"})]
    journal_path.write_text(whole[0] + "\n" + whole[1] + "\n" + '{"id": "c", "stat')
    with Journal(str(tmp_path)) as journal:
        assert set(journal.load()) == {"a", "b"}
        assert journal.torn_bytes == len('{"id": "c", "stat')
        journal.append({"id": "c", "status": "done"})
    records, length, bad = read_records(str(journal_path))
    assert [r["id"] for r in records] == ["a", "b", "c"] and bad == 0
    assert length == journal_path.stat().st_size             # every line whole again
    with pytest.raises(Exception, match="another audit is writing"):
        with Journal(str(tmp_path)):
            Journal(str(tmp_path))


def test_a_pair_that_hangs_or_kills_its_worker_gets_its_line_and_the_others_complete(tmp_path) -> None:
    """The executor's own containment: a worker that never returns is killed at the pair's time
    limit; one that dies gets its exit status; the audit goes on and records all three."""
    command = _stand_in(tmp_path,
        "import json, os, sys, time\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "if 'hang' in spec['candidate']: time.sleep(1000)\n"
        "if 'exit' in spec['candidate']: sys.stderr.write('segfault in the pair worker\\n'); os._exit(3)\n"
        "json.dump({'static': [], 'verdicts': {'CMP001': {'status': 'refuted', 'summary': 'fine', "
        "'static_flag': False, 'witness': None}}, 'allclose': {'verdict': 'PASS', 'detail': ''}}, "
        "open(sys.argv[2], 'w'))\n")
    pairs = _problem6_pairs("hostile", "level1_problem6_hang.py", "level1_problem6_hard_exit.py")
    pairs += _problem6_pairs("candidates", "level1_problem6_leaky_relu.py")
    executor = LocalExecutor(jobs=3, seconds=3, command=command)
    started = time.monotonic()
    summary = audit(pairs, AuditOptions(output=str(tmp_path / "out"), gates=["CMP001"], device="cpu",
                                        executor=executor))
    assert time.monotonic() - started < 20
    records = {Path(r["candidate"]).name: r for r in _records(tmp_path / "out")}
    assert records["level1_problem6_hang.py"]["status"] == "timeout"
    assert "--pair-timeout 3 s" in records["level1_problem6_hang.py"]["reason"]
    assert records["level1_problem6_hard_exit.py"]["status"] == "crashed"
    assert "exited with status 3" in records["level1_problem6_hard_exit.py"]["reason"]
    assert "segfault in the pair worker" in records["level1_problem6_hard_exit.py"]["reason"]
    assert records["level1_problem6_leaky_relu.py"]["status"] == "done"
    assert summary["kanalyze_failed"] == 2 and summary["pairs"] == 3 and summary["done"] == 1


SPARE_STAND_IN = (
    "import json, os, sys, time\n"
    "args, how = sys.argv[1:], 'fresh'\n"
    "open(os.path.join(os.path.dirname(__file__), 'pids', str(os.getpid())), 'w').close()\n"
    "if args[0] == '--standby':\n"
    "    if os.path.exists(os.path.join(os.path.dirname(__file__), 'spares-die')): os._exit(3)\n"
    "    line = sys.stdin.readline()\n"
    "    if not line.strip(): sys.exit(0)\n"
    "    args, how = json.loads(line), 'spare'\n"
    "spec = json.load(open(args[0]))\n"
    "time.sleep(0.3)\n"
    "json.dump({'static': [], 'verdicts': {}, 'how': how, 'device': spec['device']}, open(args[1], 'w'))\n")


@pytest.mark.parametrize("spares_die", [False, True])
def test_later_pairs_start_in_spares_and_none_outlives_the_run(tmp_path, spares_die) -> None:
    """While pairs run, the next pairs' processes start and stand by (pair.py --standby); each
    pair is handed to one, or to a fresh process where the spare ended before its turn; every
    process, spares never used included, has ended when the run returns."""
    command = _stand_in(tmp_path, SPARE_STAND_IN)
    (tmp_path / "pids").mkdir()
    if spares_die:
        (tmp_path / "spares-die").touch()
    executor = LocalExecutor(jobs=1, seconds=30, command=command, spares=True)
    results = [result for _, result in executor.run([(str(n), {"candidate": f"c{n}", "device": "cpu"})
                                                     for n in range(4)])]
    assert [r["status"] for r in results] == ["done"] * 4, results
    assert [r["how"] for r in results] == ["fresh"] + ["fresh" if spares_die else "spare"] * 3, results
    pids = [int(name) for name in os.listdir(tmp_path / "pids")]
    assert len(pids) >= 4 + (3 if spares_die else 0)       # (a spare that died did not run its pair)
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not alive, alive


def test_a_real_hanging_candidate_is_cut_before_the_pair_s_limit_and_not_blamed(tmp_path, capsys) -> None:
    """The hostile candidate that never returns, through the real pair worker: its case is cut
    before the pair's limit (halfway through the share kept for KernelBench's check), so the pair
    ends in time with its gates' verdicts written, the cut gate `unconfirmed` for the time limit
    (neither the candidate's timeout nor a failure of kanalyze's), and its processes gone."""
    output = tmp_path / "out"
    before, started = _descendants(), time.monotonic()
    code = main(["audit", str(KB / "hostile" / "level1_problem6_hang.py"), "--kernelbench", str(KB),
                 "--output", str(output), "--gates", "CMP001", "--device", "cpu", "--pair-timeout", "16", "-q"])
    assert time.monotonic() - started < 30
    (record,) = _records(output)
    assert record["status"] == "done", record
    verdict = record["verdicts"]["CMP001"]
    assert verdict["status"] == "unconfirmed" and verdict["summary"].startswith("not run: the time limit"), verdict
    assert record["baseline"]["status"] == "undecided"
    printed = capsys.readouterr().out
    assert "left gates unrun at their time limit (CMP001 1)" in printed and "kanalyze failed on 0 pairs" in printed
    assert code == 0   # nothing confirmed, nothing of kanalyze's failed
    assert _none_left(before)


def test_a_pair_past_its_limit_is_stopped_and_says_its_last_step(tmp_path, capsys) -> None:
    """A problem whose inputs never come (its `get_inputs` sleeps): no case began, so nothing
    cuts it but the pair's limit, which ends the real pair worker and everything it started;
    the line says where it was."""
    problem = tmp_path / "6_leaky_relu_slow_inputs.py"
    problem.write_text((KB / "level1" / "6_leaky_relu.py").read_text().replace(
        "def get_inputs():\n", "def get_inputs():\n    import time\n    time.sleep(1000)\n"))
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text(json.dumps({"candidate": str(KB / "candidates" / "level1_problem6_leaky_relu.py"),
                                    "problem": str(problem)}) + "\n")
    output, before = tmp_path / "out", _descendants()
    code = main(["audit", "--manifest", str(manifest), "--output", str(output), "--gates", "CMP001",
                 "--device", "cpu", "--pair-timeout", "12", "-q"])
    assert code == 1
    (record,) = _records(output)
    assert record["status"] == "timeout" and "did not finish within --pair-timeout 12 s" in record["reason"]
    assert record["last_step"]["step"].startswith("the gates"), record
    assert 0 < record["last_step"]["seconds"] < 12 and "its last step" in record["reason"]
    assert "kanalyze failed on 1 pairs" in capsys.readouterr().out
    assert _none_left(before)


def _descendants() -> set[int]:
    """This process's descendants now (their parents read from /proc)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _none_left(before: set[int], seconds: float = 10.0) -> bool:
    """Whether every process started since `before` has ended (within `seconds`)."""
    deadline = time.monotonic() + seconds
    while _descendants() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _descendants() - before


def test_manifest_paths_are_relative_to_the_manifest_and_bad_lines_say_where(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    manifest = tmp_path / "sub" / "pairs.jsonl"
    manifest.write_text('{"candidate": "c.py", "problem": "/abs/p.py", "model": "m"}\n\n{"candidate": "d.py"}\n')
    first, second = from_manifest(str(manifest))
    assert first.candidate == str(tmp_path / "sub" / "c.py") and first.problem == "/abs/p.py"
    assert first.metadata == {"model": "m"}
    assert second.problem is None and "names no \"problem\"" in second.problem_error
    manifest.write_text("not json\n")
    assert main(["audit", "--manifest", str(manifest), "--output", str(tmp_path / "o")]) == 2


def test_summary_of_an_empty_journal_says_nothing_was_confirmed() -> None:
    summary = summarize([])
    assert summary["pairs"] == 0 and summary["static"]["all"]["recall"] is None


def test_a_pair_that_ran_short_runs_again_before_later_pairs_start_and_narrows_the_run(tmp_path) -> None:
    """With more pairs than room side by side: once a pair ran short, no later pair starts
    until it has run again alone and its line is written (a journal cut short keeps it), and
    the rest of the run goes one pair fewer side by side.  (The pair beside the short one ends
    only once the short one's process is gone and half a second more, so that the executor has
    its result first.)"""
    command = _stand_in(tmp_path,
        "import json, os, sys, time\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "name = os.path.basename(spec['candidate'])\n"
        "here = os.path.dirname(sys.argv[0])\n"
        "log = os.path.join(here, 'runs.log')\n"
        "with open(log, 'a') as f: f.write(f'start {name} {time.monotonic()}\\n')\n"
        "first = not os.path.exists(sys.argv[0] + '.' + name)\n"
        "open(sys.argv[0] + '.' + name, 'w').close()\n"
        "short = first and 'hang' in name\n"
        "if short:\n"
        "    open(os.path.join(here, 'short.tmp'), 'w').write(str(os.getpid()))\n"
        "    os.replace(os.path.join(here, 'short.tmp'), os.path.join(here, 'short.pid'))\n"
        "waited = time.monotonic()\n"
        "while 'hard_exit' in name and time.monotonic() - waited < 20:   # until the short one is reaped\n"
        "    try:\n"
        "        os.kill(int(open(os.path.join(here, 'short.pid')).read()), 0)\n"
        "    except (OSError, ValueError):\n"
        "        if os.path.exists(os.path.join(here, 'short.pid')):\n"
        "            time.sleep(0.5)   # (its result read by the executor meanwhile)\n"
        "            break\n"
        "    time.sleep(0.05)\n"
        "summary = 'raised torch.OutOfMemoryError: CUDA out of memory.' if short else 'fine'\n"
        "json.dump({'static': [], 'verdicts': {'CMP001': {'status': 'refuted', 'summary': summary,\n"
        "           'static_flag': False, 'witness': None}}, 'allclose': {'verdict': 'PASS', 'detail': ''}},\n"
        "          open(sys.argv[2], 'w'))\n"
        "with open(log, 'a') as f: f.write(f'end {name} {time.monotonic()}\\n')\n")
    names, pairs = _four_pairs()
    executor = LocalExecutor(jobs=2, seconds=30, command=command)
    order = [Path(job[1]["candidate"]).name for job, _ in executor.run(
        [(str(i), {"candidate": p.candidate, "problem": p.problem}) for i, p in enumerate(pairs)])]
    assert order == names[1:2] + names[:1] + names[2:], order
    events = [(kind, name) for kind, name, _ in
              (line.split() for line in (tmp_path / "runs.log").read_text().splitlines())]
    started = [name for kind, name in events if kind == "start"]
    assert sorted(started[:2]) == sorted(names[:2]) and started[2:] == [names[0], names[2], names[3]], started
    # After the pair beside the short one ended, one pair at a time: each start after the previous end.
    later = events[events.index(("end", names[1])):]
    assert [kind for kind, _ in later] == ["end", "start", "end", "start", "end", "start", "end"], later


def test_stop_after_starts_no_pair_past_its_time_and_a_rerun_resumes(tmp_path) -> None:
    """`--stop-after`: pairs running at the time end and are written; no later pair starts; the
    next run (without it) runs the rest, and the journal holds every pair once."""
    command = _stand_in(tmp_path,
        "import json, sys, time\n"
        "time.sleep(1.0)\n"
        "json.dump({'static': [], 'verdicts': {}, 'allclose': {'verdict': 'PASS', 'detail': ''}},\n"
        "          open(sys.argv[2], 'w'))\n")
    names, pairs = _four_pairs()
    output = tmp_path / "out"
    executor = LocalExecutor(jobs=2, seconds=30, command=command, stop_after=0.5)
    audit(pairs, AuditOptions(output=str(output), gates=["CMP001"], device="cpu", executor=executor))
    first = [Path(r["candidate"]).name for r in _records(output)]
    assert sorted(first) == sorted(names[:2]), first      # the two started at once ran to the end
    executor = LocalExecutor(jobs=2, seconds=30, command=command)
    audit(pairs, AuditOptions(output=str(output), gates=["CMP001"], device="cpu", executor=executor))
    assert sorted(Path(r["candidate"]).name for r in _records(output)) == sorted(names)


def test_a_pair_that_ran_short_beside_others_runs_again_alone(tmp_path) -> None:
    """Pairs side by side share one GPU, the memory and the disk: a pair whose run ran out of
    memory (here its allclose check and a verdict say so, as torch words it) is not written
    then, but runs again once the others have ended, alone, and its line says why."""
    command = _stand_in(tmp_path,
        "import json, os, sys, time\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "name = os.path.basename(spec['candidate'])\n"
        "log = os.path.join(os.path.dirname(sys.argv[0]), 'runs.log')\n"
        "with open(log, 'a') as f: f.write(f'start {name} {time.monotonic()}\\n')\n"
        "first = not os.path.exists(sys.argv[0] + '.' + name)\n"
        "open(sys.argv[0] + '.' + name, 'w').close()\n"
        "time.sleep(0.5)\n"
        "short = first and 'relu' not in name\n"
        "summary = 'raised torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB' if short else 'fine'\n"
        "json.dump({'static': [], 'verdicts': {'CMP001': {'status': 'confirmed' if short else 'refuted',\n"
        "           'summary': summary, 'static_flag': False, 'witness': None}},\n"
        "           'allclose': {'verdict': 'PASS', 'detail': ''}}, open(sys.argv[2], 'w'))\n"
        "with open(log, 'a') as f: f.write(f'end {name} {time.monotonic()}\\n')\n")
    names = ("level1_problem6_hang.py", "level1_problem6_hard_exit.py")
    pairs = _problem6_pairs("hostile", *names) + _problem6_pairs("candidates", "level1_problem6_leaky_relu.py")
    executor = LocalExecutor(jobs=3, seconds=30, command=command)
    audit(pairs, AuditOptions(output=str(tmp_path / "out"), gates=["CMP001"], device="cpu", executor=executor))
    records = {Path(r["candidate"]).name: r for r in _records(tmp_path / "out")}
    assert len(records) == 3
    for name in names:   # written once, from the second run: the shortage's verdict is gone
        assert records[name]["verdicts"]["CMP001"]["status"] == "refuted"
        assert "ran again alone" in records[name]["retried"] and "CUDA out of memory" in records[name]["retried"]
    assert "retried" not in records["level1_problem6_leaky_relu.py"]
    # The second runs came after every first run had ended, one at a time.
    events = [line.split() for line in (tmp_path / "runs.log").read_text().splitlines()]
    assert len(events) == 10
    firsts_end = max(float(t) for kind, name, t in events[:6] if kind == "end")
    second = [(kind, name, float(t)) for kind, name, t in events[6:]]
    assert all(t > firsts_end for _, _, t in second)
    assert [kind for kind, _, _ in second] == ["start", "end", "start", "end"]


def test_a_shortage_is_read_from_any_part_of_a_result() -> None:
    from kanalyze.audit.executor import starved

    assert starved({"status": "done", "verdicts": {}, "allclose": {"verdict": "PASS", "detail": "5 trials"}}) is None
    assert starved({"status": "done", "verdicts": {"CMP001": {"status": "confirmed", "summary": "max abs error 3"}},
                    "allclose": {"verdict": "FAIL", "detail": "trial 0: max abs error"}}) is None
    assert "No space left" in starved({"status": "crashed", "reason": "OSError: [Errno 28] No space left on device"})
    assert "NoRoom" in starved({"status": "done", "allclose": {}, "verdicts": {}, "baseline": {
        "status": "undecided", "summary": "kanalyze could not read the case's device arrays: NoRoom: no room"}})
    assert "NoRoom" in starved({"status": "done", "allclose": {}, "verdicts": {"MEM001": {
        "status": "unconfirmed", "summary": "kanalyze could not read the case's device arrays: NoRoom: no room"}}})
    # the H200's reference worker saving a 16 GiB float64 output beside two other pairs
    assert "Not enough free space" in starved({"status": "done", "allclose": {}, "verdicts": {"ORD001": {
        "status": "unconfirmed", "summary": "the reference crashed: the worker exited with code 70 (an exception "
        "escaped kanalyze's worker code: OSError: Not enough free space to write 17179607040 bytes after offset 128)"}}})


def test_a_time_limit_is_read_from_any_part_of_a_result() -> None:
    from kanalyze.audit.executor import slowed

    assert slowed({"status": "done", "verdicts": {}, "allclose": {"verdict": "PASS", "detail": "5 trials"}}) is None
    # CUDA-L1's level2_43 beside three other pairs on an H100: its baseline, and the allclose check
    assert "did not finish within 120 s" in slowed({"status": "done", "allclose": {}, "verdicts": {}, "baseline": {
        "status": "failed", "summary": "on the problem's own inputs: the candidate timeout: did not finish within 120 s"}})
    assert slowed({"status": "done", "verdicts": {}, "allclose": {"verdict": "TIMEOUT",
                                                                  "detail": "no verdict within 16 s"}}).startswith("of time")
    assert "--pair-timeout" in slowed({"status": "timeout", "reason": "kanalyze's pair worker did not finish within "
                                                                      "--pair-timeout 200 s"})


def test_a_pair_that_reached_a_time_limit_beside_others_runs_again_alone(tmp_path) -> None:
    """A candidate that did not finish beside other pairs may have been slowed by them: it runs
    again alone before anything is written of it, and the run keeps its width (a candidate that
    hangs hangs alone too: here the second run is as slow, and says so)."""
    command = _stand_in(tmp_path,
        "import json, os, sys, time\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "name = os.path.basename(spec['candidate'])\n"
        "hangs = 'hang' in name\n"
        "summary = \"on the problem's own inputs: the candidate timeout: did not finish within 120 s\" if hangs else 'fine'\n"
        "json.dump({'static': [], 'verdicts': {}, 'baseline': {'status': 'failed' if hangs else 'passed',\n"
        "           'summary': summary}, 'allclose': {'verdict': 'PASS', 'detail': ''}}, open(sys.argv[2], 'w'))\n")
    names = ("level1_problem6_hang.py", "level1_problem6_hard_exit.py")
    pairs = _problem6_pairs("hostile", *names)
    executor = LocalExecutor(jobs=2, seconds=30, command=command)
    audit(pairs, AuditOptions(output=str(tmp_path / "out"), gates=["CMP001"], device="cpu", executor=executor))
    records = {Path(r["candidate"]).name: r for r in _records(tmp_path / "out")}
    assert len(records) == 2
    assert "ran again alone" in records[names[0]]["retried"] and "of time" in records[names[0]]["retried"]
    assert "retried" not in records[names[1]]


def test_pairs_start_beside_others_only_while_the_disk_has_room(tmp_path) -> None:
    """With no room on the disk, pairs of `--jobs 3` run one after another (a pair always
    starts when none runs); with room, side by side."""
    command = _stand_in(tmp_path,
        "import json, os, sys, time\n"
        "log = os.path.join(os.path.dirname(sys.argv[0]), 'runs.log')\n"
        "with open(log, 'a') as f: f.write(f'start {time.monotonic()}\\n')\n"
        "time.sleep(0.4)\n"
        "json.dump({'static': [], 'verdicts': {}, 'allclose': {'verdict': 'PASS', 'detail': ''}}, "
        "open(sys.argv[2], 'w'))\n"
        "with open(log, 'a') as f: f.write(f'end {time.monotonic()}\\n')\n")
    jobs = [(str(n), {"candidate": f"c{n}.py"}) for n in range(3)]

    def most_at_once(room) -> int:
        log = tmp_path / "runs.log"
        log.unlink(missing_ok=True)
        executor = LocalExecutor(jobs=3, seconds=30, command=command, room=room)
        assert len(list(executor.run(jobs))) == 3
        running, most = 0, 0
        for line in log.read_text().splitlines():   # appended as they happened
            running += 1 if line.startswith("start") else -1
            most = max(most, running)
        return most

    assert most_at_once(lambda: False) == 1
    assert most_at_once(lambda: True) >= 2


def test_stop_after_zero_starts_nothing_and_says_what_is_left(tmp_path, capsys) -> None:
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text(json.dumps({"candidate": str(KB / "candidates" / "level1_problem6_leaky_relu.py"),
                                    "problem": str(KB / "level1" / "6_leaky_relu.py")}) + "\n")
    assert main(["audit", "--manifest", str(manifest), "--output", str(tmp_path / "out"), "--device", "cpu",
                 "--stop-after", "0", "-q"]) == 0
    assert "1 pair not started within --stop-after 0 s: the same command resumes them" in capsys.readouterr().err
    assert not (tmp_path / "out" / "results.jsonl").exists() or _records(tmp_path / "out") == []


def test_the_gates_have_the_pair_s_time_less_the_check_s_share() -> None:
    """A pair's gates end where KernelBench's check, which runs after them, keeps its share of the
    pair's time; where the check overlaps them (the Verifier), the whole time; no limit, none.  A
    case still running is cut later than that and before the pair's end: halfway through the
    check's share, or TAIL_SHARE before the end."""
    from kanalyze.audit.pair import ALLCLOSE_SHARE, TAIL_SHARE, _gate_seconds

    now = time.monotonic()
    gates, cut = _gate_seconds({"seconds": 200.0}, now - 10.0)
    assert abs(gates - (200.0 * (1 - ALLCLOSE_SHARE) - 10.0)) < 1.0
    assert abs(cut - (200.0 * (1 - ALLCLOSE_SHARE / 2) - 10.0)) < 1.0 and gates < cut < 190.0
    gates, cut = _gate_seconds({"seconds": 200.0, "overlap_allclose": True}, now)
    assert abs(gates - 200.0) < 1.0 and abs(cut - 200.0 * (1 - TAIL_SHARE)) < 1.0
    assert _gate_seconds({}, now) == (None, None)


def test_an_environment_that_lacks_a_pair_s_module_runs_nothing_and_says_what_to_install(
        tmp_path, capsys, monkeypatch) -> None:
    # Every pair's worker would exit on the same ImportError; the journal would hold one crash a pair.
    import kanalyze.audit.command as command

    real = command.importable
    monkeypatch.setattr(command, "importable", lambda module: module != "libcst" and real(module))
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text(json.dumps({"candidate": str(KB / "candidates" / "level1_problem6_leaky_relu.py"),
                                    "problem": str(KB / "level1" / "6_leaky_relu.py")}) + "\n")
    out = tmp_path / "out"
    code = main(["audit", "--manifest", str(manifest), "--output", str(out), "--device", "cpu", "-q"])
    assert code == 2
    assert "libcst, not installed here" in capsys.readouterr().err
    assert not (out / "results.jsonl").exists()
