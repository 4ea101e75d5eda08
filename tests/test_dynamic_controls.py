"""The positive controls on the CPU: every planted violation confirmed, every clean twin refuted.

fixtures/kernelbench/controls.json names, for each gate, a candidate with a
planted violation and its clean twin; both run under Triton's interpreter at
the problems' (small) sizes.  Then `kanalyze check --dynamic` end to end with a
witness that replays (exit 1 while failing, 0 once fixed), and hostile
candidates (crash, hang, exit, fork, network, megabytes of output, unbounded
allocation, wrong output) contained as recorded results.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from kanalyze.cli import main
from kanalyze.dynamic.harness import Harness, NoHarness, find_harness
from kanalyze.dynamic.runner import Options, run_at_sizes, run_gates
from kanalyze.dynamic.sandbox.process import Limits

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = {k: v for k, v in json.loads((KB / "controls.json").read_text()).items() if not k.startswith("_")}
CUDA_CONTROLS = {code: entry["cuda"] for code, entry in CONTROLS.items() if "cuda" in entry}
JOBS = max(2, min(4, os.cpu_count() or 1))

pytest.importorskip("torch")
pytest.importorskip("triton")


def _harness(folder: str, name: str) -> Harness:
    harness = find_harness(str(KB / folder / name), kernelbench=str(KB))
    assert isinstance(harness, Harness), harness
    return harness


@pytest.fixture(scope="module")
def control_verdicts():
    jobs = [(code, role, CONTROLS[code][role]) for code in sorted(CONTROLS) for role in ("plant", "twin")]

    def run(job):
        code, role, name = job
        gate_run = run_gates(_harness("candidates", name), [code], {code: [{"row": None}]}, Options(mode="cpu"))
        return job, {v.code: v for v in gate_run.verdicts}

    with ThreadPoolExecutor(JOBS) as pool:
        return dict(pool.map(run, jobs))


@pytest.mark.parametrize("code", sorted(CONTROLS))
def test_plant_confirmed_and_twin_refuted(control_verdicts, code) -> None:
    plant = control_verdicts[(code, "plant", CONTROLS[code]["plant"])][code]
    twin = control_verdicts[(code, "twin", CONTROLS[code]["twin"])][code]
    assert plant.status == "confirmed", f"{CONTROLS[code]['plant']}: {plant.summary}"
    assert plant.cases and plant.summary
    assert twin.status == "refuted", f"{CONTROLS[code]['twin']}: {twin.summary}"


def test_every_plants_witness_cases_confirm_it_again(control_verdicts) -> None:
    """What `kanalyze replay` does with a witness: the confirmed verdict's cases, through a
    witness's JSON, run again in a fresh session and judged by the same gate.  Each plant's
    cases must be enough to confirm it again.  ORD002's CPU confirmation comes from its
    control (the poisons in one program order); its witness held that case alone, and the
    replay of a real candidate's witness failed on the case the judgment starts from."""
    from kanalyze.dynamic.cases import Case

    def again(code: str):
        plant = control_verdicts[(code, "plant", CONTROLS[code]["plant"])][code]
        cases = [Case.from_dict(json.loads(json.dumps(case.to_dict()))) for case in plant.cases]
        gate_run = run_gates(_harness("candidates", CONTROLS[code]["plant"]), [code], {code: [{"row": None}]},
                             Options(mode="cpu"), cases=cases)
        return code, {v.code: v for v in gate_run.verdicts}[code]

    with ThreadPoolExecutor(JOBS) as pool:
        replayed = dict(pool.map(again, sorted(CONTROLS)))
    for code, verdict in replayed.items():
        assert verdict.status == "confirmed", f"{code} replayed: {verdict.summary}"


def test_cuda_cpp_controls_stay_unconfirmed_without_a_gpu() -> None:
    """load_inline candidates need nvcc and a device: on the CPU no worker starts, and every
    gate says why (tests/test_dynamic_gpu.py runs them on the device)."""
    assert len(CUDA_CONTROLS) >= 5
    for code, pair in sorted(CUDA_CONTROLS.items()):
        for role in ("plant", "twin"):
            gate_run = run_gates(_harness("candidates", pair[role]), [code, "CMP001"], {code: [{"row": None}]},
                                 Options(mode="cpu"))
            verdicts = {v.code: v for v in gate_run.verdicts}
            assert set(verdicts) == {code, "CMP001"}, pair[role]
            for verdict in verdicts.values():
                assert verdict.status == "unconfirmed" and "runs only on a GPU" in verdict.summary, verdict.summary
            assert gate_run.environment == {"mode": "cpu"}       # nothing ran: no worker, no versions


def test_witness_details_say_what_failed(control_verdicts) -> None:
    def verdict(code):
        return control_verdicts[(code, "plant", CONTROLS[code]["plant"])][code]

    assert "TF32 emulated" in verdict("PRC001").summary and verdict("PRC001").details["tf32_dots"] > 0
    oob = verdict("CMP003").details["out_of_bounds"]
    assert oob["kernel"] == "softmax_kernel" and oob["tensor"] == "x_ptr" and oob["element_offset"] >= 0
    assert "promoted to fp32" in verdict("PRC002").summary and verdict("PRC002").details["promotion"]
    assert verdict("EXC001").details["special"] in ("+inf", "-inf", "nan")
    assert verdict("RES001").details["torch_calls"].get("matmul")
    assert verdict("MEM001").details["unwritten"] == 640


def test_run_at_sizes_reports_out_of_bounds_for_the_bounds_pass() -> None:
    harness = _harness("candidates", CONTROLS["CMP003"]["plant"])
    ok, out_of_bounds = run_at_sizes(harness, [{"dim": 512}, {"dim": 513}], Options(mode="cpu"))
    assert ok.status == "ok", ok.detail
    assert out_of_bounds.status == "out_of_bounds" and out_of_bounds.out_of_bounds["program_id"][0] == 15


def test_check_dynamic_end_to_end_and_replay(tmp_path, capsys) -> None:
    # A KernelBench layout of our own, so that the candidate can be fixed in place.
    (tmp_path / "level1").mkdir()
    shutil.copy(KB / "level1/1_mse_loss.py", tmp_path / "level1")
    plant, twin = CONTROLS["ORD001"]["plant"], CONTROLS["ORD001"]["twin"]
    shutil.copy(KB / "candidates" / plant, tmp_path / plant)
    shutil.copy(KB / "candidates" / twin, tmp_path / twin)
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    code = main(["check", str(tmp_path), "--dynamic", "--kernelbench", str(tmp_path), "--device", "cpu",
                 "--no-cache", "--output-format", "json"])
    findings = json.loads(capsys.readouterr().out)
    jsonschema.validate(findings, json.loads((ROOT / "kanalyze/schemas/findings.schema.json").read_text()))
    assert code == 1
    ord001 = [f for f in findings if f["code"] == "ORD001"]
    assert len(ord001) == 1 and ord001[0]["status"] == "confirmed" and ord001[0]["filename"].endswith(plant)
    assert ord001[0]["evidence"]["gate_result"].startswith("ORD001 confirmed: ")
    witness = Path(ord001[0]["witness"]["path"])
    witness = witness if witness.is_absolute() else Path.cwd() / witness
    assert witness.parent == tmp_path / ".kanalyze" / "witnesses" and witness.exists()

    assert main(["replay", str(witness), "--device", "cpu"]) == 1
    assert "ORD001 confirmed" in capsys.readouterr().out
    shutil.copy(KB / "candidates" / twin, tmp_path / plant)       # the fix
    assert main(["replay", str(witness), "--device", "cpu"]) == 0
    assert "ORD001 refuted" in capsys.readouterr().out


def test_flags_without_a_harness_stay_unconfirmed(tmp_path, capsys) -> None:
    shutil.copy(KB / "candidates" / CONTROLS["ORD001"]["plant"], tmp_path / "kernel.py")
    code = main(["check", str(tmp_path / "kernel.py"), "--dynamic", "--isolated", "--no-cache", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 1 and "ORD001 [unconfirmed]" in out and "--reference PROBLEM.py" in out


HOSTILE = {
    "segfault": ("CMP001", "confirmed", "SIGSEGV"),
    "hang": ("CMP001", "confirmed", "did not finish"),
    "sys_exit": ("CMP001", "confirmed", "sys.exit(0)"),
    "hard_exit": ("CMP001", "confirmed", "exited with code 3"),
    "fork": ("CMP001", "confirmed", "os.fork is refused"),
    "network": ("CMP001", "confirmed", "network"),
    "memory_hog": ("CMP001", "confirmed", "allocate"),
    "tuple_output": ("CMP001", "confirmed", "returned tuple(tensor) where the reference returns tensor"),
    "wrong_shape": ("CMP001", "confirmed", "float32[16, 999]"),
    "import_error": ("CMP001", "confirmed", "does not import"),
    "huge_print": ("MEM002", "refuted", "unchanged"),
    "import_sleep": ("CMP001", "confirmed", "the candidate's import did not finish within 5 s"),
    "answer_sniffer": ("CMP001", "confirmed", "max abs error"),   # the reference's outputs are not in its process
    "lazy_subclass": ("CMP001", "confirmed", "max abs error"),    # its outputs are read as plain tensors in the call
}


def test_a_candidate_whose_work_depends_on_its_input_values_is_int001() -> None:
    """PyTorch on benchmark-like inputs, its kernel on a verifier's probes: each answer right, the
    trace across inputs of one shape tells; the honest twin's trace is the same on all of them."""
    verdicts = {}
    for name in ("hostile/level1_problem6_watched_fallback.py", "candidates/level1_problem6_leaky_relu.py"):
        gate_run = run_gates(find_harness(str(KB / name), kernelbench=str(KB)), ["EXC001"], options=Options(mode="cpu"))
        verdicts[name] = {v.code: v for v in gate_run.verdicts}
    hostile, honest = verdicts.values()
    assert hostile["INT001"].status == "confirmed", hostile
    assert "launched no kernel" in hostile["INT001"].summary and "launched leaky_relu_kernel" in hostile["INT001"].summary
    assert hostile["EXC001"].status == "refuted"           # its answers are right: only the trace tells
    assert "INT001" not in honest and honest["EXC001"].status == "refuted", honest


def test_a_candidate_that_silences_or_unhooks_the_recorders_is_caught() -> None:
    """Torch calls hidden by switching torch function modes off for the call, Triton's launch
    entry point put back at import, and the recorder found on torch's mode stack and cleared:
    each leaves a record whose seal fails (INT001), so RES001 is never refuted on what the
    silenced recorder saw; the honest twin's seal holds."""
    verdicts = {}
    for name in ("hostile/level1_problem6_hidden_torch.py", "hostile/level1_problem6_unhooked_launches.py",
                 "hostile/level1_problem6_erased_record.py", "candidates/level1_problem6_leaky_relu.py"):
        gate_run = run_gates(find_harness(str(KB / name), kernelbench=str(KB)), ["RES001"], options=Options(mode="cpu"))
        verdicts[name] = {v.code: v for v in gate_run.verdicts}
    hidden, unhooked, erased, honest = verdicts.values()
    assert hidden["INT001"].status == "confirmed" and "DisableTorchFunction" in hidden["INT001"].summary, hidden
    assert unhooked["INT001"].status == "confirmed" and "launch counter" in unhooked["INT001"].summary, unhooked
    assert erased["INT001"].status == "confirmed" and "mode stack" in erased["INT001"].summary, erased
    assert hidden["RES001"].status == unhooked["RES001"].status == erased["RES001"].status == "unconfirmed"
    assert "INT001" not in honest and honest["RES001"].status == "refuted", honest


def test_hostile_candidates_are_contained() -> None:
    limits = Limits(case_seconds=8, memory_bytes=2 * 2 ** 30, import_seconds=5)

    def run(name):
        gate_run = run_gates(_harness("hostile", f"level1_problem6_{name}.py"), ["MEM002"],
                             options=Options(mode="cpu", limits=limits))
        return name, {v.code: v for v in gate_run.verdicts}

    with ThreadPoolExecutor(JOBS) as pool:
        results = dict(pool.map(run, HOSTILE))
    for name, (code, status, words) in HOSTILE.items():
        verdict = results[name][code]
        assert verdict.status == status and words in verdict.summary, f"{name}: {verdict.status}: {verdict.summary}"
        if code == "CMP001":  # the other gates say why they could not run
            assert results[name]["MEM002"].status == "unconfirmed" or name in ("tuple_output", "wrong_shape",
                                                                               "answer_sniffer", "lazy_subclass")
    missing = find_harness(str(KB / "hostile/level1_problem6_no_model_new.py"), kernelbench=str(KB))
    assert isinstance(missing, NoHarness) and "ModelNew" in missing.reason


def test_a_library_kernel_through_its_contract() -> None:
    contract = KB / "contract"
    harness = find_harness(str(contract / "softmax_rows.py"), mapping={"softmax_rows.py": "softmax_rows_contract.py"},
                           root=str(contract))
    assert isinstance(harness, Harness) and harness.kind == "contract", harness
    gate_run = run_gates(harness, ["CMP001", "MEM001"], options=Options(mode="cpu"))
    verdicts = {v.code: v for v in gate_run.verdicts}
    assert verdicts["CMP001"].status == "refuted", verdicts["CMP001"].summary
    assert "float16" in verdicts["CMP001"].summary           # every dtype the contract lists ran
    assert verdicts["MEM001"].status == "refuted", verdicts["MEM001"].summary


def test_kanalyze_itself_never_imports_torch(tmp_path) -> None:
    """Verdicts are computed from arrays in a process that has no torch to patch."""
    import subprocess
    import sys

    twin = KB / "candidates" / CONTROLS["MEM002"]["twin"]
    code = ("import sys; from kanalyze.cli import main; "
            f"rc = main(['check', {str(twin)!r}, '--gates', 'MEM002', '--kernelbench', {str(KB)!r}, '--device', "
            f"'cpu', '--isolated', '--no-cache', '--select', 'MEM002', '--witness-dir', {str(tmp_path)!r}]); "
            "print('RC', rc, 'torch' in sys.modules, 'triton' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "RC 0 False False", done.stdout + done.stderr[-2000:]


POWER = {code: entry["power"] for code, entry in CONTROLS.items() if "power" in entry}


@pytest.mark.parametrize("code", sorted(POWER))
def test_power_plants_are_confirmed_through_the_scaling(code) -> None:
    """Plants whose violation needs the problem's own size of one knob (ORD001: at least three
    blocks adding to a row; PRC002: the full K): on the CPU the gate keeps that knob whole.
    CMP003's needs a width no block of four divides in a problem that rejects odd ones (a GLU
    floor grid): before that size was tried, the plant was refuted at the three sizes that ran."""
    flags = {code: [{"row": None}]}
    plant = run_gates(_harness("candidates", POWER[code]["plant"]), [code], flags, Options(mode="cpu"))
    twin = run_gates(_harness("candidates", POWER[code]["twin"]), [code], flags, Options(mode="cpu"))
    plant_verdict, twin_verdict = ({v.code: v for v in run.verdicts}[code] for run in (plant, twin))
    assert plant_verdict.status == "confirmed", plant_verdict.summary
    assert twin_verdict.status == "refuted", twin_verdict.summary


def test_cmp001_on_the_cpu_computes_tf32_dots_as_a_gpu_does() -> None:
    """A `tl.dot` of fp32 operands at the default precision runs in TF32 on a GPU, and CMP001
    confirmed its error there (deepseek's level2_30, level2_88, level3_9: "the size of the reduced
    precision PRC001 confirms") while the interpreter's exact products refuted it on the CPU.
    CMP001's cases now round such operands as TF32 does: PRC001's plant is confirmed by CMP001
    too, and its IEEE twin still refuted."""
    flags = {"CMP001": [{"row": None}]}
    verdicts = [{v.code: v for v in run_gates(_harness("candidates", CONTROLS["PRC001"][role]), ["CMP001"], flags,
                                              Options(mode="cpu")).verdicts}["CMP001"] for role in ("plant", "twin")]
    assert verdicts[0].status == "confirmed", verdicts[0].summary
    assert verdicts[1].status == "refuted", verdicts[1].summary


def test_a_nan_the_reference_makes_through_a_structural_zero_is_not_the_candidates() -> None:
    """`torch.triu(A @ B)` over upper-triangular inputs: the dense reference carries an injected
    NaN or Inf into C[i, j] through A[i, k] * B[k, j] with B[k, j] a structural zero (QwQ's and
    llama-3.1-405b's level1_14 kernels, which skip that triangle, were confirmed for it on a
    GPU).  The twin computes the product the problem defines (refuted; confirmed before); the
    plant also zeroes the NaN the product itself has (confirmed)."""
    structure = CONTROLS["EXC001"]["structure"]
    flags = {"EXC001": [{"row": None}]}
    plant, twin = ({v.code: v for v in run_gates(_harness("candidates", structure[role]), ["EXC001"], flags,
                                                 Options(mode="cpu")).verdicts}["EXC001"] for role in ("plant", "twin"))
    assert plant.status == "confirmed" and "finite where the reference has NaN" in plant.summary, plant.summary
    assert twin.status == "refuted", twin.summary
    assert "through a product with zero" in twin.summary and "+inf" in twin.summary, twin.summary


def test_a_recurrence_left_to_pytorch_is_the_reference_s_main_computation() -> None:
    """deepseek's level3_38 keeps `nn.LSTM` and writes only the last step's linear layer in
    Triton; RES001 refuted it ("no reference library op"), as `lstm` was in no family of the
    reference's main computation.  The plant does the same (confirmed); the twin runs every
    time step in Triton (refuted)."""
    recurrence = CONTROLS["RES001"]["recurrence"]
    flags = {"RES001": [{"row": None}]}
    plant, twin = ({v.code: v for v in run_gates(_harness("candidates", recurrence[role]), ["RES001"], flags,
                                                 Options(mode="cpu")).verdicts}["RES001"] for role in ("plant", "twin"))
    assert plant.status == "confirmed" and "torch lstm (recurrence)" in plant.summary, plant.summary
    assert twin.status == "refuted" and "lstm_step_kernel" in twin.summary, twin.summary


def test_a_refutation_at_scaled_sizes_says_so() -> None:
    """On the CPU the problem's sizes are scaled down: a refutation there covers those sizes,
    not the problem's own (deepseek's level2_59 was refuted on the CPU at 64 of 128 rows and
    1024 of 32768 features, and confirmed on a GPU at its own sizes)."""
    row_loop = POWER["ORD001"]["twin"]   # a row sum, correct at every size; 128 × 8192 inputs
    run = run_gates(_harness("candidates", row_loop), ["CMP001"], {"CMP001": [{"row": None}]}, Options(mode="cpu"))
    verdict = {v.code: v for v in run.verdicts}["CMP001"]
    assert verdict.status == "refuted", verdict.summary
    assert verdict.summary.startswith("within the calibrated bound against float64 at scaled sizes ("), verdict.summary


def test_a_race_on_the_last_writer_is_confirmed_by_permuting_programs() -> None:
    """ORD001's `order` plant: several programs store a row's total, each rounded differently;
    the interpreter's permutations change which one stores last.  (On a GPU, the reversed order
    does: test_dynamic_gpu.py.)"""
    flags = {"ORD001": [{"row": None}]}
    order = CONTROLS["ORD001"]["order"]
    verdicts = [{v.code: v for v in run_gates(_harness("candidates", order[role]), ["ORD001"], flags,
                                              Options(mode="cpu")).verdicts}["ORD001"] for role in ("plant", "twin")]
    assert verdicts[0].status == "confirmed" and "permutations" in verdicts[0].summary, verdicts[0].summary
    assert verdicts[1].status == "refuted", verdicts[1].summary


def test_a_gate_without_power_at_the_sizes_it_ran_does_not_refute() -> None:
    """Replaying only the scaled-down case: a row of one block (ORD001), a K far below the
    problem's (PRC002).  Neither can show the violation: `unconfirmed`, saying why."""
    from kanalyze.dynamic.cases import Case, Run

    ord_plant = _harness("candidates", POWER["ORD001"]["plant"])
    runs = [Run(order_seed=None)] + [Run(order_seed=s) for s in range(1, 5)]
    scaled = Case("ORD001/runs", "ORD001", {"batch_size": 128, "dim": 512}, runs=runs)
    [verdict] = [v for v in run_gates(ord_plant, ["ORD001"], options=Options(mode="cpu"), cases=[scaled]).verdicts
                 if v.code == "ORD001"]
    assert verdict.status == "unconfirmed" and "at most 1 programs add to any one address" in verdict.summary

    prc_twin = _harness("candidates", POWER["PRC002"]["twin"])
    short = Case("PRC002/base/original", "PRC002", {"M": 128, "K": 256, "N": 128}, seed=9,
                 distribution="common_mean")
    [verdict] = [v for v in run_gates(prc_twin, ["PRC002"], options=Options(mode="cpu"), cases=[short]).verdicts
                 if v.code == "PRC002"]
    assert verdict.status == "unconfirmed" and "no case ran the reduction at the problem's own length" in verdict.summary
    assert "K=2048" in verdict.summary


def test_a_parameter_the_backward_never_reaches_is_confirmed() -> None:
    """CMP002 compares the gradients of the parameters the candidate shares with the reference:
    a bias whose gradient the custom backward drops (None) would never learn, though every value
    and every input gradient is right; the twin that returns it is refuted, its parameter compared."""
    verdicts = {}
    for name in ("level1_problem7_bias_relu_autograd_frozen_bias.py", "level1_problem7_bias_relu_autograd.py"):
        gate_run = run_gates(_harness("candidates", name), ["CMP002"], options=Options(mode="cpu"))
        verdicts[name] = {v.code: v for v in gate_run.verdicts}
    frozen, honest = verdicts.values()
    assert frozen["CMP002"].status == "confirmed" and "`bias` gets no gradient" in frozen["CMP002"].summary, frozen
    assert honest["CMP002"].status == "refuted" and "and 1 parameter match" in honest["CMP002"].summary, honest


def test_check_timeout_gives_each_candidate_its_own_deadline(monkeypatch) -> None:
    """`check --dynamic --timeout S`: each candidate's gates get a deadline S seconds after they
    start (runner.Options `deadline`; what a later session does with it: test_held_budget.py);
    without it, none."""
    import time

    from kanalyze.dynamic import confirm

    seen = []
    real = confirm.run_gates

    def spy(harness, codes, flags, options):
        seen.append((time.perf_counter(), options.deadline))
        return real(harness, codes, flags, options)

    monkeypatch.setattr(confirm, "run_gates", spy)
    candidate = KB / "candidates" / "level1_problem6_leaky_relu.py"
    for extra in (["--timeout", "30"], []):
        code = main(["check", str(candidate), "--isolated", "--gates", "CMP001", "--device", "cpu",
                    "--kernelbench", str(KB), "-q", *extra])
        assert code in (0, 1)
    (started, deadline), (_, none) = seen
    assert none is None and 29.0 < deadline - started <= 30.0
