"""Values across the process boundary: torch tensors ↔ numpy arrays in folders of `.npy` files.

The worker encodes what the candidate returned (`encode_value`) and saves a
case's arrays as one folder of plain `.npy` files (`save_arrays`: no archive to
unpack, nothing pickled); the parent, which imports numpy but never torch,
maps them on demand (`ArrayFolder`: a file is read when a gate looks at it, a
size that does not match the file is refused) and decodes them (`as_float64`,
`bits`).  numpy has no bfloat16 or float8, so those travel as their raw bits
(uint16 / uint8) with the dtype's name beside them.

A value is a flat list of leaves plus a structure string, so that a candidate
returning a tuple where the reference returns a tensor is visible as such.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kanalyze.dynamic.sandbox import sealed_io
from kanalyze.dynamic.sandbox.rundir import MIN_FREE_BYTES

# torch dtype name → (numpy storage dtype, is raw bits)
_RAW_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8,
             "float8_e4m3fnuz": np.uint8, "float8_e5m2fnuz": np.uint8}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64") + tuple(k for k in _RAW_BITS if k.startswith("float8"))

# Machine epsilon (distance from 1.0 to the next value) of each floating dtype.
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52,
       "float8_e4m3fn": 2.0 ** -3, "float8_e5m2": 2.0 ** -2}
# Smallest positive normal value of each floating dtype.
# In an array of non-finite classes (compare.CLASS_NAMES' order, one byte an element), "no class
# but the reference's": EXC001's classes through a product with zero (sandbox/dependence.py).
NO_CLASS = 255
TINY = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}


@dataclass
class Leaf:
    """One array of a returned value: its numpy storage and torch dtype name."""

    array: np.ndarray
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype a tensor of torch dtype `name` is stored in (raw bits where numpy lacks it)."""
    if name in _RAW_BITS:
        return np.dtype(_RAW_BITS[name])
    return np.dtype("bool" if name == "bool" else name)


def dtype_name(torch_dtype: Any) -> str:
    return str(torch_dtype).replace("torch.", "")


# ---------------------------------------------------------------- folders of arrays (both sides)

_KEY = re.compile(r"[A-Za-z0-9_]{1,100}")


class NoRoom(OSError):
    """The disk cannot take a case's arrays and still leave the machine its margin."""


def save_arrays(folder: str, arrays: dict[str, np.ndarray]) -> None:
    """Each array as `folder/KEY.npy` (the folder is created, even for no arrays).

    Arrays that would leave less than `MIN_FREE_BYTES` free on the disk are not
    written (NoRoom): runs side by side (an audit's pairs) must not fill the disk
    under each other, and a clear reason beats a half-written file."""
    os.makedirs(folder, exist_ok=True)
    needed = sum(int(np.asarray(a).nbytes) for a in arrays.values())
    if needed:
        free = shutil.disk_usage(folder).free
        if free - needed < MIN_FREE_BYTES:
            raise NoRoom(f"no room for {needed / 2 ** 30:.2f} GiB of arrays in {os.path.dirname(folder)}: "
                         f"{free / 2 ** 30:.2f} GiB free, and kanalyze leaves {MIN_FREE_BYTES / 2 ** 30:.0f} GiB "
                         f"to the rest of the machine (set TMPDIR to a larger disk, or run fewer pairs at once)")
    for key, array in arrays.items():
        if not _KEY.fullmatch(key):
            raise ValueError(f"not an array name: {key!r}")
        sealed_io.save_npy(os.path.join(folder, f"{key}.npy"), array)   # (not `numpy.save`: replaceable in a worker)


class ArrayFolder(Mapping):
    """The arrays of a folder `save_arrays` wrote, each read when first asked for.

    Arrays are memory-mapped read-only (a worker's gigabytes are not copied
    into the parent until a gate reads them); `load()` copies every array into
    memory at once (what a candidate's process could still rewrite is read
    before it can).  Nothing is unpickled: an object array, a header whose
    shape the file cannot hold, or a name that is not an array's is an error.
    """

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        names = os.listdir(folder) if folder and os.path.isdir(folder) else []
        self._keys = sorted(n[:-4] for n in names if n.endswith(".npy") and _KEY.fullmatch(n[:-4]))
        self._loaded: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._loaded:
            if key not in self._keys:
                raise KeyError(key)
            path = os.path.join(self.folder, f"{key}.npy")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            self._loaded[key] = array if array.size else np.array(array)
        return self._loaded[key]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        return sum(os.path.getsize(os.path.join(self.folder, f"{key}.npy")) for key in self._keys)

    def load(self) -> "ArrayFolder":
        for key in self._keys:
            self._loaded[key] = np.array(self[key])
        return self


# ---------------------------------------------------------------- worker side (torch)

def tensor_to_numpy(tensor: Any, shared: bool = False) -> np.ndarray:
    """A torch tensor's values as a numpy array of its own (raw bits where numpy lacks the dtype).
    A tensor copied here anyway (from the device, or made contiguous) is not copied again: at a
    problem's real size that second copy was gigabytes.  `shared`: the array may be a view of
    the tensor's own memory, for a caller that writes it out before the tensor can change."""
    import torch

    t = tensor.detach()
    own = t.device.type != "cpu" or not t.is_contiguous()   # the next line makes a new tensor
    t = t.cpu().contiguous()
    name = dtype_name(t.dtype)
    if name in _RAW_BITS:
        view = torch.int16 if _RAW_BITS[name] is np.uint16 else torch.uint8
        array = t.view(view).numpy().view(_RAW_BITS[name])
    else:
        array = t.numpy()
    return array if own or shared else array.copy()


def numpy_to_tensor(array: np.ndarray, dtype: str, device: str = "cpu") -> Any:
    import torch

    target = getattr(torch, dtype)
    if dtype in _RAW_BITS:
        view = torch.int16 if _RAW_BITS[dtype] is np.uint16 else torch.uint8
        t = torch.from_numpy(array.view(np.int16 if view is torch.int16 else np.uint8).copy()).view(target)
    else:
        t = torch.from_numpy(array.copy())
    return t.to(device)


def flatten_value(value: Any) -> tuple[str, list[Any]]:
    """A returned value as (structure, tensor-or-number leaves), or raise TypeError."""
    import torch

    if isinstance(value, torch.Tensor):
        return "tensor", [value]
    if isinstance(value, (bool, int, float)):
        return "number", [torch.tensor(value)]
    if isinstance(value, (tuple, list)):
        parts, leaves = [], []
        for item in value:
            structure, sub = flatten_value(item)
            parts.append(structure)
            leaves.extend(sub)
        return f"{type(value).__name__}({', '.join(parts)})", leaves
    raise TypeError(f"returned a {type(value).__name__}, not a tensor")


# ---------------------------------------------------------------- parent side (numpy only)

def as_float64(leaf: Leaf) -> np.ndarray:
    """The leaf's values in float64 (exact for every dtype up to float64)."""
    a = leaf.array
    if leaf.dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if leaf.dtype.startswith("float8"):
        return _float8_to_float64(a, leaf.dtype)
    if a.dtype.kind == "c":
        return a  # complex stays complex; comparisons use abs()
    return a.astype(np.float64)


def _float8_to_float64(a: np.ndarray, dtype: str) -> np.ndarray:
    # Rare in references; decode through a lookup table of all 256 codes.
    exponent_bits, bias = (4, 7) if "e4m3" in dtype else (5, 15)
    mantissa_bits = 7 - exponent_bits
    codes = np.arange(256, dtype=np.uint32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = codes & ((1 << mantissa_bits) - 1)
    normal = sign * (1 + mantissa / 2 ** mantissa_bits) * 2.0 ** (exponent.astype(np.float64) - bias)
    subnormal = sign * (mantissa / 2 ** mantissa_bits) * 2.0 ** (1 - bias)
    table = np.where(exponent == 0, subnormal, normal)
    return table[a.astype(np.int64)]


def bits(leaf: Leaf) -> np.ndarray:
    """The leaf's raw bits, with every NaN made the same (payloads are not results)."""
    a = leaf.array
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if nan.any():   # (a copy only where there is a NaN to make the same)
            a = np.where(nan, np.array(np.nan, dtype=a.dtype), a)
    if a.dtype.kind in "fc":
        return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}" if a.dtype.kind == "f" else "u1")
    return a
