"""Which accelerator a module's kernels are written for, where the source says so.

Triton's `tl.dot` on float32 operands defaults to TF32 on NVIDIA GPUs.  triton-ascend,
the Triton of Huawei's Ascend NPUs, defaults to IEEE fp32: it rounds the operands (to
HF32) only when asked, with `allow_tf32=True` or `input_precision="tf32"`/`"hf32"`.

A module is an Ascend one when it imports `torch_npu`, triton-ascend's own modules or
a module of an Ascend backend, calls `torch.npu`, or lives in a backend folder named
for Ascend or NPUs (`backends/_ascend/`, `triton_ascend/`, `npu/`), the layout of
libraries that ship one implementation per vendor.  Read from the path, the imports
and the calls; nothing is imported.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from kanalyze.analyzer.triton.model import TritonModule

# A folder or module name that says Ascend or NPU: `_ascend`, `triton_ascend`, `npu`, `ascend_ops`.
_ASCEND_PART = re.compile(r"(^|[_\-])(ascend|npu)([_\-]|$)", re.IGNORECASE)


def ascend_module(model: TritonModule) -> str | None:
    """Why this module targets an Ascend NPU (a short phrase for messages), or None."""
    folders = PurePath(model.path.replace("\\", "/")).parts[:-1]
    folder = next((part for part in folders if _ASCEND_PART.search(part)), None)
    if folder is not None:
        return f"it lives in the Ascend backend folder `{folder}/`"
    for qualified in model.imports.aliases.values():
        if any(_ASCEND_PART.search(part) for part in qualified.split(".")):
            return f"it imports `{qualified}`"
    if any((site.qualname or "").startswith("torch.npu.") for site in model.calls):
        return "it calls `torch.npu`"
    return None
