"""Where the judge keeps the arrays it holds (reference worker; imports torch): `Store`.

An array stays on the device while the device keeps `DEVICE_RESERVE` of its memory
free (asked of the driver: the candidate's worker and the second reference worker run
beside this one); past that it moves to host memory, up to `HOST_FRACTION` of the
machine's, and past that `hold` says no and the caller saves it to files.

A run whose bits are those of another run of the same case already held (the same
folder, dtype and shape, every byte equal: a deterministic candidate's repeated runs,
which ORD001, ORD002 and MEM001 make up to ten of) is kept once, under both names: at a
problem's real size, gigabytes a run.  Nothing held is written to, so a shared tensor
answers for each name exactly as its own copy would.
"""

from __future__ import annotations

import os

import torch

DEVICE_RESERVE = 0.30     # of the device's memory, left free for the candidate's worker and the computations
HOST_FRACTION = 0.40      # of the machine's memory, for arrays held past the device's share


class Store:
    """Tensors held by name ("case-3.arrays/out0", "shared-7/out0"), on the device while its share
    lasts, then in host memory."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.tensors: dict[str, torch.Tensor] = {}
        self._names: dict[int, int] = {}   # id of a held tensor -> how many names hold it
        self.device_bytes = self.host_bytes = 0
        self.host_budget = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * HOST_FRACTION)
        # Where held arrays went, for the run's account (`stats`): the most held at once on the
        # device and in host memory, arrays the device's reserve sent to host memory, arrays
        # neither could take (the caller saved them to files), and arrays kept once for two names.
        self.peaks = {"device": 0, "host": 0}
        self.moved = self.refused = self.refused_bytes = self.shared = 0

    def hold(self, name: str, tensor: torch.Tensor) -> bool:
        """Keep `tensor` (contiguous: the caller lets it go), on the device while the device keeps
        its reserve free, else in host memory; False where neither has room: the caller saves it."""
        size = tensor.numel() * tensor.element_size()
        self.drop([name])
        twin = self._twin(name, tensor)
        if twin is not None:
            self._keep(name, twin)
            self.shared += 1
            return True
        if tensor.device.type == "cuda":
            tensor = tensor.detach().contiguous()
            free, total = torch.cuda.mem_get_info(tensor.device)
            if free < DEVICE_RESERVE * total:   # what this process's allocator keeps cached is free too
                torch.cuda.empty_cache()
                free, total = torch.cuda.mem_get_info(tensor.device)
            if free >= DEVICE_RESERVE * total:   # (the tensor is allocated already: keeping it costs nothing more)
                self._keep(name, tensor)
                self.device_bytes += size
                self.peaks["device"] = max(self.peaks["device"], self.device_bytes)
                return True
        if self.host_bytes + size <= self.host_budget:
            self.moved += tensor.device.type == "cuda"
            self._keep(name, tensor.detach().to("cpu").contiguous())
            self.host_bytes += size
            self.peaks["host"] = max(self.peaks["host"], self.host_bytes)
            return True
        self.refused += 1
        self.refused_bytes += size
        return False

    def spill(self) -> int:
        """Move what is held on the device to host memory, as far as its share goes, for a
        computation that did not fit beside it (`with_room`); the bytes moved."""
        moved, copies = 0, {}
        for name, tensor in list(self.tensors.items()):
            if tensor.device.type != "cuda":
                continue
            if id(tensor) in copies:   # another name of a tensor moved already
                self.tensors[name] = copies[id(tensor)]
                continue
            size = tensor.numel() * tensor.element_size()
            if self.host_bytes + size > self.host_budget:
                continue
            copies[id(tensor)] = host = tensor.to("cpu")
            self._names[id(host)] = self._names.pop(id(tensor))
            self.tensors[name] = host
            self.device_bytes, self.host_bytes, self.moved = self.device_bytes - size, self.host_bytes + size, self.moved + 1
            self.peaks["host"] = max(self.peaks["host"], self.host_bytes)
            moved += size
        tensor = copies = None   # (nothing of the device is kept by this frame either)
        if moved:
            torch.cuda.empty_cache()
        return moved

    def get(self, name) -> torch.Tensor:
        tensor = self.tensors.get(name) if isinstance(name, str) else None
        if tensor is None:
            raise KeyError(f"kanalyze's judge holds no array {str(name)[:200]!r}")
        return tensor

    def drop(self, names) -> None:
        for name in names:
            tensor = self.tensors.pop(name, None)
            if tensor is None:
                continue
            self._names[id(tensor)] -= 1
            if self._names[id(tensor)]:   # another name still holds it
                continue
            del self._names[id(tensor)]
            size = tensor.numel() * tensor.element_size()
            if tensor.device.type == "cuda":
                self.device_bytes -= size
            else:
                self.host_bytes -= size

    def describe(self, name: str) -> dict:
        tensor = self.tensors[name]
        return {"dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape)}

    def _keep(self, name: str, tensor: torch.Tensor) -> None:
        self.tensors[name] = tensor
        self._names[id(tensor)] = self._names.get(id(tensor), 0) + 1

    def _twin(self, name: str, tensor: torch.Tensor) -> torch.Tensor | None:
        """A held tensor of `name`'s folder with `tensor`'s dtype, shape, device and every byte."""
        folder = name.rsplit("/", 1)[0]
        for other_name, other in self.tensors.items():
            if (other_name.rsplit("/", 1)[0] == folder and other.dtype == tensor.dtype and other.shape == tensor.shape
                    and other.device == tensor.device and torch.equal(_raw(other), _raw(tensor))):
                return other
        return None


def with_room(run, store: Store | None):
    """`run()`'s value.  Where it runs out of the device's memory beside what `store` holds (the
    reference worker is also the judge), the held arrays move to host memory (`Store.spill`) and
    it runs once more.  The OutOfMemoryError that ends it says how many bytes moved (`moved`)."""
    try:
        return run()
    except torch.cuda.OutOfMemoryError as exc:
        moved = store.spill() if store is not None else 0
        if not moved:
            exc.moved = 0
            raise
    try:
        return run()
    except torch.cuda.OutOfMemoryError as exc:
        exc.moved = moved
        raise


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


__all__ = ["DEVICE_RESERVE", "HOST_FRACTION", "Store", "with_room"]
