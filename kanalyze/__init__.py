"""kanalyze: a static-plus-dynamic analyzer for GPU kernels (README.md).

`import kanalyze` stays light (a pre-commit environment imports neither torch nor
libcst through it); `kanalyze.Verifier` (verifier.py, docs/verifier.md) is loaded
on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kanalyze.verifier import Allclose, Clause, Verifier, VerifyResult

_LAZY = {"Verifier": "verifier", "VerifyResult": "verifier", "Clause": "verifier", "Allclose": "verifier"}


def __getattr__(name: str):
    # By name (importlib), not an import statement: kanalyze.verifier reaches modules that
    # import this package for __version__, and the layout test reads import statements.
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Allclose", "Clause", "Verifier", "VerifyResult", "__version__"]
