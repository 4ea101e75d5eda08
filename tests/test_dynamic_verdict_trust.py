"""Only what the candidate did decides a verdict (DESIGN.md, "What a verdict must mean").

- a worker that ends or runs out of time outside the candidate's code is kanalyze's
  failure: `unconfirmed` with the cause, never a confirmation;
- a refutation that lost cases to kanalyze's failures is `unconfirmed`;
- a line on kanalyze's status channel that its worker code never writes is the
  candidate's doing: INT001 confirmed, with what it sent;
- reference and candidate run under one numerics policy, recorded in the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.gates import gates_by_code
from kanalyze.dynamic.gates.base import CONFIRMED, REFUTED, UNCONFIRMED, Gate, Verdict
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.results import Result
from kanalyze.dynamic.judging import judge as _judge  # noqa: E402
from kanalyze.dynamic.runner import BASELINE, Options, run_gates
from kanalyze.dynamic.sandbox.process import Limits, Outcome, ProtocolViolation, _parse_event

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
REFERENCE_OK = Outcome("done", meta={"status": "ok", "inputs": [], "init_inputs": []})


def _baseline(candidate: Outcome) -> Result:
    return Result(Case(BASELINE, "", {"N": 8}), REFERENCE_OK, candidate)


def _by_code(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.code: v for v in verdicts}


def test_a_verdict_at_scaled_sizes_says_at_which() -> None:
    """The CPU's interpreter runs a problem scaled down: what the base case shows is at those
    sizes, not at the problem's own (a GEMM whose grouped tiling skips columns when the rows fill
    less than one group is wrong at batch 64 and right at KernelBench's 1024), and the verdict says so."""
    from types import SimpleNamespace

    crash = Outcome("crashed", detail="the worker died of SIGSEGV (segmentation fault)", blame="candidate")
    scaled = {"MEM002": SimpleNamespace(harness=SimpleNamespace(knobs={"N": 1024, "M": 64}))}
    verdicts, baseline = _judge([_baseline(crash)], ["MEM002"], scaled, gates_by_code(), False, {})
    verdicts = _by_code(verdicts)
    assert verdicts["CMP001"].summary.startswith("on the problem's inputs at scaled sizes (N=8 of 1024): ")
    assert "own inputs" not in verdicts["CMP001"].summary + verdicts["MEM002"].summary
    assert verdicts["MEM002"].summary.count("at scaled sizes (N=8 of 1024)") == 1, verdicts["MEM002"].summary
    unscaled = {"MEM002": SimpleNamespace(harness=SimpleNamespace(knobs={"N": 8}))}
    verdicts, _ = _judge([_baseline(crash)], ["MEM002"], unscaled, gates_by_code(), False, {})
    assert _by_code(verdicts)["CMP001"].summary.startswith("on the problem's own inputs: ")


def test_a_worker_that_dies_in_kanalyze_code_confirms_nothing() -> None:
    crash = Outcome("crashed", detail="the worker exited with code 70 (an exception escaped kanalyze's worker code)",
                    output="OSError: [Errno 28] No space left on device", blame="kanalyze")
    verdicts, baseline = _judge([_baseline(crash)], ["CMP001", "MEM002"], {}, gates_by_code(), False, {})
    verdicts = _by_code(verdicts)
    assert baseline["status"] == "undecided" and "No space left on device" in baseline["summary"]
    assert all(v.status == UNCONFIRMED for v in verdicts.values()), verdicts
    assert "kanalyze could not run the candidate" in verdicts["CMP001"].summary
    assert "kanalyze could not run the candidate" in verdicts["MEM002"].summary
    assert "No space left on device" in verdicts["MEM002"].summary   # the worker's last output says why


def test_the_same_crash_inside_the_candidate_is_its_own() -> None:
    crash = Outcome("crashed", detail="the worker died of SIGSEGV (segmentation fault)", blame="candidate")
    verdicts, baseline = _judge([_baseline(crash)], ["MEM002"], {}, gates_by_code(), False, {})
    verdicts = _by_code(verdicts)
    assert verdicts["CMP001"].status == CONFIRMED and "SIGSEGV" in verdicts["CMP001"].summary
    assert verdicts["MEM002"].status == UNCONFIRMED
    # said once: "the candidate fails on the problem's own inputs: the candidate crashed ..."
    assert verdicts["MEM002"].summary.count("the problem's own inputs") == 1, verdicts["MEM002"].summary
    assert baseline == {"status": "failed", "summary": verdicts["CMP001"].summary}


def test_kanalyze_failing_to_read_inputs_is_internal() -> None:
    internal = Outcome("done", meta={"status": "internal", "error": "kanalyze could not prepare the inputs: "
                                                                      "MemoryError", "runs": []})
    verdicts = _by_code(_judge([_baseline(internal)], ["MEM002"], {}, gates_by_code(), False, {})[0])
    assert "CMP001" not in verdicts
    assert verdicts["MEM002"].status == UNCONFIRMED and "MemoryError" in verdicts["MEM002"].summary


class _AlwaysRefutes(Gate):
    code, name = "MEM002", "always-refutes"

    def judge(self, ctx, results):
        return self.verdict(REFUTED, f"{len(results)} cases ran and showed nothing")


def test_a_refutation_that_lost_cases_to_kanalyze_is_unconfirmed() -> None:
    gates = {**gates_by_code(), "MEM002": _AlwaysRefutes()}
    ran = Result(Case("MEM002/a", "MEM002", {"N": 8}), REFERENCE_OK, Outcome("done", meta={"status": "ok", "runs": []}))
    lost = Result(Case("MEM002/b", "MEM002", {"N": 8}), REFERENCE_OK,
                  Outcome("timeout", detail="did not finish within 8 s", blame="kanalyze"))
    [verdict], _ = _judge([ran, lost], ["MEM002"], {"MEM002": None}, gates, False, {})
    assert verdict.status == UNCONFIRMED and "1 of the gate's cases did not run" in verdict.summary
    [alone], no_baseline = _judge([ran], ["MEM002"], {"MEM002": None}, gates, False, {})
    assert alone.status == REFUTED                                  # with every case, the gate's own verdict
    assert no_baseline is None


def test_a_reference_worker_that_ended_is_kanalyzes_failure_never_a_rejected_size() -> None:
    """CMP003 skips sizes the problem rejects; a reference worker that died or ran out of time at
    a size (kanalyze's side: its memory, its disk) is not that, and its refutation has lost a case."""
    cmp003 = gates_by_code()["CMP003"]
    ran = Result(Case("CMP003/N=9 (+1)", "CMP003", {"N": 9}), REFERENCE_OK,
                 Outcome("done", meta={"status": "ok", "runs": [{"status": "ok", "output": None}]}))
    died = Result(Case("CMP003/N=16 (x2)", "CMP003", {"N": 16}),
                  Outcome("crashed", detail="the worker exited with code 70", output="OSError: no space"))
    assert "reference worker crashed" in died.kanalyze_failure() and "no space" in died.kanalyze_failure()
    skipped = Result(Case("CMP003/N=7 (-1)", "CMP003", {"N": 7}),
                     Outcome("not-started", detail="skipped: the candidate fails", blame="candidate"))
    assert skipped.kanalyze_failure() is None   # the candidate's own failure on the baseline
    gates = {**gates_by_code(), "CMP003": _AlwaysRefutes()}
    gates["CMP003"].code = "CMP003"
    [verdict], _ = _judge([ran, died], ["CMP003"], {"CMP003": None}, gates, False, {})
    assert verdict.status == UNCONFIRMED and "did not run" in verdict.summary, verdict.summary
    [alone], _ = _judge([died], ["CMP003"], {"CMP003": None}, {**gates_by_code(), "CMP003": cmp003}, False, {})
    assert alone.status == UNCONFIRMED and "kanalyze could not run this gate" in alone.summary, alone.summary


def test_a_candidate_too_slow_at_a_made_up_size_is_not_shape_specialised() -> None:
    """CMP003 at a size kanalyze made up: a candidate that does not finish within the case's time
    there is slow, not shown wrong (a 3-D convolution's kernel twice as large is eight times the
    work).  On the GPU this once confirmed CMP003 ("fails at kernel_size=6 (x2): the candidate
    timeout").  The size is not judged; a wrong value at another size still confirms."""
    cmp003 = gates_by_code()["CMP003"]
    slow = Result(Case("CMP003/N=16 (x2)", "CMP003", {"N": 16}), REFERENCE_OK,
                  Outcome("timeout", detail="did not finish within 120 s", blame="candidate"))
    assert slow.kanalyze_failure() is None                       # the candidate's own time, not kanalyze's
    [alone], _ = _judge([slow], ["CMP003"], {"CMP003": None}, {**gates_by_code(), "CMP003": cmp003}, False, {})
    assert alone.status == UNCONFIRMED and "too slow to judge there" in alone.summary, alone.summary
    assert "N=16 (x2)" in alone.summary
    crashed = Result(Case("CMP003/N=7 (-1)", "CMP003", {"N": 7}), REFERENCE_OK,
                     Outcome("done", meta={"status": "error", "error": "RuntimeError: N must be a multiple of 8"}))
    [both], _ = _judge([slow, crashed], ["CMP003"], {"CMP003": None}, {**gates_by_code(), "CMP003": cmp003},
                       False, {})
    assert both.status == CONFIRMED and "fails at N=7 (-1)" in both.summary and "multiple of 8" in both.summary


def test_mem002_without_the_kept_inputs_waits_and_then_says_why() -> None:
    """MEM002 whose copy of the inputs from before the run is not there yet (on a GPU the reference
    worker withholds it until the candidate's workers end where the judge has no room to hold it)
    gives no verdict while the session runs, so that streaming asks again at the end (on an H100,
    deepseek's level2_96: "kanalyze kept 0 of the 1 input tensors", settled early); at the end
    it is `unconfirmed` with that reason."""
    import numpy as np

    from kanalyze.dynamic.judging import _judge_gate
    from kanalyze.dynamic.results import CannotJudge

    reference = Outcome("done", meta={"status": "ok", "init_inputs": [], "inputs_kept": "kept_",
                                      "inputs": [{"kind": "tensor", "key": "in0", "dtype": "float32"}]}, arrays={})
    run = {"status": "ok", "output": {"prefix": "out", "dtypes": ["float32"]},
           "inputs_after": [{"kind": "tensor", "key": "after0", "dtype": "float32"}]}
    candidate = Outcome("done", meta={"status": "ok", "runs": [run]},
                        arrays={"out0": np.zeros(4, np.float32), "after0": np.zeros(4, np.float32)})
    result = Result(Case("MEM002/inputs", "MEM002", {"N": 4}), reference, candidate)
    gate = gates_by_code()["MEM002"]
    try:
        gate.judge(None, [result])
    except CannotJudge as exc:
        assert "kept 0 of the 1 input tensors" in str(exc)
    else:
        raise AssertionError("MEM002 settled without the inputs it compares")
    [verdict] = _judge_gate(gate, None, [result], [])
    assert verdict.status == UNCONFIRMED and "kept 0 of the 1 input tensors" in verdict.summary, verdict.summary


def test_cmp003_failing_by_the_precision_prc001_confirms_shows_no_shape_defect() -> None:
    """A TF32 `tl.dot` is off by ~1e-3 at every size: at a perturbed size that says nothing of
    sizes.  Beside a confirmed PRC001, a CMP003 failure of that size is `unconfirmed` with why;
    a gross one (tiles never written) still confirms, and CMP001 keeps its note."""
    import numpy as np

    from kanalyze.dynamic.judging import name_the_cause

    expected = {"expected0": np.linspace(-2.0, 2.0, 64)}
    prc001 = Verdict("PRC001", CONFIRMED, "max abs error 0.002 > bound 1e-4 (real tensor cores)")
    tf32 = Verdict("CMP003", CONFIRMED, "fails at N=9 (+1): max abs error 0.002 > bound 1e-4",
                   details={"metric": {"max_abs_error": 0.002}}, arrays=expected)
    gross = Verdict("CMP003", CONFIRMED, "fails at N=9 (+1): max abs error 1.9 > bound 1e-4",
                    details={"metric": {"max_abs_error": 1.9}}, arrays=expected)
    crashed = Verdict("CMP003", CONFIRMED, "fails at N=9 (+1): raised IndexError")
    [_, judged] = name_the_cause([prc001, tf32])
    assert judged.status == UNCONFIRMED and "says nothing of the sizes" in judged.summary, judged.summary
    assert name_the_cause([prc001, gross])[1].status == CONFIRMED
    assert name_the_cause([prc001, crashed])[1].status == CONFIRMED
    assert name_the_cause([tf32])[0].status == CONFIRMED            # no PRC001 confirmed: no cause to name


def test_a_shortage_is_the_runs_where_the_problem_needs_a_fair_share_of_the_memory() -> None:
    """Memory and disk are shared with kanalyze's own workers (and, on the CPU, limited by it).
    A candidate that ran out of memory where the problem itself holds an eighth or more of what
    the run gives (KernelBench's MLP: 16384-wide layers against a 4 GiB limit) is undecided, at
    the baseline and at a perturbed size; one that needs many times what the problem needs
    (allocating without bound) ran short by its own doing; disk is always the run's."""
    def reference(problem_bytes: int) -> Outcome:
        return Outcome("done", meta={**REFERENCE_OK.meta, "problem_bytes": problem_bytes, "budget_bytes": 4 * 2 ** 30})

    oom = Outcome("done", meta={"status": "ok", "runs": [{"status": "error", "error": (
        "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 33554432 bytes")}]})
    big = Result(Case(BASELINE, "", {"N": 8}), reference(2 ** 30), oom)
    verdicts, baseline = _judge([big], ["CMP001", "MEM002"], {}, gates_by_code(), False, {})
    verdicts = _by_code(verdicts)
    assert baseline["status"] == "undecided" and "ran short of memory or disk" in baseline["summary"]
    assert all(v.status == UNCONFIRMED for v in verdicts.values()), verdicts
    small = Result(Case(BASELINE, "", {"N": 8}), reference(2 ** 20), oom)
    verdicts, baseline = _judge([small], ["CMP001"], {}, gates_by_code(), False, {})
    assert _by_code(verdicts)["CMP001"].status == CONFIRMED and baseline["status"] == "failed"
    killed = Outcome("crashed", detail="the worker died of SIGKILL (killed: out of memory?)", blame="candidate")
    sized = Case("CMP003/N=16 (x2)", "CMP003", {"N": 16})
    assert "ran short" in Result(sized, reference(2 ** 30), killed).kanalyze_failure()
    assert Result(sized, reference(2 ** 20), killed).kanalyze_failure() is None
    full = Outcome("done", meta={"status": "error", "error": "OSError: [Errno 28] No space left on device"})
    assert "No space left" in Result(sized, reference(2 ** 20), full).kanalyze_failure()
    own = Outcome("crashed", detail="the worker died of SIGSEGV (segmentation fault)", blame="candidate")
    assert Result(sized, reference(2 ** 30), own).kanalyze_failure() is None


def test_a_failure_of_the_references_thread_is_every_case_s_kanalyze_failure(monkeypatch, tmp_path) -> None:
    from kanalyze.dynamic import ahead

    def broken(*args, **kwargs):
        raise RuntimeError("the thread broke")

    monkeypatch.setattr(ahead, "run_cases", broken)
    second = ahead.SecondReference("cpu", {}, Limits(), str(tmp_path), str(tmp_path))
    monkeypatch.setattr(second, "start", lambda: None)   # no worker: the job fails first
    second.compute([(5, {}), (6, {})])
    outcomes = second.outcomes([5])
    assert sorted(outcomes) == [5, 6]
    for outcome in outcomes.values():
        assert outcome.status == "crashed" and "the thread broke" in outcome.detail
        assert Result(Case("CMP003/x", "CMP003", {"N": 8}), outcome).kanalyze_failure()


def test_only_the_worker_codes_events_pass() -> None:
    assert _parse_event(b'{"event": "case", "index": 3, "job": 1}')["index"] == 3
    for line in (b"hello", b'{"event": "answer"}', b"[1, 2]", b'"case"'):
        try:
            _parse_event(line)
        except ProtocolViolation as exc:
            assert "unknown status line" in str(exc)
        else:
            raise AssertionError(f"accepted {line!r}")


def test_a_candidate_that_forges_a_result_line_is_int001() -> None:
    harness = find_harness(str(KB / "hostile" / "level1_problem6_status_forgery.py"), kernelbench=str(KB))
    run = run_gates(harness, ["CMP001", "MEM002"], options=Options(mode="cpu", limits=Limits(case_seconds=30)))
    verdicts = _by_code(run.verdicts)
    assert verdicts["INT001"].status == CONFIRMED, verdicts["INT001"].summary
    assert "12345" in verdicts["INT001"].summary                   # what it sent
    assert verdicts["CMP001"].status == UNCONFIRMED and verdicts["MEM002"].status == UNCONFIRMED


def test_both_sides_run_under_one_numerics_policy() -> None:
    twin = KB / "candidates" / "level1_problem6_leaky_relu.py"
    run = run_gates(find_harness(str(twin), kernelbench=str(KB)), ["MEM002"], options=Options(mode="cpu"))
    reference, candidate = run.environment["reference_numerics"], run.environment["candidate_numerics"]
    assert reference["policy"] == candidate["policy"]
    assert candidate["policy"] == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False,
                                   "float32_matmul_precision": "highest", "deterministic_algorithms": False,
                                   "deterministic_warn_only": False, "cudnn_deterministic": False}


def test_run_to_run_differences_beside_torch_own_nondeterministic_op_are_not_blamed() -> None:
    """The ORD001 plant's float atomics vary with program order; beside them the model runs
    torch's `put_` over repeated indices, which torch says it has no deterministic
    implementation of: the difference could be torch's, so ORD001 says `unconfirmed` and names
    the op.  A candidate that only makes up torch's warning (no such op in the sealed record of
    its torch calls) stays confirmed."""
    beside = KB / "candidates" / "level1_problem1_mse_atomic_torch_put.py"
    run = run_gates(find_harness(str(beside), kernelbench=str(KB)), ["ORD001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "ORD001"]
    assert verdict.status == UNCONFIRMED, verdict.summary
    assert "torch's own `put_`" in verdict.summary and "runs (launch order" in verdict.summary, verdict.summary
    forged = KB / "hostile" / "level1_problem1_forged_torch_alert.py"
    run = run_gates(find_harness(str(forged), kernelbench=str(KB)), ["ORD001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "ORD001"]
    assert verdict.status == CONFIRMED, verdict.summary


def test_the_reference_own_nonfinite_error_is_not_the_candidate_s() -> None:
    """torch's float32 gelu(+inf) is NaN on the CPU, float64's is +inf: a correct GELU that
    gives +inf is judged where the two references agree, and the verdict says what was left out."""
    gelu = KB / "candidates" / "level1_problem13_gelu_erf.py"
    run = run_gates(find_harness(str(gelu), kernelbench=str(KB)), ["EXC001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "EXC001"]
    assert verdict.status == REFUTED, verdict.summary
    assert "with +inf injected" in verdict.summary and "disagree were left out" in verdict.summary


def test_int001_probe_sees_patched_timers_and_threads_left_running() -> None:
    """Beside the cached-result plant of controls.json: a timer patched at import, and a
    thread still running when the call returns."""
    for name, words in (("timer_patch", "time.perf_counter"), ("background_thread", "background-work")):
        plant = KB / "candidates" / f"level1_problem6_leaky_relu_{name}.py"
        run = run_gates(find_harness(str(plant), kernelbench=str(KB)), ["INT001"], options=Options(mode="cpu"))
        [verdict] = [v for v in run.verdicts if v.code == "INT001"]
        assert verdict.status == CONFIRMED and words in verdict.summary, (name, verdict.summary)


def test_a_cache_that_a_write_into_its_buffers_invalidates_is_caught_on_fresh_buffers() -> None:
    """Keyed by shape and the input's version counter, a cache gives the right answer when new
    values are written into the same buffers (the write bumps the counter) and the first call's
    answer on fresh tensors of that shape: the third call, on fresh buffers, confirms it."""
    plant = KB / "candidates" / "level1_problem6_leaky_relu_cached_by_version.py"
    run = run_gates(find_harness(str(plant), kernelbench=str(KB)), ["INT001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "INT001"]
    assert verdict.status == CONFIRMED, verdict.summary
    assert "in fresh buffers of the same shapes, it returned the previous call's answer" in verdict.summary


def test_reading_the_checkers_heap_or_frames_is_int001_and_logging_is_not() -> None:
    """A candidate that walks the heap (`gc.get_objects`) or reads its caller's frame
    (`sys._getframe`) for the reference's answer or kanalyze's traces reads the checker's state,
    whatever it found; an honest kernel that logs each call and formats a traceback (logging and
    traceback read frames themselves) does not."""
    for name, words in (("hostile/level1_problem6_answer_sniffer.py", "gc.get_objects() at line 33"),
                        ("hostile/level1_problem6_watched_tells.py", "sys._getframe() at line 52")):
        run = run_gates(find_harness(str(KB / name), kernelbench=str(KB)), ["INT001"], options=Options(mode="cpu"))
        [verdict] = [v for v in run.verdicts if v.code == "INT001"]
        assert verdict.status == CONFIRMED and "read the checker's state" in verdict.summary, (name, verdict.summary)
        assert words in verdict.summary, verdict.summary
    twin = KB / "candidates" / "level1_problem6_leaky_relu_logging.py"
    run = run_gates(find_harness(str(twin), kernelbench=str(KB)), ["INT001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "INT001"]
    assert verdict.status == REFUTED and "no read of the heap or the stack" in verdict.summary, verdict.summary


def test_code_the_candidate_compiles_under_another_files_name_is_still_its_own(tmp_path) -> None:
    """A frame read from code the candidate compiled under a library's file name, or under
    `<string>` by `exec`, is the candidate's read; code of that name it did not make is not.
    In a fresh interpreter: an audit hook cannot be removed."""
    (tmp_path / "cand.py").write_text(
        "import sys\n"
        "def run():\n"
        "    exec(compile('import sys\\nsys._getframe(1)', '/usr/lib/python3/somewhere.py', 'exec'))\n"
        "    exec('import sys\\nsys._getframe(0)')\n")
    script = f"""
import importlib.util, sys
from kanalyze.dynamic.integrity import Snoops
snoops = Snoops()
exec(compile('import sys\\nsys._getframe(0)', '/usr/lib/python3/elsewhere.py', 'exec'))   # before: not its own
snoops.folder = {str(tmp_path)!r}
spec = importlib.util.spec_from_file_location("cand", {str(tmp_path / "cand.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.run()
exec(compile('import sys\\nsys._getframe(0)', '/usr/lib/python3/elsewhere.py', 'exec'))   # kanalyze's: not its own
print(snoops.seen)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=str(KB.parent.parent))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(["sys._getframe() at line 2 of somewhere.py",
                                       "sys._getframe() at line 2 of <string>"]), done.stdout


def test_a_wrong_value_is_not_called_a_precision_loss() -> None:
    """A matmul that leaves whole blocks at zero: CMP001 on the problem's own inputs, and PRC001
    does not claim the error for reduced precision."""
    wrong = KB / "candidates" / "level1_problem3_matmul_skips_blocks.py"
    run = run_gates(find_harness(str(wrong), kernelbench=str(KB)), ["PRC001"], {"PRC001": [{"row": None}]},
                    Options(mode="cpu"))
    verdicts = _by_code(run.verdicts)
    assert verdicts["CMP001"].status == CONFIRMED
    assert verdicts["PRC001"].status == UNCONFIRMED and "not the arithmetic's precision" in verdicts["PRC001"].summary


def test_work_done_in_pytorch_beside_a_decoy_or_failed_launch_is_res001() -> None:
    for name, words in (("decoy_launch", "torch leaky_relu"), ("failed_launch_fallback", "no custom kernel ran")):
        plant = KB / "candidates" / f"level1_problem6_leaky_relu_{name}.py"
        run = run_gates(find_harness(str(plant), kernelbench=str(KB)), ["RES001"], options=Options(mode="cpu"))
        [verdict] = [v for v in run.verdicts if v.code == "RES001"]
        assert verdict.status == CONFIRMED and words in verdict.summary, (name, verdict.summary)
    twin = KB / "candidates" / "level1_problem6_leaky_relu.py"
    run = run_gates(find_harness(str(twin), kernelbench=str(KB)), ["RES001"], options=Options(mode="cpu"))
    assert [v.status for v in run.verdicts if v.code == "RES001"] == [REFUTED]


def test_torch_work_on_a_thread_the_candidate_starts_is_recorded() -> None:
    """Torch function modes are kept per thread: a candidate that computes with PyTorch on a
    thread it joins before returning is still seen (RES001 confirmed, naming the op)."""
    plant = KB / "hostile" / "level1_problem6_threaded_torch.py"
    run = run_gates(find_harness(str(plant), kernelbench=str(KB)), ["RES001"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "RES001"]
    assert verdict.status == CONFIRMED and "torch leaky_relu" in verdict.summary, verdict.summary


def test_every_way_of_starting_a_thread_is_followed() -> None:
    """`threading.Thread`, a thread pool and a raw `_thread.start_new_thread`: each thread's torch
    calls land in the run's recorder; a thread inside a launch (or kanalyze's own work) is
    looked away from on that thread alone.  In a fresh interpreter: the patch is process-wide."""
    script = """
import _thread, concurrent.futures, threading, time
import torch
from kanalyze.dynamic.recording import CallRecorder, LaunchCounter, follow_threads
launches = LaunchCounter()
recorder = CallRecorder(launches)
follow_threads(lambda: recorder)
x = torch.ones(4)
thread = threading.Thread(target=lambda: torch.relu(x)); thread.start(); thread.join()
with concurrent.futures.ThreadPoolExecutor(1) as pool:
    pool.submit(torch.sigmoid, x).result()
done = threading.Event()
_thread.start_new_thread(lambda: (torch.tanh(x), done.set()), ())
done.wait(5)
def inside_a_launch():
    with launches.looking_away():
        torch.exp(x)
with launches.looking_away():   # the calling thread's launch: not the other thread's
    thread = threading.Thread(target=lambda: torch.abs(x)); thread.start(); thread.join()
thread = threading.Thread(target=inside_a_launch); thread.start(); thread.join()
print(sorted(recorder.calls))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=str(KB.parent.parent))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == str(sorted(["relu", "sigmoid", "tanh", "abs"])), done.stdout


def test_float_atomic_order_is_not_blamed_on_fresh_memory() -> None:
    """The ORD001 plant (a float atomic sum) varies with program order whatever the poison:
    ORD002 leaves it to ORD001; the ORD002 plant still varies with the poison alone."""
    atomic = KB / "candidates" / "level1_problem1_mse_atomic.py"
    run = run_gates(find_harness(str(atomic), kernelbench=str(KB)), ["ORD002"], options=Options(mode="cpu"))
    [verdict] = [v for v in run.verdicts if v.code == "ORD002"]
    assert verdict.status == UNCONFIRMED and "(ORD001)" in verdict.summary, verdict.summary
    chained = KB / "candidates" / "level1_problem9_cumsum_chained_blocks.py"
    run = run_gates(find_harness(str(chained), kernelbench=str(KB)), ["ORD002"], options=Options(mode="cpu"))
    assert [v.status for v in run.verdicts if v.code == "ORD002"] == [CONFIRMED]


def test_a_tf32_sized_value_error_names_prc001_as_its_cause() -> None:
    import numpy as np

    from kanalyze.dynamic.judging import name_the_cause as _name_the_cause

    expected = np.full((4, 4), 100.0)
    cmp = Verdict("CMP001", CONFIRMED, "on the problem's own inputs: max abs error 0.05 > bound 0.01",
                  details={"metric": {"max_abs_error": 0.05}}, arrays={"expected0": expected})
    gross = Verdict("CMP001", CONFIRMED, "max abs error 90 > bound 0.01", details={"metric": {"max_abs_error": 90.0}},
                    arrays={"expected0": expected})
    prc = Verdict("PRC001", CONFIRMED, "TF32")
    named, kept = _name_the_cause([prc, cmp])[1], _name_the_cause([prc, gross])[1]
    assert named.status == CONFIRMED and "PRC001 confirms: its cause" in named.summary
    assert kept.summary == gross.summary                      # too large to be a precision: no cause named
    assert _name_the_cause([cmp])[0].summary == cmp.summary   # without PRC001 confirmed, nothing to name


def test_a_candidate_that_fails_on_the_problems_own_inputs_gets_one_cmp001() -> None:
    """Asked for CMP001 itself, the baseline's failure is its verdict: reported once, not twice."""
    harness = find_harness(str(KB / "hostile" / "level1_problem6_import_error.py"), kernelbench=str(KB))
    run = run_gates(harness, ["CMP001", "MEM002"], options=Options(mode="cpu", limits=Limits(case_seconds=30)))
    cmp001 = [v for v in run.verdicts if v.code == "CMP001"]
    assert len(cmp001) == 1 and cmp001[0].status == CONFIRMED and "does not import" in cmp001[0].summary, cmp001


def test_a_worker_exception_is_named_in_how_the_worker_ended() -> None:
    """A reference worker that failed in kanalyze's own code says which exception (its
    traceback's last line), so the unconfirmed verdict tells disk from memory from a bug."""
    from kanalyze.dynamic.sandbox import exits

    output = ("Traceback (most recent call last):\n  File \"reference_side.py\", line 9, in run\n"
              "    save_arrays(folder, arrays)\nOSError: [Errno 28] No space left on device: '/tmp/x'\n")
    said = exits.describe(70, output)
    assert said.startswith("the worker exited with code 70 (an exception escaped kanalyze's worker code: OSError")
    assert "No space left on device" in said
    numpy_memory = ("  File \"transport.py\", line 147, in tensor_to_numpy\n"
                    "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 32.0 MiB for an array\n")
    assert "_ArrayMemoryError: Unable to allocate 32.0 MiB" in exits.describe(70, numpy_memory)
    assert exits.describe(70, "") == "the worker exited with code 70 (an exception escaped kanalyze's worker code)"
    assert exits.describe(70, "loading 4 shards\nterminate called without an active exception\n\n") == (
        "the worker exited with code 70 (an exception escaped kanalyze's worker code; its last output: "
        "terminate called without an active exception)")
    assert exits.describe(-9, "") == "the worker died of SIGKILL (killed: out of memory?)"
    assert exits.describe(None, "", lost=True).endswith("lost with the zygote that forked it")


def test_the_traceback_still_in_the_pipe_names_the_exception() -> None:
    """A worker's exit is seen before its last output is read (a thread drains the pipe): the
    cause is named from the whole output.  On the H200 a reference worker's "code 70" came
    without its exception while the candidate's, read later, had it."""
    import threading

    from kanalyze.dynamic.sandbox.process import Worker, _Drain

    read_end, write_end = os.pipe()

    class Ended:
        lost = False

        def wait(self, timeout=None):
            return 70

    def write_late() -> None:
        time.sleep(0.3)
        os.write(write_end, b"Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.\n")
        os.close(write_end)

    worker = Worker.__new__(Worker)
    worker.process = Ended()
    worker._drain = _Drain(os.fdopen(read_end, "rb"), 4096)
    worker._drain.start()
    threading.Thread(target=write_late).start()
    said = worker._how_it_ended()
    assert said.endswith("(an exception escaped kanalyze's worker code: torch.OutOfMemoryError: CUDA out of memory.)")


def test_a_workers_account_of_its_time_is_bounded() -> None:
    """`gate_seconds` takes a worker's own step times only where they are plausible: a candidate's
    worker writing NaN, infinities, negative or huge values, or thousands of keys, changes nothing."""
    from kanalyze.dynamic.accounts import durations as _durations

    said = {"model": 1.5, "runs": float("nan"), "finish": float("inf"), "x" * 50: 1.0, "neg": -1.0,
            "huge": 1e12, "flag": True, "text": "3"}
    assert _durations(said) == [("model", 1.5)]
    assert len(_durations({f"k{i}": 1.0 for i in range(10_000)})) == 32
    assert _durations(["not", "a", "dict"]) == []


def test_a_candidate_that_needs_a_gpu_the_run_lacks_is_not_confirmed() -> None:
    """Measured on LLM-written candidates under the CPU interpreter: two autotuned kernels ended
    with Triton's "libcuda.so cannot found" on the problem's own inputs and were CMP001 confirmed.
    A run without the device the candidate asks for decides nothing about it."""
    needs_gpu = Outcome("done", meta={"status": "error", "runs": [],
                                      "error": "AssertionError: libcuda.so cannot found! Please make sure GPU is set up"})
    verdicts, baseline = _judge([_baseline(needs_gpu)], ["CMP001", "PRC001"], {}, gates_by_code(), False, {})
    verdicts = _by_code(verdicts)
    assert baseline["status"] == "undecided"
    assert {code: v.status for code, v in verdicts.items()} == {"CMP001": UNCONFIRMED, "PRC001": UNCONFIRMED}
    assert all("needs a CUDA device or driver" in v.summary for v in verdicts.values()), verdicts
    wrong = Outcome("done", meta={"status": "error", "runs": [], "error": "ValueError: arange's arguments"})
    assert _by_code(_judge([_baseline(wrong)], ["PRC001"], {}, gates_by_code(), False, {})[0])["CMP001"].status \
        == CONFIRMED   # the candidate's own error stays its own


def test_gates_that_decide_nothing_are_said_even_with_no_flag(tmp_path: Path) -> None:
    """A problem whose reference cannot run leaves every gate undecided: `check` says so on
    stderr, per gate and reason, instead of a report that reads as clean."""
    problem = tmp_path / "broken_problem.py"
    problem.write_text((KB / "level1" / "10_scale.py").read_text().replace(
        "def get_init_inputs():\n", "def get_init_inputs():\n    raise RuntimeError('no weights here')\n", 1))
    candidate = tmp_path / "scale.py"
    candidate.write_text((KB / "candidates" / "level1_problem10_scale_plain.py").read_text())
    done = subprocess.run([sys.executable, "-m", "kanalyze", "check", candidate.name, "--gates", "EXC001",
                           "--reference", problem.name, "--device", "cpu", "--no-cache"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert "scale.py: EXC001 could not be decided: the reference rejects these sizes: " \
           "RuntimeError: no weights here" in done.stderr, done.stderr


def test_outputs_lost_to_a_full_disk_cost_their_own_cases_only(tmp_path: Path, monkeypatch) -> None:
    """The reference worker saves what it withheld case by case: a case whose arrays the disk
    cannot take is said lost (its value gates cannot judge, with why), the others are saved,
    the worker goes on, and what needs no arrays (the ops it recorded) still decides."""
    import numpy as np
    import pytest

    from kanalyze.dynamic.gates.base import CannotJudge
    from kanalyze.dynamic.sandbox import reference_side
    from kanalyze.dynamic.sandbox.transport import NoRoom, save_arrays
    from kanalyze.dynamic.reference_jobs import with_outputs

    side = reference_side.ReferenceSide({}, "cpu", lambda: None)
    big, small = str(tmp_path / "case-1.arrays"), str(tmp_path / "case-2.arrays")
    side._withhold(big, {"out0": np.ones(1000)})
    side._withhold(small, {"out0": np.ones(3)})

    def short_of_room(folder, arrays):
        if folder == big:
            raise NoRoom("no room for 2.91 GiB of arrays")
        save_arrays(folder, arrays)

    monkeypatch.setattr(reference_side, "save_arrays", short_of_room)
    lost, handed = side.release()
    assert handed == {}   # (nothing held for a judge: held.py)
    assert list(lost) == [big] and "NoRoom: no room for 2.91 GiB" in lost[big]
    assert np.array_equal(np.load(Path(small) / "out0.npy"), np.ones(3))

    meta = {"status": "ok", "withheld": True, "inputs": [], "init_inputs": [], "ops": {"aten::mm": 1},
            "output": {"structure": "tensor", "dtypes": ["float64"], "prefix": "out", "nbytes": [8000],
                       "shapes": [[1000]]}}
    kept = with_outputs(Outcome("done", meta=meta, arrays=small), lost)
    gone = with_outputs(Outcome("done", meta=meta, arrays=big), lost)
    assert kept.meta == meta and gone.status == "done" and gone.meta["ops"] == {"aten::mm": 1}
    with pytest.raises(CannotJudge, match="could not save the reference's outputs"):
        Result(Case("c", "EXC001", {}), gone).expected
    assert with_outputs(Outcome("done", meta=meta, arrays=small), "it ended").status == "crashed"


def test_a_case_kanalyze_cannot_hold_costs_that_case_only(tmp_path: Path) -> None:
    """A case at a size past what the machine holds (measured: a 32768 × 32768 input on the CPU,
    whose copy for the candidate numpy could not allocate) is kanalyze's failure for that case,
    said with why, never the problem's rejection or the candidate's defect; the reference worker
    goes on with the other cases.  A failure of kanalyze's code of any other kind still ends it."""
    import pytest

    from kanalyze.dynamic.sandbox import worker

    class Side:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def run(self, case, out_base, inputs):
            raise self.error

    short = worker._reference_case(Side(MemoryError("Unable to allocate 4.00 GiB")), {}, str(tmp_path), None)
    assert short["status"] == "internal" and "could not keep this case's arrays" in short["error"]
    assert "4.00 GiB" in short["error"]
    with pytest.raises(KeyError):
        worker._reference_case(Side(KeyError("a bug")), {}, str(tmp_path), None)
    result = Result(Case("c", "ORD001", {}), Outcome("done", meta=short))
    assert not result.reference_ok
    assert result.kanalyze_failure() == short["error"] == result.reference_failure()
    assert "rejects" not in result.reference_failure()


def test_outputs_a_reference_worker_held_when_it_ended_are_lost_with_its_cause(monkeypatch) -> None:
    """A reference worker that ends in the middle of its cases (killed for memory, say) takes the
    outputs it withheld for the hand-over with it, though a new worker runs the cases left and
    hands over its own.  Each of the first worker's cases says so with how it ended, and the
    value gates say they cannot judge it with that cause."""
    import pytest

    from kanalyze.dynamic.gates.base import CannotJudge
    from kanalyze.dynamic.reference_jobs import with_outputs
    from kanalyze.dynamic.sandbox import dispatch
    from kanalyze.dynamic.sandbox.process import WorkerGone

    meta = {"status": "ok", "withheld": True, "inputs": [], "init_inputs": [], "ops": {"aten::mm": 1},
            "output": {"structure": "tensor", "dtypes": ["float32"], "prefix": "out", "nbytes": [4],
                       "shapes": [[1]]}}
    started = []

    class Worker:
        phase, scratch = "kanalyze", "/nonexistent"

        def __init__(self, *args) -> None:
            started.append(self)
            self.events = [0] if len(started) == 1 else [2]   # the first ends after case 0

        def wait_ready(self) -> dict:
            return {"event": "ready"}

        def send(self, job: dict) -> None:
            self.job = job["id"]

        def next_event(self, seconds: float) -> dict:
            if not self.events:
                raise WorkerGone("the worker was killed by signal 9 (SIGKILL: the memory limit?)")
            return {"event": "case", "index": self.events.pop(0), "job": self.job}

        def kill(self) -> None: ...
        def close(self) -> None: ...
        def output(self) -> str: return ""

    monkeypatch.setattr(dispatch, "Worker", Worker)
    monkeypatch.setattr(dispatch, "_read_case", lambda scratch, index, now: Outcome("done", meta=dict(meta),
                                                                                   arrays=f"case-{index}.arrays"))
    outcomes, _, worker = dispatch.run_cases("reference", "cpu", {}, [(0, {}), (1, {}), (2, {})], Limits(), "/tmp",
                                             keep=True)
    assert worker is started[1] and outcomes[1].status == "crashed"
    assert outcomes[2].meta == meta                      # the second worker still holds case 2's outputs
    first = outcomes[0]
    assert first.status == "done" and "withheld" not in first.meta and first.meta["ops"] == {"aten::mm": 1}
    assert "killed by signal 9" in first.meta["arrays_lost"], first.meta
    handed = with_outputs(first, {})   # the second worker lost none of its own
    with pytest.raises(CannotJudge, match="killed by signal 9"):
        Result(Case("c", "PRC002", {}), handed).expected


def test_a_judge_that_ends_computing_float64_references_says_why_its_outputs_are_lost(monkeypatch) -> None:
    """The reference worker keeps the baseline's outputs until the hand-over, and computes their
    float64 references once the candidate has run there.  If it ends then (memory, a signal),
    every output it held is gone: each of its cases says so with the cause."""
    import types

    import pytest

    from kanalyze.dynamic import session as session_module
    from kanalyze.dynamic.gates.base import CannotJudge

    meta = {"status": "ok", "withheld": True, "output64_later": True, "inputs": [], "init_inputs": [],
            "output": {"structure": "tensor", "dtypes": ["float32"], "prefix": "out", "nbytes": [4],
                       "shapes": [[1]]}}
    ended = types.SimpleNamespace(process=types.SimpleNamespace(poll=lambda: -9), close=lambda: None)
    monkeypatch.setattr(session_module, "float64_later", lambda worker, indices, limits: (
        {}, "kanalyze's reference worker gave no float64 reference: it ended: killed by signal 9"))
    fake = types.SimpleNamespace(_reference_index={"a": 0, "b": 1}, _judge=ended, _reference=ended, limits=Limits(),
                                 took=lambda *args: None, _add_steps=lambda *args: None, judge_gone=None)
    fake._judge_ended = lambda *args: session_module.Session._judge_ended(fake, *args)
    by_key = {"a": Outcome("done", meta=dict(meta), arrays="a.arrays"),
              "b": Outcome("done", meta={**meta, "output64_later": False}, arrays="b.arrays")}
    session_module.Session._float64_later(fake, ["a"], by_key)
    assert fake._judge is None and fake._reference is None and "killed by signal 9" in fake.judge_gone
    for key in "ab":
        assert "withheld" not in by_key[key].meta and "killed by signal 9" in by_key[key].meta["arrays_lost"]
        with pytest.raises(CannotJudge, match="killed by signal 9"):
            Result(Case("c", "PRC002", {}), by_key[key]).expected


def test_a_run_that_faults_the_device_makes_the_case_the_candidates_error_and_reads_nothing_back() -> None:
    """On a GPU an illegal address in the candidate's second run leaves a device whose memory
    cannot be read: reading the first run's outputs back ended the worker in kanalyze's own
    code (code 70, "kanalyze failed").  The case is now the candidate's error, with the fault,
    and nothing of the device is read."""
    import torch

    from kanalyze.dynamic.sandbox.execute import _device_lost

    fault = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    result = {"status": "ok", "runs": [{"status": "ok", "output": {"prefix": "r0_out"}},
                                       {"status": "error", "error": fault}], "fatal": True}
    arrays = {"r0_out0": torch.zeros(3), "kept": b"host bytes"}
    _device_lost(result, arrays)
    assert arrays == {"kept": b"host bytes"} and all("output" not in run for run in result["runs"])
    assert result["status"] == "error" and fault in result["error"]
    outcome = Outcome("done", meta=result, arrays={})
    seen = _baseline(outcome)
    assert seen.candidate_failed() and fault in seen.candidate_failure()


def test_a_fault_a_raising_call_left_on_the_device_is_read_as_the_candidates(monkeypatch) -> None:
    """A candidate's kernel faults, and its call raises before anything synchronizes: the fault
    surfaces at the next synchronization.  The worker now synchronizes right after the raise,
    inside the candidate's run, so the fault joins the candidate's error (a GPU test runs the
    whole path: hostile/level1_problem6_illegal_address_then_raises.py)."""
    from kanalyze.dynamic.sandbox import execute

    def synchronize() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nSearch for "
                           "`cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/ for more information.")

    monkeypatch.setattr(execute.torch.cuda, "synchronize", synchronize)
    assert execute.pending_fault("cuda") == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert execute.pending_fault("cpu") is None


def test_a_reference_out_of_device_memory_is_said_so_and_the_candidate_left_unrun_says_why() -> None:
    """At a problem's real size the reference can run out of the device's memory: that is neither
    the problem rejecting the sizes nor a candidate that did not run of itself.  A gate whose
    case ended there names the reference's failure, once."""
    oom = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total "
           "capacity of 79.18 GiB of which 5.72 GiB is free.")
    rejected = Outcome("done", meta={"status": "rejected", "error": oom})
    result = Result(Case("INT001/repeat", "INT001", {"N": 8}), rejected)
    assert result.reference_failure() == f"the reference ran out of the device's memory at these sizes: {oom}"
    verdict = gates_by_code()["INT001"].judge(None, [result])
    assert verdict.status == UNCONFIRMED
    assert verdict.summary == f"the candidate did not run: the reference failed first ({result.reference_failure()})"
    other = Result(Case("INT001/repeat", "INT001", {"N": 8}), Outcome("done", meta={"status": "rejected",
                                                                                  "error": "ValueError: N < 16"}))
    assert other.reference_failure() == "the reference rejects these sizes: ValueError: N < 16"


DROPOUT_PROBLEM = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.dropout = torch.nn.Dropout(p)

    def forward(self, x):
        return torch.softmax(self.dropout(x * 2.0), dim=1)

rows, cols, p = 8, 64, {p}

def get_inputs():
    return [torch.randn(rows, cols)]

def get_init_inputs():
    return [p]
'''
DROPOUT_CANDIDATE = '''
import torch

class ModelNew(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return torch.softmax(torch.nn.functional.dropout(x * 2.0, self.p, self.training), dim=1)
'''


def test_a_reference_that_draws_random_numbers_holds_no_value_or_bit_to_account(tmp_path) -> None:
    """A problem with dropout in training mode answers the same inputs differently on every call:
    its float64 run drew another mask, so a bound calibrated from it says nothing.  The gates that
    compare values or bits say so (unconfirmed); the others judge.  With p = 0 nothing is drawn."""
    verdicts = {}
    for p in (0.2, 0.0):
        problem, candidate = tmp_path / f"problem_{p}.py", tmp_path / f"candidate_{p}.py"
        problem.write_text(DROPOUT_PROBLEM.format(p=p))
        candidate.write_text(DROPOUT_CANDIDATE)
        run = run_gates(find_harness(str(candidate), reference=str(problem)), ["CMP001", "ORD002", "INT001", "MEM002"],
                        options=Options(mode="cpu"))
        verdicts[p] = (_by_code(run.verdicts), run.baseline)
    random, baseline = verdicts[0.2]
    for code in ("CMP001", "ORD002"):
        assert random[code].status == UNCONFIRMED and "the reference draws random numbers" in random[code].summary, \
            random[code].summary
    assert random["INT001"].status == UNCONFIRMED and "a cached answer could not show" in random["INT001"].summary
    assert random["MEM002"].status == REFUTED, random["MEM002"].summary   # its inputs are compared, not its outputs
    assert baseline["status"] == "undecided" and "draws random numbers" in baseline["summary"]
    steady, baseline = verdicts[0.0]
    assert steady["CMP001"].status == REFUTED and steady["ORD002"].status == REFUTED, steady
    assert steady["INT001"].status == REFUTED and baseline["status"] == "passed"
