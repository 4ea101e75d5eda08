"""A candidate's device tensors and the reference worker, through CUDA IPC (imports torch).

Both ways, the memory is the candidate's: its outputs are read from it (`read`), and its
inputs are written into buffers it allocated (`write`, delivery.py).  No memory of the
reference worker's is ever exported.

On a GPU, what the candidate returned never goes through a file in the
candidate's process: its worker copies each output into a tensor of its own
(`DeviceArrays`), exports it (`export`: the CUDA IPC handle of its memory, as
`torch.multiprocessing` shares CUDA tensors, written as plain JSON), and keeps
it alive until the parent has had the reference worker read it (`read`) and
acknowledged the case.  A candidate's file-size limit therefore never meets a
4 GiB output, and the parent reads the arrays from the reference worker,
which the candidate does not run in.

The descriptor comes from the candidate's process, so the reading side trusts
none of it: every field is type-checked, the tensor is rebuilt contiguous from
its shape alone (no strides from the other side), and the span it reads must
lie inside the one device allocation the handle maps (asked of the CUDA
driver), or it is refused.  A refused descriptor is kanalyze's failure to read
the case (`unconfirmed`), never a verdict against or for the candidate.
"""

from __future__ import annotations

import ctypes
import math

import torch

from kanalyze.dynamic.sandbox.transport import dtype_name

_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
           "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"}
MAX_HANDLE_HEX = 512


class DeviceArrays(dict):
    """A candidate's arrays on a GPU: device tensors (copies of what it returned), exported at the
    end of the case instead of being saved to files.  `any_device`: tensors on the CPU are kept as
    tensors too (the reference's outputs for its judge to hold: held.py)."""

    any_device = False


def put(arrays: dict, key: str, tensor) -> int:
    """Keep `tensor`'s values under `key` (a copy on the device for DeviceArrays, else a numpy
    array); returns its size in bytes."""
    from kanalyze.dynamic.sandbox.transport import tensor_to_numpy

    if isinstance(arrays, DeviceArrays) and (tensor.device.type == "cuda" or arrays.any_device):
        kept = tensor.detach().contiguous().clone()
        arrays[key] = kept
        return kept.numel() * kept.element_size()
    arrays[key] = array = tensor_to_numpy(tensor)
    return int(array.nbytes)


def export(tensor) -> dict:
    """The CUDA IPC descriptor of a contiguous device tensor (the caller keeps it alive)."""
    storage = tensor.untyped_storage()
    (device, handle, storage_bytes, storage_offset, ref_handle, ref_offset, event, event_sync) = \
        storage._share_cuda_()
    return {"device": int(device), "handle": bytes(handle).hex(), "storage_bytes": int(storage_bytes),
            "storage_offset": int(storage_offset), "ref_handle": bytes(ref_handle).hex(),
            "ref_offset": int(ref_offset), "event": bytes(event).hex() if event else "",
            "event_sync": bool(event_sync), "dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape),
            "offset": int(tensor.storage_offset())}


class Refused(ValueError):
    """A descriptor that kanalyze will not read."""


def read(descriptor) -> torch.Tensor:
    """A copy, in this process's memory on the device, of the tensor a descriptor names."""
    return _mapped(descriptor).clone()


def mapped(descriptor) -> torch.Tensor:
    """The tensor a descriptor names, mapped into this process, not copied: only from a trusted
    exporter that keeps it alive, and never changes it, while this process reads it (the
    second reference worker, until its session closes)."""
    return _mapped(descriptor)


def write(descriptor, value: torch.Tensor) -> None:
    """Copy `value` into the tensor a descriptor names: a candidate's worker handing over a buffer
    of its own for its inputs (sandbox/delivery.py).  Only the span of that one tensor is
    written, inside the allocation the handle maps, and only where its dtype and shape are
    `value`'s; the copy is complete on return."""
    d = _checked(descriptor)
    if d["dtype"] != dtype_name(value.dtype) or list(value.shape) != d["shape"]:
        raise Refused(f"a buffer of {d['dtype']}{d['shape']} for a {dtype_name(value.dtype)}{list(value.shape)} input")
    if value.numel():
        _mapped(d).copy_(value)
        torch.cuda.synchronize()


def _mapped(descriptor) -> torch.Tensor:
    """The tensor a descriptor names, mapped into this process (no copy)."""
    d = _checked(descriptor)
    item = torch.empty((), dtype=getattr(torch, d["dtype"])).element_size()
    numel = math.prod(d["shape"])
    start, span = d["offset"] * item, numel * item
    if start + span > d["storage_bytes"]:
        raise Refused(f"a tensor of {span} bytes at byte {start} does not fit its storage of "
                      f"{d['storage_bytes']} bytes")
    if numel == 0:
        return torch.empty(d["shape"], dtype=getattr(torch, d["dtype"]), device=f"cuda:{d['device']}")
    torch.cuda._lazy_init()
    storage = torch.UntypedStorage._new_shared_cuda(
        d["device"], bytes.fromhex(d["handle"]), d["storage_bytes"], d["storage_offset"],
        bytes.fromhex(d["ref_handle"]), d["ref_offset"], bytes.fromhex(d["event"]) if d["event"] else None,
        d["event_sync"])
    base, size = _allocation(storage.data_ptr())
    if storage.data_ptr() < base or storage.data_ptr() + start + span > base + size:
        raise Refused(f"the tensor's {span} bytes lie outside the device allocation its handle maps "
                      f"({size} bytes)")
    view = torch.empty(0, dtype=getattr(torch, d["dtype"]), device=f"cuda:{d['device']}")
    view.set_(storage, d["offset"], d["shape"], _contiguous_strides(d["shape"]))
    return view


def _checked(descriptor) -> dict:
    if not isinstance(descriptor, dict):
        raise Refused("not a descriptor")
    want = {"device": int, "handle": str, "storage_bytes": int, "storage_offset": int, "ref_handle": str,
            "ref_offset": int, "event": str, "event_sync": bool, "dtype": str, "shape": list, "offset": int}
    for name, kind in want.items():
        value = descriptor.get(name)
        if type(value) is not kind:
            raise Refused(f"the descriptor's {name!r} is not a {kind.__name__}")
    if descriptor["dtype"] not in _DTYPES:
        raise Refused(f"unknown dtype {descriptor['dtype']!r}")
    if not all(type(n) is int and 0 <= n < 2 ** 40 for n in descriptor["shape"]) or len(descriptor["shape"]) > 16:
        raise Refused("a shape that is not a list of sizes")
    for name in ("device", "storage_bytes", "storage_offset", "ref_offset", "offset"):
        if not 0 <= descriptor[name] < 2 ** 48:
            raise Refused(f"the descriptor's {name!r} is out of range")
    for name in ("handle", "ref_handle", "event"):
        text = descriptor[name]
        if len(text) > MAX_HANDLE_HEX or any(c not in "0123456789abcdef" for c in text) or len(text) % 2:
            raise Refused(f"the descriptor's {name!r} is not a handle")
    if descriptor["device"] >= torch.cuda.device_count():
        raise Refused(f"no CUDA device {descriptor['device']}")
    return descriptor


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return list(reversed(strides))


def _allocation(pointer: int) -> tuple[int, int]:
    """(base, size) of the device allocation holding `pointer`, from the CUDA driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise Refused(f"cannot ask the CUDA driver where the tensor lies: {exc}") from exc
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    code = driver.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer))
    if code != 0:
        raise Refused(f"the CUDA driver knows no allocation at the tensor's address (error {code})")
    return base.value, size.value


def save_shared(descriptors, folder: str, max_bytes: int) -> str | None:
    """Read every descriptor of a case (`{key: descriptor}`) and save the arrays into `folder`;
    None, or why they could not be read.  `max_bytes` bounds the whole case."""
    from kanalyze.dynamic.sandbox.transport import save_arrays, tensor_to_numpy

    if not isinstance(descriptors, dict) or not all(isinstance(k, str) for k in descriptors):
        return "the case's device arrays are not named"
    total = 0
    try:
        for key, descriptor in descriptors.items():
            tensor = read(descriptor)
            total += tensor.numel() * tensor.element_size()
            if total > max_bytes:
                return f"the case's device arrays exceed {max_bytes} bytes"
            save_arrays(folder, {key: tensor_to_numpy(tensor)})
            del tensor
    except Refused as exc:
        return f"kanalyze refused a device array of the case: {exc}"
    except Exception as exc:
        return f"kanalyze could not read the case's device arrays: {type(exc).__name__}: {exc}"
    finally:
        torch.cuda.empty_cache()
    return None
