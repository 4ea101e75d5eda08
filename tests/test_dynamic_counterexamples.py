"""MEM003/MEM004 hand-off: the z3 counterexample becomes a run that confirms or refutes the flag.

`check --dynamic` on the bounds fixtures (no problem module, no harness): every
MEM003 flag is confirmed by running its own counterexample under Triton's
interpreter, with a witness that replays (exit 1) until the kernel is fixed
(exit 0); a counterexample pointed at a clean kernel is refuted.  MEM004's
counterexamples need a GPU with tens of GiB: without one they stay `flagged`.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.dynamic.counterexample import call_of
from kanalyze.dynamic.harness import kernel_harness
from kanalyze.dynamic.runner import Options, cuda_present, run_gates

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "triton").glob("mem00[34]_*.py"))

pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounds")
    for fixture in FIXTURES:
        shutil.copy(fixture, folder)
    out = io.StringIO()  # capsys is per test; the check runs once for the module
    with contextlib.redirect_stdout(out):
        code = main(["check", str(folder), "--select", "MEM003,MEM004", "--dynamic", "--device", "cpu",
                     "--no-cache", "--output-format", "json", "--witness-dir", str(folder / "witnesses")])
    assert code == 1
    return folder, json.loads(out.getvalue())


def test_every_mem003_flag_is_confirmed_from_its_counterexample(checked) -> None:
    _, findings = checked
    mem003 = [f for f in findings if f["code"] == "MEM003"]
    assert len(mem003) >= 12
    for finding in mem003:
        where = f"{finding['filename']}:{finding['location']['row']}"
        assert finding["status"] == "confirmed", (where, finding["evidence"].get("gate_result"))
        result = finding["evidence"]["gate_result"]
        assert "out-of-bounds" in result and finding["evidence"]["parameter"] in result, (where, result)
        assert finding["witness"] and Path(finding["witness"]["path"]).exists()


def test_each_flag_gets_its_own_access_not_a_neighbours(checked) -> None:
    _, findings = checked
    for finding in (f for f in findings if f["code"] == "MEM003"):
        example = finding["evidence"]["counterexample"]
        result = finding["evidence"]["gate_result"]
        assert f"out-of-bounds {example['access']} in `{example['kernel']}`" in result, result
        assert f"of `{example['parameter']}`" in result, result


def test_mem004_stays_flagged_without_a_gpu(checked) -> None:
    if cuda_present():
        pytest.skip("a GPU is here: MEM004's counterexamples run on it (tests/test_dynamic_gpu.py)")
    _, findings = checked
    mem004 = [f for f in findings if f["code"] == "MEM004"]
    assert mem004
    for finding in mem004:
        assert finding["status"] == "flagged"
        assert "needs a GPU" in finding["evidence"]["gate_result"]


def test_witness_replays_until_the_mask_is_fixed(checked) -> None:
    folder, findings = checked
    flag = next(f for f in findings if f["code"] == "MEM003" and f["kernel"] == "copy_le_kernel"
                and f["evidence"]["access"] == "load")
    witness = flag["witness"]["path"]
    assert main(["replay", witness]) == 1
    fixture = folder / "mem003_masks_1d.py"
    text = fixture.read_text()
    assert "mask = offs <= n" in text
    fixture.write_text(text.replace("mask = offs <= n", "mask = offs < n"))
    try:
        assert main(["replay", witness]) == 0
    finally:
        fixture.write_text(text)


def test_a_counterexample_aimed_at_a_clean_kernel_is_refuted(checked) -> None:
    folder, findings = checked
    flag = next(f for f in findings if f["code"] == "MEM003" and f["kernel"] == "copy_le_kernel"
                and f["evidence"]["access"] == "load")
    example = dict(flag["evidence"]["counterexample"], kernel="copy_lt_kernel", wrapper="copy_lt")
    path = str(folder / "mem003_masks_1d.py")
    run = run_gates(kernel_harness(path, "copy_lt_kernel"), ["MEM003"],
                    {"MEM003": [{"row": 1, "kernel": "copy_lt_kernel", "counterexample": example}]},
                    Options(mode="cpu"))
    [verdict] = run.verdicts
    assert verdict.status == "refuted", verdict.summary
    assert verdict.rows == [1] and "copy_lt(x: [1])" in verdict.summary


EXAMPLE = {"kernel": "k", "wrapper": "f", "wrapper_params": [{"name": "x", "default": False},
                                                               {"name": "scale", "default": True}],
           "inputs": {"x": [4, 3]}, "symbols": {"x.shape[0]": 4}, "sizes": {"n": 12}, "constexprs": {"BLOCK": 16},
           "shapes": {"x": [4, 3], "out": [None]}, "pointers": {"x_ptr": "x", "out_ptr": "out"}, "grid": [1],
           "config": None}


def test_call_prefers_the_wrapper_and_leaves_defaults_alone() -> None:
    assert call_of(EXAMPLE) == {"route": "wrapper", "function": "f", "args": [{"name": "x", "shape": [4, 3]}]}


@pytest.mark.parametrize("change", [{"config": 1}, {"wrapper": "ModelNew.forward"},
                                    {"wrapper_params": [{"name": "x", "default": False},
                                                        {"name": "eps", "default": False}]}])
def test_call_launches_the_kernel_where_the_wrapper_cannot_be_called(change) -> None:
    call = call_of({**EXAMPLE, **change})
    assert call == {"route": "kernel", "function": "k", "grid": [1], "tensors": {"x_ptr": [4, 3], "out_ptr": [None]},
                    "values": {"n": 12, "BLOCK": 16}, "placeholders": []}


def test_a_pointer_the_counterexample_does_not_size_is_a_named_stand_in() -> None:
    """Launched with a one-element tensor, and named, so that the gates do not pin a fault or an
    out-of-bounds access through it on the flagged offset."""
    example = {**EXAMPLE, "wrapper": None, "pointers": {**EXAMPLE["pointers"], "bias_ptr": "bias"}}
    call = call_of(example)
    assert call["tensors"]["bias_ptr"] == [1] and call["placeholders"] == ["bias_ptr"]


def test_no_call_without_a_grid() -> None:
    assert call_of({**EXAMPLE, "wrapper": None, "grid": None}) is None
    assert call_of(None) is None
