"""Arrays the judge holds, and the summaries it gives of them (reference worker; imports torch).

On a GPU the session's first reference worker is its judge: the reference's
outputs (in the working dtype and in float64) stay in its memory on the device,
the candidate's outputs are copied there as each case ends (CUDA IPC,
device_share.py), and the second reference worker hands over the references it
computed ahead once every candidate worker has ended.  Nothing of them is
saved: kanalyze (the parent, numpy only) asks for what a gate needs, and gets
back a few numbers (`answer`: a value check against float64, bitwise
differences, non-finite classes, unwritten elements) or a window of values for a
witness (`save`: a file of at most `MAX_SAVED` elements unless a gate needs a
whole array).  Every comparison runs here, in chunks, on the device, with the
same arithmetic as compare.py's numpy (float64, the same masks, the first
largest error), so that a verdict does not depend on where it was computed.

Where the arrays are kept (the device, host memory, once for identical runs) is
store.py's `Store`.  A request that names an array the store does not hold, or one
that fails, gets `error` (kanalyze's failure: the gate says `unconfirmed`), never a
verdict.
"""

from __future__ import annotations

import os
import shutil

import torch

from kanalyze.dynamic.sandbox.store import DEVICE_RESERVE, HOST_FRACTION, Store
from kanalyze.dynamic.sandbox.transport import NO_CLASS, save_arrays, tensor_to_numpy

CHUNK = 1 << 25           # elements compared at a time (float64 temporaries of 256 MiB)
MAX_SAVED = 1 << 20       # elements of a window; a whole array only where asked (`whole`)


# ---------------------------------------------------------------- the summaries

def answer(store: Store, request: dict) -> dict:
    """What the parent asked of held arrays (`request["op"]`), or `error` with why not."""
    op = _OPS.get(request.get("op")) if isinstance(request, dict) else None
    if op is None or store is None:
        return {"error": f"kanalyze's judge has no answer to {str(request)[:200]} (it holds "
                         f"{'no arrays' if store is None else 'no such request'})"}
    try:
        return op(store, request)
    except KeyError as exc:   # an array it does not hold (Store.get), or a request without a field
        return {"error": str(exc.args[0]) if exc.args else "an incomplete request"}
    except Exception as exc:  # kanalyze's failure to judge: the gate says unconfirmed
        return {"error": f"kanalyze's judge failed: {type(exc).__name__}: {str(exc)[:300]}"}


def _compute_device(store: Store) -> str:
    return "cuda" if store.device == "cuda" else "cpu"


def _chunks(store: Store, *names):
    """(offset, flat chunks...) of held arrays of the same size, each chunk on the compute device."""
    tensors = [store.get(name).reshape(-1) for name in names]
    numel = tensors[0].numel()
    if any(t.numel() != numel for t in tensors):
        raise ValueError("the arrays compared differ in size")
    device = _compute_device(store)
    for start in range(0, numel, CHUNK):
        yield (start, *[t[start:start + CHUNK].to(device) for t in tensors])


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float64 (complex128 for complex values), as compare.as_float64 reads them."""
    return t.to(torch.complex128) if t.is_complex() else t.to(torch.float64)


def _finite(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() or t.is_complex():
        return torch.isfinite(t)
    return torch.ones_like(t, dtype=torch.bool)


def _scalar(t: torch.Tensor) -> float:
    return float(t.real.item()) if t.is_complex() else float(t.item())


def _first(first: int | None, start: int, mask: torch.Tensor) -> int | None:
    """The first flat position found so far: `first`, else the first True of this chunk's `mask`."""
    return first if first is not None else start + int(torch.nonzero(mask)[0, 0].item())


def _calibrate(store: Store, working: str, exact: str, factor: float, floor: float) -> tuple[float, float, float]:
    """(bound, reference error, scale): compare._calibration."""
    reference_error, scale = 0.0, 0.0
    for _, ref, wanted in _chunks(store, working, exact):
        wanted = _wide(wanted)
        finite = torch.isfinite(wanted) & _finite(ref)
        error = torch.where(finite, (_wide(ref) - wanted).abs(), 0.0)
        magnitude = torch.where(finite, wanted.abs(), 0.0)
        if error.numel():
            reference_error = max(reference_error, float(error.max().item()))
            scale = max(scale, float(magnitude.max().item()))
    return max(factor * reference_error, floor * (scale or 1.0)), reference_error, scale


def _values(store: Store, request: dict) -> dict:
    """compare.check_values: observed against float64 within the calibrated bound (or the one given)."""
    calibrated, reference_error, scale = _calibrate(store, request["working"], request["exact"], request["factor"],
                                                    request["floor"])
    bound = calibrated if request.get("bound") is None else float(request["bound"])
    if request.get("exactly"):   # integers and booleans
        bound = 0.0
    worst, at, observed_at, expected_at, mismatches = -1.0, 0, None, None, 0
    for start, out, ref, wanted in _chunks(store, request["observed"], request["working"], request["exact"]):
        wanted = _wide(wanted)
        considered = torch.isfinite(wanted) & _finite(ref)
        error = torch.where(considered, (_wide(out) - wanted).abs(), 0.0)
        error = torch.where(torch.isnan(error), torch.inf, error)
        i = int(torch.argmax(error).item())
        if float(error[i].item()) > worst:
            worst, at = float(error[i].item()), start + i
            observed_at, expected_at = _scalar(_wide(out[i])), _scalar(wanted[i])
        mismatches += int((error > bound).sum().item())
    return {"ok": worst <= bound, "max_error": max(worst, 0.0), "bound": bound, "reference_error": reference_error,
            "scale": scale, "at": at, "observed": observed_at, "expected": expected_at, "mismatches": mismatches}


def _calibrated(store: Store, request: dict) -> dict:
    bound, reference_error, scale = _calibrate(store, request["working"], request["exact"], request["factor"],
                                               request["floor"])
    return {"bound": bound, "reference_error": reference_error, "scale": scale}


def _canonical_bytes(t: torch.Tensor) -> torch.Tensor:
    """Each element's raw bytes (one row each), every NaN made the same (transport.bits)."""
    if t.is_floating_point():
        nan = torch.isnan(t)
        if bool(nan.any()):
            t = torch.where(nan, torch.tensor(float("nan"), dtype=t.dtype, device=t.device), t)
    return _raw_bytes(t)


def _bits(store: Store, request: dict) -> dict:
    """compare.bitwise_differences: differing elements, the largest difference, the first one."""
    count, largest, first = 0, 0.0, None
    for start, a, b in _chunks(store, request["a"], request["b"]):
        differ = (_canonical_bytes(a) != _canonical_bytes(b)).any(dim=1)
        n = int(differ.sum().item())
        if not n:
            continue
        first = _first(first, start, differ)
        count += n
        delta = torch.where(differ, (_wide(a) - _wide(b)).abs(), 0.0)
        delta = torch.where(torch.isnan(delta), torch.inf, delta)
        largest = max(largest, float(delta.max().item()))
    return {"count": count, "largest": largest, "first": first}


def _classes(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 −Inf (compare.classes)."""
    if not (t.is_floating_point() or t.is_complex()):
        return torch.zeros(t.shape, dtype=torch.int64, device=t.device)
    out = torch.isnan(t).to(torch.int64)
    infinite = torch.isinf(t)
    positive = (t.real if t.is_complex() else t) > 0
    return torch.where(infinite, torch.where(positive, 2, 3), out)


def _class_pairs(store: Store, request: dict) -> dict:
    """compare.class_comparison: which elements are in the wrong non-finite class where the
    reference's working dtype and float64 agree, counted by (reference class, candidate class);
    an element in the class `through_zero` gives it (where it names an array) counted apart."""
    left_out, reached, wrong, first, through_zero = 0, False, 0, None, 0
    pairs = torch.zeros(16, dtype=torch.int64)
    names = [request["observed"], request["expected"], request["exact"]]
    marked = request.get("through_zero")
    for start, got, want, exact, *other in _chunks(store, *names, *([marked] if marked else [])):
        got, want = _classes(got), _classes(want)
        agree = want == _classes(exact)
        other = other[0].to(torch.int64) if other else torch.full_like(want, NO_CLASS)
        left_out += int((~agree).sum().item())
        reached = reached or bool(((want != 0) & agree & (other != 0)).any().item())
        bad = (got != want) & agree
        product = bad & (got == other)
        through_zero += int(product.sum().item())
        bad &= ~product
        n = int(bad.sum().item())
        if not n:
            continue
        first = _first(first, start, bad)
        wrong += n
        pairs += torch.bincount((want[bad] * 4 + got[bad]), minlength=16).cpu()
    return {"left_out": left_out, "reached": reached, "wrong": wrong, "first": first, "pairs": pairs.tolist(),
            "through_zero": through_zero}


def _finite_summary(store: Store, request: dict) -> dict:
    """Whether every value is finite, and the largest finite magnitude."""
    all_finite, largest = True, 0.0
    for _, values in _chunks(store, request["name"]):
        finite = _finite(values)
        all_finite = all_finite and bool(finite.all().item())
        if values.numel():
            largest = max(largest, float(torch.where(finite, _wide(values).abs(), 0.0).max().item()))
    return {"all_finite": all_finite, "largest": largest}


def _unwritten(store: Store, request: dict) -> dict:
    """Elements whose every byte holds the first sentinel in run `a` and the second in run `b`
    (MEM001): how many, and the first."""
    first_byte, second_byte = (int(b) for b in request["bytes"])
    count, first = 0, None
    for start, a, b in _chunks(store, request["a"], request["b"]):
        both = (_raw_bytes(a) == first_byte).all(dim=1) & (_raw_bytes(b) == second_byte).all(dim=1)
        n = int(both.sum().item())
        first = _first(first, start, both) if n else first
        count += n
    return {"count": count, "first": first}


def _flushed(store: Store, request: dict) -> dict:
    """Nonzero finite reference elements, and those the candidate returned as 0 (EXC002)."""
    nonzero, flushed, first = 0, 0, None
    for start, got, want in _chunks(store, request["observed"], request["expected"]):
        want = _wide(want)
        kept = torch.isfinite(want) & (want != 0)
        zero = kept & (_wide(got) == 0)
        nonzero += int(kept.sum().item())
        n = int(zero.sum().item())
        first = _first(first, start, zero) if n else first
        flushed += n
    return {"nonzero": nonzero, "flushed": flushed, "first": first}


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).reshape(-1, t.element_size())


def _save(store: Store, request: dict) -> dict:
    """A held array's values into a file for the parent (`path`): the flat window of `count`
    elements from `start`, or the whole array where `whole` is asked."""
    tensor = store.get(request["name"])
    if request.get("whole"):
        values = tensor
    else:
        start, count = int(request["start"]), min(int(request["count"]), MAX_SAVED)
        values = tensor.reshape(-1)[start:start + count]
    save_arrays(request["path"], {"values": tensor_to_numpy(values)})
    return {"saved": True}


def _stats(store: Store, request: dict) -> dict:
    """Where this store's arrays went (Store.peaks, moved, refused), for the run's account."""
    return {"held_device_peak": store.peaks["device"], "held_host_peak": store.peaks["host"],
            "held_moved_to_host": store.moved, "held_refused": store.refused,
            "held_refused_bytes": store.refused_bytes, "held_shared": store.shared}


def _drop(store: Store, request: dict) -> dict:
    """Let go of held arrays the gates have judged already (streaming.py): at a problem's real
    size, the next case's arrays need their room."""
    names = [n for n in request.get("names") or [] if isinstance(n, str) and n in store.tensors]
    before = store.device_bytes + store.host_bytes
    store.drop(names)
    freed = before - store.device_bytes - store.host_bytes
    if freed and store.device == "cuda":
        torch.cuda.empty_cache()
    return {"dropped": len(names), "bytes": freed}


_OPS = {"values": _values, "calibrate": _calibrated, "bits": _bits, "classes": _class_pairs,
        "finite": _finite_summary, "unwritten": _unwritten, "flushed": _flushed, "save": _save,
        "stats": _stats, "drop": _drop}


# ---------------------------------------------------------------- arrays changing hands

def hand_over(store: Store, memory: str | None = None) -> dict:
    """What a reference worker held, for the session's judge to adopt once every candidate worker
    has ended (the second reference worker's, ahead.py): `exported`, {name: CUDA IPC descriptor}
    of those on the device (kept alive here until this worker ends), and `saved`, {name: where}
    of those in host memory, saved into `memory` (a folder in shared memory: RAM, not disk; the
    parent removes it once the judge has adopted them), or where it has no room or there is
    none, into their case's folder."""
    from kanalyze.dynamic.sandbox.device_share import export

    exported, saved = {}, {}
    for number, (name, tensor) in enumerate(store.tensors.items()):
        if tensor.device.type == "cuda":
            exported[name] = export(tensor)
            continue
        folder, key = name.rsplit("/", 1)
        values = tensor_to_numpy(tensor, shared=True)
        if memory and _saved_into(os.path.join(memory, str(number)), key, values):
            folder = os.path.join(memory, str(number))
        else:
            save_arrays(folder, {key: values})
        saved[name] = {"folder": folder, "key": key, **store.describe(name)}
    return {"exported": exported, "saved": saved}


def _saved_into(folder: str, key: str, values) -> bool:
    """`values` saved into `folder`; False, and nothing left there, where it has no room (a
    small /dev/shm: NoRoom)."""
    try:
        save_arrays(folder, {key: values})
        return True
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return False


def adopt(store: Store, exported, saved, max_bytes: int, map_exported: bool = False) -> dict:
    """Hold what another worker handed over (`hand_over`) or saved (`saved`: {name: folder, key,
    dtype}, a candidate's outputs on the CPU too); what finds no room here is saved into its
    case's folder.  Exported arrays are copied, or with `map_exported` (the second reference
    worker's, which lives until the session closes) mapped where they are: no second copy on
    the device.  Returns {"held": {name: dtype and shape}} or {"error": why}."""
    from kanalyze.dynamic.sandbox.device_share import Refused, mapped, read
    from kanalyze.dynamic.sandbox.transport import ArrayFolder, numpy_to_tensor

    described, total = {}, 0
    try:
        for name, where in {**(exported or {}), **(saved or {})}.items():
            if not isinstance(name, str) or "/" not in name:
                return {"error": "an array to adopt has no name"}
            if name in (exported or {}):
                tensor = mapped(where) if map_exported else read(where)
            else:
                array = ArrayFolder(where["folder"])[where["key"]]
                tensor = numpy_to_tensor(array, where["dtype"])
            total += tensor.numel() * tensor.element_size()
            if total > max_bytes:
                return {"error": f"the arrays to adopt exceed {max_bytes} bytes"}
            if store.hold(name, tensor):
                described[name] = store.describe(name)
            else:
                folder, key = name.rsplit("/", 1)
                save_arrays(folder, {key: tensor_to_numpy(tensor)})
            del tensor
    except Refused as exc:
        return {"error": f"kanalyze refused an array to adopt: {exc}"}
    except Exception as exc:
        return {"error": f"kanalyze could not adopt an array: {type(exc).__name__}: {str(exc)[:300]}"}
    return {"held": described}


__all__ = ["DEVICE_RESERVE", "HOST_FRACTION", "MAX_SAVED", "Store", "adopt", "answer", "hand_over"]
