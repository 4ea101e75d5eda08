"""The judge's comparisons give what compare.py's numpy gives (sandbox/held.py, held_arrays.py).

On a GPU the judge holds the reference's and the candidate's outputs and compares them on the
device; a verdict must not depend on where that ran.  Each comparison here runs twice on the
same values, once on numpy arrays and once on arrays a store holds (asked through the same
requests the parent sends), across dtypes, non-finite values and sizes past one chunk.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic import compare  # noqa: E402
from kanalyze.dynamic.held_arrays import HeldArray, Judge, Window, windows  # noqa: E402
from kanalyze.dynamic.results import CannotJudge  # noqa: E402
from kanalyze.dynamic.sandbox import held  # noqa: E402
from kanalyze.dynamic.sandbox.transport import Leaf, dtype_name, tensor_to_numpy  # noqa: E402


class InProcessJudge(Judge):
    """The worker's answers, computed in this process (the requests are the parent's own)."""

    def __init__(self, store: held.Store, root: str) -> None:
        super().__init__(None, 10.0, root)
        self.store = store

    def _ask(self, request: dict) -> dict:
        reply = held.answer(self.store, request)
        if reply.get("error"):
            raise CannotJudge(reply["error"])
        self.asked += 1
        return reply


GPU = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                      reason="needs a CUDA device")])


@pytest.fixture(params=["cpu", GPU])
def judge(request, tmp_path, monkeypatch):
    """A store on the CPU, and on a GPU (where the judge's arrays live in a GPU run)."""
    monkeypatch.setattr(held, "CHUNK", 1000)   # several chunks for a few thousand elements
    return InProcessJudge(held.Store(request.param), str(tmp_path))


def both(judge: InProcessJudge, name: str, tensor) -> tuple[Leaf, Leaf]:
    """The same values as a numpy leaf and as a held one."""
    assert judge.store.hold(name, tensor.to(judge.store.device))
    dtype = dtype_name(tensor.dtype)
    return Leaf(tensor_to_numpy(tensor), dtype), Leaf(HeldArray(judge, name, dtype, list(tensor.shape)), dtype)


def same(a, b) -> bool:
    """Equal field by field, NaN equal to NaN."""
    return repr(dataclasses.astuple(a)) == repr(dataclasses.astuple(b))


def values(shape, dtype=torch.float32, seed=0, specials=0.0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    if specials:
        pick = torch.rand(shape, generator=generator)
        x[pick < specials / 3] = float("nan")
        x[(pick >= specials / 3) & (pick < 2 * specials / 3)] = float("inf")
        x[(pick >= 2 * specials / 3) & (pick < specials)] = float("-inf")
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("specials", [0.0, 0.01])
def test_a_value_check_is_the_same_held_or_not(judge, dtype, specials) -> None:
    exact = values((37, 101), torch.float64, seed=1, specials=specials)
    working = exact.to(dtype)
    observed = (exact * (1 + 1e-3 * values((37, 101), torch.float64, seed=2))).to(dtype)
    observed[5, 7] = float("nan")   # a NaN where the reference is finite (or not)
    local = [both(judge, name, t) for name, t in (("o", observed), ("w", working), ("e", exact))]
    for bound in (None, 1e-2):
        for terms in (1, 4096):
            here = compare.check_values(*[pair[0] for pair in local], bound=bound, terms=terms)
            there = compare.check_values(*[pair[1] for pair in local], bound=bound, terms=terms)
            assert same(there, here), (there, here)
    assert compare.calibrated_bound(local[1][1], local[2][1], 64) == compare.calibrated_bound(local[1][0],
                                                                                            local[2][0], 64)


def test_integers_are_compared_exactly_held_or_not(judge) -> None:
    exact = torch.arange(3000, dtype=torch.int64).reshape(30, 100)
    observed = exact.clone()
    observed[29, 99] += 1
    o, w = both(judge, "o", observed), both(judge, "w", exact)
    here = compare.check_values(o[0], w[0], w[0])
    there = compare.check_values(o[1], w[1], w[1])
    assert same(there, here) and not there.ok and there.index == (29, 99) and there.mismatches == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.bool,
                                   torch.complex64])
def test_bitwise_differences_are_the_same_held_or_not(judge, dtype) -> None:
    a = values((4, 1500), torch.float64, seed=3, specials=0.01)
    if dtype == torch.bool:
        a = a > 0
    elif dtype == torch.complex64:
        a = torch.complex(a, a.flip(0)).to(dtype)
    else:
        a = a.to(dtype) if dtype.is_floating_point else torch.nan_to_num(a).mul(100).to(dtype)
    b = a.clone()
    if dtype == torch.bool:
        b[2, 900:910] = ~b[2, 900:910]
    else:
        b[2, 900:910] += 1
        b[3, 5] = float("nan") if dtype.is_floating_point else b[3, 5]
    left, right = both(judge, "a", a), both(judge, "b", b)
    assert compare.bitwise_differences(left[1], right[1]) == compare.bitwise_differences(left[0], right[0])
    assert compare.bitwise_differences(left[1], left[1]) == (0, 0.0, None)


def test_nan_payloads_are_not_differences(judge) -> None:
    a = torch.full((2000,), float("nan"))
    b = a.view(torch.int32).clone()
    b[1500] ^= 1   # another NaN
    left, right = both(judge, "a", a), both(judge, "b", b.view(torch.float32))
    assert compare.bitwise_differences(left[1], right[1]) == compare.bitwise_differences(left[0], right[0]) \
        == (0, 0.0, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
def test_non_finite_classes_are_counted_the_same_held_or_not(judge, dtype) -> None:
    def cast(x):
        return torch.complex(x, torch.zeros_like(x)).to(dtype) if dtype == torch.complex64 else x.to(dtype)

    expected = values((50, 80), torch.float64, seed=4, specials=0.05)
    exact = expected.clone()
    exact[0, :10] = 1.0                          # where the working dtype and float64 disagree
    observed = torch.nan_to_num(expected, nan=0.0)   # a kernel that swallows NaN
    observed[10, 10] = float("inf")
    leaves = [both(judge, name, cast(t)) for name, t in (("o", observed), ("w", expected), ("e", exact))]
    here = compare.class_comparison(*[pair[0] for pair in leaves])
    there = compare.class_comparison(*[pair[1] for pair in leaves])
    assert same(there, here) and there.wrong > 0 and there.left_out > 0 and there.reached
    # Where the reference's class comes through a product with zero (sandbox/dependence.py), the
    # class the product has is accepted too: here finite, in the first 25 rows.
    other = torch.full((50, 80), compare.NO_CLASS, dtype=torch.uint8)
    other[:25] = 0
    marks = both(judge, "z", other)
    here = compare.class_comparison(*[pair[0] for pair in leaves], marks[0])
    there = compare.class_comparison(*[pair[1] for pair in leaves], marks[1])
    assert same(there, here), (there, here)
    assert there.pairs.get("NaN -> finite", 0) == int(torch.isnan(expected[25:]).sum())   # row 0's disagree
    assert there.through_zero == int(torch.isnan(expected[1:25]).sum()) and there.reached


def test_finite_summaries_and_sentinels_are_the_same_held_or_not(judge) -> None:
    x = values((3, 1200), torch.float32, seed=5, specials=0.002)
    local, remote = both(judge, "x", x)
    assert compare.finite_summary(remote) == compare.finite_summary(local)
    clean = both(judge, "c", torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0))
    assert compare.finite_summary(clean[1]) == compare.finite_summary(clean[0]) and compare.finite_summary(clean[1])[0]

    first, second = torch.randn(2, 1500), torch.randn(2, 1500)
    first.view(torch.uint8).view(2, 1500, 4)[1, 1200:1300] = 0xA5   # a tail never written by either run
    second.view(torch.uint8).view(2, 1500, 4)[1, 1200:1300] = 0x5A
    a, b = both(judge, "a", first), both(judge, "b", second)
    assert compare.sentinel_elements(a[1], b[1], 0xA5, 0x5A) == compare.sentinel_elements(a[0], b[0], 0xA5, 0x5A) \
        == (100, (1, 1200))


def test_windows_single_values_and_whole_arrays_come_back_exactly(judge) -> None:
    x = values((40, 500), torch.bfloat16, seed=6)
    local, remote = both(judge, "x", x)
    assert remote.array[17, 3] == local.array[17, 3]
    assert np.array_equal(np.asarray(remote.array), local.array)
    cut = windows({"x": remote.array, "kept": local.array}, [39, 499], 1000)
    assert isinstance(cut["x"], Window) and cut["x"].offset == 19000 and cut["x"].shape == (40, 500)
    assert np.array_equal(cut["x"].values, local.array.reshape(-1)[19000:])
    assert cut["kept"] is local.array


def test_an_array_the_judge_does_not_hold_is_a_reason_not_a_verdict(judge) -> None:
    ghost = Leaf(HeldArray(judge, "gone/out0", "float32", [4]), "float32")
    with pytest.raises(CannotJudge, match="holds no array"):
        compare.check_values(ghost, ghost, ghost)
    assert held.answer(judge.store, {"op": "no-such-op"})["error"]


def test_an_array_neither_held_nor_saved_is_kanalyzes_failure_in_words(judge, tmp_path: Path) -> None:
    """A case's arrays are what the judge holds, then its folder; a name in neither is a reason
    (a CannotJudge that still reads as a KeyError to code that looks names up), never a bare
    `KeyError: 'out0'` that a gate turns into an unexplained failure."""
    from kanalyze.dynamic.held_arrays import with_held
    from kanalyze.dynamic.sandbox.transport import save_arrays

    folder = str(tmp_path / "case")
    save_arrays(folder, {"in0": np.zeros(3, np.float32)})
    both(judge, f"{folder}/out1", values((4,), torch.float32, seed=2))
    arrays = with_held(folder, judge, folder, {"out1": {"dtype": "float32", "shape": [4]}})
    assert arrays["in0"].shape == (3,) and arrays["out1"].shape == (4,) and "out0" not in arrays
    with pytest.raises(CannotJudge, match="could not find the case's array `out0`") as raised:
        arrays["out0"]
    assert isinstance(raised.value, KeyError) and str(raised.value).startswith("kanalyze could not")
    assert arrays.get("out0") is None


def test_a_store_past_its_shares_says_no() -> None:
    store = held.Store("cpu")
    store.host_budget = 1000
    assert store.hold("a", torch.zeros(200))          # 800 bytes
    assert not store.hold("b", torch.zeros(100))      # 400 more: past the share
    store.drop(["a"])
    assert store.hold("b", torch.zeros(100)) and store.host_bytes == 400


def test_a_run_with_the_bits_of_one_held_is_kept_once() -> None:
    """Repeated runs of one case that came back bit for bit the same (ORD001's, ORD002's, MEM001's)
    are kept once under every name; another folder, another dtype or one byte apart is not.
    Dropping one name keeps the array for the others; its bytes go with the last."""
    store = held.Store("cpu")
    values = torch.arange(100, dtype=torch.float32)
    values[3] = float("nan")
    assert store.hold("shared-1/run0_out0", values.clone())
    assert store.hold("shared-1/run1_out0", values.clone())              # the same bits: shared
    other = values.clone()
    other[7] = -other[7] if other[7] != 0 else 1.0
    assert store.hold("shared-1/run2_out0", other)                       # one element apart
    assert store.hold("shared-2/run0_out0", values.clone())              # another case
    assert store.hold("shared-1/run3_out0", values.clone().view(torch.int32))   # another dtype
    assert store.shared == 1 and store.host_bytes == 4 * 400
    assert store.get("shared-1/run0_out0") is store.get("shared-1/run1_out0")
    assert torch.equal(store.get("shared-1/run1_out0").view(torch.int32), values.view(torch.int32))
    assert held.answer(store, {"op": "bits", "a": "shared-1/run0_out0", "b": "shared-1/run1_out0"})["count"] == 0
    assert held.answer(store, {"op": "bits", "a": "shared-1/run0_out0", "b": "shared-1/run2_out0"})["count"] == 1
    store.drop(["shared-1/run0_out0"])
    assert store.host_bytes == 4 * 400 and torch.equal(store.get("shared-1/run1_out0").view(torch.int32),
                                                       values.view(torch.int32))
    store.drop(["shared-1/run1_out0", "shared-1/run2_out0", "shared-2/run0_out0", "shared-1/run3_out0"])
    assert store.host_bytes == 0 and not store.tensors


def test_the_account_says_where_held_arrays_went(tmp_path) -> None:
    """The most held at once, and what neither share could take (the caller saved it to files),
    as the run's account reports them; the account's own question is not counted as the gates'."""
    from kanalyze.dynamic.held_arrays import Judges

    store = held.Store("cpu")
    store.host_budget = 1000
    assert store.hold("a", torch.zeros(200))          # 800 bytes
    assert not store.hold("b", torch.zeros(100))      # refused: 400 bytes to files
    store.drop(["a"])
    assert store.hold("c", torch.zeros(50))
    judges = Judges(True, 10.0, str(tmp_path))
    judges._by_worker[0] = InProcessJudge(store, str(tmp_path))
    account = judges.account()
    assert account["asked"] == 0
    assert (account["held_host_peak"], account["held_device_peak"]) == (800, 0)
    assert (account["held_refused"], account["held_refused_bytes"]) == (1, 400)


KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
PLANTS = (("level1_problem2_tanh_exp_ratio.py", ["EXC001", "CMP001"]),
          ("level1_problem6_leaky_relu_cached_result.py", ["INT001", "MEM002"]),
          ("level1_problem6_leaky_relu_floor_grid.py", ["MEM001"]),
          ("level1_problem11_row_sum_atomic_blocks.py", ["ORD001"]),
          ("level1_problem3_matmul_tf32.py", ["PRC001"]),
          ("level1_problem12_matmul_fp16_acc.py", ["PRC002"]),
          ("level1_problem10_scale_flush_denormals.py", ["EXC002"]),
          ("level1_problem6_leaky_relu_autograd_wrong_backward.py", ["CMP002"]),
          ("level1_problem7_bias_relu_inplace.py", ["MEM002"]),
          ("level1_problem6_leaky_relu.py", ["all"]))


@pytest.mark.parametrize("mode", ["cpu", "cpu-delivered", GPU])
def test_a_session_judges_held_arrays_as_it_judges_saved_ones(monkeypatch, mode) -> None:
    """Plants of every value gate, and a correct twin under every gate, with the outputs held by
    the judge and compared there (a GPU run's default; in host memory on the CPU), and with them
    saved: the same verdicts, word for word.  Held, no gate reads a whole array: only
    summaries and the witnesses' windows come back."""
    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    if mode == "cpu-delivered":   # the inputs handed over too, as on a GPU (delivery.py)
        monkeypatch.setenv("KANALYZE_DELIVER_INPUTS", "1")
        mode = "cpu"
    verdicts, judged = {}, {}
    for hold in ("0", "1"):
        monkeypatch.setenv("KANALYZE_JUDGE_HELD", hold)
        for name, codes in PLANTS:
            REFERENCES.clear()
            codes = sorted(gates_by_code()) if codes == ["all"] else codes
            harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
            run = run_gates(harness, codes, options=Options(mode=mode, limits=Limits(case_seconds=120)))
            # (how many elements two runs of float atomics differ in is itself the nondeterminism ORD001 shows)
            verdicts.setdefault(hold, []).extend(sorted(
                (name, v.code, v.status, v.summary if v.code != "ORD001" else "") for v in run.verdicts))
            judged[(hold, name)] = run.environment.get("judge")
    assert verdicts["1"] == verdicts["0"], [pair for pair in zip(verdicts["0"], verdicts["1"]) if pair[0] != pair[1]]
    statuses = {(name, code): status for name, code, status, _ in verdicts["1"]}
    assert mode != "cpu" or all(statuses[(name, code)] == "confirmed" for name, codes in PLANTS[:-1]
                                for code in codes if code != "MEM002"), statuses
    for name, _ in PLANTS:
        assert judged[("0", name)] is None
        assert judged[("1", name)]["asked"] > 0 and judged[("1", name)]["whole_arrays"] == 0, (name, judged)


def test_flushes_to_zero_are_counted_the_same_held_or_not(judge) -> None:
    expected = values((20, 300), torch.float32, seed=7) * 1e-39   # subnormal results
    observed = expected.clone()
    observed[3, 100:150] = 0.0
    o, e = both(judge, "o", observed), both(judge, "e", expected)
    assert compare.flushed_to_zero(o[1], e[1]) == compare.flushed_to_zero(o[0], e[0])
    assert compare.flushed_to_zero(o[1], e[1])[1:] == (50, (3, 100))


def test_a_replay_whose_cases_all_run_ahead_is_judged_held(tmp_path, monkeypatch) -> None:
    """A witness replays its cases alone, with no baseline: every reference is computed by the
    second reference worker, and the judge that takes them is the worker that read the
    candidate's side.  The plant's witness fails again (1) with its arrays held."""
    import shutil

    from kanalyze.cli import main

    (tmp_path / "level1").mkdir()
    shutil.copy(KB / "level1" / "12_matmul_long_k.py", tmp_path / "level1")
    shutil.copy(KB / "candidates" / "level1_problem12_matmul_fp16_acc.py", tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_JUDGE_HELD", "1")
    assert main(["check", ".", "--dynamic", "--kernelbench", ".", "--device", "cpu", "--no-cache", "--output-format",
                 "json", "--select", "PRC002"]) == 1
    witness = next((tmp_path / ".kanalyze" / "witnesses").glob("*PRC002*.json"))
    assert main(["replay", str(witness), "--device", "cpu"]) == 1


def test_what_a_gpu_case_returned_is_held_and_the_rest_saved(tmp_path) -> None:
    """What a candidate's worker shared on the device: its outputs and the inputs after the run
    (which MEM002 compares with the judge's own copy of the inputs) go to the judge to hold
    (adopt); anything else its record does not name as returned is saved as before (ingest)."""
    from types import SimpleNamespace

    from kanalyze.dynamic.held_arrays import Judges
    from kanalyze.dynamic.reference_jobs import Reader
    from kanalyze.dynamic.sandbox.process import Outcome

    session = SimpleNamespace(spec={"judge_held": True}, root=str(tmp_path), judges=Judges(True, 10.0, str(tmp_path)))
    reader = Reader(session, judge=object())
    asked = []

    def answer(job):
        asked.append(job)
        if job["kind"] == "adopt":
            return {"held": {name: {"dtype": "float32", "shape": [4]} for name in job["exported"]}}
        return {"error": None}

    reader._ask_judge = answer
    meta = {"status": "ok", "runs": [{"output": {"prefix": "r0_out", "dtypes": ["float32"]},
                                      "inputs_after": [{"kind": "tensor", "key": "r0_in0", "dtype": "float32"}]}],
            "shared": {"r0_out0": {"d": 1}, "r0_in0": {"d": 2}, "scratch0": {"d": 3}}}
    outcome = reader.read(0, Outcome("done", meta=meta, arrays=str(tmp_path / "own")))
    adopt, ingest = [j for j in asked if j["kind"] == "adopt"], [j for j in asked if j["kind"] == "ingest"]
    assert [sorted(j["exported"]) for j in adopt] == [[f"{tmp_path}/shared-1/r0_in0", f"{tmp_path}/shared-1/r0_out0"]]
    assert [sorted(j["tensors"]) for j in ingest] == [["scratch0"]]
    assert isinstance(outcome.arrays["r0_out0"], HeldArray) and outcome.meta["status"] == "ok"


def test_arrays_handed_over_in_host_memory_go_through_shared_memory_not_the_disk(tmp_path, monkeypatch) -> None:
    """The second reference worker's arrays that its device share could not keep are handed to the
    judge through a folder in shared memory where one is given (a GPU run), and into their case's
    folder where that folder has no room, or where none is given; the judge holds the same values."""
    from kanalyze.dynamic.sandbox import transport

    cases, memory = tmp_path / "run", tmp_path / "shm"
    second = held.Store("cpu")
    first, other = torch.arange(12, dtype=torch.float32), torch.ones(3, dtype=torch.float64)
    assert second.hold(f"{cases}/case-1.arrays/out0", first)
    assert second.hold(f"{cases}/case-2.arrays/out0", other)
    real_save = transport.save_arrays

    def small_shared_memory(folder, arrays):   # room for the first array only
        if str(folder).startswith(str(memory)) and any(a.dtype == np.float64 for a in arrays.values()):
            raise transport.NoRoom("no room")
        real_save(folder, arrays)

    monkeypatch.setattr(held, "save_arrays", small_shared_memory)
    handed = held.hand_over(second, str(memory))
    places = {name: where["folder"] for name, where in handed["saved"].items()}
    assert places[f"{cases}/case-1.arrays/out0"].startswith(str(memory))       # in RAM
    assert places[f"{cases}/case-2.arrays/out0"] == f"{cases}/case-2.arrays"   # no room there: its case's folder
    assert not [p for p in memory.iterdir() if not any(p.iterdir())]          # nothing half-made left
    judge = held.Store("cpu")
    assert held.adopt(judge, {}, handed["saved"], 1 << 20)["held"].keys() == handed["saved"].keys()
    assert torch.equal(judge.get(f"{cases}/case-1.arrays/out0"), first)
    assert torch.equal(judge.get(f"{cases}/case-2.arrays/out0"), other)
    assert not (cases / "case-1.arrays").exists()                              # never on the disk
    again = held.hand_over(second)                                              # none given: the cases' folders
    assert {w["folder"] for w in again["saved"].values()} == {f"{cases}/case-1.arrays", f"{cases}/case-2.arrays"}


def test_a_summary_asked_again_is_the_one_given_even_once_the_arrays_are_let_go_of(tmp_path) -> None:
    """Held arrays never change: the parent keeps every summary and window the judge gave, so a gate
    judged as its cases ended and again at the session's end asks the judge once (streaming.py),
    even where the judge let go of the arrays in between; a question no one asked before is
    kanalyze's failure then, never an answer."""
    store = held.Store("cpu")
    values = torch.arange(8, dtype=torch.float32)
    store.hold("c/out0", values.clone())
    store.hold("c/ref0", values + 1)
    judge = InProcessJudge(store, str(tmp_path))
    request = {"op": "bits", "a": "c/out0", "b": "c/ref0"}
    first = judge.ask(request)
    window = judge.fetch("c/out0", 2, 3)
    judge.drop(["c/out0", "c/ref0", "c/gone"])
    assert not store.tensors and store.host_bytes == 0 and (judge.dropped, judge.dropped_bytes) == (2, 64)
    assert judge.ask(dict(reversed(list(request.items())))) == first and judge.asked == 2   # (the bits, the window)
    assert judge.fetch("c/out0", 2, 3).tolist() == window.tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(CannotJudge, match="holds no array"):
        judge.ask({"op": "finite", "name": "c/out0"})


def test_arrays_the_second_reference_worker_took_with_it_are_said_lost(monkeypatch) -> None:
    """The second reference worker ends after computing its cases, before it hands over what it
    held (its outputs too large to withhold were saved at once, as at a problem's real size):
    those cases' held arrays are gone with it.  The gates that read them say kanalyze lost them
    (unconfirmed, with how the worker ended), never a verdict and never `KeyError: 'out0'`."""
    from kanalyze.dynamic.ahead import SecondReference
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, run_gates
    from kanalyze.dynamic.sandbox.process import Limits

    finish = SecondReference.finish

    def finish_then_end(self):
        outcomes = finish(self)
        for outcome in outcomes.values():   # as at a real size: what it did not hold, saved at once
            outcome.meta["withheld"] = False
        if self.worker is not None:
            self.worker.kill()
        return outcomes

    monkeypatch.setattr(SecondReference, "finish", finish_then_end)
    monkeypatch.setenv("KANALYZE_JUDGE_HELD", "1")
    REFERENCES.clear()
    harness = find_harness(str(KB / "candidates" / "level1_problem12_matmul_fp16_acc.py"), kernelbench=str(KB))
    run = run_gates(harness, ["PRC002"], options=Options(mode="cpu", limits=Limits(case_seconds=120)))
    REFERENCES.clear()
    (verdict,) = run.verdicts
    assert verdict.status == "unconfirmed", verdict
    assert "reference worker did not hand over" in verdict.summary and "KeyError" not in verdict.summary, verdict
