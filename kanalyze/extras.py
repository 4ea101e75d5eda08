"""Which packages are installed, asked without importing them (a pre-commit environment has
neither torch nor triton, and the static path must not load them to find out)."""

from __future__ import annotations

from importlib.util import find_spec


def importable(module: str) -> bool:
    """Whether `module` is installed: found by the import system, not imported."""
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False
