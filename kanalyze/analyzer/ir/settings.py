"""Settings of the IR stage: the command line over `[tool.kanalyze]`.

    [tool.kanalyze]
    target = ["sm_90", "sm_100"]          # targets to compile for (default sm_90)

    [tool.kanalyze.ir]
    pointer-dtype = "fp16"                # element type of pointers whose dtype the launch does not show
    constexprs = { BLOCK_SIZE = 1024, "matmul_kernel.BLOCK_K" = 64 }   # values of constexprs with no static value
    max-configs = 8                       # autotune configurations compiled per launch
    timeout = 120                         # seconds per compilation
    size = 4096                           # runtime sizes handed to @triton.heuristics
    nvcc-flags = ["-O3"]                  # extra flags for CUDA units
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kanalyze.analyzer.ir.targets import DEFAULT_TARGETS, Target, TargetError, parse_targets

POINTER_DTYPES = {"fp16", "bf16", "fp32", "fp64", "i8", "i16", "i32", "i64", "u8", "fp8e4nv", "fp8e5"}
_KEYS = {"pointer-dtype", "constexprs", "max-configs", "timeout", "size", "nvcc-flags", "max-launches"}


class SettingsError(ValueError):
    """A setting the user has to fix."""


@dataclass(frozen=True)
class IRSettings:
    targets: tuple[Target, ...] = DEFAULT_TARGETS
    pointer_dtype: str = "fp32"
    constexprs: dict[str, Any] = field(default_factory=dict)
    max_configs: int = 8
    max_launches: int = 4
    timeout_s: float = 120.0
    size: int = 4096
    nvcc_flags: tuple[str, ...] = ()
    show_resources: bool = False

    def constexpr_for(self, kernel: str, name: str) -> Any:
        """The configured value of `kernel`'s constexpr `name` (kernel-qualified first)."""
        if f"{kernel}.{name}" in self.constexprs:
            return self.constexprs[f"{kernel}.{name}"]
        return self.constexprs.get(name)

    def key(self) -> str:
        """What in these settings changes a compilation (for the cache)."""
        return repr((self.pointer_dtype, sorted(self.constexprs.items()), self.max_configs,
                     self.max_launches, self.size, self.nvcc_flags))


def load_settings(raw: dict[str, Any], targets: list[str] | None = None, show_resources: bool = False) -> IRSettings:
    """From the `[tool.kanalyze]` table and the command line (`--target` wins)."""
    table = raw.get("ir", {}) or {}
    if not isinstance(table, dict):
        raise SettingsError("[tool.kanalyze] `ir` must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise SettingsError(f"[tool.kanalyze.ir] unknown key(s): {', '.join(unknown)}")
    configured = raw.get("target")
    if isinstance(configured, str):
        configured = [configured]
    try:
        chosen = parse_targets(targets or configured or ())
    except TargetError as exc:
        raise SettingsError(str(exc)) from exc
    pointer_dtype = table.get("pointer-dtype", "fp32")
    if pointer_dtype not in POINTER_DTYPES:
        raise SettingsError(f"[tool.kanalyze.ir] pointer-dtype must be one of {', '.join(sorted(POINTER_DTYPES))}")
    constexprs = table.get("constexprs", {})
    if not isinstance(constexprs, dict) or not all(isinstance(v, (int, float, bool, str)) for v in constexprs.values()):
        raise SettingsError("[tool.kanalyze.ir] constexprs must be a table of NAME = number, bool or string")
    flags = table.get("nvcc-flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise SettingsError("[tool.kanalyze.ir] nvcc-flags must be a list of strings")
    numbers = {}
    for key, default in (("max-configs", 8), ("max-launches", 4), ("timeout", 120), ("size", 4096)):
        value = table.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise SettingsError(f"[tool.kanalyze.ir] {key} must be a positive number")
        numbers[key] = value
    return IRSettings(
        targets=chosen, pointer_dtype=pointer_dtype, constexprs=dict(constexprs),
        max_configs=int(numbers["max-configs"]), max_launches=int(numbers["max-launches"]),
        timeout_s=float(numbers["timeout"]), size=int(numbers["size"]), nvcc_flags=tuple(flags),
        show_resources=show_resources,
    )
