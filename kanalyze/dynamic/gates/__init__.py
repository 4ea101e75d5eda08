"""The gates, one module per clause: `<code>_<what it does>.py`, each with one `Gate` subclass.

`all_gates()` finds them; `gates_by_code()` maps a clause code to its gate.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from kanalyze.dynamic.gates.base import Gate


@lru_cache(maxsize=None)
def all_gates() -> tuple[Gate, ...]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Gate) and value is not Gate and value.code \
                    and value.__module__ == module.__name__:
                found.append(value())
    return tuple(sorted(found, key=lambda g: g.code))


def gates_by_code() -> dict[str, Gate]:
    return {g.code: g for g in all_gates()}
