"""A case's inputs, and its model's state, handed to the candidate's worker when it needs them,
never saved beside the reference (worker side; imports torch).

The reference worker that computes a case does not save the inputs it drew, nor the initial
state of the model it built: it records how to draw them again (the case's sizes, dtype,
seeds, distribution and injected values) and a digest of each (`offer`).  The candidate's
worker asks for the inputs as the case starts, and for the state only where the model it
built has the reference's parameters but other values (a ModelNew seeded as the problem's
Model already holds them, bit for bit, and takes nothing).  Asked (`receive`):

* on a GPU it allocates a buffer of each array's dtype and shape on the device and sends
  their CUDA IPC handles; the session's first reference worker draws them again (the
  inputs from their seed, the state by building the model from its seed), checks each
  against its digest and writes it into the buffer (`ReferenceSide.fill`, device_share.write).
  Nothing crosses the host or a disk, and no memory of the reference worker's is mapped into
  the candidate's process: the handles name the candidate's own memory, and the reference
  side writes only inside the one tensor each names;
* elsewhere (the CPU, or a device that cannot export) it sends no handle, and the reference
  worker saves what it drew again into a fresh folder that the candidate's worker is
  shown (the parent names it in its reply).

Where the reference worker cannot write into the buffers (a handle it cannot open), the
candidate's worker asks once more without handles, through a folder.  A digest that does
not match (a problem whose `get_inputs` draws other values under the same seed), a folder
that fails too or a reference worker that does not answer is kanalyze's failure: the
candidate's case says so, `internal`, and no verdict rests on it.
Inputs a gate compares in kanalyze (MEM002: were they written?) are still saved with the
reference (reference_side.py): the parent must read them.
"""

from __future__ import annotations

import torch

# What `ReferenceSide.inputs` and `.model` draw from: the rest of a case changes neither.
DRAWN_FROM = ("sizes", "dtype", "seed", "distribution", "special", "model_seed")
_CHUNK = 1 << 22   # elements a digest reads at once (32 MiB of int64 on the device)


class Undelivered(RuntimeError):
    """The case's inputs did not reach the candidate's worker: kanalyze's failure, with why."""


def digest(tensor: torch.Tensor) -> str:
    """The values of `tensor`, bit for bit and position by position, in a few numbers: two sums of
    its words as integers, one weighted by position.  Computed where the tensor lies (a GPU's
    gigabytes are not copied to the host); equal bits give equal digests on every device.
    A checksum against accidents (a `get_inputs` that is not deterministic), not against an
    adversary: the trusted side compares its own draws with it, and a candidate that fools
    its own comparison of its weights only keeps weights other than the reference's."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    words = flat.view(torch.uint8)
    for width, kind in ((8, torch.int64), (4, torch.int32), (2, torch.int16)):
        if words.numel() % width == 0:
            words = words.view(kind)
            break
    sums = torch.zeros(2, dtype=torch.int64, device=words.device)   # (int64 sums wrap: still a digest)
    for start in range(0, words.numel(), _CHUNK):
        part = words[start:start + _CHUNK].to(torch.int64)
        weight = torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64) % 65521 + 1
        sums[0] += part.sum()
        sums[1] += (part * weight).sum()
    total, weighted = (int(n) % 2 ** 64 for n in sums.tolist())
    return f"{str(tensor.dtype)[6:]}{list(tensor.shape)}:{total:x}:{weighted:x}"


def offer(case: dict) -> dict:
    """What a reference result offers the candidate's worker: the case as far as its inputs are
    drawn from it, and (added as they are drawn) each delivered array's dtype, shape and digest."""
    return {"case": {key: case.get(key) for key in DRAWN_FROM}, "arrays": {}}


def describe(arrays: dict, key: str, value: torch.Tensor) -> None:
    arrays[key] = {"dtype": str(value.dtype)[6:], "shape": list(value.shape), "digest": digest(value)}


def receive(offered: dict, device: str, share: bool, ask) -> dict:
    """The offered arrays in the candidate's worker: device tensors filled in place (`share`, on a
    GPU), else numpy arrays from the folder the reply names.  `ask(handles or None)` sends the
    request and returns the parent's reply."""
    from kanalyze.dynamic.sandbox.device_share import export
    from kanalyze.dynamic.sandbox.transport import ArrayFolder

    wanted = offered.get("arrays") or {}
    buffers: dict = {}
    handles = None
    if share and device == "cuda" and wanted:
        try:
            buffers = {key: torch.empty(spec["shape"], dtype=getattr(torch, spec["dtype"]), device=device)
                       for key, spec in wanted.items()}
            handles = {key: export(buffer) for key, buffer in buffers.items()}
        except Exception:   # this platform cannot export (or an empty tensor): through a folder
            buffers, handles = {}, None
    reply = ask(handles)
    if handles is not None and isinstance(reply, dict) and reply.get("error"):
        # The reference side could not write into the buffers (on an H100 once: "mapping of
        # buffer object failed" opening a handle): the same arrays through a folder instead.
        buffers, handles = {}, None
        reply = ask(None)
    if not isinstance(reply, dict) or reply.get("error"):
        raise Undelivered(str(reply.get("error") if isinstance(reply, dict) else "no reply"))
    if handles is not None:
        return buffers
    folder = ArrayFolder(reply.get("folder")).load()
    missing = sorted(set(wanted) - set(folder))
    if missing:
        raise Undelivered(f"the inputs' folder lacks {', '.join(missing)}")
    return dict(folder)
