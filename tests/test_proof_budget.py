"""The MEM003/MEM004 proofs are reproducible and bounded by z3 resource counts; a clock only as a watchdog.

Every question z3 is asked carries an `rlimit`; the same file gives byte-identical
findings on an idle and on a loaded machine; a file whose questions use up their
budget (`proof-rlimit`) asks no more and says so once (KAN003).  Under `kanalyze
check` a watchdog thread (a CPU deadline below the file's CPU budget) interrupts a
question z3 works on without counting: the file still ends within its budget, with a
KAN003 note that says the cut was by time, and a file that ends before the deadline
gives the same findings as without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path

import pytest
import z3

from kanalyze.analyzer.bounds import proofs
from kanalyze.analyzer.bounds.solver import BUDGET_SPENT, TIME_SPENT, Budget, Settings, solve
from kanalyze.analyzer.bounds.symbols import fresh_context
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.check import analyze_source, analyze_text
from kanalyze.check.errors import FILE_BUDGET_WITH_PROOFS_S, PROOF_SHARE

ROOT = Path(__file__).resolve().parent.parent
# Many kernels, most with MEM004 counterexamples found by z3 (nonlinear `row * stride`).
MANY_KERNELS = ROOT / "fixtures" / "triton" / "cmp003_library_shapes.py"
SMALL_BUDGET = 1_000_000   # about a third of what that file's questions use


def _record_checks(monkeypatch) -> tuple[list[dict], list]:
    """The parameters every z3 check runs under, and every global z3.set_param call."""
    settings: dict[int, dict] = {}
    checked: list[dict] = []
    set_param, original_set, original_check = z3.set_param, z3.Solver.set, z3.Solver.check
    global_params: list = []

    def record_set(self, *args, **keys):
        params = settings.setdefault(id(self), {})
        params.update(dict(zip(args[::2], args[1::2])), **keys)
        return original_set(self, *args, **keys)

    def record_check(self, *args):
        checked.append(dict(settings.get(id(self), {})))
        return original_check(self, *args)

    monkeypatch.setattr(z3.Solver, "set", record_set)
    monkeypatch.setattr(z3.Solver, "check", record_check)
    monkeypatch.setattr(z3, "set_param", lambda *a, **k: (global_params.append((a, k)), set_param(*a, **k)))
    return checked, global_params


def test_every_question_has_an_rlimit_and_no_timeout(monkeypatch) -> None:
    assert not [f.name for f in fields(Settings) if "timeout" in f.name or f.name.endswith("_ms")]
    checked, global_params = _record_checks(monkeypatch)
    found, _ = analyze_text(str(MANY_KERNELS), MANY_KERNELS.read_text())  # no CPU budget: no watchdog

    assert [f for f in found if f.code == "MEM004"], "the fixture should need z3 for its MEM004 findings"
    assert len(checked) > 20
    assert all(params.get("rlimit", 0) > 0 for params in checked)
    assert not any("timeout" in params for params in checked)
    assert not any("timeout" in str(call) for call in global_params)
    assert z3.get_param("timeout") == "4294967295"  # z3's default: no limit


_FINDINGS = """
import json, sys
from kanalyze.check import analyze_text
path = sys.argv[1]
found, _ = analyze_text(path, open(path, encoding="utf-8").read())
print(json.dumps([f.to_dict() for f in found], sort_keys=True))
"""


def _findings_in_a_fresh_process(path: Path, seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run([sys.executable, "-c", _FINDINGS, str(path)], capture_output=True, check=True,
                          cwd=ROOT, env=env, timeout=300).stdout


def test_the_same_file_gives_byte_identical_findings_on_an_idle_and_a_loaded_machine() -> None:
    idle = _findings_in_a_fresh_process(MANY_KERNELS, "1")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _findings_in_a_fresh_process(MANY_KERNELS, "2")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    codes = [f["code"] for f in json.loads(idle)]
    assert codes.count("MEM004") >= 5 and "KAN003" not in codes
    assert loaded == idle


def _analysis(path: Path, **settings) -> proofs.BoundsAnalysis:
    text = path.read_text()
    return proofs.analyze(TritonModule.from_source(str(path), text, {k.replace("_", "-"): v
                                                                      for k, v in settings.items()}))


def test_a_file_past_its_proof_budget_asks_no_more_and_gets_one_note() -> None:
    text = MANY_KERNELS.read_text()
    full, _ = analyze_text(str(MANY_KERNELS), text)
    capped, _ = analyze_text(str(MANY_KERNELS), text, {"proof-rlimit": SMALL_BUDGET})
    again, _ = analyze_text(str(MANY_KERNELS), text, {"proof-rlimit": SMALL_BUDGET})
    assert [f.to_dict() for f in capped] == [f.to_dict() for f in again]   # the cap is a count: reproducible
    assert not [f for f in full if f.code == "KAN003"]

    (note,) = [f for f in capped if f.code == "KAN003"]
    assert note.informational and not note.stands and note.name == "proof-budget"
    assert "`proof-rlimit`" in note.message and f"{SMALL_BUDGET:_}" in note.message
    evidence = note.evidence
    assert evidence["proof_rlimit"] == SMALL_BUDGET and evidence["spent"] >= SMALL_BUDGET
    assert 0 < evidence["unproved"] < evidence["accesses"]
    # What was found before the budget ran out is found with the full budget too.
    where = {(f.code, f.location.row, f.location.column) for f in capped if f.code.startswith("MEM")}
    assert where and where < {(f.code, f.location.row, f.location.column) for f in full if f.code.startswith("MEM")}

    analysis = _analysis(MANY_KERNELS, proof_rlimit=SMALL_BUDGET)
    assert len(analysis.cut) == evidence["unproved"]
    # A cut access has a question left unasked: unknown there, unless another configuration found a violation.
    assert all("unknown" in (r.bounds.status, r.overflow.status) or r.wraps for r in analysis.cut)
    assert analysis.queries < _analysis(MANY_KERNELS).queries
    kernels = evidence["kernels"]
    assert kernels and all(evidence["configurations"][k]["finished"] < evidence["configurations"][k]["of"]
                           for k in kernels)


def test_once_the_budget_is_spent_no_question_is_asked(monkeypatch) -> None:
    fresh_context()
    x, y, z = z3.Ints("x y z")
    budget = Budget(Settings(file_rlimit=2000))
    hard = [x > 0, y > 0, z > 0, x * x * x + y * y * y == z * z * z]
    assert solve(hard, budget) == ("unknown", None)          # cut short by the file's budget
    assert budget.exhausted and budget.gave_up() == BUDGET_SPENT
    asked = []
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: asked.append(1))
    assert solve([x > 3, x < 5], budget) == ("unknown", None)  # easy, but not asked
    assert not asked and budget.refused == 1 and budget.queries == 1
    fresh_context()


def test_proof_rlimit_is_a_setting_of_the_project(tmp_path: Path) -> None:
    from kanalyze.check import run_static
    from kanalyze.config import ConfigError, load_config

    (tmp_path / "kernel.py").write_text(MANY_KERNELS.read_text())
    (tmp_path / "pyproject.toml").write_text(f'[tool.kanalyze]\nselect = ["ALL"]\nproof-rlimit = {SMALL_BUDGET}\n')
    config = load_config([str(tmp_path)])
    assert proofs.proof_ranges(config.raw) == {"proof-rlimit": SMALL_BUDGET}
    result = run_static([str(tmp_path)], config, use_cache=False)
    notes = [f for f in result.findings if f.code == "KAN003"]
    assert len(notes) == 1 and notes[0].informational
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nproof-rlimit = 0\n')
    with pytest.raises(ConfigError, match="proof-rlimit"):
        load_config([str(tmp_path)])


def _watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kanalyze-proof-watchdog"]


def test_the_watchdog_changes_nothing_for_a_file_under_it(monkeypatch) -> None:
    from kanalyze.analyzer.bounds import watchdog

    text = MANY_KERNELS.read_text()
    alone, _ = analyze_text(str(MANY_KERNELS), text)
    checked, _ = _record_checks(monkeypatch)
    started, original = [], watchdog.Watchdog.__init__

    def recording(self, deadline: float) -> None:
        started.append(deadline)
        original(self, deadline)

    monkeypatch.setattr(watchdog.Watchdog, "__init__", recording)
    before = time.process_time()
    budgeted, _ = analyze_source(str(MANY_KERNELS), text, budget=FILE_BUDGET_WITH_PROOFS_S)
    assert [f.to_dict() for f in budgeted] == [f.to_dict() for f in alone]
    # One watchdog, for this file's deadline, gone when the file is done; its questions still have no timeout.
    (deadline,) = started
    assert before < deadline - PROOF_SHARE * FILE_BUDGET_WITH_PROOFS_S < time.process_time()
    assert not _watchdogs()
    assert len(checked) > 20 and all(params.get("rlimit", 0) > 0 for params in checked)
    assert not any("timeout" in params for params in checked)


def test_the_watchdog_stops_a_question_inside_z3_and_leaves_the_context_usable(monkeypatch) -> None:
    fresh_context()
    x, y, z = z3.Ints("x y z")
    # Counts out of reach for half a second (1e8 units: 10 s or more): only the deadline can stop the hard question.
    budget = Budget(Settings(rlimit=10**8, file_rlimit=10**9, deadline=time.process_time() + 0.5))
    status, model = solve([x > 3, x < 5], budget)
    assert status == "sat" and not budget.out_of_time
    started = time.process_time()
    assert solve([x > 0, y > 0, z > 0, x * x * x + y * y * y == z * z * z], budget) == ("unknown", None)
    assert time.process_time() - started < 1.5  # the watchdog: the rlimit alone takes 10 s or more
    assert budget.out_of_time and budget.exhausted and budget.gave_up() == TIME_SPENT
    assert budget.remaining() > 0               # the count is not what stopped it
    assert budget.watchdog.fired
    time.sleep(0.2)                              # the watchdog goes on, past its deadline, between questions:
    assert model.eval(x + 1).as_long() == 5     # the interrupt stopped one question, the context stays usable
    asked = []
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: asked.append(1))
    assert solve([y > 3, y < 5], budget) == ("unknown", None)  # easy, but past the deadline: not asked
    assert not asked and budget.refused == 1
    budget.close()
    assert not _watchdogs()
    fresh_context()


# Every bounds question of this kernel asks z3 for positive cubes with i³ + a³ = b³
# (none exist; z3 cannot tell): each runs to its rlimit, 1e7 units, a second or more.
HARD_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def cubes_kernel(x_ptr, out_ptr, a, b, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) + 1
    offs = i * i * i + a * a * a
    x = tl.load(x_ptr + offs, mask=offs == b * b * b, other=0.0)
    tl.store(out_ptr + offs, x, mask=offs == b * b * b + 0 * i)


def cubes(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    out = torch.empty_like(x)
    cubes_kernel[(triton.cdiv(x.numel(), 128),)](x, out, a, b, BLOCK=128)
    return out
"""


def test_a_hard_nonlinear_file_stops_at_the_watchdog_within_its_cpu_budget() -> None:
    budget = 2.0   # CPU seconds; the proofs' deadline is at PROOF_SHARE of it
    started = time.process_time()
    # A count budget out of reach (the default would stop these questions by count, after about 5 s).
    found, _ = analyze_source("cubes.py", HARD_KERNEL, proofs={"proof-rlimit": 10**12}, budget=budget)
    assert time.process_time() - started < budget
    assert "KAN001" not in [f.code for f in found]
    (note,) = [f for f in found if f.code == "KAN003"]
    assert note.informational and note.evidence["cut_by"] == "time"
    assert "cut by time" in note.message and "`file-timeout`" in note.message and "differ" in note.message
    assert 0 < note.evidence["cpu_seconds"] <= PROOF_SHARE * budget
    assert note.evidence["unproved"] == note.evidence["accesses"] == 2
    assert note.evidence["spent"] < 3 * 10**7   # the three hard questions were not all asked to their rlimit
