"""What the worker reads its results and writes its records with cannot be replaced by the candidate.

A candidate that replaces `json.dump` rewrote the worker's record of its call (its torch
calls dropped, a kernel launch made up: RES001 was refuted); one that replaces
`torch.Tensor.numpy`, or leaves a torch function mode of its own on the stack, put back the
inputs it overwrote before MEM002 read them (refuted).  The worker now writes with
sandbox/sealed_io.py, and a replacement, a mode left behind, or a hook through which the
candidate's code runs inside the worker's (a profile function rewrote the record from the
encoder's own frame, an audit hook from the frames of the worker's file writes) is a broken
seal (writers.py, recording.py): INT001 confirmed, every other verdict `unconfirmed`.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest

from kanalyze.dynamic.sandbox import sealed_io

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, float("nan"), float("inf"), -float("inf"), None, True, False, "é\n\"x"],
     "b": {"c": 1e-40, 3: 4, 2.5: 1, None: 2, True: 3}, "t": (1, 2)},
    collections.Counter(kernel=3), [], {}, "", 0, -0.0, 1e300, 2 ** 100,
])
def test_records_are_written_as_json_writes_them(value) -> None:
    assert sealed_io.dumps(value) == json.dumps(value)


def test_what_json_cannot_write_is_refused_too() -> None:
    with pytest.raises(TypeError):
        sealed_io.dumps({"x": object()})
    with pytest.raises(TypeError):
        json.dumps({"x": object()})


@pytest.mark.parametrize("array", [
    np.arange(7, dtype=np.float32), np.zeros((0, 3)), np.array(3.5), np.arange(12).reshape(3, 4).T,
    np.ones((2, 3), dtype=np.uint16), np.array([True, False]), np.arange(10.0)[::3],
])
def test_arrays_are_written_as_numpy_save_writes_them(tmp_path, array) -> None:
    sealed_io.save_npy(str(tmp_path / "ours.npy"), array)
    np.save(tmp_path / "numpy.npy", np.ascontiguousarray(array) if array.ndim else array)
    assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()
    read = np.load(tmp_path / "ours.npy", allow_pickle=False)
    assert read.shape == array.shape and read.dtype == array.dtype and np.array_equal(read, array)


def test_replacing_json_or_numpy_after_import_changes_nothing_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(json, "dumps", lambda *a, **k: "{}")
    monkeypatch.setattr(json.encoder, "encode_basestring_ascii", lambda s: '"forged"')
    monkeypatch.setattr(np, "ascontiguousarray", lambda a: np.zeros_like(a))
    assert sealed_io.dumps({"ops": {"relu": 1}}) == '{"ops": {"relu": 1}}'
    sealed_io.save_npy(str(tmp_path / "x.npy"), np.arange(3.0))
    assert np.load(tmp_path / "x.npy").tolist() == [0.0, 1.0, 2.0]


def test_the_watch_sees_a_replaced_function_a_swapped_code_object_and_changed_keyword_defaults(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from kanalyze.dynamic.writers import WriterWatch

    watch = WriterWatch()
    assert watch.replaced() == []
    original_code = json.dump.__code__
    try:
        json.dump.__code__ = (lambda obj, fp, **kw: None).__code__
        assert any("`json.dump`" in said for said in watch.replaced())
    finally:
        json.dump.__code__ = original_code
    kwdefaults = dict(json.dump.__kwdefaults__)
    try:
        json.dump.__kwdefaults__["cls"] = json.JSONDecoder
        assert any("`json.dump`" in said for said in watch.replaced())
    finally:
        json.dump.__kwdefaults__.clear()
        json.dump.__kwdefaults__.update(kwdefaults)
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, other, non_blocking=False: self, raising=False)
    assert any("`torch.Tensor.copy_`" in said for said in watch.replaced())
    monkeypatch.undo()
    assert watch.replaced() == []


RESULTS = "which kanalyze's worker reads or writes the run's results with"
POISON = "fills fresh memory with the run's sentinel"
MODE_LEFT = "stays on torch's mode stack after its call"
HOOK = "runs inside the worker's own code after its call"


def test_the_watch_sees_profile_and_trace_functions_and_gc_callbacks() -> None:
    import gc
    import sys
    import threading

    pytest.importorskip("torch")
    from kanalyze.dynamic.writers import WriterWatch

    watch = WriterWatch()
    assert watch.replaced() == []
    def callback(*args):
        return None

    profile = sys.getprofile()
    for install, undo, words in ((lambda: sys.setprofile(callback), lambda: sys.setprofile(profile), "sys.setprofile"),
                                 (lambda: threading.settrace(callback), lambda: threading.settrace(None),
                                  "threading.settrace"),
                                 (lambda: gc.callbacks.append(callback), lambda: gc.callbacks.remove(callback),
                                  "gc.callbacks")):
        install()
        try:
            said = watch.replaced()
        finally:
            undo()
        assert any(words in line for line in said), said
    assert watch.replaced() == []


@pytest.mark.parametrize("name,gate,words", [("record_rewriter", "RES001", RESULTS), ("input_restorer", "MEM002", RESULTS),
                                             ("mode_restorer", "MEM002", MODE_LEFT),
                                             ("profile_rewriter", "RES001", HOOK), ("hook_rewriter", "RES001", HOOK),
                                             ("unpoisoned", "MEM001", POISON),
                                             ("level1_problem3_interpreter_unhooked", "PRC001", "Triton's interpreter")])
def test_a_candidate_that_replaces_what_the_worker_reads_or_writes_with_is_int001(name, gate, words) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.runner import Options, run_gates

    path = KB / "hostile" / (f"{name}.py" if name.startswith("level") else f"level1_problem6_{name}.py")
    gate_run = run_gates(find_harness(str(path), kernelbench=str(KB)), [gate], options=Options(mode="cpu"))
    verdicts = {v.code: v for v in gate_run.verdicts}
    assert verdicts["INT001"].status == "confirmed", verdicts
    assert words in verdicts["INT001"].summary, verdicts["INT001"].summary
    assert verdicts[gate].status == "unconfirmed", verdicts[gate]
