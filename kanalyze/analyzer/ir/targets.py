"""GPU targets the IR stage compiles for, and the hardware limits of each.

A target is written as users write it on the command line: `sm_90`, `sm_90a`,
`sm_100`.  The limits are the per-block budgets from NVIDIA's CUDA C++
Programming Guide (table "Technical Specifications per Compute Capability"):
a kernel above one of them fails to launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KIB = 1024

# Largest dynamic shared memory per block with the opt-in attribute
# (cudaFuncAttributeMaxDynamicSharedMemorySize), per compute capability.
_MAX_SHARED = {
    70: 96 * KIB, 72: 48 * KIB, 75: 64 * KIB, 80: 163 * KIB, 86: 99 * KIB, 87: 163 * KIB,
    89: 99 * KIB, 90: 227 * KIB, 100: 227 * KIB, 101: 227 * KIB, 103: 227 * KIB,
    110: 227 * KIB, 120: 99 * KIB, 121: 99 * KIB,
}
# Architectures with Blackwell tensor memory (tcgen05): 128 lanes x 512 columns.
_TMEM_ARCHS = {100, 101, 103, 110}

MAX_THREADS_PER_BLOCK = 1024
MAX_REGISTERS_PER_THREAD = 255
REGISTERS_PER_BLOCK = 64 * KIB   # 32-bit registers one block may hold
TMEM_COLUMNS = 512

_TARGET = re.compile(r"^(?:sm_?|compute_)?(\d{2,3})([af]?)$", re.IGNORECASE)


class TargetError(ValueError):
    """A target string kanalyze does not understand (a usage error)."""


@dataclass(frozen=True)
class Target:
    capability: int      # 90 for sm_90
    suffix: str = ""     # "a" for sm_90a (architecture-specific features)

    @classmethod
    def parse(cls, text: str) -> "Target":
        match = _TARGET.match(text.strip())
        if match is None:
            raise TargetError(f"unknown target {text!r}: write it as sm_90, sm_90a, sm_100, ...")
        capability = int(match.group(1))
        if capability not in _MAX_SHARED:
            known = ", ".join(f"sm_{c}" for c in sorted(_MAX_SHARED))
            raise TargetError(f"unknown target {text!r}: kanalyze knows {known}")
        return cls(capability, match.group(2).lower())

    @property
    def name(self) -> str:
        return f"sm_{self.capability}{self.suffix}"

    @property
    def max_shared_bytes(self) -> int:
        return _MAX_SHARED[self.capability]

    @property
    def has_tensor_memory(self) -> bool:
        return self.capability in _TMEM_ARCHS

    def __str__(self) -> str:
        return self.name


DEFAULT_TARGETS = (Target(90),)


def parse_targets(values) -> tuple[Target, ...]:
    """`["sm_90,sm_100", "sm_80"]` → the distinct targets, in order."""
    found: list[Target] = []
    for value in values or ():
        for part in str(value).split(","):
            if part.strip():
                target = Target.parse(part)
                if target not in found:
                    found.append(target)
    return tuple(found) or DEFAULT_TARGETS
