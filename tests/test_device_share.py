"""What crosses between the workers: folders of arrays, and device descriptors from a candidate.

The CPU half runs everywhere: arrays saved as `.npy` folders and read back
memory-mapped, refusing what is not an array; descriptors that a candidate's
process could forge, refused before anything is mapped.  The GPU half
(`pytest -m gpu`) hands a real device tensor from one process to another
through CUDA IPC and refuses a descriptor that claims more memory than the
handle maps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kanalyze.dynamic.runner import cuda_present
from kanalyze.dynamic.sandbox.transport import ArrayFolder, save_arrays

ROOT = Path(__file__).resolve().parent.parent


def test_arrays_round_trip_through_a_folder(tmp_path: Path) -> None:
    arrays = {"out0": np.arange(12, dtype=np.float32).reshape(3, 4), "bits": np.array([1, 2], dtype=np.uint16),
              "empty": np.zeros((0, 5))}
    save_arrays(str(tmp_path / "case-0.arrays"), arrays)
    folder = ArrayFolder(str(tmp_path / "case-0.arrays"))
    assert sorted(folder) == ["bits", "empty", "out0"]
    assert isinstance(folder["out0"], np.memmap)     # read when looked at, not copied
    assert np.array_equal(folder["out0"], arrays["out0"]) and folder["empty"].shape == (0, 5)
    loaded = ArrayFolder(str(tmp_path / "case-0.arrays")).load()
    assert not isinstance(loaded["out0"], np.memmap) and np.array_equal(loaded["bits"], arrays["bits"])


def test_a_folder_refuses_what_is_not_an_array(tmp_path: Path) -> None:
    folder = tmp_path / "case-1.arrays"
    save_arrays(str(folder), {"good": np.ones(4)})
    np.save(folder / "objects.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    (folder / "short.npy").write_bytes((folder / "good.npy").read_bytes()[:90])   # header cut off
    (folder / "../escape.npy").write_bytes(b"")
    read = ArrayFolder(str(folder))
    assert "escape" not in read
    with pytest.raises(ValueError):
        read["objects"]        # nothing is unpickled
    with pytest.raises(ValueError):
        read["short"]
    with pytest.raises(ValueError):
        save_arrays(str(folder), {"../x": np.ones(1)})
    assert ArrayFolder(str(tmp_path / "missing")) == {}


def _descriptor(**changes) -> dict:
    good = {"device": 0, "handle": "00" * 64, "storage_bytes": 64, "storage_offset": 0, "ref_handle": "2f74",
            "ref_offset": 0, "event": "", "event_sync": False, "dtype": "float32", "shape": [4, 4], "offset": 0}
    return {**good, **changes}


@pytest.mark.parametrize("changes, says", [
    ({"shape": "4x4"}, "'shape' is not a list"),
    ({"shape": [4, -1]}, "not a list of sizes"),
    ({"dtype": "object"}, "unknown dtype"),
    ({"handle": "zz" * 64}, "not a handle"),
    ({"handle": "ab" * 1000}, "not a handle"),
    ({"storage_bytes": 1 << 60}, "out of range"),
    ({"offset": True}, "'offset' is not a int"),
    ({"shape": [16], "storage_bytes": 32}, "does not fit its storage"),
])
def test_forged_descriptors_are_refused_before_anything_is_mapped(changes, says) -> None:
    torch = pytest.importorskip("torch")
    from kanalyze.dynamic.sandbox import device_share

    if not torch.cuda.is_available() and "fit its storage" in says:
        pytest.skip("the size check comes after the device check")
    with pytest.raises(device_share.Refused, match=says.replace("(", r"\(")):
        device_share.read(_descriptor(**changes))


def test_a_descriptor_for_a_device_that_is_not_there_is_refused() -> None:
    torch = pytest.importorskip("torch")
    from kanalyze.dynamic.sandbox import device_share

    with pytest.raises(device_share.Refused, match="no CUDA device"):
        device_share.read(_descriptor(device=torch.cuda.device_count()))


def test_save_shared_reports_a_refusal_instead_of_raising(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from kanalyze.dynamic.sandbox.device_share import save_shared

    why = save_shared({"r0_out0": _descriptor(dtype="object")}, str(tmp_path / "x"), 1 << 20)
    assert why and "refused" in why and "unknown dtype" in why
    assert "not named" in save_shared(["x"], str(tmp_path / "y"), 1 << 20)


# ---------------------------------------------------------------- on a GPU

EXPORTER = textwrap.dedent("""
    import json, sys
    import torch
    from kanalyze.dynamic.sandbox.device_share import export
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda").reshape(1024, 1024) * 0.5
    y = x[1:].contiguous()
    print(json.dumps({"x": export(x), "y": export(y)}), flush=True)
    sys.stdin.readline()   # alive until the reader is done
""")


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_present(), reason="needs a CUDA device")
def test_a_device_tensor_crosses_processes_and_a_lie_about_its_size_is_refused() -> None:
    import torch

    from kanalyze.dynamic.sandbox import device_share

    child = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        shared = json.loads(child.stdout.readline())
        x = device_share.read(shared["x"])
        expected = torch.arange(1 << 20, dtype=torch.float32, device="cuda").reshape(1024, 1024) * 0.5
        assert torch.equal(x, expected)
        assert torch.equal(device_share.read(shared["y"]), expected[1:])
        # More than the allocation holds: the storage size is a lie the driver exposes.
        forged = {**shared["x"], "storage_bytes": 1 << 36, "shape": [1 << 34]}
        with pytest.raises(device_share.Refused, match="outside the device allocation"):
            device_share.read(forged)
    finally:
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=30)


BUFFERS = textwrap.dedent("""
    import json, sys
    import torch
    from kanalyze.dynamic.sandbox.device_share import export
    x = torch.empty(1000, 1000, dtype=torch.float32, device="cuda")
    flags = torch.empty(7, dtype=torch.bool, device="cuda")
    print(json.dumps({"x": export(x), "flags": export(flags)}), flush=True)
    sys.stdin.readline()   # filled by the other process
    expected = torch.arange(10 ** 6, dtype=torch.float32, device="cuda").reshape(1000, 1000) / 3
    print(json.dumps({"x": bool(torch.equal(x, expected)), "flags": flags.tolist()}), flush=True)
""")


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_present(), reason="needs a CUDA device")
def test_inputs_are_written_into_buffers_another_process_allocated() -> None:
    """A candidate's worker allocates its inputs' buffers and sends their handles; the reference
    side writes into them (delivery.py): nothing of its own memory is mapped by the other."""
    import torch

    from kanalyze.dynamic.sandbox import device_share

    child = subprocess.Popen([sys.executable, "-c", BUFFERS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        handles = json.loads(child.stdout.readline())
        device_share.write(handles["x"], torch.arange(10 ** 6, dtype=torch.float32, device="cuda").reshape(1000, 1000) / 3)
        device_share.write(handles["flags"], torch.tensor([True, False] * 3 + [True], device="cuda"))
        with pytest.raises(device_share.Refused, match="a buffer of float32"):   # not the input it holds
            device_share.write(handles["x"], torch.zeros(1000, 999, device="cuda"))
        child.stdin.write("\n")
        child.stdin.flush()
        seen = json.loads(child.stdout.readline())
        assert seen == {"x": True, "flags": [True, False] * 3 + [True]}
    finally:
        child.kill()
        child.wait(timeout=30)
