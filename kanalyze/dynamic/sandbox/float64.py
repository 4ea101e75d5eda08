"""The reference's float64 run, in the reference worker (imports torch): the same computation
on upcast inputs, which the gates calibrate the working dtype's error against.

At a problem's real size it may not fit beside what the worker holds on the device: as
the session's judge it keeps arrays there up to a share of the device (held.py).  Where
the float64 run runs out of the device's memory, those arrays move to host memory
(`store.with_room`) and the run is tried once more; where it still does not fit, there is
no float64 reference, and the gates that need one say why.
"""

from __future__ import annotations

import torch

from kanalyze.dynamic.sandbox.encoding import encode_output
from kanalyze.dynamic.sandbox.execute import describe_error, synchronize
from kanalyze.dynamic.sandbox.model_state import upcast
from kanalyze.dynamic.sandbox.store import with_room


def float64_reference(model, values: list, device: str, store, result: dict, arrays: dict,
                      name: str, prefix: str) -> None:
    """`result[name]`, the float64 outputs (kept in `arrays` under `prefix`), or `result[name_error]`,
    why there are none.  `store`: the judge's held arrays (store.Store), or None."""
    try:
        result[name] = with_room(lambda: _run(model, values, device, arrays, prefix), store)
    except torch.cuda.OutOfMemoryError as exc:
        moved = getattr(exc, "moved", 0)
        room = f", with {moved / 2 ** 30:.1f} GiB of held arrays moved to host memory" if moved else ""
        result[f"{name}_error"] = (f"the float64 reference does not fit in the device's memory at these sizes{room} "
                                   f"({describe_error(exc)[:200]})")
    except BaseException as exc:
        result[f"{name}_error"] = describe_error(exc)


def _run(model, values: list, device: str, arrays: dict, prefix: str) -> dict:
    values64 = out64 = None
    try:
        values64 = [v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for v in values]
        with upcast(model) as model64, torch.no_grad():
            out64 = model64(*values64)
            synchronize(device)
            return encode_output(out64, prefix, arrays)
    finally:
        del values64, out64
        if device == "cuda":
            torch.cuda.empty_cache()
