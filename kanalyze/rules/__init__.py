"""The clause catalog: one module per clause, discovered by name.

Adding a clause means adding `kanalyze/rules/<code>_<name>.py` with one Rule
subclass; nothing here needs to change.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import textwrap
from functools import lru_cache

from kanalyze.rules.base import Report, Rule

_MODULE = re.compile(r"^[a-z]{3}\d{3}_")


@lru_cache(maxsize=None)
def _discover() -> tuple[tuple[type[Rule], ...], tuple[type[Rule], ...]]:
    """(catalog rules, CUDA detector rules), each sorted by code.  A clause's CUDA
    detectors (`<code>_<name>_cuda.py`, rules/cuda_rule.py) share its code and are
    not listed as a clause of their own."""
    found: list[type[Rule]] = []
    cuda: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.code \
                    and value.__module__ == module.__name__:
                (cuda if getattr(value, "detects_cuda", False) else found).append(value)
    return tuple(sorted(found, key=lambda r: r.code)), tuple(sorted(cuda, key=lambda r: r.code))


def all_rules() -> tuple[type[Rule], ...]:
    """Every clause's rule class, sorted by code."""
    return _discover()[0]


def cuda_rules() -> list[Rule]:
    """Instances of the CUDA detectors, one per clause that has them."""
    return [rule() for rule in _discover()[1]]


def cuda_detector_classes(code: str) -> list[type[Rule]]:
    return [rule for rule in _discover()[1] if rule.code == code]


@lru_cache(maxsize=None)
def rules_by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


def explanation(rule: type[Rule]) -> str:
    """What `kanalyze explain CODE` prints: the clause's docs, its CUDA detectors' docs
    (rules/cuda_rule.py) as a section of their own, and the gate that decides it."""
    header = f"# {rule.code} ({rule.name})\n\n{rule.summary}\n\n"
    cuda = "".join(f"\n\n## In CUDA C++\n\n{textwrap.dedent(detector.docs).strip()}"
                   for detector in cuda_detector_classes(rule.code) if detector is not rule and detector.docs)
    gate = f"\n\n## How it is confirmed\n\nGate: `{rule.gate}`.\n" if rule.gate else "\n"
    return header + textwrap.dedent(rule.docs).strip() + cuda + gate


def detecting_rules() -> list[Rule]:
    """Instances of the rules that have static detectors."""
    return [rule() for rule in all_rules() if rule.has_detectors]


__all__ = ["Report", "Rule", "all_rules", "cuda_detector_classes", "cuda_rules", "detecting_rules", "explanation", "rules_by_code"]
