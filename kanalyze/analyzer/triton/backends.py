"""Which accelerator a module's kernels are written for, where the source says so.

Triton's `tl.dot` on float32 operands defaults to TF32 on NVIDIA GPUs only.  Elsewhere
the default is the backend's own:

* triton-ascend, the Triton of Huawei's Ascend NPUs, multiplies fp32 in IEEE fp32: it
  rounds the operands (to HF32) only when asked, with `allow_tf32=True` or
  `input_precision="tf32"`/`"hf32"`;
* Triton's AMD backend defaults to `"ieee"` too (`HIPOptions.default_dot_input_precision`);
* the Triton forks of other vendors (Kunlunxin, Cambricon, Moore Threads, Iluvatar,
  MetaX, Hygon, Enflame, ...) choose their own, which their sources do not say.

A module is an Ascend one when it imports `torch_npu`, triton-ascend's own modules or
a module of an Ascend backend, calls `torch.npu`, or lives in a backend folder named
for Ascend or NPUs (`backends/_ascend/`, `triton_ascend/`, `npu/`).  A module is
another vendor's when it lives in a folder named for the vendor inside a backend
folder, or with a leading underscore (`runtime/backend/_kunlunxin/`, `backends/rocm/`,
`_mthreads/`: the layout of libraries that ship one implementation per vendor, as
FlagGems and Liger-Kernel do), or imports that vendor's torch extension (`torch_mlu`,
`torch_musa`, `torch_gcu`) or calls its device module (`torch.mlu`, `torch.musa`).
Read from the path, the imports and the calls; nothing is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from kanalyze.analyzer.triton.model import TritonModule

# A folder or module name that says Ascend or NPU: `_ascend`, `triton_ascend`, `npu`, `ascend_ops`.
_ASCEND_PART = re.compile(r"(^|[_\-])(ascend|npu)([_\-]|$)", re.IGNORECASE)

# Other vendors: (the accelerator, what its Triton does with a default fp32 dot, the words
# that name it in a folder, its torch extension and device module where it has them).
_VENDORS = (
    ("an AMD GPU", "ieee", ("amd", "rocm", "hip"), None, None),
    ("a Hygon DCU", "unknown", ("hygon", "dcu"), None, None),
    ("a Kunlunxin XPU", "unknown", ("kunlunxin", "klx"), None, None),
    ("a Cambricon MLU", "unknown", ("cambricon", "mlu"), "torch_mlu", "torch.mlu."),
    ("a Moore Threads GPU", "unknown", ("mthreads", "musa"), "torch_musa", "torch.musa."),
    ("an Iluvatar GPU", "unknown", ("iluvatar", "corex"), None, None),
    ("a MetaX GPU", "unknown", ("metax", "maca"), None, None),
    ("an Enflame GCU", "unknown", ("enflame", "gcu"), "torch_gcu", "torch.gcu."),
    ("an Intel GPU", "unknown", ("intel", "xpu"), "intel_extension_for_pytorch", "torch.xpu."),
    ("a TsingMicro accelerator", "unknown", ("tsingmicro",), None, None),
    ("an AIPU", "unknown", ("aipu",), None, None),
)
# Folders that hold one implementation per vendor.
_BACKEND_FOLDERS = {"backend", "backends", "vendor", "vendors", "platform", "platforms", "devices"}


@dataclass(frozen=True)
class Backend:
    """A module's accelerator other than an NVIDIA GPU, and what its default fp32 `tl.dot` is."""
    accelerator: str   # "an Ascend NPU", "a Kunlunxin XPU"
    dot_fp32: str      # "ieee" (no TF32 unless asked) or "unknown" (the vendor's Triton decides)


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


def module_backend(model: TritonModule) -> Backend | None:
    """The accelerator other than an NVIDIA GPU this module is written for, or None (NVIDIA's,
    or nothing in the module says)."""
    if ascend_module(model) is not None:
        return Backend("an Ascend NPU", "ieee")
    folders = PurePath(model.path.replace("\\", "/")).parts[:-1]
    calls = [site.qualname or "" for site in model.calls]
    for accelerator, dot_fp32, words, extension, device in _VENDORS:
        for parent, folder in zip(("",) + folders, folders):
            name = folder.lower()
            if name.lstrip("_") in words and (name.startswith("_") or parent.lower() in _BACKEND_FOLDERS):
                return Backend(accelerator, dot_fp32)
        if (extension and any(q.split(".")[0] == extension for q in model.imports.aliases.values())) \
                or (device and any(q.startswith(device) for q in calls)):
            return Backend(accelerator, dot_fp32)
    return None
