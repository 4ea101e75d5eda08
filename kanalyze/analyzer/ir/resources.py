"""What a compiled kernel takes from the GPU, as `ptxas -v` and the compiler's
metadata report it.

`ptxas -v` (Triton runs it with `-v`; nvcc passes `-Xptxas -v`) prints per
function:

    ptxas info    : Function properties for mm
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 64 registers, used 1 barriers, 48 bytes smem, 400 bytes cmem[0]

Triton's metadata adds the dynamic shared memory it will request (`shared`),
the tensor-memory columns on Blackwell (`tmem_size`) and `num_warps`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_PROPERTIES = re.compile(r"Function properties for ([\w$]+)")
_COMPILING = re.compile(r"Compiling entry function '([\w$]+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


@dataclass
class Resources:
    """The budget-relevant numbers of one compiled kernel (None: not known)."""

    registers: int | None = None          # per thread
    spill_stores: int | None = None       # bytes
    spill_loads: int | None = None        # bytes
    stack_frame: int | None = None        # bytes of local memory per thread
    static_shared: int | None = None      # bytes of `__shared__` arrays
    dynamic_shared: int | None = None     # bytes requested at launch (Triton's `shared`)
    threads: int | None = None            # per block
    tmem_columns: int | None = None       # Blackwell tensor memory
    barriers: int | None = None

    @property
    def shared(self) -> int | None:
        parts = [p for p in (self.static_shared, self.dynamic_shared) if p is not None]
        return sum(parts) if parts else None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> "Resources":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def parse_ptxas_log(log: str) -> dict[str, Resources]:
    """function name → Resources, from `ptxas -v` output."""
    found: dict[str, Resources] = {}
    function = None
    for line in log.splitlines():
        match = _PROPERTIES.search(line) or _COMPILING.search(line)
        if match:
            function = match.group(1)
            found.setdefault(function, Resources())
            continue
        if function is None:
            continue
        resources = found[function]
        match = _FRAME.search(line)
        if match:
            resources.stack_frame, resources.spill_stores, resources.spill_loads = map(int, match.groups())
            continue
        match = _USED.search(line)
        if match:
            resources.registers = int(match.group(1))
            if match.group(2) is not None:
                resources.barriers = int(match.group(2))
            resources.static_shared = int(match.group(3)) if match.group(3) is not None else 0
    return found
